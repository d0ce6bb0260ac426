"""Decoders: the decompressed tar stream of an archive, from the fastest decoder at hand.

`xz -T0` decodes multi-block .tar.xz on every core; liblzma decodes one-block .tar.xz in this
process straight into the writer's buffers; ISA-L (else zlib) decodes gzip, bz2 decodes bzip2,
each on a thread of its own a few MiB ahead of the reader.
"""
from __future__ import annotations

import fcntl
import hashlib
import io
import lzma
import queue
import subprocess
import tarfile
import threading
import zlib
from pathlib import Path
from typing import Callable, IO

from cudnn_setup.archive import liblzma
from cudnn_setup.errors import ArchiveRejected
from cudnn_setup.digest import file_digest
from cudnn_setup.text import escape

CHUNK = 1 << 20
# In-process decoders hand over 128 KiB at a time: bigger pieces are each a fresh mmap (and a
# page fault per 4 KiB), smaller ones come back from malloc's free list still in the cache.
DECODED_PIECE = 128 << 10

GZIP, XZ, BZIP2, PLAIN_TAR, ZIP = "gzip", "xz", "bzip2", "tar", "zip"

try:  # ISA-L's gzip decoder, when installed, reports damage with its own error type
    from isal.igzip_lib import IsalError
except ImportError:  # pragma: no cover - isal is an optional speed-up
    IsalError = zlib.error
DECODE_ERRORS = (tarfile.TarError, EOFError, lzma.LZMAError, zlib.error, IsalError, OSError)


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


class HashingReader(io.RawIOBase):
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


class Decoder:
    """A readable stream of the decompressed tar, from the fastest decoder at hand.

    A .tar.xz of several blocks goes through the `xz` binary, which decodes blocks on all cores;
    a thread feeds it the file, hashing the bytes on the way. A single xz block can only be
    decoded sequentially: liblzma then decodes it in this process, straight into the buffers the
    writer thread writes from (the pipe out of `xz` would cost it 7% of its time). gzip and
    bzip2 are decoded on a thread of their own. Whenever the decoding happens in this process,
    another thread hashes the archive file from the page cache on the other core.
    """

    def __init__(self, path: Path, compression: str, on_read: Callable[[int], None] | None,
                 xz: str | None = None):
        self.proc: subprocess.Popen | None = None
        self.feeder: threading.Thread | None = None
        self.hasher: threading.Thread | None = None
        self.digest = hashlib.sha256()
        self.file_sha256 = ""  # from the hasher thread, when decoding happens in this process
        self.hash_error: OSError | None = None  # the hasher thread's, raised by `sha256`
        self.stream: IO[bytes]
        xz = xz if compression == XZ else None
        piped = xz is not None and _xz_decodes_in_parallel(xz) and _xz_blocks(xz, path) != 1
        self.raw = HashingReader(path, on_read, self.digest if piped else None)
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
        try:
            self.file_sha256 = file_digest(path)
        except OSError as exc:
            self.hash_error = exc

    @property
    def sha256(self) -> str:
        if self.hasher is not None:
            self.hasher.join()
            if self.hash_error is not None:
                raise self.hash_error
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


def _in_process_stream(compression: str, raw: HashingReader) -> IO[bytes]:
    if compression == XZ and (lib := liblzma.load()) is not None:
        return liblzma.XzReader(lib, raw)  # decodes into our write buffers
    if compression == XZ:
        return ReadAhead(lzma.open(raw, "rb"))
    if compression == GZIP:
        return ReadAhead(_open_gzip(raw))
    if compression == BZIP2:
        import bz2

        return ReadAhead(bz2.open(raw, "rb"))
    return io.BufferedReader(raw, CHUNK)


class ReadAhead(io.RawIOBase):
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


