"""Opening files the tool did not create (libraries, headers, loader configs, caches): regular
files only, never a call that can block, and never more read than asked for.

A FIFO named like a library would block open(2) until a writer comes, and a read of a device or
a named pipe may never end; an `lstat`/`stat` before the open keeps devices from being opened at
all (some act on open), O_NONBLOCK makes the open of a FIFO swapped in after that stat return at
once, and `fstat` of the opened descriptor is what decides. NotRegular is an OSError, so every
caller that already handles an unreadable file handles these the same way.
"""
from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO

_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link"))


class NotRegular(OSError):
    """The path is not a regular file; the message says what it is."""

    def __init__(self, path: str | os.PathLike, what: str):
        if what == "a directory":  # the words ld.so and every tool use for it
            super().__init__(errno.EISDIR, os.strerror(errno.EISDIR), os.fspath(path))
        else:
            super().__init__(errno.EINVAL, f"not a regular file ({what})", os.fspath(path))
        self.what = what


def kind(mode: int) -> str:
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


def open_regular(path: str | os.PathLike, *, follow_symlinks: bool = True,
                 buffering: int = -1) -> BinaryIO:
    """`path` opened for reading as a binary file, or NotRegular/OSError; never blocks."""
    st = os.stat(path, follow_symlinks=follow_symlinks)
    if not stat.S_ISREG(st.st_mode):
        raise NotRegular(path, kind(st.st_mode))
    fd = os.open(path, _FLAGS | (0 if follow_symlinks else os.O_NOFOLLOW))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped after the stat above
            raise NotRegular(path, kind(st.st_mode))
        return os.fdopen(fd, "rb", buffering=buffering)
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | os.PathLike, limit: int) -> bytes:
    """At most `limit` bytes from the start of the regular file `path`."""
    with open_regular(path) as f:
        return f.read(limit)


def is_regular(path: str | os.PathLike) -> bool:
    """Whether `path` (symlinks followed) is a regular file; False when it cannot be told."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def regular_size(path: str | os.PathLike) -> int:
    """The size of the regular file `path` (symlinks followed), from its stat: NotRegular for
    anything else, which is never opened."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise NotRegular(path, kind(st.st_mode))
    return st.st_size
