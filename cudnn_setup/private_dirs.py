"""Directories of the user's own that no one else can change: made 0700 where missing, and
refused where another user could replace or plant a file in them."""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


def root_in_another_users(path: Path) -> bool:
    """Whether this process is root and `path` (where it does not exist yet, its nearest
    parent that does) belongs to another user: `sudo` keeps the caller's HOME on many systems,
    and whatever root made there would be root's, in their home, in their way."""
    if os.geteuid() != 0:
        return False
    nearest = path
    while not os.path.lexists(nearest) and nearest.parent != nearest:
        nearest = nearest.parent
    try:
        return os.stat(nearest).st_uid != 0
    except OSError:
        return False


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


def open_private_dir(directory: Path, euid: int) -> int:
    """`directory`, made if missing, opened (a descriptor to use it through, so it cannot be
    swapped after the checks); OSError, saying why, where it is a link or not a directory,
    belongs to another user or may be written by others."""
    make_private_dir(directory)
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(directory, flags)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise OSError(f"{directory} is a link or not a directory") from None
        raise
    try:
        info = os.fstat(fd)
        if info.st_uid != euid:
            raise OSError(f"{directory} belongs to uid {info.st_uid}, not to this user")
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise OSError(f"{directory} is writable by others "
                          f"(mode {stat.S_IMODE(info.st_mode):04o})")
    except BaseException:
        os.close(fd)
        raise
    return fd


def private_dir(directory: Path, euid: int) -> Path:
    """`directory`, as open_private_dir judges it, for a caller that goes on by its path (a
    scratch dir made inside it, 0700 itself)."""
    os.close(open_private_dir(directory, euid))
    return directory
