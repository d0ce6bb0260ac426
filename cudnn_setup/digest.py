"""Hashing files without holding them in memory, and the hash of an installed file's bytes.

Two hashes, for two jobs. The archive's own hash is sha256: it is what NVIDIA publishes, what a
package index lists and what `--sha256` gives, so it is what an archive is checked against and
known by. The content hash of each file the tool installs (the manifest's record of what it
placed, by which verify and uninstall tell a file changed since) only has to be one that no
one can forge: BLAKE3, which hashes about four times as fast as sha256 on one core (7 GB/s
against 1.7 on this project's 2-core machine, with SHA extensions), through the `blake3`
package. Where that package is missing the content hash is sha256, as before; a manifest
says which one each record holds.
"""
from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path
from typing import Iterable

from cudnn_setup.errors import InstallFailed
from cudnn_setup.untrusted import open_regular

BUFFER = 1 << 20
SHA256, BLAKE3 = "sha256", "blake3"
CONTENT_HASHES = (BLAKE3, SHA256)  # a record's hashes, compared in this order


class HashUnavailable(InstallFailed):
    """A manifest's record is of a hash this Python cannot compute (blake3 not installed)."""


def hasher(algorithm: str):
    """A new hash object (update, hexdigest) for `algorithm`: blake3, or any of hashlib's."""
    if algorithm == BLAKE3:
        try:
            from blake3 import blake3
        except ImportError:
            raise HashUnavailable("the installed files are recorded by their BLAKE3 hash, and "
                                  "the blake3 package is not installed in this Python",
                                  "pip install blake3 (the install that wrote the record had "
                                  "it)", code="missing-blake3") from None
        return blake3()
    return hashlib.new(algorithm)


def content_hash() -> str:
    """The hash an install records for each file it places: BLAKE3 where the package is
    installed, else sha256."""
    return BLAKE3 if importlib.util.find_spec("blake3") is not None else SHA256


def file_digests(path: Path, algorithms: Iterable[str]) -> dict[str, str]:
    """The hex digests of the file at `path` for each of `algorithms`, in one read."""
    hashes = {a: hasher(a) for a in dict.fromkeys(algorithms)}
    buf = bytearray(BUFFER)  # reused: a fresh 1 MiB bytes per read would be a fresh mmap each
    view = memoryview(buf)
    with open_regular(path, buffering=0) as f:  # a FIFO or device is refused, never read
        while n := f.readinto(buf):
            for h in hashes.values():
                h.update(view[:n])
    return {a: h.hexdigest() for a, h in hashes.items()}


def file_digest(path: Path, algorithm: str = SHA256) -> str:
    return file_digests(path, (algorithm,))[algorithm]
