"""Decoders: the decompressed tar stream of an archive, from the fastest decoder at hand.

`xz -T0` decodes multi-block .tar.xz on every core; liblzma decodes one-block .tar.xz in this
process straight into the writer's buffers; rapidgzip decodes gzip on many cores, reading at
offsets (a whole file under its lease, or an arriving one as its bytes come); else ISA-L (else
zlib) decodes gzip, and bz2 bzip2, each on a thread of its own a few MiB ahead of the reader. Which one is decided by
archive/decoder_choice.py from facts gathered here (the archive's xz blocks, the decoders
installed) and in facts/host.py (cores, memory, the xz version); this module starts it.
"""
from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import io
import lzma
import os
import queue
import subprocess
import tarfile
import threading
import zlib
from pathlib import Path
from typing import IO, Callable, Mapping, Protocol

from cudnn_setup.archive import decoder_choice as choice
from cudnn_setup.archive import whole_file
# The names of compressions and decoders, here too for the reader and the tests.
from cudnn_setup.archive.decoder_choice import (BZIP2, GZIP, ISAL, LIBLZMA, PLAIN_TAR,  # noqa: F401
                                                RAPIDGZIP, RAPIDGZIP_MIN_CORES, XZ,
                                                XZ_PARALLEL, ZIP, ZLIB)
from cudnn_setup.child import ended, run_command
from cudnn_setup.errors import ArchiveRejected
from cudnn_setup.facts import host
from cudnn_setup.facts.host import available_memory, usable_cores
from cudnn_setup.text import escape
from cudnn_setup.untrusted import open_regular

CHUNK = 1 << 20
# In-process decoders hand over 128 KiB at a time: bigger pieces are each a fresh mmap (and a
# page fault per 4 KiB), smaller ones come back from malloc's free list still in the cache.
DECODED_PIECE = 128 << 10

# The piece of an arriving .tar.gz each of rapidgzip's threads decodes (rapidgzip's default).
ARRIVING_CHUNK = 4 << 20

# Said by the rapidgzip path when the decoded size disagrees with gzip's trailer: the archive
# is then read again by ISA-L or zlib, whose verdict stands (see archive.reader).
GZIP_SIZE_MISMATCH = "the decoded size does not match the gzip trailer"
# Said by the rapidgzip path when someone opened the file to write it while it was read (its
# lease broke); the one-stream reread that follows hashes what it decodes.
FILE_CHANGED = "the file was opened for writing while it was read"

try:  # ISA-L's gzip decoder, when installed, reports damage with its own error type
    from isal.igzip_lib import IsalError
except ImportError:  # pragma: no cover - isal is an optional speed-up
    IsalError = zlib.error


class RapidgzipError(Exception):
    """Damage as rapidgzip reports it (ValueError for a CRC mismatch or a bad header,
    RuntimeError for a trailer cut short or a size that disagrees with it)."""


DECODE_ERRORS = (tarfile.TarError, EOFError, lzma.LZMAError, zlib.error, IsalError, OSError,
                 RapidgzipError)


class Growing(Protocol):
    """An archive read while it arrives (fetch/arriving.Follower): a stream from byte 0 that
    blocks for bytes not there yet and ends only once the whole archive matched its checksum,
    which was computed on the same bytes as they were written; or, for a wheel, bytes read at
    offsets (`reach`, `pread`) as they arrive."""

    name: str

    def readinto(self, buffer) -> int: ...

    def peek(self, n: int) -> bytes: ...

    def reach(self, end: int) -> int: ...

    def pread(self, n: int, at: int) -> bytes: ...

    def readinto_at(self, buffer, at: int) -> int: ...

    def again(self) -> Growing: ...

    def fileno(self) -> int: ...

    def stop(self) -> None: ...

    def close(self) -> None: ...

    @property
    def sha256(self) -> str | None: ...

    @property
    def size(self) -> int | None: ...

    @property
    def announced(self) -> int | None: ...


def sniff(path: Path, source: Growing | None = None) -> str:
    """The archive's compression, from its first bytes (of `source` when it is arriving)."""
    if source is not None:
        head = source.peek(512)
    else:
        with open_regular(path) as f:  # a FIFO swapped in for the archive is refused, not read
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


