"""Read a cuDNN archive once, as a stream, judging each member before any byte of it is written.

Members are never extracted with tarfile's own extract: only regular files that pass every check
are written, under names this module builds, into a staging directory the caller owns. Archive
symlinks are kept as records (name → target) and never created, so no chain of links can lead a
write outside the staging directory.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import io
import lzma
import mmap
import os
import posixpath
import queue
import shutil
import stat
import subprocess
import tarfile
import threading
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, IO, Iterator

from cudnn_setup import mounts, xz_into
from cudnn_setup.checksums import file_digest
from cudnn_setup.errors import ArchiveRejected, InstallFailed
from cudnn_setup.problems import Problem, escape

CHUNK = 1 << 20
# In-process decoders hand over 128 KiB at a time: bigger pieces are each a fresh mmap (and a
# page fault per 4 KiB), smaller ones come back from malloc's free list still in the cache.
DECODED_PIECE = 128 << 10
MAX_MEMBERS = 5000
# The largest library NVIDIA ships (libcudnn_engines_precompiled.so.9) is under 1 GiB.
MAX_MEMBER_BYTES = 4 << 30
MAX_TOTAL_BYTES = 16 << 30
MAX_HEADER_BYTES = 16 << 20
MAX_NAME_LENGTH = 1024

GZIP, XZ, BZIP2, PLAIN_TAR, ZIP = "gzip", "xz", "bzip2", "tar", "zip"

try:  # ISA-L's gzip decoder, when installed, reports damage with its own error type
    from isal.igzip_lib import IsalError
except ImportError:  # pragma: no cover - isal is an optional speed-up
    IsalError = zlib.error
DECODE_ERRORS = (tarfile.TarError, EOFError, lzma.LZMAError, zlib.error, IsalError, OSError)


@dataclass
class Member:
    path: str  # relative to the archive root, normalised ("cuda/lib64/libcudnn.so.7")
    kind: str  # file | symlink | dir
    size: int = 0
    mode: int = 0o644
    sha256: str | None = None
    target: str | None = None  # symlink target, as stored
    staged: Path | None = None  # where the bytes were written, for staged files
    head: bytes = b""  # first bytes of a file, to tell ELF from anything else
    text: str | None = None  # whole content of headers, kept for version parsing

    @property
    def name(self) -> str:
        return posixpath.basename(self.path)

    @property
    def parent(self) -> str:
        return posixpath.dirname(self.path)


@dataclass
class Listing:
    """Everything one pass over an archive learned."""

    compression: str
    sha256: str | None = None  # of the archive file, when it was read to the end
    size: int = 0
    members: list[Member] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    def files(self) -> Iterator[Member]:
        return (m for m in self.members if m.kind == "file")

    def by_path(self) -> dict[str, Member]:
        return {m.path: m for m in self.members}


def sniff(path: Path) -> str:
    with open(path, "rb") as f:
        head = f.read(512)
    if head.startswith(b"\x1f\x8b"):
        return GZIP
    if head.startswith(b"\xfd7zXZ\x00"):
        return XZ
    if head.startswith(b"BZh"):
        return BZIP2
    if head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
        return ZIP
    if len(head) >= 262 and head[257:262] == b"ustar":
        return PLAIN_TAR
    raise ArchiveRejected(
        f"{escape(path.name)} is not a tar archive (nor gzip, xz or bzip2 compressed)",
        "pass the .tgz or .tar.xz file NVIDIA distributes",
    )


class _HashingReader(io.RawIOBase):
    """The raw archive file, counted (and hashed, when `digest` is given) as the decoder reads it."""

    def __init__(self, path: Path, on_read: Callable[[int], None] | None = None,
                 digest=None):
        self.file = open(path, "rb")
        self.digest = digest
        self.count = 0
        self.on_read = on_read

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = self.file.readinto(buffer)
        if n:
            if self.digest is not None:
                self.digest.update(memoryview(buffer)[:n])
            self.count += n
            if self.on_read:
                self.on_read(self.count)
        return n or 0

    def drain(self) -> None:
        buf = bytearray(CHUNK)
        while self.readinto(buf):
            pass

    def close(self) -> None:
        self.file.close()
        super().close()


class _Decoder:
    """A readable stream of the decompressed tar, from the fastest decoder at hand.

    A .tar.xz of several blocks goes through the `xz` binary, which decodes blocks on all cores;
    a thread feeds it the file, hashing the bytes on the way. A single xz block can only be
    decoded sequentially: liblzma then decodes it in this process, straight into the buffers the
    writer thread writes from (the pipe out of `xz` would cost it 7% of its time). gzip and
    bzip2 are decoded on a thread of their own. Whenever the decoding happens in this process,
    another thread hashes the archive file from the page cache on the other core.
    """

    def __init__(self, path: Path, compression: str, on_read: Callable[[int], None] | None):
        self.proc: subprocess.Popen | None = None
        self.feeder: threading.Thread | None = None
        self.hasher: threading.Thread | None = None
        self.digest = hashlib.sha256()
        self.file_sha256 = ""  # from the hasher thread, when decoding happens in this process
        self.stream: IO[bytes]
        xz = shutil.which("xz") if compression == XZ else None
        piped = xz is not None and _xz_decodes_in_parallel(xz) and _xz_blocks(xz, path) != 1
        self.raw = _HashingReader(path, on_read, self.digest if piped else None)
        if piped:
            self.proc = subprocess.Popen(
                [xz, "-dc", "-T0", "-q", *_xz_memory_limit()], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=CHUNK,
            )
            _widen_pipe(self.proc.stdout)
            _widen_pipe(self.proc.stdin)
            self.stream = self.proc.stdout  # type: ignore[assignment]
            self.feeder = threading.Thread(target=self._feed, daemon=True)
            self.feeder.start()
        else:
            self.hasher = threading.Thread(target=self._hash_file, args=(path,), daemon=True)
            self.hasher.start()
            self.stream = _in_process_stream(compression, self.raw)

    def _feed(self) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        buf = bytearray(CHUNK)
        try:
            while True:
                n = self.raw.readinto(buf)
                if not n:
                    break
                self.proc.stdin.write(memoryview(buf)[:n])
        except (BrokenPipeError, ValueError, OSError):
            pass  # the decoder stopped early; finish() reports why
        finally:
            try:
                self.proc.stdin.close()
            except OSError:
                pass

    def _hash_file(self, path: Path) -> None:
        self.file_sha256 = file_digest(path)

    @property
    def sha256(self) -> str:
        if self.hasher is not None:
            self.hasher.join()
            return self.file_sha256
        return self.digest.hexdigest()

    @property
    def size(self) -> int:
        return self.raw.count

    def finish(self, complete: bool) -> str | None:
        """Close the decoder; return the decoder's complaint if it found the input damaged."""
        if self.proc is None:
            try:
                if complete:
                    while self.stream.read(CHUNK):  # padding after the tar's end marker
                        pass
                    self.raw.drain()
            except DECODE_ERRORS as exc:
                return str(exc) or type(exc).__name__
            finally:
                self.stream.close()
                self.raw.close()
            return None
        if complete:
            while self.proc.stdout.read(CHUNK):
                pass
        else:
            self.proc.kill()
        self.proc.stdout.close()
        self.feeder.join()
        err = self.proc.stderr.read().decode(errors="replace").strip()
        self.proc.stderr.close()
        rc = self.proc.wait()
        self.raw.close()
        if complete and rc != 0:
            return err.splitlines()[-1] if err else f"xz exited with status {rc}"
        return None


