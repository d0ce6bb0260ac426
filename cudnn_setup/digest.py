"""Hashing files without holding them in memory."""
from __future__ import annotations

import hashlib
from pathlib import Path

BUFFER = 1 << 20


def file_digest(path: Path, algorithm: str = "sha256") -> str:
    h = hashlib.new(algorithm)
    buf = bytearray(BUFFER)  # reused: a fresh 1 MiB bytes per read would be a fresh mmap each
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()
