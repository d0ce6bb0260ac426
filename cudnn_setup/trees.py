"""Removing a directory tree that someone else may have shaped, without recursion.

shutil.rmtree recurses once per level: a tree 1,000 directories deep (made in a child's scratch
directory by the interpreter `--python` names, or left in the state) raised RecursionError,
which no caller expects, and the command ended with exit 70. Here each directory is listed
once, through a descriptor opened without following a link (a link is removed, never what it
points to), and removed after everything below it; memory grows with the number of
directories, not with their depth.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def remove_tree(path: Path | str) -> None:
    """Remove a file, a link (not what it points to) or a directory tree; nothing when absent.
    An OSError (a directory this user may not change, a path past PATH_MAX) is the caller's."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(path)
        return
    directories = []  # in the order listed: each after the directory that holds it
    pending = [os.fspath(path)]
    while pending:
        directory = pending.pop()
        directories.append(directory)
        fd = os.open(directory, _DIR_FLAGS)
        try:
            with os.scandir(fd) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(os.path.join(directory, entry.name))
                    else:
                        os.unlink(entry.name, dir_fd=fd)
        finally:
            os.close(fd)
    for directory in reversed(directories):
        os.rmdir(directory)


def remove_tree_quietly(path: Path | str) -> None:
    """remove_tree for a scratch directory whose removal nothing depends on."""
    try:
        remove_tree(path)
    except OSError:
        pass
