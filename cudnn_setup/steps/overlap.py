"""A download overlapped with the install that reads it: the archive is fetched on a thread of
its own while the install decodes and stages its members from the part file as the bytes
arrive (fetch/arriving.py). The install's commit waits for the download's verdict; a download
that fails, or whose checksum does not match, fails the install with the download's own error,
its staging discarded and the root untouched.

A tar (.tar.xz, .tar.gz, .tgz, .tar) is a stream and overlaps; so does a wheel, whose members
are decoded from their local headers as they arrive and confirmed by its central directory at
the end (archive/wheel_stream.py). An archive found complete in the cache or on a file://
mirror is read as it is.
"""
from __future__ import annotations

import threading
from typing import Callable

from cudnn_setup.archive import check_readable
from cudnn_setup.fetch.arriving import Arriving, Cancelled, Follower
from cudnn_setup.sources.base import Obtained

# How long a cancelled download is waited for (it stops at its next piece; a stalled read is
# bounded by the client's own timeouts, and the thread dies with the command anyway).
CANCEL_WAIT = 5.0


def overlaps(file_name: str) -> bool:
    """Whether an archive of this name can be read as it arrives: a tar stream, or a wheel."""
    return file_name.endswith((".tar.xz", ".txz", ".tar.gz", ".tgz", ".tar", ".whl"))


class Download:
    """`run` (a source's obtain, handed the Arriving its downloader reports to) on a thread of
    its own."""

    def __init__(self, run: Callable[[Arriving], Obtained]):
        self.arriving = Arriving()
        self.obtained: Obtained | None = None
        self.error: BaseException | None = None
        self._run = run
        self.thread = threading.Thread(target=self._body, name="download", daemon=True)
        self.thread.start()

    def _body(self) -> None:
        try:
            got = self._run(self.arriving)
            if got.fetched is None:  # a file:// mirror's own copy: said as a local one is
                check_readable(got.path)
            size = got.fetched.size if got.fetched is not None else got.path.stat().st_size
            self.obtained = got
            self.arriving.finish(got.path, got.fetched.sha256 if got.fetched else None, size)
        except BaseException as exc:  # handed to the install, which raises it as its own
            self.error = exc
            self.arriving.fail(exc)

    @property
    def streaming(self) -> bool:
        """Whether the bytes are being written now (else the download ended: found complete,
        or failed), after waiting for it to begin one way or the other."""
        self.arriving.wait_started()
        return self.arriving.streaming and self.arriving.error is None

    def follow(self) -> Follower:
        return self.arriving.follow()

    def result(self) -> Obtained:
        """The download's verdict: what was obtained, once it is whole and matched its
        checksum; else its error."""
        while self.thread.is_alive():
            self.thread.join(1.0)  # in slices, so that a signal is seen
        if self.error is not None:
            raise self.error
        assert self.obtained is not None
        return self.obtained

    def provenance(self) -> dict | None:
        """For the install's commit: the verdict, as the provenance to record."""
        return self.result().provenance.to_dict()

    def failure(self) -> BaseException | None:
        """Stop the download (the install gave up), and say its own error, if it failed
        before it was stopped: what the install reports instead of the stream cut short."""
        self.arriving.cancel()
        self.thread.join(CANCEL_WAIT)
        return None if isinstance(self.error, Cancelled) else self.error