class ArchiveFile(io.RawIOBase):
    """The archive file, read once: the bytes handed to the decoder are the bytes hashed.

    Hashing never reads the file a second time, so a file rewritten in place while it is
    installed cannot pass the checksum with one content and install another. With
    `hash_aside`, each piece read is copied into a recycled buffer and hashed on a thread of its
    own, so the sha256 does not slow a decoder that runs on the reading thread.
    """

    def __init__(self, path: Path, on_read: Callable[[int], None] | None = None,
                 hash_aside: bool = False, source: Growing | None = None):
        self.file: IO[bytes] | Growing = source if source is not None else \
            open_regular(path, buffering=0)
        self.count = 0
        self.on_read = on_read
        # an arriving archive was hashed as it was written: its end is that hash's verdict
        self.hasher = Hasher(background=hash_aside) if source is None else Hashed(source)

    def readable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.file.fileno()  # type: ignore[union-attr]  # a file's, never a Growing's

    def readinto(self, buffer) -> int:
        view = memoryview(buffer).cast("B")
        n = self.hasher.read_from(self.file, view)
        if n:
            self.count += n
            if self.on_read:
                self.on_read(self.count)
        return n

    def drain(self) -> None:
        buf = bytearray(CHUNK)
        while self.readinto(buf):
            pass

    def close(self) -> None:
        self.hasher.stop()
        self.file.close()
        super().close()


class Hasher:
    """sha256 of a stream, on the calling thread or on a thread of its own.

    In the background, each piece is read into a buffer of this class's own pool and copied out
    to the caller, and the pool buffer is hashed and recycled: the copy costs far less than the
    hashing it takes off the reading thread.
    """

    DEPTH = 8

    def __init__(self, background: bool):
        self.digest = hashlib.sha256()
        self.thread: threading.Thread | None = None
        if background:
            self.pool: queue.Queue = queue.Queue()
            self.made = 0  # buffers are made as the reading needs them: a small archive, one
            self.queue: queue.Queue = queue.Queue()
            self.thread = threading.Thread(target=self._run, daemon=True)
            self.thread.start()

    def _buffer(self) -> bytearray:
        if self.made < self.DEPTH and self.pool.empty():
            self.made += 1
            return bytearray(CHUNK)
        return self.pool.get()

    def read_from(self, file: IO[bytes], view: memoryview) -> int:
        if self.thread is None:
            n = file.readinto(view) or 0
            self.digest.update(view[:n])
            return n
        buf = self._buffer()
        n = file.readinto(memoryview(buf)[:min(len(view), CHUNK)]) or 0
        view[:n] = memoryview(buf)[:n]
        self.queue.put((buf, n))
        return n

    def _run(self) -> None:
        while (item := self.queue.get()) is not None:
            buf, n = item
            self.digest.update(memoryview(buf)[:n])
            self.pool.put(buf)

    def stop(self) -> None:
        if self.thread is not None and self.thread.is_alive():
            self.queue.put(None)
            self.thread.join()

    def hexdigest(self) -> str:
        self.stop()
        return self.digest.hexdigest()


class Hashed:
    """The checksum of an arriving archive, computed by its download: read on, not again."""

    def __init__(self, source: Growing):
        self.source = source

    def read_from(self, file, view: memoryview) -> int:
        return file.readinto(view) or 0

    def stop(self) -> None:
        pass

    def hexdigest(self) -> str:
        if self.source.sha256 is None:
            raise OSError(f"{self.source.name} has not arrived whole")
        return self.source.sha256


