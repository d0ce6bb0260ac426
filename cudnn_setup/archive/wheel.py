"""NVIDIA's `nvidia-cudnn-cuNN` wheel read as if it were NVIDIA's archive.

The wheel (a zip) holds `nvidia/cudnn/include/cudnn*.h` and `nvidia/cudnn/lib/libcudnn*.so.N`,
each library under its SONAME. NVIDIA's archive holds `include/` and `lib/`, each library
under its full version (`libcudnn_ops.so.9.28.0`) with the SONAME and development links beside
it. `read` turns the wheel into the members the archive's would be (the version taken from
`cudnn_version.h`), passes each through the same `MemberRules` and writes the wanted ones
through the same staging `Writer`, so judging, planning, the transaction, the manifest and
uninstall are the archive's. Everything outside `nvidia/cudnn/` (the dist-info, `nvidia/__init__.py`)
is not part of NVIDIA's layout and is left out.

The members are independent deflate streams, so they are inflated, checked (CRC, size) and
hashed on every usable core at once, the largest first, beside the wheel's own sha256 (read from
the same open file); a member bigger than a core's share hashes on a writer lane beside its
decoding, and each library's facts are read for the judge as soon as its file is staged
(library_facts.py), not after the last member; the first fault stops them all. All that reading
at offsets runs under the file's read lease (whole_file.Steady), which nobody can write through:
a wheel that cannot be leased is read from a private copy instead, and so is one whose lease
broke (a writer asked in): copied while that writer is held back, and read once more. So a file
rewritten during the install cannot pass the checksum with one content and install another.
Nothing leaves staging before the caller has compared that checksum with the one expected.

A wheel still downloading is read by wheel_stream.py, from its local headers as the bytes come,
with the same pieces: `admitted` (the central directory's judgement), `as_archive` (one file's
member), `new_writer`, `stage_job` and `decoded` (one member from any reader of offsets).
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import queue
import re
import stat
import struct
import tarfile
import threading
import zipfile
import zlib
from pathlib import Path
from typing import IO, Callable, Iterator

from msgspec import Struct
from packaging.version import Version

from cudnn_setup import parallel
from cudnn_setup.archive import library_facts, staging
from cudnn_setup.archive.decoders import CHUNK, DECODED_PIECE, IsalError, usable_cores
from cudnn_setup.archive.listing import Listing, Member, Progress, Wanted
from cudnn_setup.archive.problems import Problem
from cudnn_setup.archive.reader import empty_staging, staging_failed, unreadable
from cudnn_setup.archive.rules import Limits, MemberRules, Stop, corrupt
from cudnn_setup.archive.whole_file import (Changed, ReadFailed, Steady, hash_file,
                                             private_copy, unchanged)
from cudnn_setup.durable import make_dirs
from cudnn_setup.digest import SHA256
from cudnn_setup.errors import ArchiveRejected, no_thread
from cudnn_setup.facts import cudnn as gen
from cudnn_setup.text import escape
from cudnn_setup.untrusted import open_regular

WHEEL = "wheel"  # Listing.compression of a wheel
PREFIX = "nvidia/cudnn/"
_DIST = re.compile(r"^nvidia-cudnn-cu(\d{1,2})\Z")
_SONAME_FILE = re.compile(r"^(?P<stem>libcudnn[a-z0-9_]*)\.so\.(?P<major>\d{1,3})\Z")
MAX_VERSION_HEADER = 1 << 20  # cudnn_version.h is about 3 KB
_ARCH = {"x86_64": "x86_64", "aarch64": "aarch64"}  # the platform tag's machine → archive arch


class WheelName(Struct, frozen=True):
    """What an `nvidia-cudnn-cuNN` wheel's file name says (PEP 427, read by `packaging`)."""

    file_name: str
    cuda_major: int
    version: Version
    arch: str | None  # x86_64 | aarch64, from the platform tag; None for another platform
    platform_tags: tuple[str, ...]

    @property
    def top(self) -> str:
        """The top directory the members get: the wheel's own name, never NVIDIA's."""
        return f"nvidia_cudnn_cu{self.cuda_major}-{self.version}"

    def name_facts(self) -> gen.NameFacts:
        return gen.NameFacts(os="linux" if self.arch else "other", arch=self.arch or "other",
                             cuda_version=str(self.cuda_major), cudnn_version=str(self.version),
                             release_tag=None, extension="whl")


