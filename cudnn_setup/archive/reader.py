"""Read a cuDNN archive once, as a stream, judging each member before any byte of it is written.

Members are never extracted with tarfile's own extract: `rules.MemberRules` judges each one, and
only regular files that pass are written, by `staging`, under names built here, into a staging
directory the caller owns.
"""
from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path
from typing import IO, Callable, Mapping

from cudnn_setup.archive import headers, library_facts, staging, xz_index
from cudnn_setup.archive.decoders import (CHUNK, DECODE_ERRORS, RAPIDGZIP, XZ, ZIP, Decoder,
                                         Growing, fallback_gzip, sniff, usable_cores)
from cudnn_setup.archive.listing import Listing, Member, Progress, Wanted
from cudnn_setup.archive.problems import Problem
from cudnn_setup.archive.rules import Limits, MemberRules, Stop, corrupt
from cudnn_setup.digest import SHA256
from cudnn_setup.errors import ArchiveRejected, InstallFailed, no_thread, os_error
from cudnn_setup.text import escape, show_path
from cudnn_setup.trees import remove_tree
from cudnn_setup.untrusted import open_regular


def read(path: Path, staging_dir: Path, want: Wanted, limits: Limits | None = None,
         on_read: Progress | None = None, xz: str | None = None,
         gzip: str | None = None, env: Mapping[str, str] = {},
         content_hash: str = SHA256, source: Growing | None = None) -> Listing:
    """Stream `path` once; write the members `want` accepts under `staging_dir`; record everything.

    `on_read` hears how far the reading got: the decoded bytes of the total a .tar.xz's index
    records (the compressed ones arrive in gulps: a block, or a megabyte that decodes to fifty),
    else the archive's bytes of its size. `xz` is the xz program to decode multi-block .tar.xz
    with, on every core (None: decode in this process); `gzip` the gzip decoder (None: the one
    for this machine); `env` the command's environment, the one decoding children run in;
    `content_hash` what each member's bytes are hashed with (Member.sha256 or .blake3). When rapidgzip
    finds fault with a .tar.gz, the archive is read again by ISA-L or zlib, whose verdict stands:
    rapidgzip refuses some files that gzip reads (zeros after the end) and cannot tell a stream
    cut short. Problems with single members are all collected; a stream that cannot be decoded ends the pass
    with one more problem. The caller judges the listing and decides what to do with the staging
    directory. `source`: the archive as it arrives (fetch/arriving.py), read instead of
    `path`, its members staged while the rest is downloaded.
    """
    try:
        compression = sniff(path, source)
    except OSError as exc:
        raise unreadable(path, exc) from None
    if compression == ZIP and path.name.endswith(".whl"):
        raise ArchiveRejected(
            f"{escape(path.name)} is a wheel, but not NVIDIA's cuDNN wheel (nvidia-cudnn-cuNN)",
            "give NVIDIA's nvidia_cudnn_cu<major>-….whl, or install by version with --from pypi")
    if compression == ZIP:
        raise ArchiveRejected(
            f"{escape(path.name)} is a .zip archive, the format of cuDNN for Windows",
            "download the Linux archive (.tgz or .tar.xz) for this machine",
        )
    listing = Listing(compression=compression)
    counts = _Counts(path, compression, on_read)
    try:
        decoder = Decoder(path, compression, counts.compressed, xz, gzip, env, source)
    except OSError as exc:
        raise unreadable(path, exc) from None
    decoded_by_rapidgzip = decoder.name == RAPIDGZIP
    complete = False
    listing.facts = library_facts.FactsReader()
    handed_over = False
    try:
        try:
            _walk(decoder.stream, staging_dir, want, MemberRules(limits or Limits()), listing,
                  content_hash, counts.decoded)
            complete = True
        except staging.StagingWriteFailed as exc:
            raise staging_failed(staging_dir, exc) from None
        except DECODE_ERRORS as exc:
            if isinstance(exc, OSError) and exc.errno is not None:  # reading, not decoding
                raise unreadable(path, exc) from None
            listing.problems.append(corrupt(str(exc) or type(exc).__name__))
        finally:
            if not complete:
                decoder.stop()
            try:
                complaint = decoder.finish(complete)
            except OSError as exc:  # the hash beside rapidgzip could not read the file
                raise unreadable(path, exc) from None
        read_again = decoded_by_rapidgzip and (complaint or not complete) \
            and not decoder.arrival_failed
        handed_over = not read_again
    finally:
        if not handed_over:  # nothing reads the staged files once this pass gives up on them
            listing.facts.close()
    if read_again:
        empty_staging(staging_dir)
        return read(path, staging_dir, want, limits, on_read, xz, gzip=fallback_gzip(), env=env,
                    content_hash=content_hash,
                    source=source.again() if source is not None else None)
    if complaint:
        listing.problems.append(corrupt(complaint))
    if complete and not complaint:
        counts.finished()
        try:
            listing.sha256, listing.size = decoder.sha256, decoder.size
        except OSError as exc:
            listing.facts.close()
            raise unreadable(path, exc) from None
    listing.facts.wait()
    return listing