class Decoder:
    """A readable stream of the decompressed tar, from the fastest decoder at hand.

    A .tar.xz of several blocks goes through the `xz` binary, which decodes blocks on all cores;
    a thread feeds it the file. A single xz block can only be decoded sequentially: liblzma then
    decodes it in this process, straight into the buffers the writer thread writes from (the
    pipe out of `xz` would cost it 7% of its time). gzip is decoded by rapidgzip on many cores
    (see `gzip_decoder`), else by ISA-L or zlib on a thread of their own, as is bzip2. Whatever
    decodes, the bytes decoded are the bytes hashed: read once, or, by rapidgzip, read at
    offsets from a file nobody may write while it is read (its lease: whole_file.py), or from
    a download's part file, whose checksum the download took of the bytes it wrote there.
    """

    def __init__(self, path: Path, compression: str, on_read: Callable[[int], None] | None,
                 xz: str | None = None, gzip: str | None = None, env: Mapping[str, str] = {},
                 source: Growing | None = None):
        """`xz`: the xz program, if any; `gzip`: a gzip decoder to use instead of choosing;
        `env`: the command's environment, which the xz program runs in (without XZ_OPT and
        XZ_DEFAULTS); `source`: the archive as it arrives, read
        instead of `path` (rapidgzip, which must read a file of its own, and xz's index, at
        the archive's end, are then not used)."""
        self.proc: subprocess.Popen | None = None  # xz's child
        self.feeder: threading.Thread | None = None
        self.hashing: _Hashing | None = None  # the archive's sha256 beside rapidgzip
        self.steady: whole_file.Steady | None = None  # the archive's lease while it reads
        self.source = source  # what an arriving archive is read through
        self.at_offsets: _AtOffsets | None = None  # what rapidgzip reads an arriving one from
        self.stream: IO[bytes]
        self.env = env
        if compression == GZIP:
            gzip = gzip or (gzip_decoder(archive_bytes=path.stat().st_size) if source is None
                            else _arriving_gzip(source.announced))
            self.name = gzip
        else:
            gzip = None
            self.name = xz_decoder(xz, None if source is not None else path, env,
                                   source.peek(XZ_HEAD) if source is not None else None) \
                if compression == XZ else compression
        piped = self.name == XZ_PARALLEL
        self.raw = ArchiveFile(path, on_read, hash_aside=not piped and gzip != RAPIDGZIP,
                               source=source)
        if piped:
            assert xz is not None
            self.proc = subprocess.Popen(
                [xz, "-dc", "-T0", "-q", *_xz_memory_limit()],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                bufsize=CHUNK, env=host.xz_env(env),
                start_new_session=True,  # a terminal's Ctrl-C reaches the tool, which ends it
            )
            _widen_pipe(self.proc.stdout)
            _widen_pipe(self.proc.stdin)
            self.stream = self.proc.stdout  # type: ignore[assignment]
            self.feeder = threading.Thread(target=self._feed, daemon=True)
            self.feeder.start()
        elif gzip == RAPIDGZIP and source is not None:
            try:
                self.stream = self._rapidgzip_arriving(source, on_read)
            except Exception:  # no threads for rapidgzip (a pids limit): one stream, from
                self.at_offsets = None  # byte 0 again, whatever rapidgzip's threads reached
                self.source = source.again()
                self.stream = self._one_stream(path, compression, on_read, self.source)
        elif gzip == RAPIDGZIP:
            steady = whole_file.Steady(self.raw.fileno())
            try:
                self.stream = self._rapidgzip(on_read, steady) if steady.held else \
                    self._one_stream(path, compression, on_read)
            except Exception:  # no threads for rapidgzip or the hash (a pids limit): the
                steady.release()  # archive is not at fault, and ISA-L or zlib reads it
                self.hashing = self.steady = None
                self.stream = self._one_stream(path, compression, on_read)
        else:
            self.stream = _in_process_stream(compression, self.raw, gzip)

    def _feed(self) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        buf = bytearray(CHUNK)
        try:
            while True:
                n = self.raw.readinto(buf)
                if not n:
                    break
                self.proc.stdin.write(memoryview(buf)[:n])
                self.proc.stdin.flush()  # a piece of an archive still arriving: decode it now
        except (BrokenPipeError, ValueError, OSError):
            pass  # the decoder stopped early; finish() reports why
        finally:
            try:
                self.proc.stdin.close()
            except OSError:
                pass

    def _one_stream(self, path: Path, compression: str, on_read: Callable[[int], None] | None,
                    source: Growing | None = None) -> IO[bytes]:
        """ISA-L or zlib reading the archive as one stream, its bytes hashed as decoded (or,
        `source` arriving, as its download wrote them): for a file that cannot be kept from
        changing (whole_file.Steady), or where rapidgzip could not start."""
        self.raw.close()
        self.name = fallback_gzip()
        self.raw = ArchiveFile(path, on_read, hash_aside=source is None, source=source)
        return _in_process_stream(compression, self.raw, self.name)

    def _rapidgzip(self, on_read: Callable[[int], None] | None,
                   steady: whole_file.Steady) -> IO[bytes]:
        """rapidgzip decoding our open file on its own threads, at offsets, while a thread of
        ours hashes the same file at offsets, all under `steady`, the file's read lease.

        rapidgzip reads a file it is given faster than any feeder could pipe it the bytes, and
        hashing beside it rather than in front of it takes the sha256 off its path."""
        import rapidgzip

        fd = self.raw.fileno()
        self.steady = steady
        self.before = os.fstat(fd)
        self.hashing = _Hashing(fd)
        try:
            decoded = rapidgzip.open(fd, parallelization=usable_cores())
        except BaseException:
            self.hashing.stop()
            self.hashing.result()  # no read of ours outlives the file's descriptor
            raise
        return _Progress(decoded, on_read)

    def _rapidgzip_arriving(self, source: Growing, on_read: Callable[[int], None] | None
                            ) -> IO[bytes]:
        """rapidgzip decoding an archive still arriving, on its own threads, each reading at
        offsets and waiting for the bytes there (fetch/arriving.py): so a .tar.gz is decoded on
        every core as it comes. The bytes are those the download hashed; rapidgzip is told the
        size announced before the end, which `finish` holds against the size that arrived."""
        import rapidgzip

        assert source.announced is not None
        self.at_offsets = _AtOffsets(source, source.announced)
        decoded = rapidgzip.RapidgzipFile(self.at_offsets, parallelization=usable_cores(),
                                          chunk_size=ARRIVING_CHUNK)
        try:  # on a thread of its own, so that this one waits in Python, where a signal is
            # seen, even while the wire is silent and rapidgzip's threads wait for bytes
            return ReadAhead(_Progress(decoded, on_read, self.at_offsets))
        except BaseException:
            source.stop()  # rapidgzip's threads stop waiting for bytes, and are joined
            decoded.close()
            raise

    @property
    def arrival_failed(self) -> bool:
        """Whether rapidgzip's pass over an arriving archive ended because the download did
        (failed, or started over): reading it again would not help."""
        return self.at_offsets is not None and self.at_offsets.failed is not None

    @property
    def announced(self) -> int | None:
        """The size rapidgzip was told an arriving archive has (None: not read so)."""
        return self.at_offsets.size if self.at_offsets is not None else None

    def stop(self) -> None:
        """The reading gave up: an arriving archive's waits for bytes end, so that the
        decoder's threads can be joined while the wire is silent."""
        if self.source is not None:
            self.source.stop()

    @property
    def _beside(self) -> bool:
        """Whether the archive is hashed beside rapidgzip (rather than as it is read)."""
        return self.hashing is not None

    @property
    def sha256(self) -> str:
        return self.beside_sha256 if self._beside else self.raw.hasher.hexdigest()

    @property
    def size(self) -> int:
        if self.announced is not None:  # read at offsets, and found to be the size that arrived
            return self.announced
        return self.beside_size if self._beside else self.raw.count

    def finish(self, complete: bool) -> str | None:
        """Close the decoder; return the decoder's complaint if it found the input damaged."""
        if self._beside:
            return self._finish_beside(complete)
        if self.proc is None:
            try:
                if complete:
                    while self.stream.read(CHUNK):  # padding after the tar's end marker
                        pass
                    self.raw.drain()  # an arriving archive: until the download's good end
                    if self.announced is not None:
                        return self._arrived_whole()
            except DECODE_ERRORS as exc:
                if self.at_offsets is not None and isinstance(exc, OSError) and exc.errno is None:
                    self.at_offsets.failed = exc  # the download failed at its end: no reread
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
            return err.splitlines()[-1] if err else f"xz {ended(rc)}"
        return None

    def _arrived_whole(self) -> str | None:
        """rapidgzip's verdict on an arriving archive, once the whole of it matched its
        checksum: it read as many bytes as arrived, and decoded as many as gzip's trailer says
        (it takes a stream cut short for a whole one)."""
        source = self.raw.file
        if source.size != self.announced:
            return f"{self.announced} bytes were announced and {source.size} arrived"
        assert isinstance(self.stream, ReadAhead) and isinstance(self.stream.source, _Progress)
        return _trailer_disagrees(source.pread(4, self.announced - 4) if self.announced >= 4
                                  else b"", self.stream.source.decoded)

    def _finish_beside(self, complete: bool) -> str | None:
        assert self.hashing is not None and self.steady is not None
        try:
            if complete:
                try:
                    while self.stream.read(CHUNK):  # padding after the tar's end marker
                        pass
                except DECODE_ERRORS as exc:
                    return str(exc) or type(exc).__name__
            else:
                return None
            hashed = self.hashing.result()
            if isinstance(hashed, whole_file.ReadFailed):
                raise hashed.exc
            assert hashed is not None  # not stopped: the hash ran to the file's end
            self.beside_sha256, self.beside_size = hashed
            fd = self.raw.fileno()
            try:
                whole_file.unchanged(fd, self.before, self.beside_size, self.steady)
            except whole_file.Changed:  # the readers may have read two contents
                return FILE_CHANGED
            # rapidgzip takes a stream cut short for a whole one; gzip's last 4 bytes hold the
            # decoded size mod 2**32 (of the last member: a file of several members is re-read).
            tail = os.pread(fd, 4, self.beside_size - 4) if self.beside_size >= 4 else b""
            return _trailer_disagrees(tail, self.stream.decoded)
        finally:  # whatever ends the pass (a Ctrl-C too): no reader outlives the descriptor
            self.hashing.stop()
            self.stream.close()
            self.hashing.result()
            self.steady.release()
            self.raw.close()


