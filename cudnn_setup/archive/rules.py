"""What a member of a cuDNN archive may be, and why anything else is refused.

This is the file to audit. Every member passes `MemberRules.admit` before a byte of it is
written anywhere; each member type has one handler. Only regular files are ever written (under
names built here, into a staging directory); symlinks are kept as records and never created, so
no chain of links can lead a write outside the staging directory.
"""
from __future__ import annotations

import stat
import tarfile
from typing import Iterator

from msgspec import Struct, field

from cudnn_setup.archive.listing import Member
from cudnn_setup.archive.problems import Problem
from cudnn_setup.text import escape


class Limits(Struct, frozen=True):
    members: int = 5000  # real cuDNN archives have fewer than 200
    # The largest library NVIDIA ships (libcudnn_engines_precompiled.so.9) is under 1 GiB.
    member_bytes: int = 4 << 30
    total_bytes: int = 16 << 30
    name_length: int = 1024
    name_component_bytes: int = 255  # NAME_MAX of every Linux filesystem
    # Headers are capped before they are read: tarfile would read whatever size one claims.
    long_name_bytes: int = 4096  # a GNU long name or link target (PATH_MAX)
    pax_bytes: int = 1 << 20  # one PAX extended header, all its records together
    extended_headers: int = 16  # extended headers in a row before a member's own


class Stop(Exception):
    """A problem after which reading on makes no sense (too many members, a bomb)."""

    def __init__(self, problem: Problem):
        super().__init__(problem.message)
        self.problem = problem


def check_name(raw: str, limits: Limits) -> tuple[str | None, Problem | None]:
    """The member's normalised path, or the problem with its name; (None, None) for "./"."""
    if any(ord(c) < 32 or ord(c) == 127 for c in raw):
        return None, Problem("bad-name", f"member {escape(raw)} has control characters in its name",
                             "real cuDNN archives never do; the file is damaged or hostile")
    if len(raw) > limits.name_length:
        return None, Problem("bad-name", f"member name longer than {limits.name_length} characters",
                             "real cuDNN archives never have such names")
    if any(len(p.encode("utf-8", "surrogateescape")) > limits.name_component_bytes
           for p in raw.split("/")):
        return None, Problem("bad-name", f"member {escape(raw[:200])}… has a name part longer "
                             f"than {limits.name_component_bytes} bytes",
                             "no Linux filesystem can hold such a name; real cuDNN archives "
                             "never have one")
    if raw.startswith("/"):
        return None, Problem("unsafe-path", f"member {escape(raw)} has an absolute path",
                             "the archive tries to write outside its directory; do not use it")
    parts = [p for p in raw.split("/") if p not in ("", ".")]
    if ".." in parts:
        return None, Problem("unsafe-path", f"member {escape(raw)} climbs out with '..'",
                             "the archive tries to write outside its directory; do not use it")
    if not parts:
        return None, None
    return "/".join(parts), None


def check_link(member: Member) -> Problem | None:
    """cuDNN archives only ever link a library name to a file beside it."""
    target = member.target or ""
    shown = f"{escape(member.path)} -> {escape(target)}"
    if target.startswith("/"):
        return Problem("unsafe-link", f"symlink {shown} points to an absolute path",
                       "cuDNN archives only link a library name to a library beside it")
    if "/" in target or target in ("", ".", ".."):
        return Problem("unsafe-link", f"symlink {shown} points outside its directory",
                       "cuDNN archives only link a library name to a library beside it")
    return None


def parents(rel: str) -> Iterator[str]:
    parts = rel.split("/")
    for i in range(1, len(parts)):
        yield "/".join(parts[:i])


