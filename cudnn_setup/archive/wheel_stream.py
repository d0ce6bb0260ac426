"""A wheel read while it downloads: its members decoded and staged as their bytes arrive.

A zip's central directory comes last, but each member's local header, in front of its bytes,
carries its name, method, CRC-32 and sizes (when flag bit 3, the data descriptor, is clear, as
in NVIDIA's wheels). The local headers are walked in file order as the bytes come; each member
of `nvidia/cudnn/` is named as the whole-file read would name it (wheel.as_archive, the version
from the local cudnn_version.h) and handed to a decoding thread at once, which inflates it as
its bytes arrive (Growing.pread waits for them), so decoding keeps pace with the wire on every
core while the rest downloads.

The central directory decides. Once the download has ended well (its checksum matched on the
bytes it wrote), the wheel is judged from the central directory exactly as wheel.read judges
it (wheel.admitted: layout, version, MemberRules); each member it names is taken from what was
staged early only when the local header said the same (offset, name, method, CRC-32, sizes)
and the member got the same name and decoded cleanly; one it names that was not staged (a data
descriptor, an encrypted or zip64 entry, anything the walk stopped at) is decoded then. When
anything staged early is not what the central directory says (a local header that lies, a
member it does not name) the early staging is thrown away and the whole wheel is decoded again
from the central directory, as if it had been read once whole; early decoding it disowns is
stopped rather than waited for. An early member that fails, to decode or to be staged (a bomb
whose local header alone declares gigabytes fills the disk), is the local header's word only:
the central directory's pass decides, never the early staging's fault. Nothing is placed from
here: the install's commit waits for the download's verdict (steps/overlap.py).

A download that started over after bytes were read fails the pass (Follower.reach), as it does
a tar's; the install then reads the file once whole. The file must be unchanged (size, mtime,
ctime) from the download's end to the last member decoded, as wheel.read requires of a whole
file.
"""
from __future__ import annotations

import os
import struct
import threading
import zipfile
from pathlib import Path

from msgspec import Struct

from cudnn_setup import parallel
from cudnn_setup.archive import library_facts, staging, wheel
from cudnn_setup.archive.whole_file import unchanged
from cudnn_setup.archive.decoders import Growing, usable_cores
from cudnn_setup.archive.listing import Listing, Member, Wanted
from cudnn_setup.archive.problems import Problem
from cudnn_setup.archive.rules import Limits, MemberRules, Stop, corrupt
from cudnn_setup.digest import SHA256
from cudnn_setup.facts import cudnn as gen
from cudnn_setup.trees import remove_tree

LOCAL = b"PK\x03\x04"
LOCAL_SIZE = 30
VERSION_HEADER = wheel.PREFIX + "include/cudnn_version.h"
# flag bits of a local header: sizes after the bytes, encryption, names in UTF-8
_DATA_DESCRIPTOR, _ENCRYPTED, _UTF8 = 0x8, 0x1, 0x800


class Early(Struct):
    """A member staged from its local header, before the central directory was read."""

    info: zipfile.ZipInfo  # what the local header says
    member: Member  # named and staged as the whole-file read would, from the local header
    done: bool = False  # decoded and checked against the local header, staged whole
    failed: bool = False  # did not decode as the local header says, or could not be staged

    def agrees(self, info: zipfile.ZipInfo, member: Member) -> bool:
        """Whether the central directory's entry and member are what the local header said
        (decoded or not)."""
        local = self.info
        return (member.path == self.member.path
                and member.kind == "file" and info.header_offset == local.header_offset
                and info.orig_filename == local.orig_filename
                and info.compress_type == local.compress_type and info.CRC == local.CRC
                and info.compress_size == local.compress_size
                and info.file_size == local.file_size)


def read(path: Path, staging_dir: Path, want: Wanted, source: Growing,
         limits: Limits | None = None, content_hash: str = SHA256
         ) -> tuple[Listing, wheel.WheelName]:
    """The wheel at `path` (not there yet: `source` is its download) staged as wheel.read
    stages it, its members decoded as they arrive; the listing's sha256 is the download's."""
    name = wheel.parse_name(path.name)
    assert name is not None  # read_package tells a wheel by its name
    listing = Listing(compression=wheel.WHEEL)
    listing.facts = library_facts.FactsReader()
    read_whole = False
    try:
        with wheel.faults(path, staging_dir, listing):
            try:
                _read(name, staging_dir, want, source, limits or Limits(), listing,
                      content_hash)
            except OSError as exc:
                if exc.errno is not None:
                    raise
                # the download failed or started over (fetch/arriving.ArrivalFailed): the
                # install says the download's own error, or reads the file once whole
                listing.problems.append(corrupt(str(exc)[:200]))
            else:
                read_whole = True
    finally:
        source.close()
        if not read_whole:  # refused: nothing reads the staged files any more
            listing.facts.close()
    if read_whole:
        listing.facts.wait()
    return listing, name