def _trailer_disagrees(tail: bytes, decoded: int) -> str | None:
    """GZIP_SIZE_MISMATCH unless `tail`, gzip's last 4 bytes, holds the decoded size mod 2**32
    (of the last member: a file of several members is then read again)."""
    isize = int.from_bytes(tail, "little") if len(tail) == 4 else -1
    return GZIP_SIZE_MISMATCH if isize != decoded & 0xFFFFFFFF else None


def _arriving_gzip(announced: int | None) -> str:
    """The gzip decoder for an archive still arriving: as for a file of the size announced;
    one stream where no size was (rapidgzip must know where the file ends)."""
    return gzip_decoder(archive_bytes=announced) if announced else fallback_gzip()


class _AtOffsets(io.RawIOBase):
    """An arriving archive as a file rapidgzip's threads read at offsets, each read waiting
    for its bytes; its end is the size announced."""

    def __init__(self, source: Growing, size: int):
        self.source, self.size = source, size
        self.pos = 0
        # why the bytes stopped coming (the download failed or started over, while rapidgzip
        # read or at the end): rapidgzip says only that a read failed
        self.failed: OSError | None = None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self.pos, os.SEEK_END: self.size}[whence]
        self.pos = max(base + offset, 0)
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, buffer) -> int:
        view = memoryview(buffer).cast("B")[:max(self.size - self.pos, 0)]
        try:
            n = self.source.readinto_at(view, self.pos) if len(view) else 0
        except OSError as exc:
            self.failed = self.failed or exc
            raise
        self.pos += n
        return n


