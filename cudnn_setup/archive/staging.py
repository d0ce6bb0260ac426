"""Staging: member bytes hashed and written on a thread of their own, into recycled buffers.

A tar's members are read by one thread (`consume`); a wheel's members are decoded on several
(`stage_pieces`), each hashing what it decodes.

Libraries are written with O_DIRECT on local disk filesystems, so a gigabyte of cuDNN does not
first become a gigabyte of freshly allocated page cache.
"""
from __future__ import annotations

import errno
import fcntl
import mmap
import os
import queue
import threading
from pathlib import Path
from typing import IO, Callable, Iterable

from cudnn_setup.archive.decoders import CHUNK
from cudnn_setup.archive.listing import Member
from cudnn_setup.digest import BLAKE3, SHA256, hasher
from cudnn_setup.durable import make_dirs
from cudnn_setup.facts import cudnn as gen
from cudnn_setup.facts import mounts

# Headers are kept as text, for version parsing, up to this size all together: cuDNN's come to
# well under a MiB, and a hostile archive of many large headers must not fill the memory.
MAX_HEADER_BYTES = 16 << 20


class StagingWriteFailed(Exception):
    """Writing the staging dir failed (disk full…): the machine's fault, not the archive's."""



class Writer:
    """Hashes and writes member bytes on threads of their own.

    Each file is hashed on one of `lanes` hashing threads, in turn, so one file's hash runs
    beside the next file's decoding; its chunks are written by `writers` threads at their
    offsets (pwrite), so a slow disk sees several direct writes in flight rather than one. The
    hashes (sha256, BLAKE3) and the writes release the GIL. A buffer goes back to the pool when both its hash and its write
    are done; the pool (`pool_chunks` MiB) bounds memory however far any thread falls behind.
    """

    POOL_CHUNKS = 16

    def __init__(self, direct: bool = False, lanes: int = 1, writers: int = 1,
                 on_complete: Callable[[Member], None] | None = None,
                 content_hash: str = SHA256, pool_chunks: int = POOL_CHUNKS):
        self.direct = direct  # big files are written with O_DIRECT
        self.content_hash = content_hash  # each member's bytes: sha256 or blake3
        self.on_complete = on_complete  # told of each staged file once all of it is written
        self.buffers: queue.Queue = queue.Queue()
        for _ in range(pool_chunks + 2):
            self.buffers.put(mmap.mmap(-1, CHUNK))  # page-aligned, as O_DIRECT writes need
        self.error: Exception | None = None
        self.writes: queue.SimpleQueue = queue.SimpleQueue()
        self.lanes = [queue.SimpleQueue() for _ in range(max(1, lanes))]
        self.threads: list[threading.Thread] = []
        queues = [self.writes] * max(1, writers) + self.lanes
        for q in queues:
            t = threading.Thread(target=self._run, args=(q,), daemon=True)
            try:
                t.start()
            except BaseException:  # short of threads: those started end before this is said
                for started in queues[:len(self.threads)]:
                    started.put(None)
                for started_thread in self.threads:
                    started_thread.join()
                raise
            self.threads.append(t)
        self.turn = 0
        self.open_sinks: set[Sink] = set()
        self.text_left = MAX_HEADER_BYTES  # header text still to be kept (under text_lock:
        self.text_lock = threading.Lock()  # a wheel's members are read on several threads)

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
        self.turn = (self.turn + 1) % len(self.lanes)
        return self.lanes[self.turn]

    def check(self) -> None:
        if self.error is not None:
            raise StagingWriteFailed() from self.error

    def put(self, jobs: queue.SimpleQueue, job: Callable[[], None]) -> None:
        self.check()
        jobs.put((job, None))

    def put_chunk(self, sink: "Sink", hashing: queue.SimpleQueue, buf: mmap.mmap, n: int,
                  offset: int) -> None:
        chunk = _Chunk(buf, self.buffers)
        if self.error is not None:
            chunk.release(2)
            self.check()
        view = memoryview(buf)[:n]
        hashing.put((lambda: sink.hash(view), chunk))
        sink.queued()
        self.writes.put((lambda: sink.write_at(view, offset), chunk))

    def put_hashed(self, sink: "Sink", buf: mmap.mmap, n: int, offset: int) -> None:
        """A chunk its reader has hashed already, for the writing threads only."""
        chunk = _Chunk(buf, self.buffers, users=1)
        if self.error is not None:
            chunk.release()
            self.check()
        sink.queued()
        self.writes.put((lambda: sink.write_at(memoryview(buf)[:n], offset), chunk))

    def finish(self) -> None:
        for _ in range(len(self.threads) - len(self.lanes)):
            self.writes.put(None)
        for q in self.lanes:
            q.put(None)
        for t in self.threads:
            t.join()
        for sink in list(self.open_sinks):  # left open by a write that failed
            sink.abandon()
        self.check()


