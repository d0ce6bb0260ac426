"""What one pass over an archive learned: its members, and the problems found on the way."""
from __future__ import annotations

import posixpath
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from msgspec import Struct, field

from cudnn_setup.archive.problems import Problem

if TYPE_CHECKING:
    from cudnn_setup.archive.library_facts import FactsReader


class Member(Struct):
    path: str  # relative to the archive root, normalised ("cuda/lib64/libcudnn.so.7")
    kind: str  # file | symlink | dir
    size: int = 0
    mode: int = 0o644
    sha256: str | None = None
    blake3: str | None = None  # instead of sha256, when the pass hashed files so (an install)
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


class Listing(Struct):
    """Everything one pass over an archive learned."""

    compression: str
    sha256: str | None = None  # of the archive file, when it was read to the end
    size: int = 0
    members: list[Member] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    # The staged libraries' facts, read while the archive was decoded (library_facts.py);
    # None when the pass read none early: the judge then reads each file itself, once.
    facts: "FactsReader | None" = None

    def files(self) -> Iterator[Member]:
        return (m for m in self.members if m.kind == "file")

    def by_path(self) -> dict[str, Member]:
        return {m.path: m for m in self.members}



Wanted = Callable[[Member], bool]
# How far reading an archive got, for the progress display: (bytes done, of a total or None).
Progress = Callable[[int, "int | None"], None]
"""Decides whether a regular file's bytes are written to the staging directory."""