def _read(name: wheel.WheelName, staging_dir: Path, want: Wanted, source: Growing,
          limits: Limits, listing: Listing, content_hash: str) -> None:
    cores = usable_cores()
    writer = wheel.new_writer(staging_dir, cores, listing.facts, content_hash)
    lanes = parallel.Lanes(cores, on_error=source.stop)
    early: dict[int, Early] = {}
    discarded = False  # the early staging thrown away, its writer's faults with it
    judged = False
    try:
        try:
            _walk(name, staging_dir, want, source, limits, writer, lanes, early)
            size = source.reach(1 << 62)  # the download's good end: all of it, hashed
        except BaseException as exc:  # a signal too: no thread may go on waiting for bytes
            first = lanes.error  # a decoding thread's fault, which stopped the walk
            source.stop()
            lanes.join(quiet=True)
            if first is not None and isinstance(exc, Exception):
                raise first from None
            raise
        fd = source.fileno()
        before = os.fstat(fd)
        with os.fdopen(os.dup(fd), "rb") as f, wheel.open_zip(f, limits) as z:
            staged = wheel.admitted(z, name, MemberRules(limits), listing)
            late = _late(staged, early)
            if late is not None:
                lanes.join()  # the early members decoded, each staged whole or failed
                if not all(e.done for e in early.values()):
                    late = None
            if late is None:  # staged early what the central directory disowns: start over
                lanes.join(quiet=True)  # what it disowns is not decoded on
                discarded = True
                _discard(writer)
                _again(staging_dir, listing)
                listing.members.clear()
                listing.problems.clear()
                sha256, size = wheel.decode_whole(f, name, staging_dir, want,
                                                  MemberRules(limits), listing, None,
                                                  content_hash)
                unchanged(fd, before, size)
                listing.sha256, listing.size = sha256, size
                return
            late_lanes = parallel.Lanes(cores)
            try:
                read_at = _reader(fd)
                for member, info in sorted(late, key=lambda job: -job[1].file_size):
                    late_lanes.put(wheel.stage_job(read_at, info, size, member,
                                                   staging_dir if want(member) else None,
                                                   writer))
            finally:
                late_lanes.join()
        writer.finish()  # every staged file closed, its mode set: now the central's mode
        unchanged(fd, before, size)
        for member, info in staged:
            if (e := early.get(info.header_offset)) is not None:
                _take(member, e.member)
        judged = True
    finally:
        lanes.join(quiet=True)
        if judged:
            writer.finish()
        elif not discarded:  # the fault under way is the pass's verdict, not the staging's
            _discard(writer)
    listing.sha256, listing.size = source.sha256, size


def _walk(name: wheel.WheelName, staging_dir: Path, want: Wanted, source: Growing,
          limits: Limits, writer: staging.Writer, lanes: parallel.Lanes,
          early: dict[int, Early]) -> None:
    """Follow the local headers from byte 0 while the bytes arrive, handing each member of
    `nvidia/cudnn/` to `lanes` once its header is in; stop quietly where the stream cannot be
    followed (what is left is decoded from the central directory at the end)."""
    rules = MemberRules(limits)  # the early members' own: the central directory's come later
    full: str | None = None
    at = 0
    for _ in range(limits.members):
        found = _local(source, at)
        if found is None:
            return
        info, end = found
        at = end
        if not info.filename.startswith(wheel.PREFIX) or info.is_dir():
            continue
        if full is None:  # the release's version names the libraries: take it first
            if info.filename == VERSION_HEADER:
                full = _version(source, info, end)
                if full is None or name.version.release[:3] != tuple(map(int, full.split("."))):
                    return  # the central directory's layout says what is wrong
            continue  # a member before the version: decoded at the end
        try:
            item = next(wheel.as_archive(info, name.top, full))
            if isinstance(item, Problem):
                return
            member = rules.admit(item[0])
        except Stop:
            return
        if not isinstance(member, Member) or member.kind != "file":
            continue
        staged = Early(info, member)
        early[info.header_offset] = staged
        lanes.put(_early_job(staged, source, end, staging_dir if want(member) else None,
                             writer))