def _in_process_stream(compression: str, raw: _HashingReader) -> IO[bytes]:
    if compression == XZ and (liblzma := xz_into.load()) is not None:
        return xz_into.XzReader(liblzma, raw)  # decodes into our write buffers
    if compression == XZ:
        return _ReadAhead(lzma.open(raw, "rb"))
    if compression == GZIP:
        return _ReadAhead(_open_gzip(raw))
    if compression == BZIP2:
        import bz2

        return _ReadAhead(bz2.open(raw, "rb"))
    return io.BufferedReader(raw, CHUNK)


class _ReadAhead(io.RawIOBase):
    """Runs an in-process decoder on a thread of its own, a few MiB ahead of the reader.

    zlib, ISA-L, lzma and bz2 release the GIL while decoding, so decoding then proceeds in
    parallel with the tar parsing and copying on the reading thread, as `xz` does in its process.
    """

    DEPTH = 16  # pieces: 2 MiB ahead

    def __init__(self, source: IO[bytes]):
        self.source = source  # a decompressing file, closed with this stream
        self.queue: queue.Queue = queue.Queue(maxsize=self.DEPTH)
        self.chunk = memoryview(b"")
        self.ended = False
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self.stopped.is_set():
                data = self.source.read(DECODED_PIECE)
                self.queue.put(data)
                if not data:
                    return
        except BaseException as exc:  # handed to the reader, which raises it as its own
            self.queue.put(exc)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if not self.chunk:
            if self.ended:
                return 0
            item = self.queue.get()
            if isinstance(item, BaseException):
                self.ended = True
                raise item
            if not item:
                self.ended = True
                return 0
            self.chunk = memoryview(item)
        view = memoryview(buffer)
        n = min(len(view), len(self.chunk))
        view[:n] = self.chunk[:n]
        self.chunk = self.chunk[n:]
        return n

    def close(self) -> None:
        self.stopped.set()
        while self.thread.is_alive():  # unblock a decoder waiting on a full queue
            try:
                self.queue.get(timeout=0.05)
            except queue.Empty:
                pass
        self.source.close()
        super().close()


