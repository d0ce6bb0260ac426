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
import secrets
import stat
from pathlib import Path
from typing import Callable, Iterable

from cudnn_setup import parallel


def write_atomic(path: Path, data: bytes, mode: int = 0o644, dir_fd: int | None = None,
                 owner: tuple[int, int] | None = None) -> None:
    """Replace `path` so that a crash leaves either the old bytes or the new ones, never a mix:
    write `data` to a new file beside it (`mode` whatever the umask), fsync that, rename it over
    `path`, then fsync the directory so the rename itself survives a power cut. With `dir_fd`,
    `path` is a name in the directory open as `dir_fd` (one its caller reached without
    following a link, as a mirror's are), and nothing is looked up by path. `owner`: (uid, gid)
    the new file is given before it takes the name (root writing a user's file)."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")  # beside it
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if owner is not None:
                try:
                    os.fchown(f.fileno(), *owner)
                except OSError as exc:  # an owner this namespace cannot map: the writer's
                    if exc.errno not in (errno.EPERM, errno.EINVAL):
                        raise
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, path, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except FileNotFoundError:
            pass
        raise
    _fsync_parent(path, dir_fd)


def replace_durably(src: Path, dst: Path, src_dir_fd: int | None = None,
                    dst_dir_fd: int | None = None) -> None:
    """Rename the finished file `src` over `dst` so that, once this returns, `dst` has all of
    its bytes after a power cut: the file fsynced, renamed, its directory fsynced. With the
    `*_dir_fd`s, `src` and `dst` are names in the directories open as those."""
    fsync_file(src, src_dir_fd)
    os.replace(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
    _fsync_parent(dst, dst_dir_fd)


def _fsync_parent(path: Path, dir_fd: int | None) -> None:
    if dir_fd is None:
        fsync_dir(path.parent)
    else:
        os.fsync(dir_fd)


def fsync_file(path: Path, dir_fd: int | None = None) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
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
    its directory; those of one depth side by side). `fsync`: how (a transaction passes its
    Filesystem's, where tests inject faults)."""
    by_depth: dict[int, list[Path]] = {}
    for directory in sorted(set(dirs), key=str):
        try:
            is_dir = stat.S_ISDIR(os.lstat(directory).st_mode)
        except FileNotFoundError:
            continue
        if is_dir:
            by_depth.setdefault(len(directory.parts), []).append(directory)
    for depth in sorted(by_depth, reverse=True):
        fsync_all(by_depth[depth], fsync)


# fsyncs issued at once. Each waits for a journal commit and a flush of the device's cache;
# issued together, the filesystem serves them with a few commits instead of one each (an
# install's 30 staged files: 0.09-0.15 s one after another on this project's disk, 0.03 s).
FSYNC_THREADS = 8


def fsync_all(paths: list[Path], fsync: Callable[[Path], None] | None = None) -> None:
    """`fsync` (fsync_file) each of `paths`, several at once; every one done, or the first
    failure raised once the others have finished."""
    fsync = fsync or fsync_file
    if len(paths) < 2:
        for path in paths:
            fsync(path)
        return

    def call(path: Path) -> Callable[..., None]:  # the stop event: an fsync is not cut short
        return lambda stop: fsync(path)

    parallel.spread([call(path) for path in paths], min(FSYNC_THREADS, len(paths)))


def make_durable(sources: Iterable[Path], top: Path) -> None:
    """fsync every regular file of `sources` (symlinks carry no data), several at once, then
    every directory from theirs up to `top`, and `top`: after a power cut an installed library
    is whole, never empty."""
    dirs: set[Path] = {top}
    files = []
    for source in sources:
        if stat.S_ISREG(os.lstat(source).st_mode):
            files.append(source)
        parent = source.parent
        while parent != top and top in parent.parents:
            dirs.add(parent)
            parent = parent.parent
    fsync_all(files)
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