def parse_name(name: str) -> WheelName | None:
    """The facts of an nvidia-cudnn-cuNN wheel's file name, or None for any other file."""
    if not name.endswith(".whl"):
        return None
    # packaging.utils brings packaging.tags, sysconfig and logging: only for a wheel's name
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    try:
        dist, version, _build, tags = parse_wheel_filename(name)
    except InvalidWheelFilename:
        return None
    m = _DIST.match(str(dist))
    if not m:
        return None
    platforms = tuple(sorted({t.platform for t in tags}))
    arch = next((_ARCH[a] for p in platforms for a in _ARCH
                 if p.startswith(("manylinux", "linux")) and p.endswith("_" + a)), None)
    return WheelName(name, int(m[1]), version, arch, platforms)


def is_wheel(path: Path) -> bool:
    return parse_name(path.name) is not None


def read(path: Path, staging_dir: Path, want: Wanted, limits: Limits | None = None,
         on_read: Progress | None = None,
         expected_sha256: str | None = None,
         content_hash: str = SHA256) -> tuple[Listing, WheelName]:
    """Stream the wheel's cuDNN files as NVIDIA's archive members into `staging_dir`, hashing
    the wheel as they are decoded, and each member with `content_hash`. When
    `expected_sha256` is given and differs, the listing comes back with the digest and no
    members, for the caller's mismatch."""
    wheel = parse_name(path.name)
    if wheel is None:
        raise ArchiveRejected(f"{escape(path.name)} is not an nvidia-cudnn-cuNN wheel",
                              "give NVIDIA's cuDNN wheel (nvidia_cudnn_cu12-…whl) or archive")
    limits = limits or Limits()
    try:
        f = open_regular(path, buffering=0)  # a FIFO swapped in for the wheel is refused
    except OSError as exc:
        raise unreadable(path, exc) from None
    one = functools.partial(_pass, path=path, wheel=wheel, staging_dir=staging_dir, want=want,
                            limits=limits, on_read=on_read, expected_sha256=expected_sha256,
                            content_hash=content_hash)
    with f:
        steady = Steady(f.fileno())
        try:
            if steady.held:
                listing = one(f, steady)
                if listing is not None:
                    return listing, wheel
                # Someone asked to write the wheel while it was read: its bytes may never have
                # changed (any open for writing breaks the lease). What the pass staged goes;
                # the wheel is copied while that writer is still held back (up to the kernel's
                # lease-break-time) and the copy, judged on its own, is what counts.
                empty_staging(staging_dir)
            with _private(f, staging_dir) as copy:
                steady.release()  # a writer waiting goes on: nothing reads the wheel any more
                listing = one(copy, None)
                assert listing is not None  # a pass without a lease is never taken again
                return listing, wheel
        finally:
            steady.release()