class _Chunk:
    """A pool buffer shared by a hash job and a write job; back to the pool when both are done."""

    def __init__(self, buf: mmap.mmap, pool: queue.Queue, users: int = 2):
        self.buf = buf
        self.pool = pool
        self.users = users
        self.lock = threading.Lock()

    def release(self, count: int = 1) -> None:
        with self.lock:
            self.users -= count
            last = self.users == 0
        if last:
            self.pool.put(self.buf)


class Sink:
    """One member's destination: its digest, its staged file, its text if it is a header.

    The staged file is closed by whichever comes last: the reading thread saying every chunk
    is queued, or the writing thread finishing the last queued write.
    """

    def __init__(self, member: Member, staging: Path | None, writer: Writer):
        self.member = member
        self.writer = writer
        self.direct = writer.direct and member.size >= DIRECT_MIN_BYTES
        self.digest = hasher(writer.content_hash)
        with writer.text_lock:
            self.keep_text = (member.name in gen.HEADERS_WITH_VERSION
                              and member.size <= writer.text_left)
            if self.keep_text:
                writer.text_left -= member.size
        self.chunks: list[bytes] = []
        self.out: StagedFile | None = None
        self.lock = threading.Lock()
        self.pending = 0
        self.all_queued = False
        if staging is not None:
            member.staged = staging / member.path

    # On the reading thread:
    def open(self) -> None:
        if self.member.staged is not None:
            make_dirs(self.member.staged.parent)
            self.out = StagedFile(self.member.staged, self.direct)
            self.writer.open_sinks.add(self)

    def queued(self) -> None:
        with self.lock:
            self.pending += 1

    def done_queuing(self) -> None:
        with self.lock:
            self.all_queued = True
            last = self.pending == 0
        if last:
            self.close()

    # On a writing thread:
    def write_at(self, chunk: memoryview, offset: int) -> None:
        if self.out is not None:
            self.out.write_at(chunk, offset)
        with self.lock:
            self.pending -= 1
            last = self.all_queued and self.pending == 0
        if last:
            self.close()

    def close(self) -> None:
        m = self.member
        if self.out is not None:
            self.writer.open_sinks.discard(self)
            self.out.close()
            # World-readable, never group/other-writable; set-id bits were refused earlier.
            os.chmod(m.staged, (m.mode & 0o755) | 0o444)
            if self.writer.on_complete is not None:
                self.writer.on_complete(m)

    def abandon(self) -> None:
        self.writer.open_sinks.discard(self)
        if self.out is not None:
            self.out.close()

    # On the file's hashing thread:
    def hash(self, chunk: memoryview) -> None:
        self.digest.update(chunk)
        if self.keep_text:
            self.chunks.append(bytes(chunk))

    def seal(self) -> None:
        if self.writer.content_hash == BLAKE3:
            self.member.blake3 = self.digest.hexdigest()
        else:
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
    """A new staging file, written in chunks at offsets that are multiples of CHUNK, by one
    thread or several.

    Full chunks go straight to the disk when `direct`; a short one (the file's tail), and every
    chunk once the device has refused a direct write (EINVAL: stricter alignment than ours), go
    through a second, buffered descriptor of the same file.
    """

    def __init__(self, path: Path, direct: bool):
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        self.path = path
        self.direct = False
        self.lock = threading.Lock()
        self.buffered_fd: int | None = None
        if direct and hasattr(os, "O_DIRECT"):
            try:
                self.fd = os.open(path, flags | os.O_DIRECT, 0o600)
                self.direct = True
                return
            except OSError as exc:
                if exc.errno != errno.EINVAL:  # EINVAL: this filesystem has no direct I/O
                    raise
        self.fd = os.open(path, flags, 0o600)

    def write_at(self, chunk: memoryview, offset: int) -> None:
        if self.direct and not len(chunk) % DIRECT_ALIGN:
            try:
                _pwrite_all(self.fd, chunk, offset)
                return
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                self.direct = False  # a device with stricter alignment: the page cache from now
        _pwrite_all(self._buffered(), chunk, offset)

    def _buffered(self) -> int:
        with self.lock:
            if self.buffered_fd is None:
                opened_direct = fcntl.fcntl(self.fd, fcntl.F_GETFL) & getattr(os, "O_DIRECT", 0)
                self.buffered_fd = (os.open(self.path, os.O_WRONLY | os.O_CLOEXEC)
                                    if opened_direct else self.fd)
            return self.buffered_fd

    def close(self) -> None:
        if self.buffered_fd is not None and self.buffered_fd != self.fd:
            os.close(self.buffered_fd)
        os.close(self.fd)