class MemberRules(Struct):
    """Judges members in archive order; remembers what earlier members were."""

    limits: Limits = field(default_factory=Limits)
    seen: set[str] = field(default_factory=set)
    not_dirs: set[str] = field(default_factory=set)  # paths nothing may lie under
    implied_dirs: set[str] = field(default_factory=set)  # paths earlier members lie under
    count: int = 0
    total: int = 0

    def admit(self, info: tarfile.TarInfo) -> Member | Problem | None:
        """The member to record, the problem that refuses it, or None for the "./" entry.

        Raises Stop when the archive as a whole must not be read further.
        """
        self.count += 1
        if self.count > self.limits.members:
            raise Stop(Problem("too-many-members",
                               f"the archive has more than {self.limits.members} members",
                               "real cuDNN archives have fewer than 200"))
        rel, problem = check_name(info.name, self.limits)
        if problem or rel is None:
            return problem
        if rel in self.seen:
            return Problem("duplicate", f"member {escape(rel)} appears twice",
                           "a later copy would overwrite the first; do not use it")
        self.seen.add(rel)
        if any(parent in self.not_dirs for parent in parents(rel)):
            return Problem("unsafe-path", f"member {escape(rel)} lies under a file or symlink",
                           "the archive is damaged or hostile; do not use it")
        if not info.isdir() and rel in self.implied_dirs:  # `a/b/x.h`, then a file `a/b`
            return Problem("unsafe-path", f"member {escape(rel)} is a file or symlink where "
                           "an earlier member needs a directory",
                           "the archive is damaged or hostile; do not use it")
        self.implied_dirs.update(parents(rel))
        if not info.isdir():
            self.not_dirs.add(rel)
        if info.sparse is not None:  # marked by the header reader
            return Problem("sparse", f"member {escape(rel)} is a sparse file",
                           "cuDNN archives hold no sparse files; the file is damaged or hostile")
        mode = info.mode & 0o7777
        if mode & (stat.S_ISUID | stat.S_ISGID) and not info.isdir():
            return Problem("setuid", f"member {escape(rel)} is setuid or setgid",
                           "real cuDNN archives never are; do not use it")
        if info.isdir():
            return self._directory(rel, mode)
        if info.issym():
            return self._symlink(rel, mode, info.linkname)
        if info.islnk():
            return self._hard_link(rel, info.linkname)
        if info.isreg():
            return self._file(rel, mode, info.size)
        return self._special(rel, info)

    def _directory(self, rel: str, mode: int) -> Member:
        return Member(rel, "dir", mode=mode)

    def _symlink(self, rel: str, mode: int, target: str) -> Member | Problem:
        member = Member(rel, "symlink", mode=mode, target=target)
        return check_link(member) or member

    def _hard_link(self, rel: str, target: str) -> Problem:
        return Problem("hard-link", f"member {escape(rel)} is a hard link to {escape(target)}",
                       "cuDNN archives use symlinks only; do not use it")

    def _file(self, rel: str, mode: int, size: int) -> Member | Problem:
        if size > self.limits.member_bytes:
            # A stop, not a problem to read past: skipping the member means decoding all it
            # claims (100 GiB from a 4 MB .tgz took minutes), which a bomb is made for.
            raise Stop(Problem("too-large",
                               f"member {escape(rel)} claims {size} bytes, more than any real "
                               f"cuDNN file ({self.limits.member_bytes} at most)",
                               "a decompression bomb or a damaged archive; do not use it"))
        self.total += size
        if self.total > self.limits.total_bytes:
            raise Stop(Problem("too-large", f"the archive unpacks to more than "
                               f"{self.limits.total_bytes} bytes",
                               "a decompression bomb or a damaged archive"))
        return Member(rel, "file", size=size, mode=mode)

    def _special(self, rel: str, info: tarfile.TarInfo) -> Problem:
        kind = ("a device file" if info.ischr() or info.isblk()
                else "a fifo" if info.isfifo() else "of an unsupported type")
        return Problem("special-file", f"member {escape(rel)} is {kind}",
                       "cuDNN archives hold files and symlinks only")


def corrupt(detail: str) -> Problem:
    return Problem("corrupt", f"the archive is truncated or corrupt ({escape(detail)})",
                   "download it again and compare its sha256 with NVIDIA's")
