"""Paths read back from the state dir, judged before they drive any action.

A path recorded in the manifest or the journal is trusted only if it is relative, normalised
(no `..`, `.`, empty parts or NUL) and, once the symlinks of its directories are resolved, still
inside the CUDA root. Directories under the state dir itself must not be symlinks at all.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

from cudnn_setup.errors import InstallFailed

STATE_DIR = ".cudnn-setup"
MAX_PATH = 4096
NAME_MAX = 255  # bytes in one name (ext4, xfs, btrfs, tmpfs…)


class Damaged(Exception):
    """What is wrong with the state, as one phrase; StateDir turns it into the user's error."""


def damaged_error(root: Path, what: str) -> InstallFailed:
    return InstallFailed(
        f"the state in {root / STATE_DIR} is damaged: {what}",
        f"nothing was changed; if no cudnn-setup run is in progress, move {root / STATE_DIR} "
        "aside (the cuDNN files stay in place, unmanaged) and run the command again",
        code="state-damaged")


def relative(value: object, where: str) -> str:
    """`value` if it is a normalised relative path, else Damaged."""
    if not isinstance(value, str):
        raise Damaged(f"{where} is {type(value).__name__}, not a path")
    if not value or len(value) > MAX_PATH:
        raise Damaged(f"{where} is empty or too long")
    if "\x00" in value:
        raise Damaged(f"{where} contains a NUL byte")
    not_a_name(value, where)
    if value.startswith("/"):
        raise Damaged(f"{where} is an absolute path ({value!r})")
    for part in value.split("/"):
        if part in ("", ".", ".."):
            raise Damaged(f"{where} is not a normalised relative path ({value!r})")
        if len(os.fsencode(part)) > NAME_MAX:  # every call given it fails, a rollback's too
            raise Damaged(f"{where} has a name longer than {NAME_MAX} bytes, which no file "
                          f"system holds ({part[:40]!r}…)")
    return value


def not_a_name(value: str, where: str) -> None:
    """Damaged if `value` holds a character no file name can (a lone surrogate that is not an
    undecodable byte as os.fsdecode carries it, which JSON's `\\ud800` escape can spell):
    every system call given it would raise, far from the record that holds it."""
    try:
        os.fsencode(value)
    except UnicodeEncodeError as exc:
        raise Damaged(f"{where} holds {value[exc.start]!r}, which no file name can") from None


def is_within(path: str, base: str) -> bool:
    return path == base or path.startswith(base.rstrip("/") + "/")


def contained(root: Path, rel: str, where: str, real_root: str | None = None) -> None:
    """Damaged unless `root/rel`, its directories' symlinks resolved, lies inside the root and
    outside the state dir. The last part is not followed: it may be a link the tool made."""
    real_root = real_root or os.path.realpath(root)
    parent, _, name = rel.rpartition("/")
    real_parent = os.path.realpath(os.path.join(root, parent)) if parent else real_root
    real = os.path.join(real_parent, name)
    if not is_within(real, real_root) or real == real_root:
        raise Damaged(f"{where} {rel!r} leads out of the CUDA root (to {real})")
    if is_within(real, os.path.join(real_root, STATE_DIR)):
        raise Damaged(f"{where} {rel!r} points into the state dir")


def real_dir_chain(base: Path, rel: str) -> None:
    """Damaged if a directory on the way from `base` to `base/rel` exists but is a symlink or
    not a directory. `base` itself is checked by the caller."""
    current = base
    for part in rel.split("/")[:-1]:
        current = current / part
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            return
        if stat.S_ISLNK(st.st_mode):
            raise Damaged(f"{current} is a symbolic link")
        if not stat.S_ISDIR(st.st_mode):
            raise Damaged(f"{current} is not a directory")
