"""Making bytes and renames survive a power cut: every fsync the tool does goes through here.

One rule (data first, then the directory entries that name it, before anything claims them)
for every user: an atomic file write (write_atomic: the config files, the manifest, the
journal), the staged files an install puts into the root (make_durable, before the journal and
the manifest name them; dpkg does the same before its renames), a transaction's renames
(sync_dirs, before its commit point), and a finished file renamed to its published name
(replace_durably: a mirror's archives, before its manifests name them).
"""
from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path
from typing import Callable, Iterable


def write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Replace `path` so that a crash leaves either the old bytes or the new ones, never a mix:
    write `data` to a temporary file beside it, fsync that, rename it over `path`, then fsync
    the directory so the rename itself survives a power cut."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def replace_durably(src: Path, dst: Path) -> None:
    """Rename the finished file `src` over `dst` so that, once this returns, `dst` has all of
    its bytes after a power cut: the file fsynced, renamed, its directory fsynced."""
    fsync_file(src)
    os.replace(src, dst)
    fsync_dir(dst.parent)


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_dirs(dirs: Iterable[Path], fsync: Callable[[Path], None] = fsync_dir) -> None:
    """fsync each directory that exists, the deepest first (an entry before the one naming
    its directory). `fsync`: how (a transaction passes its Filesystem's, where tests inject
    faults)."""
    for directory in sorted(set(dirs), key=lambda p: (-len(p.parts), str(p))):
        try:
            is_dir = stat.S_ISDIR(os.lstat(directory).st_mode)
        except FileNotFoundError:
            continue
        if is_dir:
            fsync(directory)


def make_durable(sources: Iterable[Path], top: Path) -> None:
    """fsync every regular file of `sources` (symlinks carry no data), then every directory
    from theirs up to `top`, and `top`: after a power cut an installed library is whole,
    never empty."""
    dirs: set[Path] = {top}
    for source in sources:
        if stat.S_ISREG(os.lstat(source).st_mode):
            fsync_file(source)
        parent = source.parent
        while parent != top and top in parent.parents:
            dirs.add(parent)
            parent = parent.parent
    sync_dirs(dirs)


DIR_MODE = 0o755  # what the tool creates is readable by everyone, writable by its owner only


def make_dirs(path: Path, mode: int = DIR_MODE) -> None:
    """`path` and its missing parents as directories of `mode` whatever the umask (under
    `umask 000` a plain mkdir gives 0777: anyone could swap what is staged there; under 077,
    0700: nobody else could read it)."""
    missing = []
    current = path
    while not os.path.lexists(current):
        missing.append(current)
        current = current.parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, mode)
        except FileExistsError:  # made meanwhile by another thread of this run
            continue
        os.chmod(directory, mode)  # in a parent only this user may write: still the one made
    if not stat.S_ISDIR(os.stat(path).st_mode):
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(path))
