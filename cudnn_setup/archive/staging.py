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
    """Hashes and writes member bytes on threads of their own.

    One thread writes every file in archive order; each file is hashed on one of `lanes` hashing
    threads, in turn, so one file's sha256 runs beside the next file's decoding and beside the
    writes (hashlib and write() release the GIL). A buffer goes back to the pool when both its
    hash and its write are done; the pool (POOL_CHUNKS MiB) bounds memory however far any thread
    falls behind.
    """

    POOL_CHUNKS = 16

    def __init__(self, direct: bool = False, lanes: int = 1):
        self.direct = direct  # big files are written with O_DIRECT
        self.buffers: queue.Queue = queue.Queue()
        for _ in range(self.POOL_CHUNKS + 2):
            self.buffers.put(mmap.mmap(-1, CHUNK))  # page-aligned, as O_DIRECT writes need
        self.error: Exception | None = None
        self.queues = [queue.SimpleQueue() for _ in range(1 + max(1, lanes))]
        self.threads = [threading.Thread(target=self._run, args=(q,), daemon=True)
                        for q in self.queues]
        for t in self.threads:
            t.start()
        self.turn = 0

    def _run(self, jobs: queue.SimpleQueue) -> None:
        while (item := jobs.get()) is not None:
            job, chunk = item
            try:
                if self.error is None:
                    job()
            except Exception as exc:  # kept for the reading thread; this one must keep draining
                self.error = self.error or exc
            finally:
                if chunk is not None:  # recycled even after an error, so the reader never starves
                    chunk.release()

    def lane(self) -> queue.SimpleQueue:
        """The hashing queue for the next file."""
        self.turn = self.turn % (len(self.queues) - 1) + 1
        return self.queues[self.turn]

    def check(self) -> None:
        if self.error is not None:
            raise StagingWriteFailed() from self.error

    def put(self, jobs: queue.SimpleQueue, job: Callable[[], None]) -> None:
        self.check()
        jobs.put((job, None))

    def put_chunk(self, sink: "Sink", hashing: queue.SimpleQueue, buf: mmap.mmap, n: int) -> None:
        chunk = _Chunk(buf, self.buffers)
        if self.error is not None:
            chunk.release(2)
            self.check()
        view = memoryview(buf)[:n]
        hashing.put((lambda: sink.hash(view), chunk))
        self.queues[0].put((lambda: sink.write(view), chunk))

    @property
    def writes(self) -> queue.SimpleQueue:
        return self.queues[0]

    def finish(self) -> None:
        for q in self.queues:
            q.put(None)
        for t in self.threads:
            t.join()
        self.check()


class _Chunk:
    """A pool buffer shared by a hash job and a write job; back to the pool when both are done."""

    def __init__(self, buf: mmap.mmap, pool: queue.Queue):
        self.buf = buf
        self.pool = pool
        self.users = 2
        self.lock = threading.Lock()

    def release(self, count: int = 1) -> None:
        with self.lock:
            self.users -= count
            last = self.users == 0
        if last:
            self.pool.put(self.buf)


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

    # On the writing thread, in archive order:
    def open(self) -> None:
        if self.member.staged is not None:
            self.member.staged.parent.mkdir(parents=True, exist_ok=True)
            self.out = StagedFile(self.member.staged, self.direct)

    def write(self, chunk: memoryview) -> None:
        if self.out is not None:
            self.out.write(chunk)

    def close(self) -> None:
        m = self.member
        if self.out is not None:
            self.out.close()
            # World-readable, never group/other-writable; set-id bits were refused earlier.
            os.chmod(m.staged, (m.mode & 0o755) | 0o444)

    # On the file's hashing thread:
    def hash(self, chunk: memoryview) -> None:
        self.digest.update(chunk)
        if self.keep_text:
            self.chunks.append(bytes(chunk))

    def seal(self) -> None:
        self.member.sha256 = self.digest.hexdigest()
        if self.keep_text:
            self.member.text = b"".join(self.chunks).decode("utf-8", errors="replace")


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
    """Read one member's bytes once, into pool buffers, for the writer's threads."""
    sink = Sink(member, staging, writer.direct)
    hashing = writer.lane()
    writer.put(writer.writes, sink.open)
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
        writer.put_chunk(sink, hashing, buf, n)
    writer.put(writer.writes, sink.close)
    writer.put(hashing, sink.seal)


def hash_lanes(cores: int) -> int:
    """Hashing threads for member files: one per four cores, up to four.

    One sha256 thread (1 to 2 GB/s with SHA extensions) keeps up with every decoder on two
    cores; on many cores rapidgzip and `xz -T0` decode faster than one thread hashes, and
    cuDNN's bytes sit in a few large libraries, so more than four lanes would wait idle.
    """
    return max(1, min(4, cores // 4))


def direct_io_allowed(staging_dir: Path) -> bool:
    """Direct writes only on local disk filesystems (not NFS round trips, not tmpfs)."""
    return mounts.fs_type(staging_dir) in DIRECT_IO_FILESYSTEMS
