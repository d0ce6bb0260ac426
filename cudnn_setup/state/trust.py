"""Whose state may drive an action: OpenSSH's StrictModes and sudo's rule for the state dir.

Whatever `<root>/.cudnn-setup/` holds decides what install and uninstall move and delete in the
root, with the privileges of whoever runs them (root, often). So the state is trusted only
when nobody but the root directory's owner and root (uid 0) could have written it: every
directory in it, and every record, owned by one of them and writable by neither group nor
others. Anything else is refused as `unsafe-state` before it is read. Files the tool keeps
as they were found (backups, originals) keep their owner and mode: only the directories that
hold them are judged, since nobody else can add, remove or swap an entry there.
"""
from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

from cudnn_setup.errors import InstallFailed
from cudnn_setup.text import escape

OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def owners(root: Path) -> frozenset[int]:
    """Who may have written the state of `root`: root (uid 0) and the root directory's owner."""
    return frozenset({0, os.stat(root).st_uid})


def unsafe(st: os.stat_result, trusted: frozenset[int]) -> str | None:
    """Why a state piece with this lstat/fstat cannot be trusted, or None. A symlink's own
    mode means nothing (always 0777); its owner does."""
    if st.st_uid not in trusted:
        return f"owned by {_user(st.st_uid)}, not by the root's owner or root"
    if not stat.S_ISLNK(st.st_mode) and st.st_mode & OTHERS_WRITE:
        who = " and ".join(w for w, bit in (("group", stat.S_IWGRP), ("others", stat.S_IWOTH))
                           if st.st_mode & bit)
        return f"mode {stat.S_IMODE(st.st_mode):04o}: writable by {who}"
    return None


def unsafe_error(root: Path, path: Path, why: str) -> InstallFailed:
    state = root / ".cudnn-setup"
    return InstallFailed(
        f"the state in {escape(str(state))} is unsafe: {escape(str(path))} is {why}; someone "
        "else could have changed what it says, so it was not read",
        f"nothing was changed; check that {escape(str(state))} holds only what cudnn-setup "
        f"wrote, then make it its owner's alone (`chmod -R go-w {escape(str(state))}`, and "
        "`chown` it to the root's owner), or move it aside (the cuDNN files stay in place, "
        "unmanaged)", code="unsafe-state")


def unsafe_dirs(top: Path, trusted: frozenset[int]) -> tuple[Path, str] | None:
    """The first directory under `top` (links not followed) that is not trusted, and why;
    None when all are (or `top` is absent). Callers judge `top` itself first."""
    stack = [top]
    while stack:
        directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except FileNotFoundError:
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(st.st_mode):
                why = unsafe(st, trusted)
                if why:
                    return Path(entry.path), why
                stack.append(Path(entry.path))
    return None


def _user(uid: int) -> str:
    try:
        return f"uid {uid} ({escape(pwd.getpwuid(uid).pw_name)})"
    except KeyError:
        return f"uid {uid}"
