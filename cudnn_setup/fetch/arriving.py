"""An archive arriving: the download writes its `.part` file and says, as it goes, how many of
its bytes are written and how the download ended; a follower reads the growing file as the
bytes come, so an install decodes and stages members while the rest is still on the wire.

The downloader (fetch/downloader.py) calls `begin` before each attempt writes (with the offset
it writes from: the part already there is readable at once), `wrote` after each piece is in the
file, and whoever ran the download `finish`es or `fail`s it. A follower starts at byte 0, waits
for bytes (waking on progress) and ends only when the whole download ended well and matched its
checksum: the bytes it handed out are then the bytes that were hashed, unless an attempt wrote
over some of them again (a server that ignored the Range request), which the follower refuses
rather than hand out a mixture (`ArrivalFailed`). A wheel's reader reads it at offsets instead
(`reach`, `pread`, from several threads): everything below the furthest byte reached counts as
read.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path

# How long a follower waits between looks at a download that said nothing: the download wakes
# it on progress; this only bounds how late a cancel or a signal is seen.
WAKE_SECONDS = 1.0


class ArrivalFailed(OSError):
    """The download a follower reads failed, was cancelled, or wrote over bytes already read.
    An OSError without errno, which the archive reader takes as the end of the stream; the
    install says the download's own error instead (steps/overlap.py)."""


class Cancelled(Exception):
    """Raised in the downloading thread once the install that reads it has given up."""


class Arriving:
    """What one download has written so far, shared by the downloading thread and followers."""

    def __init__(self, expected_size: int | None = None):
        self._cond = threading.Condition()
        self.expected_size = expected_size  # what the source promised, when it did
        self.path: Path | None = None  # the file written: the part, then the archive
        self.dest: Path | None = None  # the archive's own path once it is complete
        self.written = 0  # bytes of the part file that are written (flushed to the file)
        self.announced: int | None = None  # the whole archive's size, as the latest attempt said
        self.starts: list[int] = []  # the byte each attempt began writing at, in order
        self.sha256: str | None = None
        self.size: int | None = None
        self.finished = False
        self.rewound = False  # a follower met bytes an attempt wrote again
        self.error: BaseException | None = None
        self.cancelled = False
        # each attempt's file, held open from the moment its writer opened it: a follower reads
        # the very bytes the download hashed, never whatever a path names later (the archive's
        # place in the cache once it is renamed there, which another run may have replaced)
        self.fds: list[int] = []
        self.closed = False

    # --- the downloading side ---------------------------------------------------------------

    def begin(self, part: Path, start: int, dest: Path, fd: int,
              total: int | None = None) -> None:
        """An attempt is about to write `part` (to become `dest`) from byte `start` (0:
        starting over) through `fd`, open for reading too; the bytes before `start` are there
        already and stay as they are. `total`: the whole archive's size, where the server or
        the manifest said it."""
        with self._cond:
            self.check_cancelled()
            if not self.closed:
                self.fds.append(os.dup(fd))
            self.path, self.dest, self.written = part, dest, start
            self.announced = total
            self.starts.append(start)
            self._cond.notify_all()

    def wrote(self, done: int) -> None:
        with self._cond:
            self.check_cancelled()
            self.written = done
            self._cond.notify_all()

    def check_cancelled(self) -> None:
        if self.cancelled:
            raise Cancelled("the install reading this download gave up")

    def finish(self, path: Path, sha256: str | None, size: int) -> None:
        """The download is complete and matched its checksum: `path` holds it."""
        with self._cond:
            if self.generation == 0:  # found complete (the cache): nothing was streamed
                self.path = path
            self.dest = path
            self.sha256, self.size, self.written = sha256, size, size
            self.finished = True
            self._cond.notify_all()

    def fail(self, error: BaseException) -> None:
        with self._cond:
            self.error = error
            self._cond.notify_all()

    def cancel(self) -> None:
        """The reader gives up: the download stops at its next piece."""
        with self._cond:
            self.cancelled = True
            self._cond.notify_all()

    def close(self) -> None:
        """Once nothing follows the download any more: the attempts' files are let go."""
        with self._cond:
            self.closed = True
            for fd in self.fds:
                os.close(fd)
            self.fds.clear()

    # --- the reading side -------------------------------------------------------------------

    @property
    def ended(self) -> bool:
        return self.error is not None or self.finished

    @property
    def generation(self) -> int:
        """Attempts begun: a follower reopens the part at each."""
        return len(self.starts)

    def rewrote(self, since: int, below: int) -> bool:
        """Whether an attempt after the `since`-th began writing before byte `below`."""
        return any(start < below for start in self.starts[since:])

    @property
    def streaming(self) -> bool:
        """Whether an attempt began writing (False when the file was found complete)."""
        return self.generation > 0

    def wait_started(self) -> None:
        """Until an attempt begins writing, or the download ends without one."""
        with self._cond:
            while not self.streaming and not self.ended:
                self._cond.wait(WAKE_SECONDS)

    def follow(self) -> Follower:
        return Follower(self)


