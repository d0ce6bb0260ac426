"""An archive file read by several readers at once: its sha256 taken beside the decoding, and
the proof that the file did not change while it was read.

A wheel's members are inflated at their own offsets, and a .tar.gz is decoded by rapidgzip's
own threads; neither can hand its bytes to one hasher. So the file is hashed at offsets too,
from the same open file, and it must be unchanged (size, mtime, ctime) once all of it has been
read: a write moves ctime, which no user can set back, so a file rewritten during the install
cannot pass the checksum with one content and be decoded from another.
"""
from __future__ import annotations

import hashlib
import os
import threading
import time
from typing import Callable

from cudnn_setup import parallel

CHUNK = 1 << 20
# The kernel stamps ctime from a clock that moves in ticks (up to 10 ms), so a write in the
# same tick as the first stat would leave ctime as that stat saw it. Once ctime is this far in
# the past, any later write gives it a newer value.
SETTLED_NS = 50_000_000
SETTLE_TRIES = 20  # a file written on and on for a second: taken as it is, the end check judges


class Changed(Exception):
    """The file changed while it was read."""


class ReadFailed(Exception):
    """Reading the file failed (an I/O error): the machine's fault, not the archive's."""

    def __init__(self, exc: OSError):
        super().__init__(str(exc))
        self.exc = exc


def settled_stat(fd: int) -> os.stat_result:
    """The open file's stat, taken once its ctime is old enough that any later write moves it
    (a file changed in the last 50 ms waits that long; any other costs one fstat).

    A ctime ahead of this machine's clock (a file server whose clock runs ahead) cannot be
    aged by waiting: once a wait leaves ctime as it was, the stat is taken. A file still being
    written is waited for while its ctime keeps moving, a second at most."""
    st = os.fstat(fd)
    for _ in range(SETTLE_TRIES):
        age = time.time_ns() - st.st_ctime_ns
        if age >= SETTLED_NS:
            break
        time.sleep((SETTLED_NS - max(age, 0)) / 1e9)
        before, st = st, os.fstat(fd)
        if st.st_ctime_ns == before.st_ctime_ns:
            break
    return st


def unchanged(fd: int, before: os.stat_result, size: int) -> None:
    """The file is as it was `before` it was read (size, mtime, ctime), `size` bytes long:
    else it may have passed its checksum with one content and been decoded from another."""
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
