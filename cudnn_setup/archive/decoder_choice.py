"""Which decoder reads an archive: a choice made from facts alone, with no I/O.

The facts (how many xz blocks the archive has, the cores and memory this process may use, the
decoders installed, the archive's size) are gathered by `decoders.Decoder` from facts/host.py
and the archive; this module only decides, so every case can be tested by a table.
"""
from __future__ import annotations

from typing import Collection

GZIP, XZ, BZIP2, PLAIN_TAR, ZIP = "gzip", "xz", "bzip2", "tar", "zip"  # compressions
# Decoders. A .tar.xz: the `xz` program on every core, liblzma in this process through ctypes,
# else Python's lzma (named by the compression, "xz"). A .tar.gz: rapidgzip, ISA-L, zlib.
XZ_PARALLEL, LIBLZMA = "xz -T0", "liblzma"
RAPIDGZIP, ISAL, ZLIB = "rapidgzip", "isal", "zlib"  # gzip decoders, fastest first
# Measured with bench/install_speed.py (docs/evidence/performance-history.md): on 2 cores ISA-L
# alone decodes a cuDNN .tar.gz as fast as rapidgzip on both, and leaves the second core to
# hashing and writing.
RAPIDGZIP_MIN_CORES = 4
XZ_PARALLEL_SINCE = 50040000  # XZ_VERSION of 5.4.0: the first xz that decodes on many threads
XZ_MEMLIMIT_FLOOR = 64 << 20


def xz_decodes_in_parallel(version: int | None) -> bool:
    """Whether an xz of this XZ_VERSION decodes blocks on several threads (5.4.0 and later).

    An older one decodes on one thread and knows no --memlimit-mt, so liblzma in this process
    does better, without the pipe.
    """
    return version is not None and version >= XZ_PARALLEL_SINCE


def choose_decoder(compression: str, blocks: int | None, cores: int, memory: int | None,
                   available: Collection[str], size: int) -> str:
    """The decoder for an archive of `compression` and `size` bytes.

    `blocks`: how many blocks a .tar.xz has (None when unknown); `cores`, `memory`: what this
    process may use (memory None when unknown); `available`: the optional decoders at hand
    (XZ_PARALLEL for an xz that decodes in parallel, LIBLZMA, RAPIDGZIP, ISAL; zlib, Python's
    lzma and bz2 are always there).

    A .tar.xz of several blocks (or of a count xz could not read) goes to `xz -T0`; a single
    block can only be decoded sequentially, and liblzma then decodes it in this process
    straight into the writer's buffers (the pipe out of xz would cost it 7% of its time).
    gzip: see `gzip_choice`. bzip2 and a plain tar have one decoder each.
    """
    if compression == XZ:
        if XZ_PARALLEL in available and blocks != 1:
            return XZ_PARALLEL
        return LIBLZMA if LIBLZMA in available else XZ
    if compression == GZIP:
        return gzip_choice(cores, size, memory, available)
    return compression


def gzip_choice(cores: int, size: int, memory: int | None, available: Collection[str]) -> str:
    """rapidgzip on RAPIDGZIP_MIN_CORES cores or more when its memory fits in a quarter of what
    is available (as xz's is held; unknown memory does not stop it), ISA-L otherwise (or where
    rapidgzip is missing), zlib where neither is installed."""
    if cores >= RAPIDGZIP_MIN_CORES and RAPIDGZIP in available:
        if memory is None or rapidgzip_memory(size, cores) <= memory // 4:
            return RAPIDGZIP
    return fallback_gzip(available)


def fallback_gzip(available: Collection[str]) -> str:
    """The gzip decoder whose verdict stands when rapidgzip finds fault: ISA-L, else zlib."""
    return ISAL if ISAL in available else ZLIB


def rapidgzip_memory(archive_bytes: int, cores: int) -> int:
    """What rapidgzip may hold decoding `archive_bytes` on `cores` threads, high.

    Fed through a pipe it kept much of what it had read: measured peaks were 315 MiB for a
    200 MB prefix and 449 MiB for a 635 MB .tar.gz on 2 threads, 589 MiB for a 349 MiB one on 16
    (docs/evidence/performance-history.md). Reading the file itself it holds less (485 MiB of
    peak RSS for a 741 MB one on 16 threads); the estimate stays the pipe's: the archive,
    256 MiB, 16 MiB a thread.
    """
    return archive_bytes + (256 << 20) + cores * (16 << 20)


def xz_memory_limit(memory: int | None) -> list[str]:
    """xz's options keeping its parallel decoder to a quarter of the memory this process may
    still use (at least 64 MiB); none when that is unknown.

    xz's own default is a quarter of the machine's RAM, which inside a container with a memory
    limit can be more than the container has.
    """
    return [f"--memlimit-mt={max(memory // 4, XZ_MEMLIMIT_FLOOR)}"] if memory is not None else []
