"""What stands in a CUDA root where a plan looks: the one part of planning that touches the disk.

An install or an uninstall first looks (this module: lstat, readlink, hashing; any of it may
raise OSError), then decides from what it saw (state/plan.py `decide`, `decide_uninstall`,
which do no I/O and are tested case by case).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Mapping

from msgspec import Struct, field

from cudnn_setup.state.files import describe, describe_known
from cudnn_setup.state.manifest import DIR, Content, Manifest


class Observed(Struct, frozen=True):
    """What stood at each path looked at, relative to the root."""

    at: Mapping[str, Content | None] = field(default_factory=dict)  # None: nothing there
    standing: frozenset[str] = frozenset()  # paths only asked whether anything stands there

    def content(self, path: str) -> Content | None:
        return self.at[path]  # a path nobody looked at is a bug, not "nothing there"

    def stands(self, path: str) -> bool:
        return path in self.standing


def parents(paths: Iterable[str]) -> list[str]:
    """The directories the paths go into, each once, in order."""
    return sorted({path.rpartition("/")[0] for path in paths})


def observe_install(root: Path, old: Manifest | None, desired: Iterable[str],
                    deep: bool = False,
                    hashes: Mapping[str, Iterable[str]] | None = None) -> Observed:
    """What stands at each desired path (in order) and at each path of the previous install,
    and which of the desired paths' directories exist.

    A recorded file is trusted by its stat (describe_known) unless `deep`: then hashed. A file
    is hashed (or its record completed) with every hash it is compared with: its record's and
    `hashes[path]`, the archive's file's. Looking stops at the first directory standing where a
    desired file goes: the plan refuses there, so nothing after it is hashed."""
    desired = list(desired)
    records = {f.path: f for f in old.files} if old else {}
    standing = frozenset(d for d in parents(desired) if os.path.lexists(root / d))
    at: dict[str, Content | None] = {}
    hashes = hashes or {}

    def look(path: str) -> Content | None:
        record = records.get(path)
        also = tuple(hashes.get(path, ()))
        if deep:
            return describe(root / path, (*(record.content.hashes if record else ()), *also))
        return describe_known(root / path, record, also)

    for path in desired:
        at[path] = look(path)
        if at[path] is not None and at[path].type == DIR:
            return Observed(at, standing)
    for path in records:
        if path not in at:
            at[path] = look(path)
    return Observed(at, standing)


def observe_uninstall(root: Path, manifest: Manifest | None, originals_rel: str) -> Observed:
    """What stands at each path the manifest installed (files found in place excepted: they
    stay whatever they are), and, for each original in the store, whether its copy is there
    (`originals_rel/path`) and whether anything stands where it goes back."""
    if manifest is None:
        return Observed()
    at = {entry.path: describe_known(root / entry.path, entry) for entry in manifest.files
          if not (manifest.originals.get(entry.path) and manifest.originals[entry.path].in_place)}
    standing = set()
    for path, original in manifest.originals.items():
        if original.in_place:
            continue
        for rel in (f"{originals_rel}/{path}", path):
            if os.path.lexists(root / rel):
                standing.add(rel)
    return Observed(at, frozenset(standing))
