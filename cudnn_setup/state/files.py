"""What is at a path in a CUDA root, in the manifest's terms, and whether it is what was recorded."""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Iterable

from cudnn_setup.digest import BLAKE3, SHA256, file_digests
from cudnn_setup.state.manifest import DIR, FILE, OTHER, SYMLINK, Content, FileRecord


def describe(path: Path, hashes: Iterable[str] = (SHA256,)) -> Content | None:
    """What is at `path` now (never following a symlink there); a file hashed with each of
    `hashes`, in one read."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return Content(SYMLINK, target=os.readlink(path))
    if stat.S_ISREG(st.st_mode):
        return _file(file_digests(path, tuple(hashes) or (SHA256,)), st)
    if stat.S_ISDIR(st.st_mode):
        return Content(DIR)
    return Content(OTHER)


def _file(digests: dict[str, str | None], st: os.stat_result) -> Content:
    return Content(FILE, digests.get(SHA256), stat.S_IMODE(st.st_mode), blake3=digests.get(BLAKE3))


def stat_key(path: Path) -> tuple[int, int, int, int]:
    st = os.lstat(path)
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def describe_known(path: Path, record: FileRecord | None,
                   hashes: Iterable[str] = ()) -> Content | None:
    """describe(), trusting the recorded hashes while inode, size, mtime and ctime are unchanged.

    Any write or chmod moves ctime, which no user can set back, so an unchanged stat means
    unchanged bytes (git's index relies on the same); everything else is hashed, with the
    record's hashes and each of `hashes` (what else the file is compared with). A file whose
    stat is as recorded is read only for a hash the record lacks."""
    wanted = tuple(dict.fromkeys([*(record.content.hashes if record else ()), *hashes]))
    if record is not None and record.type == FILE and record.stat:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        if stat.S_ISREG(st.st_mode) and \
                (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) == tuple(record.stat):
            digests = {a: record.content.digest(a) for a in record.content.hashes}
            missing = [a for a in wanted if a not in digests]
            if missing:
                digests.update(file_digests(path, missing))
            return _file(digests, st)
    return describe(path, wanted)


def record_stats(root: Path, files: list[FileRecord]) -> None:
    """Each installed file's stat, taken once the files are in place."""
    for entry in files:
        if entry.type == FILE:
            entry.stat = stat_key(root / entry.path)