def _pass(f: IO[bytes], steady: Steady | None, *, path: Path, wheel: WheelName,
          staging_dir: Path, want: Wanted, limits: Limits, on_read: Progress | None,
          expected_sha256: str | None, content_hash: str) -> Listing | None:
    """One read of the open wheel `f`, under the lease `steady` (None: `f` is a copy nobody
    else can open). None: the lease broke (or the file's stat moved) and the pass failed or
    did not end: it proves nothing about the wheel, and its staged files are the caller's to
    throw away."""
    listing = Listing(compression=WHEEL)
    listing.facts = library_facts.FactsReader()
    before = os.fstat(f.fileno())
    listing.size = before.st_size
    read_whole = moved = False
    try:
        with faults(path, staging_dir, listing):
            whole = before.st_size  # the wheel is hashed from start to end: its bytes count
            counted = None if on_read is None else (lambda done: on_read(done, whole))
            sha256, size = decode_whole(f, wheel, staging_dir, want, MemberRules(limits),
                                        listing, counted, content_hash)
            try:
                unchanged(f.fileno(), before, size, steady)
            except Changed:
                if steady is None:
                    raise
                moved = True
            else:
                read_whole = True
    finally:
        if not read_whole:  # refused: nothing reads the staged files any more
            listing.facts.close()
    if steady is not None and not read_whole and (moved or not steady.kept()):
        return None  # what was decoded after the lease broke may be a writer's half-done work
    if not read_whole:
        return _unless_mismatch(f, expected_sha256, listing)
    listing.size = size
    listing.sha256 = sha256
    if expected_sha256 is not None and sha256 != expected_sha256:
        listing.facts.close()
        listing.members.clear()  # staged, never to be placed: the caller refuses the mismatch
    else:
        listing.facts.wait()
    return listing


# How a wheel's bytes show they are not what they claim, as decoding meets them. (isal's stubs
# call IsalError an instance; it is a class.)
FAULTS: tuple[type[Exception], ...] = (  # type: ignore[assignment]
    zipfile.BadZipFile, zlib.error, IsalError, EOFError, NotImplementedError, RuntimeError,
    ValueError)


@contextlib.contextmanager
def faults(path: Path, staging_dir: Path, listing: Listing) -> Iterator[None]:
    """One pass over a wheel: the machine's faults raised (the file cannot be read, staging
    cannot be written), the wheel's recorded as a problem of `listing` and the pass ended."""
    try:
        yield
    except ReadFailed as failed:
        raise unreadable(path, failed.exc) from None
    except OSError as exc:  # the zip directory could not be read
        raise unreadable(path, exc) from None
    except staging.StagingWriteFailed as exc:
        raise staging_failed(staging_dir, exc) from None
    except Changed:
        listing.problems.append(corrupt("the file changed while it was read"))
    except FAULTS as exc:
        if (limit := no_thread(exc)) is not exc:  # the machine's limit, not the wheel's fault
            raise limit from None
        listing.problems.append(corrupt(str(exc)[:200] or type(exc).__name__))
    except Stop as stop:
        listing.problems.append(stop.problem)


def _unless_mismatch(f: IO[bytes], expected_sha256: str | None, listing: Listing) -> Listing:
    """A wheel refused before all of it was hashed: when it is not even the file expected (a
    download cut short, another file), that is what the caller reports, as for any archive."""
    if expected_sha256 is None:
        return listing
    try:
        sha256, size = hash_file(f.fileno(), None, threading.Event())
    except ReadFailed:
        return listing
    if sha256 == expected_sha256:
        return listing
    return Listing(compression=WHEEL, sha256=sha256, size=size)


def _private(f: IO[bytes], staging_dir: Path) -> IO[bytes]:
    """A copy of the wheel no other process can open, in `staging_dir` (made here): read at
    offsets in its place, its bytes are the bytes hashed."""
    try:
        make_dirs(staging_dir)
        return private_copy(f, staging_dir)
    except OSError as exc:
        raise staging_failed(staging_dir, exc) from None


def pread(fd: int, n: int, at: int) -> bytes:
    try:
        return os.pread(fd, n, at)
    except OSError as exc:
        raise ReadFailed(exc) from None