class _Hashing:
    """The archive's sha256, taken at offsets on a thread of its own beside rapidgzip."""

    def __init__(self, fd: int):
        self.stopped = threading.Event()
        self.outcome: tuple[str, int] | whole_file.ReadFailed | None = None
        self.thread = threading.Thread(target=self._run, args=(fd,), daemon=True)
        self.thread.start()

    def _run(self, fd: int) -> None:
        try:
            self.outcome = whole_file.hash_file(fd, None, self.stopped)
        except whole_file.ReadFailed as failed:
            self.outcome = failed
        except Exception:  # stopped (parallel.Cancelled): nobody asks for the digest
            self.outcome = None

    def stop(self) -> None:
        self.stopped.set()

    def result(self) -> tuple[str, int] | whole_file.ReadFailed | None:
        self.thread.join()
        return self.outcome


class _Progress(io.RawIOBase):
    """rapidgzip's output, counted, reporting how far into the archive it has decoded."""

    def __init__(self, source, on_read: Callable[[int], None] | None,
                 read_from: _AtOffsets | None = None):
        self.source = source
        self.decoded = 0
        self.on_read = on_read
        self.read_from = read_from  # an arriving archive, whose own failure is said instead

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        try:
            n = self.source.readinto(buffer)
        except Exception as exc:  # ValueError, RuntimeError ("End of file reached!")…
            if self.read_from is not None and self.read_from.failed is not None:
                raise self.read_from.failed from None
            raise RapidgzipError(str(exc) or type(exc).__name__) from None
        self.decoded += n
        if self.on_read:
            self.on_read(self.source.tell_compressed() // 8)  # rapidgzip counts bits
        return n

    def close(self) -> None:
        self.source.close()
        super().close()


def _in_process_stream(compression: str, raw: ArchiveFile, gzip: str | None) -> IO[bytes]:
    if compression == XZ and (lib := _liblzma().load()) is not None:
        return _liblzma().XzReader(lib, raw)  # decodes into our write buffers
    if compression == XZ:
        return ReadAhead(lzma.open(raw, "rb"))
    if compression == GZIP:
        return ReadAhead(_open_gzip(raw, gzip))
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


def _open_gzip(raw: IO[bytes], gzip: str | None) -> IO[bytes]:
    if gzip == ISAL:
        from isal import igzip  # ISA-L: about twice as fast as zlib

        return igzip.open(raw, "rb")
    import gzip as zlib_gzip

    return zlib_gzip.open(raw, "rb")


def fallback_gzip() -> str:
    """The gzip decoder whose verdict stands when rapidgzip finds fault: ISA-L, else zlib."""
    return choice.fallback_gzip({ISAL} if importlib.util.find_spec("isal") is not None else set())


def gzip_decoder(cores: int | None = None, archive_bytes: int = 0,
                 available: int | None = None) -> str:
    """The gzip decoder for this machine and an archive of `archive_bytes`
    (decoder_choice.gzip_choice); `cores` and `available` memory are this process's unless
    given."""
    cores = usable_cores() if cores is None else cores
    installed = {n for n in (RAPIDGZIP, ISAL) if importlib.util.find_spec(n) is not None}
    if cores >= RAPIDGZIP_MIN_CORES and RAPIDGZIP in installed and available is None:
        available = available_memory()  # only read where it can matter
    return choice.choose_decoder(GZIP, None, cores, available, installed, archive_bytes)


def _liblzma():
    """archive/liblzma.py, imported for a .tar.xz only: it brings ctypes (6 ms of every
    other install's start)."""
    from cudnn_setup.archive import liblzma

    return liblzma


def xz_decoder(xz: str | None, path: Path | None, env: Mapping[str, str],
               head: bytes | None = None) -> str:
    """The decoder for the .tar.xz at `path`: the facts for decoder_choice.choose_decoder
    (whether `xz` decodes in parallel, in the command's environment; then the archive's block
    count, which only matters then). An archive still arriving has no index to count blocks
    in yet (it is at the end): its first bytes (`head`) tell whether its first block says its
    sizes, without which xz cannot decode in parallel either (one block, as far as it goes)."""
    available = {LIBLZMA} if _liblzma().load() is not None else set()
    blocks = None
    if xz is not None and _xz_decodes_in_parallel(xz, env):
        available.add(XZ_PARALLEL)
        blocks = _xz_blocks(xz, path, env) if path is not None else \
            1 if head is not None and not first_block_sized(head) else None
    return choice.choose_decoder(XZ, blocks, 1, None, available, 0)


# The .xz stream header (12 bytes), then the first block header's size byte and flags byte.
XZ_HEAD = 14
_BLOCK_SIZES = 0x40 | 0x80  # the flags saying the block header holds its compressed and
# uncompressed sizes, which xz's multi-threaded encoder writes and its decoder needs


def first_block_sized(head: bytes) -> bool:
    """Whether the first block of the .xz stream starting with `head` says its sizes (an
    empty stream, or bytes too few to tell: True, and xz decides)."""
    if len(head) < XZ_HEAD or head[12] == 0:
        return True
    return bool(head[13] & _BLOCK_SIZES)


def _xz_decodes_in_parallel(xz: str, env: Mapping[str, str] = {}) -> bool:
    """Whether this `xz` decodes blocks on several threads (5.4.0 and later)."""
    return choice.xz_decodes_in_parallel(host.xz_version(xz, env))


def _xz_blocks(xz: str, path: Path, env: Mapping[str, str] = {}) -> int | None:
    """How many blocks the .xz file has, from its index (None when xz cannot read it)."""
    done = run_command([xz, "--robot", "--list", "--", str(path)], host.XZ_TIMEOUT,
                       host.xz_env(env))
    if done.returncode is None or done.timed_out:
        return None
    for line in done.out.splitlines():
        fields = line.split("\t")
        if fields[0] == "file" and len(fields) > 2 and fields[2].isdigit():
            return int(fields[2])
    return None


def _xz_memory_limit() -> list[str]:
    """xz's memory limit for the memory this process may still use now."""
    return choice.xz_memory_limit(available_memory())
