"""Directories of the user's own that no one else can change: made 0700 where missing, and
refused where another user could replace or plant a file in them."""
from __future__ import annotations

import os
import stat
from pathlib import Path


def make_private_dir(directory: Path) -> None:
    """Create the missing parts of `directory`, each 0700 (its parents too: ~/.cache is the
    user's alone)."""
    missing = []
    for part in (directory, *directory.parents):
        if os.path.lexists(part):
            break
        missing.append(part)
    for part in reversed(missing):
        try:
            os.mkdir(part, 0o700)
        except FileExistsError:
            continue
        os.chmod(part, 0o700, follow_symlinks=False)


def private_dir(directory: Path, euid: int) -> Path:
    """`directory`, made if missing; OSError, saying why, where it is a link or not a
    directory, belongs to another user or may be written by others."""
    make_private_dir(directory)
    info = os.lstat(directory)
    if not stat.S_ISDIR(info.st_mode):
        raise OSError(f"{directory} is a link or not a directory")
    if info.st_uid != euid:
        raise OSError(f"{directory} belongs to uid {info.st_uid}, not to this user")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise OSError(f"{directory} is writable by others (mode {stat.S_IMODE(info.st_mode):04o})")
    return directory