class _Counts:
    """What `read` tells its caller's progress: decoded bytes when the .xz index says how many
    there will be, else the bytes of the file, which the decoder counts as it reads them."""

    def __init__(self, path: Path, compression: str, on_read: Progress | None):
        self.on_read = on_read
        self.total: int | None = None  # decoded bytes, from the index
        self.size: int | None = None  # the file's bytes
        if on_read is None:
            return
        try:  # for the display only: a file that cannot be opened now is refused just after
            with open_regular(path, buffering=0) as f:
                self.size = os.fstat(f.fileno()).st_size
                if compression == XZ:
                    self.total = xz_index.decoded_size(f.fileno())
        except OSError:
            pass

    @property
    def compressed(self) -> Callable[[int], None] | None:
        if self.on_read is None or self.total is not None:
            return None
        on_read, size = self.on_read, self.size
        return lambda done: on_read(done, size)

    @property
    def decoded(self) -> Callable[[int], None] | None:
        if self.on_read is None or self.total is None:
            return None
        on_read, total = self.on_read, self.total

        def count(pos: int) -> None:
            # an index that records fewer bytes than come out is shown as a count alone
            on_read(pos, total if pos < total else None)
        return count

    def finished(self) -> None:
        """The tar's end marker and padding are decoded but not walked: the bytes are done."""
        if self.on_read is not None and self.total is not None:
            self.on_read(self.total, self.total)


def staging_failed(staging_dir: Path, exc: staging.StagingWriteFailed | OSError) -> Exception:
    """Writing the staging copy failed: the machine's fault (disk full, permissions, a name
    too long), said by errno."""
    what = f"cannot write the staging copy under {show_path(staging_dir.parent)}"
    cause = no_thread(exc if isinstance(exc, OSError) else exc.__cause__)
    if isinstance(cause, OSError):
        return os_error(cause, what)
    return InstallFailed(f"{what}: {escape(str(cause))}", "fix it, then run again")


def empty_staging(staging_dir: Path) -> None:
    """Remove what a first pass staged, leaving the (caller's) directory itself (made with
    the first file staged: a pass that staged nothing may leave none)."""
    if not staging_dir.exists():
        return
    for entry in staging_dir.iterdir():
        remove_tree(entry)


def unreadable(path: Path, exc: OSError) -> ArchiveRejected:
    """The archive file itself cannot be read (permissions, I/O error): exit 3, said by errno."""
    error = os_error(exc, f"cannot read the archive {escape(path.name)}", kind=ArchiveRejected)
    error.code = "archive-unreadable"
    return error


class ForwardStream(io.RawIOBase):
    """The decoded tar as a file that can only move forward.

    tarfile's "r:" mode needs tell() and seek(); it only ever seeks forward when members are
    read in order, so a stream will do, and member data can then be read straight from the
    decoder instead of through tarfile's own stream buffers (which copy every byte twice).
    """

    def __init__(self, raw: IO[bytes], on_pos: Callable[[int], None] | None = None):
        self.raw = raw
        self.pos = 0
        self.on_pos = on_pos  # told the position after every read

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
            if self.on_pos is not None:
                self.on_pos(self.pos)
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
        if self.on_pos is not None:
            self.on_pos(self.pos)
        return got

    def seek(self, pos: int, whence: int = io.SEEK_SET) -> int:
        if whence != io.SEEK_SET or pos < self.pos:
            raise tarfile.ReadError("the archive asks to seek backwards, which a stream cannot do")
        while self.pos < pos:
            if not self.read(min(CHUNK, pos - self.pos)):
                break
        return self.pos


def _walk(stream: IO[bytes], staging_dir: Path, want: Wanted, rules: MemberRules,
          listing: Listing, content_hash: str = SHA256,
          on_pos: Callable[[int], None] | None = None) -> None:
    cores = usable_cores()
    facts = listing.facts

    def complete(member: Member) -> None:
        if facts is not None and library_facts.early(member.name):
            facts.submit(member.staged)

    writer = staging.Writer(direct=staging.direct_io_allowed(staging_dir),
                            lanes=staging.hash_lanes(cores), writers=staging.write_threads(cores),
                            on_complete=complete, content_hash=content_hash)
    try:
        _walk_members(ForwardStream(stream, on_pos), staging_dir, want, rules, listing, writer)
    finally:
        writer.finish()


def _walk_members(stream: "ForwardStream", staging_dir: Path, want: Wanted, rules: MemberRules,
                  listing: Listing, writer: staging.Writer) -> None:
    try:
        for info in headers.members(stream, rules.limits):
            verdict = rules.admit(info)
            if isinstance(verdict, Problem):
                listing.problems.append(verdict)
            elif isinstance(verdict, Member):
                if verdict.kind == "file":
                    staging.consume(stream, verdict, staging_dir if want(verdict) else None,
                                    writer)
                listing.members.append(verdict)
    except Stop as stop:  # reading on makes no sense (a bomb, a header too large to read)
        listing.problems.append(stop.problem)
