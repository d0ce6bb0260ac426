"""What is at a path in a CUDA root, in the manifest's terms, and whether it is what was recorded."""
from __future__ import annotations

import os
import stat
from pathlib import Path

from cudnn_setup.digest import file_digest
from cudnn_setup.state.manifest import DIR, FILE, OTHER, SYMLINK, Content, FileRecord


def describe(path: Path) -> Content | None:
    """What is at `path` now (never following a symlink there)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return Content(SYMLINK, target=os.readlink(path))
    if stat.S_ISREG(st.st_mode):
        return Content(FILE, file_digest(path), stat.S_IMODE(st.st_mode))
    if stat.S_ISDIR(st.st_mode):
        return Content(DIR)
    return Content(OTHER)


def stat_key(path: Path) -> tuple[int, int, int, int]:
    st = os.lstat(path)
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def describe_known(path: Path, record: FileRecord | None) -> Content | None:
    """describe(), trusting the recorded hash while inode, size, mtime and ctime are unchanged.

    Any write or chmod moves ctime, which no user can set back, so an unchanged stat means
    unchanged bytes (git's index relies on the same); everything else is hashed.
    """
    if record is not None and record.type == FILE and record.stat:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        if stat.S_ISREG(st.st_mode) and \
                (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) == tuple(record.stat):
            return Content(FILE, record.content.sha256, stat.S_IMODE(st.st_mode))
    return describe(path)


def record_stats(root: Path, files: list[FileRecord]) -> None:
    """Each installed file's stat, taken once the files are in place."""
    for entry in files:
        if entry.type == FILE:
            entry.stat = stat_key(root / entry.path)