def _widen_pipe(pipe: IO[bytes] | None) -> None:
    """A 1 MiB pipe instead of 64 KiB, so xz rarely stalls waiting for this process to read."""
    setsize = getattr(fcntl, "F_SETPIPE_SZ", None)
    if pipe is None or setsize is None:
        return
    try:
        fcntl.fcntl(pipe.fileno(), setsize, CHUNK)
    except OSError:
        pass  # over /proc/sys/fs/pipe-max-size for this user: keep the default


def _open_gzip(raw: IO[bytes]) -> IO[bytes]:
    try:
        from isal import igzip  # ISA-L: about twice as fast as zlib where it is installed

        return igzip.open(raw, "rb")
    except ImportError:
        import gzip

        return gzip.open(raw, "rb")


def _xz_decodes_in_parallel(xz: str) -> bool:
    """Whether this `xz` decodes blocks on several threads (5.4.0 and later).

    An older one decodes on one thread and knows no --memlimit-mt, so liblzma in this process
    does better, without the pipe.
    """
    try:
        done = subprocess.run([xz, "--robot", "--version"], capture_output=True, text=True,
                              timeout=60)
        number = done.stdout.split("XZ_VERSION=")[1].split()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return False
    return number.isdigit() and int(number) >= 50040000


def _xz_blocks(xz: str, path: Path) -> int | None:
    """How many blocks the .xz file has, from its index (None when xz cannot read it)."""
    try:
        done = subprocess.run([xz, "--robot", "--list", "--", str(path)], capture_output=True,
                              text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    for line in done.stdout.splitlines():
        fields = line.split("\t")
        if fields[0] == "file" and len(fields) > 2 and fields[2].isdigit():
            return int(fields[2])
    return None


def _xz_memory_limit() -> list[str]:
    """Keep xz's parallel decoder to a quarter of the memory this process may still use.

    xz's own default is a quarter of the machine's RAM, which inside a container with a memory
    limit can be more than the container has.
    """
    free = []
    try:
        meminfo = Path("/proc/meminfo").read_text()
        free.append(int(meminfo.split("MemAvailable:")[1].split()[0]) * 1024)
    except (OSError, IndexError, ValueError):
        pass
    try:
        cgroup = Path("/sys/fs/cgroup")
        limit = (cgroup / "memory.max").read_text().strip()
        if limit != "max":
            free.append(int(limit) - int((cgroup / "memory.current").read_text()))
    except (OSError, ValueError):
        pass
    return [f"--memlimit-mt={max(min(free) // 4, 64 << 20)}"] if free else []


def _check_name(raw: str) -> tuple[str | None, Problem | None]:
    if any(ord(c) < 32 or ord(c) == 127 for c in raw):
        return None, Problem("bad-name", f"member {escape(raw)} has control characters in its name",
                             "real cuDNN archives never do; the file is damaged or hostile")
    if len(raw) > MAX_NAME_LENGTH:
        return None, Problem("bad-name", f"member name longer than {MAX_NAME_LENGTH} characters",
                             "real cuDNN archives never have such names")
    if raw.startswith("/"):
        return None, Problem("unsafe-path", f"member {escape(raw)} has an absolute path",
                             "the archive tries to write outside its directory; do not use it")
    parts = [p for p in raw.split("/") if p not in ("", ".")]
    if ".." in parts:
        return None, Problem("unsafe-path", f"member {escape(raw)} climbs out with '..'",
                             "the archive tries to write outside its directory; do not use it")
    if not parts:
        return None, None  # "./" itself
    return "/".join(parts), None


def _check_link(member: Member) -> Problem | None:
    target = member.target or ""
    shown = f"{escape(member.path)} -> {escape(target)}"
    if target.startswith("/"):
        return Problem("unsafe-link", f"symlink {shown} points to an absolute path",
                       "cuDNN archives only link a library name to a library beside it")
    if "/" in target or target in ("", ".", ".."):
        return Problem("unsafe-link", f"symlink {shown} points outside its directory",
                       "cuDNN archives only link a library name to a library beside it")
    return None


Wanted = Callable[[Member], bool]
"""Decides whether a regular file's bytes are written to the staging directory."""


class StagingWriteFailed(Exception):
    """Writing the staging dir failed (disk full…): the machine's fault, not the archive's."""


def read(path: Path, staging: Path, want: Wanted, limits: dict | None = None,
         on_read: Callable[[int], None] | None = None) -> Listing:
    """Stream `path` once; write the members `want` accepts under `staging`; record everything.

    Problems with single members are all collected; a stream that cannot be decoded ends the pass
    with one more problem. The caller judges the listing and decides what to do with the staging
    directory.
    """
    lim = {"members": MAX_MEMBERS, "member_bytes": MAX_MEMBER_BYTES, "total_bytes": MAX_TOTAL_BYTES}
    lim.update(limits or {})
    compression = sniff(path)
    if compression == ZIP:
        raise ArchiveRejected(
            f"{escape(path.name)} is a .zip archive, the format of cuDNN for Windows",
            "download the Linux archive (.tgz or .tar.xz) for this machine",
        )
    listing = Listing(compression=compression)
    decoder = _Decoder(path, compression, on_read)
    complete = False
    try:
        _walk(decoder.stream, staging, want, lim, listing)
        complete = True
    except StagingWriteFailed as exc:
        raise InstallFailed(f"cannot write the staging copy under {staging.parent}: "
                            f"{exc.__cause__}", "free some space (or quota) on the CUDA root's "
                            "filesystem, then run again") from None
    except DECODE_ERRORS as exc:
        listing.problems.append(_corrupt(str(exc) or type(exc).__name__))
    finally:
        complaint = decoder.finish(complete)
    if complaint:
        listing.problems.append(_corrupt(complaint))
    if complete and not complaint:
        listing.sha256, listing.size = decoder.sha256, decoder.size
    return listing


def _corrupt(detail: str) -> Problem:
    return Problem("corrupt", f"the archive is truncated or corrupt ({escape(detail)})",
                   "download it again and compare its sha256 with NVIDIA's")


class _ForwardStream(io.RawIOBase):
    """The decoded tar as a file that can only move forward.

    tarfile's "r:" mode needs tell() and seek(); it only ever seeks forward when members are
    read in order, so a stream will do, and member data can then be read straight from the
    decoder instead of through tarfile's own stream buffers (which copy every byte twice).
    """

    def __init__(self, raw: IO[bytes]):
        self.raw = raw
        self.pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def read(self, n: int = -1) -> bytes:
        if n < 0:
            data = self.raw.read()
            self.pos += len(data)
            return data
        buf = bytearray(n)
        got = self.readinto(buf)
        return bytes(buf[:got])

    def readinto(self, buffer) -> int:
        view = memoryview(buffer)
        got = 0
        while got < len(view):
            n = self.raw.readinto(view[got:])
            if not n:
                break
            got += n
        self.pos += got
        return got

    def seek(self, pos: int, whence: int = io.SEEK_SET) -> int:
        if whence != io.SEEK_SET or pos < self.pos:
            raise tarfile.ReadError("the archive asks to seek backwards, which a stream cannot do")
        while self.pos < pos:
            if not self.read(min(CHUNK, pos - self.pos)):
                break
        return self.pos


def _walk(stream: IO[bytes], staging: Path, want: Wanted, lim: dict, listing: Listing) -> None:
    writer = _Writer(direct=mounts.fs_type(staging) in DIRECT_IO_FILESYSTEMS)
    try:
        _walk_members(_ForwardStream(stream), staging, want, lim, listing, writer)
    finally:
        writer.finish()


def _walk_members(stream: _ForwardStream, staging: Path, want: Wanted, lim: dict, listing: Listing,
                  writer: _Writer) -> None:
    seen: set[str] = set()
    not_dirs: set[str] = set()
    total = 0
    count = 0
    problems = listing.problems
    with tarfile.open(fileobj=stream, mode="r:") as tar:
        for info in tar:
            count += 1
            if count > lim["members"]:
                problems.append(Problem("too-many-members",
                                        f"the archive has more than {lim['members']} members",
                                        "real cuDNN archives have fewer than 200"))
                return
            rel, problem = _check_name(info.name)
            if problem:
                problems.append(problem)
                continue
            if rel is None:
                continue
            if rel in seen:
                problems.append(Problem("duplicate", f"member {escape(rel)} appears twice",
                                        "a later copy would overwrite the first; do not use it"))
                continue
            seen.add(rel)
            if any(parent in not_dirs for parent in _parents(rel)):
                problems.append(Problem("unsafe-path",
                                        f"member {escape(rel)} lies under a file or symlink",
                                        "the archive is damaged or hostile; do not use it"))
                continue
            if not info.isdir():
                not_dirs.add(rel)
            mode = info.mode & 0o7777
            if mode & (stat.S_ISUID | stat.S_ISGID) and not info.isdir():
                problems.append(Problem("setuid", f"member {escape(rel)} is setuid or setgid",
                                        "real cuDNN archives never are; do not use it"))
                continue
            if info.isdir():
                listing.members.append(Member(rel, "dir", mode=mode))
            elif info.issym():
                member = Member(rel, "symlink", mode=mode, target=info.linkname)
                bad = _check_link(member)
                if bad:
                    problems.append(bad)
                else:
                    listing.members.append(member)
            elif info.islnk():
                problems.append(Problem("hard-link",
                                        f"member {escape(rel)} is a hard link to "
                                        f"{escape(info.linkname)}",
                                        "cuDNN archives use symlinks only; do not use it"))
            elif info.isreg():
                if info.size > lim["member_bytes"]:
                    problems.append(Problem(
                        "too-large",
                        f"member {escape(rel)} claims {info.size} bytes, more than any real "
                        f"cuDNN file ({lim['member_bytes']} at most)",
                        "a decompression bomb or a damaged archive; do not use it"))
                    continue
                total += info.size
                if total > lim["total_bytes"]:
                    problems.append(Problem("too-large",
                                            f"the archive unpacks to more than "
                                            f"{lim['total_bytes']} bytes",
                                            "a decompression bomb or a damaged archive"))
                    return
                member = Member(rel, "file", size=info.size, mode=mode)
                _consume(stream, member, staging if want(member) else None, writer)
                listing.members.append(member)
            else:
                kind = ("a device file" if info.ischr() or info.isblk()
                        else "a fifo" if info.isfifo() else "of an unsupported type")
                problems.append(Problem("special-file", f"member {escape(rel)} is {kind}",
                                        "cuDNN archives hold files and symlinks only"))


def _parents(rel: str) -> Iterator[str]:
    parts = rel.split("/")
    for i in range(1, len(parts)):
        yield "/".join(parts[:i])


class _Writer:
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


class _Sink:
    """One member's destination: its digest, its staged file, its text if it is a header."""

    def __init__(self, member: Member, staging: Path | None, direct: bool):
        self.member = member
        self.direct = direct and member.size >= DIRECT_MIN_BYTES
        self.digest = hashlib.sha256()
        self.keep_text = member.name.endswith(".h") and member.size <= MAX_HEADER_BYTES
        self.chunks: list[bytes] = []
        self.out: _StagedFile | None = None
        if staging is not None:
            member.staged = staging / member.path

    def open(self) -> None:
        if self.member.staged is not None:
            self.member.staged.parent.mkdir(parents=True, exist_ok=True)
            self.out = _StagedFile(self.member.staged, self.direct)

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


class _StagedFile:
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


def _consume(stream: _ForwardStream, member: Member, staging: Path | None,
             writer: _Writer) -> None:
    """Read one member's bytes once, into recycled buffers; the writer thread hashes and writes."""
    sink = _Sink(member, staging, writer.direct)
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