def _local(source: Growing, at: int) -> tuple[zipfile.ZipInfo, int] | None:
    """The local header at `at` as a ZipInfo (header_offset, name, method, CRC, sizes) and
    where its member's bytes end; None where the walk stops: the central directory, or
    anything it cannot follow."""
    if source.reach(at + LOCAL_SIZE) < at + LOCAL_SIZE:
        return None
    head = source.pread(LOCAL_SIZE, at)
    if head[:4] != LOCAL:
        return None  # the central directory, or a stream out of step
    (_version, flags, method, _time, _date, crc, csize, usize, name_len,
     extra_len) = struct.unpack_from("<HHHHHIIIHH", head, 4)
    if flags & (_DATA_DESCRIPTOR | _ENCRYPTED) or 0xFFFFFFFF in (csize, usize) \
            or method not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        return None
    raw = source.pread(name_len, at + LOCAL_SIZE)
    if len(raw) != name_len:
        return None
    # decoded as zipfile decodes the central directory's names, so that the two compare
    info = zipfile.ZipInfo(raw.decode("utf-8" if flags & _UTF8 else "cp437", "replace"))
    info.header_offset, info.flag_bits, info.compress_type = at, flags, method
    info.CRC, info.compress_size, info.file_size = crc, csize, usize
    return info, at + LOCAL_SIZE + name_len + extra_len + csize


def _version(source: Growing, info: zipfile.ZipInfo, end: int) -> str | None:
    """The release's version from the local cudnn_version.h (small: decoded here)."""
    if info.file_size > wheel.MAX_VERSION_HEADER:
        return None
    try:
        text = b"".join(wheel.decoded(source.pread, info, end, threading.Event()))
    except wheel.FAULTS:
        return None
    version = gen.header_version(text.decode("utf-8", "replace"))
    return "%d.%d.%d" % version if version else None


# An early member's faults: the wheel's, and a staging disk it filled
_EARLY_FAULTS: tuple[type[Exception], ...] = (*wheel.FAULTS, staging.StagingWriteFailed)


def _early_job(staged: Early, source: Growing, end: int, staging_dir: Path | None,
               writer: staging.Writer):
    job = wheel.stage_job(source.pread, staged.info, end, staged.member, staging_dir, writer)

    def run(stop: threading.Event) -> None:
        try:
            job(stop)
        # the local header's word only, which the central directory judges: what it declares
        # may not decode, nor fit the staging disk (a bomb the central directory does not name)
        except _EARLY_FAULTS:
            staged.failed = True
        else:
            staged.done = True
    return run


def _late(staged: list[tuple[Member, zipfile.ZipInfo]], early: dict[int, Early]
          ) -> list[tuple[Member, zipfile.ZipInfo]] | None:
    """The members the central directory names that were not staged early, to decode now;
    None when anything staged early is not what it names (then nothing early is kept)."""
    late = []
    used = set()
    for member, info in staged:
        e = early.get(info.header_offset)
        if e is None:
            late.append((member, info))
            continue
        used.add(info.header_offset)
        if not e.agrees(info, member):
            return None
    if used != set(early):
        return None
    return late


def _take(member: Member, staged: Member) -> None:
    """The central directory's member takes what was staged for it early; its mode is the
    central directory's (a local header has none)."""
    member.sha256, member.blake3 = staged.sha256, staged.blake3
    member.head, member.text, member.staged = staged.head, staged.text, staged.staged
    if member.staged is not None and member.mode != staged.mode:
        os.chmod(member.staged, (member.mode & 0o755) | 0o444)  # as staging's Sink sets it


def _reader(fd: int) -> wheel.ReadAt:
    return lambda n, at: wheel.pread(fd, n, at)


def _discard(writer: staging.Writer) -> None:
    """The early staging's writer ended, its faults dropped with what it wrote: a disk filled
    by members the central directory disowns is not the install's fault, and one filled by
    what it names fills again when they are decoded anew."""
    try:
        writer.finish()
    except staging.StagingWriteFailed:
        pass


def _again(staging_dir: Path, listing: Listing) -> None:
    """Staging emptied, and the facts read from it forgotten, for a pass from the start."""
    if listing.facts is not None:
        listing.facts.close()
    listing.facts = library_facts.FactsReader()
    for entry in os.scandir(staging_dir):
        remove_tree(Path(entry.path))