def _info(name: str, size: int, mode: int, kind: bytes = tarfile.REGTYPE,
          target: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.type, info.linkname = size, mode, kind, target
    return info


def _version(z: zipfile.ZipFile, infos: dict[str, zipfile.ZipInfo]) -> tuple[int, int, int] | None:
    header = infos.get(PREFIX + "include/cudnn_version.h") or infos.get(PREFIX + "include/cudnn.h")
    if header is None or header.file_size > MAX_VERSION_HEADER:
        return None
    with z.open(header) as h:
        return gen.header_version(h.read(MAX_VERSION_HEADER + 1).decode("utf-8", "replace"))


def open_zip(f: IO[bytes], limits: Limits) -> zipfile.ZipFile:
    f.seek(0)
    z = zipfile.ZipFile(f)  # reads the central directory: bounded by the file, checked below
    if len(z.infolist()) > limits.members:
        raise Stop(Problem("too-many-members", f"the wheel has {len(z.infolist())} members",
                           "NVIDIA's cuDNN wheels have fewer than 50"))
    return z


def layout(z: zipfile.ZipFile, wheel: WheelName
           ) -> Iterator[Problem | tuple[tarfile.TarInfo, zipfile.ZipInfo | None]]:
    """NVIDIA's archive members for the wheel's files, in the wheel's order: (the member's tar
    header, the zip entry holding its bytes, or None for a directory or link), or a Problem.

    The version comes from cudnn_version.h and must be the wheel's; each library goes under
    its full version, followed by its SONAME link and its development link."""
    entries = z.infolist()
    infos = {i.filename: i for i in entries}
    version = _version(z, infos)
    if version is None:
        yield Problem("no-version", f"the wheel has no readable {PREFIX}include/cudnn_version.h",
                      "this is not NVIDIA's cuDNN wheel, or it is damaged")
        return
    full = "%d.%d.%d" % version
    if wheel.version.release[:3] != version:
        yield Problem("version-mismatch",
                      f"the wheel's name says {wheel.version}, its headers say {full}",
                      "this is not the wheel NVIDIA published under that name")
        return
    top = wheel.top
    for dir_name in ("", "/include", "/lib"):
        yield _info(top + dir_name + "/", 0, 0o755, tarfile.DIRTYPE), None
    for info in sorted(entries, key=lambda i: i.header_offset):
        if info.filename.startswith(PREFIX) and not info.is_dir():
            yield from as_archive(info, top, full)


def as_archive(info: zipfile.ZipInfo, top: str, full: str
               ) -> Iterator[Problem | tuple[tarfile.TarInfo, zipfile.ZipInfo | None]]:
    """One file of the wheel's `nvidia/cudnn/` as NVIDIA's archive holds it, `full` the
    release's version: the member, then the links a library gets; or a Problem."""
    rel = info.filename[len(PREFIX):]
    mode = (info.external_attr >> 16) & 0o7777 or 0o644
    ftype = (info.external_attr >> 16) & 0o170000
    if ftype and ftype != stat.S_IFREG:
        yield Problem("special-file", f"wheel member {escape(info.filename)} is not a "
                      "regular file", "NVIDIA's wheels hold regular files only; do not use it")
        return
    if info.flag_bits & 0x1:
        yield Problem("corrupt", f"wheel member {escape(info.filename)} is encrypted",
                      "NVIDIA's wheels are not; do not use it")
        return
    links: list[tuple[str, str]] = []
    base = rel.rsplit("/", 1)[-1]
    shared = _SONAME_FILE.match(base) if rel.startswith("lib/") and "/" not in rel[4:] else None
    if shared:
        # NVIDIA's layout: the file under its full version, the SONAME and .so linked
        file_name = f"{shared['stem']}.so.{full}"
        links = [(base, file_name), (f"{shared['stem']}.so", base)]
        rel, mode = f"lib/{file_name}", mode | 0o755
    yield _info(f"{top}/{rel}", info.file_size, mode), info
    for link, target in links:
        yield _info(f"{top}/lib/{link}", 0, 0o777, tarfile.SYMTYPE, target), None


def read_to_end(data: IO[bytes], name: str) -> None:
    """Reaching the end checks the zip entry's CRC; nothing may follow what it declares."""
    if data.read(1):
        raise zipfile.BadZipFile(f"{name} holds more than it declares")


# Compressed bytes handed to the inflater at a time: what it leaves unconsumed (its output is
# bounded to DECODED_PIECE) is copied at every call, so a big input would be copied over and over.
IN_PIECE = 64 << 10
# Reading a byte of the wheel for its sha256 costs about a third of inflating and hashing a
# decoded byte: the whole-file hash takes its turn among the members by that estimate.
HASH_COST = 3


def admitted(z: zipfile.ZipFile, wheel: WheelName, rules: MemberRules, listing: Listing
             ) -> list[tuple[Member, zipfile.ZipInfo]]:
    """Every member of the central directory's layout judged in the wheel's order, problems
    and members recorded in `listing`: the files to decode, with the entries holding them."""
    staged: list[tuple[Member, zipfile.ZipInfo]] = []
    for item in layout(z, wheel):
        if isinstance(item, Problem):
            listing.problems.append(item)
            continue
        tar_info, zip_info = item
        verdict = _admit(rules, listing, tar_info)
        if isinstance(verdict, Member) and zip_info is not None:
            staged.append((verdict, zip_info))
    return staged


def new_writer(staging_dir: Path, cores: int, facts: library_facts.FactsReader | None,
               content_hash: str) -> staging.Writer:
    """The staging writer of one pass, each library's facts read once its file is staged."""

    def complete(member: Member) -> None:  # its facts read while the rest decodes
        if facts is not None and member.staged is not None and library_facts.early(member.name):
            facts.submit(member.staged)

    return staging.Writer(direct=staging.direct_io_allowed(staging_dir),
                          lanes=staging.hash_lanes(cores), writers=staging.write_threads(cores),
                          pool_chunks=staging.Writer.POOL_CHUNKS + cores,
                          on_complete=complete, content_hash=content_hash)


# Reads `n` bytes at an offset of the wheel: (n, offset) -> bytes.
ReadAt = Callable[[int, int], bytes]


def stage_job(read: ReadAt, info: zipfile.ZipInfo, end: int, member: Member,
              staging_dir: Path | None, writer: staging.Writer,
              hashing: "queue.SimpleQueue | None" = None) -> Callable[[threading.Event], None]:
    """Decoding, checking and staging one member (under `staging_dir`, or only hashed when
    None), for a thread of `parallel`; `end`: where the bytes read may end."""
    return lambda stop: staging.stage_pieces(decoded(read, info, end, stop), member,
                                             staging_dir, writer, hashing)


def decode_whole(f: IO[bytes], wheel: WheelName, staging_dir: Path, want: Wanted,
             rules: MemberRules, listing: Listing, on_read: Callable[[int], None] | None,
             content_hash: str) -> tuple[str, int]:
    """Admit every member in the wheel's order, then hash the file and decode the admitted
    members on every usable core, the costliest first; (the file's sha256, its size)."""
    z = open_zip(f, rules.limits)
    staged = admitted(z, wheel, rules, listing)
    fd = f.fileno()
    end = os.fstat(fd).st_size
    cores = usable_cores()
    writer = new_writer(staging_dir, cores, listing.facts, content_hash)
    # A member bigger than a core's share of all the decoding outlasts the rest: its thread is
    # the install's critical path, so its hash runs on a lane beside its decoding (on 2 cores
    # no member is: both are busy to the end).
    share = sum(info.file_size for _, info in staged) // cores

    def read(n: int, at: int) -> bytes:
        return pread(fd, n, at)

    jobs: list[tuple[int, Callable[[threading.Event], object]]] = [
        (end // HASH_COST, lambda stop: hash_file(fd, on_read, stop))]
    jobs += [(info.file_size, stage_job(read, info, end, member,
                                        staging_dir if want(member) else None, writer,
                                        writer.lane() if info.file_size > share else None))
             for member, info in staged]
    jobs.sort(key=lambda job: -job[0])
    try:
        results = parallel.spread([call for _, call in jobs], cores)
    finally:
        writer.finish()
    return next(r for r in results if isinstance(r, tuple))


def _inflater():
    """A raw-deflate decompressor and its crc32: ISA-L's (about twice as fast) when installed,
    else zlib's; both release the GIL."""
    try:
        from isal import isal_zlib
    except ImportError:  # pragma: no cover - isal is an optional speed-up
        return zlib.decompressobj(-zlib.MAX_WBITS), zlib.crc32
    return isal_zlib.decompressobj(-zlib.MAX_WBITS), isal_zlib.crc32


def data_range(read: ReadAt, info: zipfile.ZipInfo, file_size: int) -> tuple[int, int]:
    """Where a member's compressed bytes lie: after its local header, which must be a local
    header and name the central directory's file, and within the file."""
    head = read(30, info.header_offset)
    if len(head) != 30 or head[:4] != b"PK\x03\x04":
        raise zipfile.BadZipFile(f"{escape(info.filename)}: bad magic number for its file header")
    flags, = struct.unpack_from("<H", head, 6)
    name_len, extra_len = struct.unpack_from("<HH", head, 26)
    name = read(name_len, info.header_offset + 30)
    if name.decode("utf-8" if flags & 0x800 else "cp437", "replace") != info.orig_filename:
        raise zipfile.BadZipFile(f"{escape(info.filename)}: its file header names another file")
    start = info.header_offset + 30 + name_len + extra_len
    if start + info.compress_size > file_size:
        raise zipfile.BadZipFile(f"{escape(info.filename)} runs past the end of the file")
    return start, start + info.compress_size


def decoded(read: ReadAt, info: zipfile.ZipInfo, file_size: int,
            stop: threading.Event) -> Iterator[bytes]:
    """A member's bytes, decoded in pieces on the calling thread; the end checks that they
    are the size and CRC-32 `info` declares (the central directory's), and nothing more."""
    start, end = data_range(read, info, file_size)
    if info.compress_type == zipfile.ZIP_DEFLATED:
        inflater, crc32 = _inflater()
    elif info.compress_type == zipfile.ZIP_STORED:
        inflater, crc32 = None, zlib.crc32
    else:
        raise NotImplementedError(f"{escape(info.filename)}: compression method "
                                  f"{info.compress_type}")
    left, crc, at = info.file_size, 0, start
    while at < end and not (inflater is not None and inflater.eof):
        if stop.is_set():
            raise parallel.Cancelled()
        data = read(min(IN_PIECE, end - at), at)
        if not data:
            break
        at += len(data)
        while data:
            if inflater is None:
                out, data = data, b""
            else:
                given = len(data)
                out = inflater.decompress(data, min(DECODED_PIECE, left + 1))
                data = b"" if inflater.eof else inflater.unconsumed_tail
                if not out and len(data) == given:  # no progress: never loop on it
                    raise zipfile.BadZipFile(f"{escape(info.filename)} does not inflate")
            if out:
                left -= len(out)
                if left < 0:
                    raise zipfile.BadZipFile(f"{escape(info.filename)} holds more than it "
                                             "declares")
                crc = crc32(out, crc)
                yield out
    if inflater is not None and not inflater.eof and (out := inflater.flush()):
        left -= len(out)
        if left < 0:
            raise zipfile.BadZipFile(f"{escape(info.filename)} holds more than it declares")
        crc = crc32(out, crc)
        yield out
    if left:
        raise EOFError(f"unexpected end of data in {escape(info.filename)}")
    if crc != info.CRC:
        raise zipfile.BadZipFile(f"bad CRC-32 for file {escape(info.filename)}")


def _admit(rules: MemberRules, listing: Listing, info: tarfile.TarInfo) -> Member | None:
    verdict = rules.admit(info)
    if isinstance(verdict, Problem):
        listing.problems.append(verdict)
        return None
    if isinstance(verdict, Member):
        listing.members.append(verdict)
    return verdict


# --- the wheels cuDNN's wheel depends on (nvidia-cublas-cuNN, nvidia-cuda-nvrtc-cuNN) --------

MAX_METADATA = 1 << 20
_DEP_LIB = re.compile(r"^nvidia/[a-z0-9_]{1,40}/lib/(lib[A-Za-z0-9_.+-]{1,100}\.so(?:\.\d{1,6}){0,4})\Z")


def requirements(path: Path) -> list:
    """The Requires-Dist of a wheel (its dist-info METADATA) whose markers hold on this
    machine, as packaging Requirements; the names of the wheels it needs at run time."""
    from packaging.requirements import InvalidRequirement, Requirement

    with _judged(path):  # a wheel is judged before anything reads it: bad zips are refusals
        with open(path, "rb") as raw, open_zip(raw, Limits()) as z:
            meta = [i for i in z.infolist() if i.filename.count("/") == 1
                    and i.filename.endswith(".dist-info/METADATA")]
            if len(meta) != 1 or meta[0].file_size > MAX_METADATA:
                return []
            with z.open(meta[0]) as f:
                text = f.read(MAX_METADATA + 1).decode("utf-8", "replace")
    out = []
    for line in text.splitlines():
        if not line.lower().startswith("requires-dist:"):
            if not line.strip():
                break  # the headers end at the first empty line; the description follows
            continue
        try:
            req = Requirement(line.split(":", 1)[1].strip())
        except InvalidRequirement:
            continue
        try:  # packaging raises ValueErrors for markers it cannot compare ("~= '3'")
            holds = req.marker is None or req.marker.evaluate({"extra": ""})
        except ValueError as exc:
            raise ArchiveRejected(f"{escape(path.name)} declares {escape(str(req)[:120])}, "
                                  f"whose marker cannot be evaluated ({escape(str(exc)[:120])})",
                                  "use NVIDIA's wheel as published") from None
        if holds:
            out.append(req)
    return out


@contextlib.contextmanager
def _judged(path: Path, reading_only: bool = True):
    """Reading a wheel's zip with every way it can be broken (not a zip, a bad CRC, member
    names that are not UTF-8 under the UTF-8 flag, too many members) refused as such; an
    OSError is the wheel's unreadability only where nothing else is written (`reading_only`)."""
    try:
        yield
    except Stop as stop:
        raise ArchiveRejected(f"{escape(path.name)}: {stop.problem.message}",
                              stop.problem.hint) from None
    except OSError as exc:
        if not reading_only:
            raise
        raise unreadable(path, exc) from None
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError,
            ValueError) as exc:
        raise ArchiveRejected(f"{escape(path.name)} is not a readable wheel "
                              f"({escape(str(exc)[:160] or type(exc).__name__)})",
                              "download it again, or use the wheel as its index publishes it"
                              ) from None


def dependency_libraries(path: Path, dest: Path, limits: Limits | None = None
                         ) -> list[tuple[str, Path, str]]:
    """The shared libraries of a dependency wheel (`nvidia/<pkg>/lib/lib*.so*`, regular files)
    written under `dest`, each hashed: [(file name, staged path, sha256)]."""
    limits = limits or Limits()
    out: list[tuple[str, Path, str]] = []
    make_dirs(dest)
    total = 0
    with _judged(path, reading_only=False), open(path, "rb") as raw, \
            open_zip(raw, limits) as z:
        for info in z.infolist():
            m = _DEP_LIB.match(info.filename)
            kind = (info.external_attr >> 16) & 0o170000
            if not m or info.is_dir() or (kind and kind != stat.S_IFREG):
                continue
            total += info.file_size
            if info.file_size > limits.member_bytes or total > limits.total_bytes:
                raise ArchiveRejected(f"{escape(path.name)}: {escape(info.filename)} claims more "
                                      "than any CUDA library", "do not use this wheel")
            name = m[1]
            if any(name == n for n, _, _ in out):
                raise ArchiveRejected(f"{escape(path.name)} holds {escape(name)} twice",
                                      "do not use this wheel")
            h = hashlib.sha256()
            staged = dest / name
            with z.open(info) as src, open(staged, "xb") as f:
                while chunk := src.read(CHUNK):
                    h.update(chunk)
                    f.write(chunk)
                read_to_end(src, info.filename)
            os.chmod(staged, 0o755)
            out.append((name, staged, h.hexdigest()))
    return out
