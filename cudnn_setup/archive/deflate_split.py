"""One long deflate stream inflated on several cores at once.

A wheel's members are inflated side by side, one core each, so its largest library (about half
of NVIDIA's wheel) is the install's critical path on a machine with many cores: the rest are
done long before it. rapidgzip decodes a single deflate stream on several threads (it finds
block boundaries, decodes ahead without the window, then resolves the back-references), so
that member is given the cores the others leave idle. rapidgzip reads the member's compressed
bytes through `_Range`, a read-only file over their place in the wheel.

Nothing is trusted from rapidgzip beyond the bytes: the caller counts them against the size
the central directory declares and checks their CRC-32, as for a member inflated on one core.
"""
from __future__ import annotations

import importlib.util
import os
import threading
from typing import Iterator

from cudnn_setup import parallel

# A member is split only where the machine has cores to spare: on fewer, every core is busy
# inflating a member of its own to the end, and rapidgzip's two passes cost more CPU than one.
MIN_CORES = 8
# Below this a member finishes on one core before the threads would have started.
MIN_BYTES = 32 << 20


def available() -> bool:
    return importlib.util.find_spec("rapidgzip") is not None


def threads_for(size: int, share: int, cores: int) -> int:
    """Threads for a member of `size` decoded bytes, where each core's fair `share` of the
    whole is `share`: enough that the member ends with the rest (1 means one core, as always)."""
    if cores < MIN_CORES or size < MIN_BYTES or share <= 0 or not available():
        return 1
    return max(1, min(cores, -(-size // share)))


class _Range:
    """The bytes [start, end) of an open file as a read-only file of its own, read with pread
    (no shared offset, so rapidgzip's threads and the other members' never disturb each other)."""

    def __init__(self, fd: int, start: int, end: int):
        self.fd, self.start, self.length, self.pos = fd, start, end - start, 0

    def read(self, n: int = -1) -> bytes:
        left = self.length - self.pos
        n = left if n is None or n < 0 else min(n, left)
        data = os.pread(self.fd, n, self.start + self.pos) if n > 0 else b""
        self.pos += len(data)
        return data

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self.pos, os.SEEK_END: self.length}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def tell(self) -> int:
        return self.pos

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def write(self, _data) -> int:
        raise OSError("read-only")

    def close(self) -> None:
        pass


def inflated(fd: int, start: int, end: int, threads: int, piece: int,
             stop: threading.Event) -> Iterator[bytes]:
    """The raw deflate stream at [start, end) of `fd`, decoded on `threads` threads, in pieces
    of at most `piece` bytes; rapidgzip's threads are joined whenever the caller stops."""
    import rapidgzip

    with rapidgzip.RapidgzipFile(_Range(fd, start, end), parallelization=threads) as decoded:
        while True:
            if stop.is_set():
                raise parallel.Cancelled()
            data = decoded.read(piece)
            if not data:
                return
            yield data