def _pwrite_all(fd: int, chunk: memoryview, offset: int) -> None:
    while chunk:
        n = os.pwrite(fd, chunk, offset)
        chunk, offset = chunk[n:], offset + n


def consume(stream: IO[bytes], member: Member, staging: Path | None,
            writer: Writer) -> None:
    """Read one member's bytes once, into pool buffers, for the writer's threads."""
    sink = Sink(member, staging, writer)
    hashing = writer.lane()
    writer.check()
    try:
        sink.open()
    except OSError as exc:  # the machine's fault (disk full, a name too long), as a write's
        raise StagingWriteFailed() from exc
    offset = 0
    while offset < member.size:
        buf = writer.buffers.get()
        n = stream.readinto(memoryview(buf)[:min(CHUNK, member.size - offset)])
        if not n:
            writer.buffers.put(buf)  # the file is closed by Writer.finish, after its writes
            raise EOFError(f"unexpected end of data in {member.path}")
        if offset == 0:
            member.head = bytes(buf[:min(n, 64)])
        writer.put_chunk(sink, hashing, buf, n, offset)
        offset += n
    try:
        sink.done_queuing()  # closes the file here when its writes are all done
    except OSError as exc:  # closing or chmod: the staging disk's fault, as a write's would be
        raise StagingWriteFailed() from exc
    writer.put(hashing, sink.seal)


def stage_pieces(pieces: Iterable[bytes], member: Member, staging: Path | None,
                 writer: Writer, hashing: queue.SimpleQueue | None = None) -> None:
    """One member's bytes as a decoder running on the calling thread hands them over (in
    pieces of any size, `member.size` in all): gathered into pool buffers and hashed on this
    thread, so members decoded on several threads are hashed on as many, and written by the
    writer's threads. With `hashing` (one of the writer's lanes) each full buffer is hashed
    there instead, beside the decoding of the next: for a member whose decoding alone is the
    longest job, while other cores have nothing left to do."""
    sink = Sink(member, staging, writer)
    writer.check()
    try:
        sink.open()
    except OSError as exc:  # the machine's fault (disk full, a name too long), as a write's
        raise StagingWriteFailed() from exc
    buf: mmap.mmap | None = None
    offset = fill = 0
    try:
        for piece in pieces:
            view = memoryview(piece)
            if offset + fill + len(view) > member.size:
                raise ValueError(f"{member.path} holds more than it declares")
            if hashing is None:
                sink.hash(view)
            while view:
                if buf is None:
                    buf, fill = writer.buffers.get(), 0
                n = min(len(view), CHUNK - fill)
                buf[fill:fill + n] = view[:n]
                view, fill = view[n:], fill + n
                if fill == CHUNK:
                    full, buf, fill = buf, None, 0
                    offset = _hand_over(writer, sink, full, CHUNK, offset, hashing)
        if buf is not None:
            full, buf = buf, None
            offset = _hand_over(writer, sink, full, fill, offset, hashing)
    finally:
        if buf is not None:  # an error mid-chunk: the file is closed by Writer.finish
            writer.buffers.put(buf)
    if offset != member.size:
        raise EOFError(f"unexpected end of data in {member.path}")
    try:
        sink.done_queuing()  # closes the file here when its writes are all done
    except OSError as exc:  # closing or chmod: the staging disk's fault, as a write's would be
        raise StagingWriteFailed() from exc
    if hashing is None:
        sink.seal()
    else:
        writer.put(hashing, sink.seal)  # after the member's last chunk on its lane


def _hand_over(writer: Writer, sink: Sink, buf: mmap.mmap, fill: int, offset: int,
               hashing: queue.SimpleQueue | None) -> int:
    """A filled buffer to the writers, and to `hashing` when this thread did not hash it
    (theirs from now, even if this raises); the next offset."""
    if offset == 0:
        sink.member.head = bytes(buf[:min(fill, 64)])
    if hashing is None:
        writer.put_hashed(sink, buf, fill, offset)
    else:
        writer.put_chunk(sink, hashing, buf, fill, offset)
    return offset + fill


def write_threads(cores: int) -> int:
    """Threads writing staged files: one on two cores, where the decoder needs both and a direct
    write costs little CPU; up to four on more, so a slow disk (seen on a 16-core VM: about
    370 MB/s for one 1 MiB direct write at a time) has several writes in flight."""
    return 1 if cores <= 2 else min(4, cores // 2)


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
