"""Hashing files without holding them in memory."""
from __future__ import annotations

import hashlib
from pathlib import Path

from cudnn_setup.untrusted import open_regular

BUFFER = 1 << 20


def file_digest(path: Path, algorithm: str = "sha256") -> str:
    h = hashlib.new(algorithm)
    buf = bytearray(BUFFER)  # reused: a fresh 1 MiB bytes per read would be a fresh mmap each
    view = memoryview(buf)
    with open_regular(path, buffering=0) as f:  # a FIFO or device is refused, never read
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()
