"""Staging: member bytes hashed and written on a thread of their own, into recycled buffers.

Libraries are written with O_DIRECT on local disk filesystems, so a gigabyte of cuDNN does not
first become a gigabyte of freshly allocated page cache.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import mmap
import os
import queue
import threading
from pathlib import Path
from typing import IO, Callable

from cudnn_setup.archive.decoders import CHUNK
from cudnn_setup.archive.listing import Member
from cudnn_setup.facts import mounts

MAX_HEADER_BYTES = 16 << 20  # headers up to this size are kept as text, for version parsing


class StagingWriteFailed(Exception):
    """Writing the staging dir failed (disk full…): the machine's fault, not the archive's."""



class Writer:
    """Hashes and writes member bytes on a thread of its own.

    hashlib and file writes release the GIL, so on two cores this overlaps with decompressing and
    parsing the tar stream; the bounded queue keeps memory flat (QUEUE_CHUNKS MiB at most).
    """

    QUEUE_CHUNKS = 8

    def __init__(self, direct: bool = False):
        self.direct = direct  # big files are written with O_DIRECT
        self.queue: queue.Queue = queue.Queue(maxsize=self.QUEUE_CHUNKS)
        self.buffers: queue.Queue = queue.Queue()
        for _ in range(self.QUEUE_CHUNKS + 2):
            self.buffers.put(mmap.mmap(-1, CHUNK))  # page-aligned, as O_DIRECT writes need
        self.error: Exception | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            item = self.queue.get()
            if item is None:
                return
            job, buf = item
            try:
                if self.error is None:
                    job()
            except Exception as exc:  # kept for the reading thread; this one must keep draining
                self.error = exc
            finally:
                if buf is not None:  # recycled even after an error, so the reader never starves
                    self.buffers.put(buf)

    def put(self, job: Callable[[], None], buf: mmap.mmap | None = None) -> None:
        if self.error is not None:
            if buf is not None:
                self.buffers.put(buf)
            raise StagingWriteFailed() from self.error
        self.queue.put((job, buf))

    def finish(self) -> None:
        self.queue.put(None)
        self.thread.join()
        if self.error is not None:
            raise StagingWriteFailed() from self.error


class Sink:
    """One member's destination: its digest, its staged file, its text if it is a header."""

    def __init__(self, member: Member, staging: Path | None, direct: bool):
        self.member = member
        self.direct = direct and member.size >= DIRECT_MIN_BYTES
        self.digest = hashlib.sha256()
        self.keep_text = member.name.endswith(".h") and member.size <= MAX_HEADER_BYTES
        self.chunks: list[bytes] = []
        self.out: StagedFile | None = None
        if staging is not None:
            member.staged = staging / member.path

    def open(self) -> None:
        if self.member.staged is not None:
            self.member.staged.parent.mkdir(parents=True, exist_ok=True)
            self.out = StagedFile(self.member.staged, self.direct)

    def feed(self, chunk: memoryview) -> None:
        self.digest.update(chunk)
        if self.keep_text:
            self.chunks.append(bytes(chunk))
        if self.out is not None:
            self.out.write(chunk)

    def close(self) -> None:
        m = self.member
        if self.out is not None:
            self.out.close()
            # World-readable, never group/other-writable; set-id bits were refused earlier.
            os.chmod(m.staged, (m.mode & 0o755) | 0o444)
        m.sha256 = self.digest.hexdigest()
        if self.keep_text:
            m.text = b"".join(self.chunks).decode("utf-8", errors="replace")


# Libraries are written with O_DIRECT: the bytes go from our recycled buffers to the disk
# instead of into a gigabyte of freshly allocated page cache. Allocating those pages is most of
# the kernel time of a buffered write (on VMs whose free memory goes back to the host, about
# 2 s per GiB), and the installer never reads the bytes back. Only on local disk filesystems:
# on NFS every direct write would wait for a round trip to the server, and tmpfs is the page
# cache itself.
DIRECT_MIN_BYTES = 4 * CHUNK
DIRECT_IO_FILESYSTEMS = {"ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "overlay"}
DIRECT_ALIGN = 4096  # the largest logical block size in use; every full chunk is a multiple


class StagedFile:
    """A new staging file, written chunk by chunk at offsets that are multiples of CHUNK."""

    def __init__(self, path: Path, direct: bool):
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        self.direct = False
        if direct and hasattr(os, "O_DIRECT"):
            try:
                self.fd = os.open(path, flags | os.O_DIRECT, 0o600)
                self.direct = True
                return
            except OSError as exc:
                if exc.errno != errno.EINVAL:  # EINVAL: this filesystem has no direct I/O
                    raise
        self.fd = os.open(path, flags, 0o600)

    def write(self, chunk: memoryview) -> None:
        if self.direct and len(chunk) % DIRECT_ALIGN:
            self._buffered()  # the file's short last chunk
        while chunk:
            try:
                n = os.write(self.fd, chunk)
            except OSError as exc:
                if not (self.direct and exc.errno == errno.EINVAL):
                    raise
                self._buffered()  # a device with stricter alignment than ours
                continue
            chunk = chunk[n:]

    def _buffered(self) -> None:
        fcntl.fcntl(self.fd, fcntl.F_SETFL, fcntl.fcntl(self.fd, fcntl.F_GETFL) & ~os.O_DIRECT)
        self.direct = False

    def close(self) -> None:
        os.close(self.fd)


def consume(stream: IO[bytes], member: Member, staging: Path | None,
             writer: Writer) -> None:
    """Read one member's bytes once, into recycled buffers; the writer thread hashes and writes."""
    sink = Sink(member, staging, writer.direct)
    writer.put(sink.open)
    remaining = member.size
    while remaining:
        buf = writer.buffers.get()
        n = stream.readinto(memoryview(buf)[:min(CHUNK, remaining)])
        if not n:
            writer.buffers.put(buf)
            raise EOFError(f"unexpected end of data in {member.path}")
        if remaining == member.size:
            member.head = bytes(buf[:min(n, 64)])
        remaining -= n
        writer.put(lambda buf=buf, n=n: sink.feed(memoryview(buf)[:n]), buf)
    writer.put(sink.close)


def direct_io_allowed(staging_dir: Path) -> bool:
    """Direct writes only on local disk filesystems (not NFS round trips, not tmpfs)."""
    return mounts.fs_type(staging_dir) in DIRECT_IO_FILESYSTEMS
