"""An archive file read by several readers at once: kept from changing while they read, its
sha256 taken beside them.

A wheel's members are inflated at their own offsets, and a .tar.gz is decoded by rapidgzip's
own threads; neither can hand its bytes to one hasher, so the file is hashed at offsets too,
from the same open file. That is only sound while nobody can change the file, and no stat can
prove it: a store through a shared writable mapping whose page is already dirty moves neither
size, mtime nor ctime. So the readers run under a read lease (`Steady`), which the kernel
grants only while no process has the file open for writing or mapped writable, and which it
breaks (holding the writer's open until the lease is let go) when one tries. A file that cannot
be leased (another user's, a file system without leases, one open for writing) is read as one
stream instead, or from a private copy.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import signal
import threading
from typing import IO, Callable

from cudnn_setup import parallel

CHUNK = 1 << 20
F_SETSIG = getattr(fcntl, "F_SETSIG", 10)  # Linux's value; Python names it from 3.12 on


class Changed(Exception):
    """The file changed while it was read."""


class ReadFailed(Exception):
    """Reading the file failed (an I/O error): the machine's fault, not the archive's."""

    def __init__(self, exc: OSError):
        super().__init__(str(exc))
        self.exc = exc


class Steady:
    """A read lease on the open (read-only) file `fd`, held until `release`.

    The kernel tells of a break with a signal; SIGURG's default is to ignore it, where SIGIO's,
    the default signal, would end the process. `held`: whether the lease was granted (EAGAIN:
    the file is open for writing or mapped writable somewhere; EACCES: another user's file;
    EINVAL: a file system without leases)."""

    def __init__(self, fd: int):
        self.fd = fd
        self.held = False
        try:
            fcntl.fcntl(fd, F_SETSIG, signal.SIGURG)
            fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
        except OSError:
            return
        self.held = True

    def kept(self) -> bool:
        """Whether the lease is still whole: nobody opened the file to write it, truncated it
        or asked to, since it was granted."""
        if not self.held:
            return False
        try:
            return fcntl.fcntl(self.fd, fcntl.F_GETLEASE) == fcntl.F_RDLCK
        except OSError:
            return False

    def release(self) -> None:
        """Let the lease go (a writer waiting on it goes on); idempotent."""
        if self.held:
            self.held = False
            try:
                fcntl.fcntl(self.fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
            except OSError:
                pass  # already broken and taken back by the kernel


def private_copy(source: IO[bytes], directory: str | os.PathLike) -> IO[bytes]:
    """An unnamed copy of `source` (from its start) in `directory`, open for reading: no other
    process can open it, so many readers may take it at offsets. OSError: the copy could not
    be written (the directory's file system full, say)."""
    import tempfile

    copy = tempfile.TemporaryFile(dir=directory)  # O_TMPFILE where there is one: no name
    try:
        src, dst = source.fileno(), copy.fileno()
        done = 0
        while n := os.sendfile(dst, src, done, 1 << 30):
            done += n
        copy.seek(0)
    except BaseException:  # its space goes back now, not when the collector gets to it
        copy.close()
        raise
    return copy


def unchanged(fd: int, before: os.stat_result, size: int, steady: Steady | None = None) -> None:
    """The file is as it was `before` it was read (size, mtime, ctime), `size` bytes long, and
    its lease (`steady`, where one was held) is whole: else it may have passed its checksum
    with one content and been decoded from another. The stat stays beside the lease for file
    systems that grant a lease their remote writers never break (FUSE, network mounts)."""
    if steady is not None and steady.held and not steady.kept():
        raise Changed()
    after = os.fstat(fd)
    if (after.st_size, after.st_mtime_ns, after.st_ctime_ns) != (
            before.st_size, before.st_mtime_ns, before.st_ctime_ns) or size != after.st_size:
        raise Changed()


def hash_file(fd: int, on_read: Callable[[int], None] | None,
              stop: threading.Event) -> tuple[str, int]:
    """The sha256 and size of the whole file, read at offsets from its start to its end (the
    file's offset is left to other readers); hashlib and the reads release the GIL."""
    h = hashlib.sha256()
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    done = 0
    while not stop.is_set():
        try:
            n = os.preadv(fd, [buf], done)
        except OSError as exc:
            raise ReadFailed(exc) from None
        if not n:
            return h.hexdigest(), done
        h.update(view[:n])
        done += n
        if on_read is not None:
            on_read(done)
    raise parallel.Cancelled()