class Follower:
    """The arriving archive as a read-only stream from byte 0 (readinto, peek), blocking until
    the bytes asked for are written; its end is the download's good end."""

    def __init__(self, arriving: Arriving):
        self.arriving = arriving
        self.pos = 0
        self.fd: int | None = None
        self.generation = 0
        self.name = ""
        self.stopped = False
        # files of earlier attempts, kept open until close: a thread may still pread from one
        # while another moves the follower on to the next attempt's
        self.earlier: list[int] = []

    def _available(self, want_end: int) -> int:
        """Bytes from self.pos on that may be read now (0 at the good end), having waited for
        at least one, or for `want_end` - pos of them; raises when the download failed or
        rewrote what was read."""
        a = self.arriving
        with a._cond:
            while True:
                if a.error is not None:
                    raise ArrivalFailed(f"the download failed: {a.error}")
                if a.cancelled:
                    raise ArrivalFailed("the download was cancelled")
                if self.stopped:
                    raise ArrivalFailed("the reading stopped")
                if self.generation != a.generation and a.fds:
                    if self.generation and a.rewrote(self.generation, self.pos):
                        raise self._rewound()
                    self._reopen(a.fds[a.generation - 1], a.dest or a.path)
                    self.generation = a.generation
                elif a.finished and self.fd is None:  # found complete: nothing was streamed
                    raise ArrivalFailed("the archive was not downloaded as it was read")
                if self.fd is not None and (a.written >= want_end or a.finished) \
                        and a.written > self.pos:
                    return a.written - self.pos
                if a.finished and self.fd is not None and a.written <= self.pos:
                    return 0
                a._cond.wait(WAKE_SECONDS)

    def _rewound(self) -> ArrivalFailed:
        self.arriving.rewound = True  # the download goes on: the archive is read once whole
        return ArrivalFailed("the download started over after bytes had been read")

    def _reopen(self, fd: int, path: Path | None) -> None:
        """Read the latest attempt's file (`fd`, the download's own) in place of the one read
        so far."""
        if self.fd is not None:
            self.earlier.append(self.fd)
        self.fd = os.dup(fd)
        self.name = path.name if path is not None else ""

    def readinto(self, buffer) -> int:
        view = memoryview(buffer).cast("B")
        while True:
            ready = self._available(self.pos + 1)
            if not ready:
                return 0
            assert self.fd is not None
            n = os.preadv(self.fd, [view[:min(ready, len(view))]], self.pos)
            a = self.arriving
            with a._cond:  # an attempt that began meanwhile may have rewritten what was read
                if a.rewrote(self.generation, self.pos + n):
                    raise self._rewound()
            if n:
                self.pos += n
                return n
            if self.generation == a.generation:  # the file holds less than its writer wrote
                raise self._short()

    def reach(self, end: int) -> int:
        """Wait until the first `end` bytes are written, or for the download's good end: how
        many bytes may be read from now on (`end` or more, fewer only at the good end). For a
        reader that jumps about (a wheel's members): everything below the answer counts as
        read, so an attempt that writes any of it again fails the reading."""
        with self.arriving._cond:
            if end > self.pos:
                ready = self._available(end)  # waits: other threads may move pos meanwhile
                self.pos += ready
            return self.pos

    def pread(self, n: int, at: int) -> bytes:
        """`n` bytes from `at`, once they are written (fewer only at the good end); from any
        thread."""
        fd, want = self._ready_at(at, n, n)
        data = os.pread(fd, want, at)
        if len(data) < want:
            raise self._short()
        return data

    def readinto_at(self, buffer, at: int) -> int:
        """Bytes from `at` into `buffer`, as many as are written and it holds, once at least
        one is (0 only at the good end); from any thread."""
        view = memoryview(buffer).cast("B")
        if not len(view):
            return 0
        fd, want = self._ready_at(at, 1, len(view))  # reach moves on to all that is written
        n = os.preadv(fd, [view[:want]], at) if want else 0
        if n < want:
            raise self._short()
        return n

    def _ready_at(self, at: int, need: int, most: int) -> tuple[int, int]:
        """The file to read, and how many bytes from `at` to read there (`most` at most), once
        `need` of them are written (fewer only at the good end)."""
        ready = self.reach(at + need) - at
        fd = self.fd
        assert fd is not None
        return fd, min(most, max(ready, 0))

    def _short(self) -> ArrivalFailed:
        return ArrivalFailed(f"{self.name or 'the download'} is shorter than written")

    def again(self) -> Follower:
        """Another follower of the same download, from byte 0: to read it once more."""
        return self.arriving.follow()

    def fileno(self) -> int:
        """The file read now: the download's own (once `reach` answered)."""
        assert self.fd is not None
        return self.fd

    def peek(self, n: int) -> bytes:
        """The first bytes of the archive, up to `n`, without moving (to tell its format)."""
        ready = self._available(n)
        assert self.fd is not None
        return os.pread(self.fd, min(n, ready + self.pos), 0)

    def stop(self) -> None:
        """The reader gives up (a signal, a failure of its own): whoever waits for bytes here
        stops waiting, so that the decoder's threads can be joined while the wire is silent."""
        with self.arriving._cond:
            self.stopped = True
            self.arriving._cond.notify_all()

    def close(self) -> None:
        for fd in self.earlier:
            os.close(fd)
        self.earlier.clear()
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    @property
    def sha256(self) -> str | None:
        return self.arriving.sha256

    @property
    def size(self) -> int | None:
        return self.arriving.size

    @property
    def announced(self) -> int | None:
        """The whole archive's size as the download was told it, before its end."""
        return self.arriving.announced
