"""Reading a file the tool did not create (a config file, a mirror's manifest): its type checked
first, opened without blocking, read with a cap.

A FIFO opened for reading blocks until a writer comes, forever if none does; /dev/zero or a
huge file would fill memory. So the path is stat()ed, opened O_NONBLOCK (a FIFO swapped in
after the stat still cannot block the open), fstat()ed again on the descriptor, and read up to
`limit + 1` bytes, so the caller can tell "too large" from "just fits".
"""
from __future__ import annotations

import os
import stat


class NotRegular(OSError):
    """The path is a FIFO, device, socket or directory: not opened for reading."""

    def __init__(self, path, mode: int):
        super().__init__(f"{os.fspath(path)} is {kind(mode)}, not a regular file")
        self.filename = os.fspath(path)
        self.mode = mode


def kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def read_regular(path, limit: int) -> bytes:
    """At most `limit + 1` bytes of the regular file at `path` (following symlinks).

    NotRegular for anything else; FileNotFoundError and other OSErrors are the caller's."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise NotRegular(path, st.st_mode)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(path, st.st_mode)
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 16, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def regular_size(path) -> int:
    """The size of the regular file at `path`; NotRegular for anything else (never opened)."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise NotRegular(path, st.st_mode)
    return st.st_size
