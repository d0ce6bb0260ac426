"""What is at a path in a CUDA root, in the manifest's terms, and whether it is what was recorded."""
from __future__ import annotations

import os
import stat
from pathlib import Path

from cudnn_setup.digest import file_digest


def describe(path: Path) -> dict | None:
    """What is at `path` now, in the manifest's terms."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return {"type": "symlink", "target": os.readlink(path)}
    if stat.S_ISREG(st.st_mode):
        return {"type": "file", "sha256": file_digest(path), "mode": stat.S_IMODE(st.st_mode)}
    if stat.S_ISDIR(st.st_mode):
        return {"type": "dir"}
    return {"type": "other"}


def stat_key(path: Path) -> list[int]:
    st = os.lstat(path)
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def describe_known(path: Path, record: dict | None) -> dict | None:
    """describe(), trusting the recorded hash while inode, size, mtime and ctime are unchanged.

    Any write or chmod moves ctime, which no user can set back, so an unchanged stat means
    unchanged bytes (git's index relies on the same); everything else is hashed.
    """
    if record and record.get("type") == "file" and record.get("stat"):
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        if stat.S_ISREG(st.st_mode) and \
                [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns] == record["stat"]:
            return {"type": "file", "sha256": record["sha256"], "mode": stat.S_IMODE(st.st_mode)}
    return describe(path)


def with_stats(root: Path, manifest: dict) -> dict:
    """The manifest with each installed file's stat, taken once the files are in place."""
    for entry in manifest["files"]:
        if entry["type"] == "file":
            entry["stat"] = stat_key(root / entry["path"])
    return manifest


def same_content(current: dict | None, record: dict) -> bool:
    if current is None or current["type"] != record["type"]:
        return False
    if record["type"] == "symlink":
        return current["target"] == record["target"]
    return current.get("sha256") == record.get("sha256")
