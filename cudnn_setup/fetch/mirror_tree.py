"""The directory a mirror is built in, written only through descriptors of its own directories.

Every directory below DIR is opened relative to its parent's descriptor without following a
symbolic link (`O_NOFOLLOW`): a link planted where the mirror writes (`DIR/cudnn/linux-x86_64 ->
elsewhere`, `DIR/.incoming -> elsewhere`) is refused as install refuses one in a CUDA root
(`link-outside-root`), so nothing outside DIR is written or removed. Work files are created
under names no one else holds (`O_EXCL`), so a file already in `.incoming/` is never replaced,
and they are removed when the run ends, whatever its outcome. Modes do not follow the umask:
directories 0755, files 0644, so the web server's user can serve them and no one else can
change them. Files are stat-checked (a regular file, within its size bound) before a byte of
them is read. Two builders of one DIR never interleave: DIR itself is flocked, and a second
builder waits for it as an install waits for a root's lock (state/layout.py: the same budget,
and the same lines while it waits).
"""
from __future__ import annotations

import errno
import fcntl
import os
import re
import secrets
import stat
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from cudnn_setup.durable import replace_durably, write_atomic
from cudnn_setup.errors import InstallFailed
from cudnn_setup.state.layout import (DEFAULT_LOCK_TIMEOUT, got_line, lock_held_error,
                                      waiting_line)
from cudnn_setup.state.trust import unsafe
from cudnn_setup.text import escape, show_path

DIR_MODE, FILE_MODE = 0o755, 0o644
INCOMING = ".incoming"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


_WORK_NAME = re.compile(r"^[0-9a-f]{12}-[^/]+\Z")  # work_file's names


class TooLarge(Exception):
    def __init__(self, size: int):
        super().__init__(size)
        self.size = size


class MirrorTree:
    """DIR, opened once; `rel` paths below it use `/` and never `..`."""

    def __init__(self, root: Path):
        self.root = root
        missing = []  # DIR and the parents this run makes: 0755 too, so a web server reaches it
        at = root
        while not os.path.lexists(at) and at != at.parent:
            missing.append(at)
            at = at.parent
        root.mkdir(parents=True, exist_ok=True)  # DIR itself is where the user points
        for made in reversed(missing):
            os.chmod(made, DIR_MODE)
        self.fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        st = os.fstat(self.fd)
        # state/trust.py's rule: only this user, root and DIR's owner may have written it
        self._trusted = frozenset({0, os.geteuid(), st.st_uid})
        try:
            self._judge(st, "")
            self._judge_below()
        except InstallFailed:
            os.close(self.fd)
            raise
        self._dirs: dict[str, int] = {"": self.fd}
        self._work: list[str] = []  # names this run created in INCOMING
        self._made_incoming = False

    # --- directories ----------------------------------------------------------------------------

    def dir(self, rel: str) -> int:
        """The descriptor of DIR/rel, made (0755) where missing, never reached through a link."""
        if rel in self._dirs:
            return self._dirs[rel]
        parent_rel, _, name = rel.rpartition("/")
        parent = self.dir(parent_rel)
        try:
            os.mkdir(name, DIR_MODE, dir_fd=parent)
            created = True
        except FileExistsError:
            created = False
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise self._not_ours(rel) from None
            raise
        if created:
            os.fchmod(fd, DIR_MODE)
            if rel == INCOMING:
                self._made_incoming = True
        else:
            try:
                self._judge(os.fstat(fd), rel)
            except InstallFailed:
                os.close(fd)
                raise
        self._dirs[rel] = fd
        return fd

    def _judge_below(self) -> None:
        """Every entry under DIR judged before anything is written (links not followed: a
        link's target is refused where the mirror would use it)."""
        stack = [""]
        while stack:
            rel = stack.pop()
            with os.scandir(self.root / rel if rel else self.root) as entries:
                for entry in entries:
                    sub = f"{rel}/{entry.name}" if rel else entry.name
                    st = entry.stat(follow_symlinks=False)
                    self._judge(st, sub)
                    if stat.S_ISDIR(st.st_mode):
                        stack.append(sub)

    def _judge(self, st: os.stat_result, rel: str) -> None:
        """Refuse (`unsafe-mirror`) a directory or file of DIR that someone else could have
        written: another user could swap an archive after its checksum went into a manifest,
        or plant a manifest that root's run keeps and the fleet then trusts."""
        why = unsafe(st, self._trusted)
        if why:
            shown = show_path(self.root / rel) if rel else show_path(self.root)
            raise InstallFailed(
                f"{shown} in the mirror is {why}; someone else could change what the fleet "
                "installs from it, so nothing was written there",
                f"make it its owner's alone (`chmod go-w {shown}`, `chown` it to yourself), or "
                "build the mirror in another directory", code="unsafe-mirror")

    def _not_ours(self, rel: str) -> InstallFailed:
        return InstallFailed(
            f"{escape(rel)} in the mirror {show_path(self.root)} is a symbolic link or not a "
            "directory; cudnn-setup writes only into the mirror's own directories",
            f"remove or rename {escape(rel)}, or build the mirror in another directory",
            code="link-outside-root")

    def fd_path(self, rel: str) -> Path:
        """A path to DIR/rel through its directory's descriptor, for code that takes paths:
        whatever happens to the names above it, it leads where the descriptor does."""
        parent, _, name = rel.rpartition("/")
        return Path(f"/proc/self/fd/{self.dir(parent)}") / name

    # --- reading --------------------------------------------------------------------------------

    def regular_size(self, rel: str) -> int | None:
        """The size of DIR/rel when it is a regular file (not a link); None when it is not."""
        parent, _, name = rel.rpartition("/")
        try:
            st = os.stat(name, dir_fd=self.dir(parent), follow_symlinks=False)
        except FileNotFoundError:
            return None
        return st.st_size if stat.S_ISREG(st.st_mode) else None

    def read(self, rel: str, limit: int) -> bytes | None:
        """DIR/rel's bytes (None when there is no such file), after its stat says it is a
        regular file of at most `limit` bytes (TooLarge otherwise: nothing read)."""
        parent, _, name = rel.rpartition("/")
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=self.dir(parent))
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise self._not_ours(rel) from None
            raise
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise self._not_ours(rel)
            self._judge(st, rel)
            if st.st_size > limit:
                raise TooLarge(st.st_size)
            return f.read(limit + 1)

    def names(self, rel: str) -> list[str]:
        """The regular files (not links) directly in DIR/rel."""
        fd = self.dir(rel)
        out = []
        for name in os.listdir(fd):
            try:
                if stat.S_ISREG(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                    out.append(name)
            except FileNotFoundError:
                continue
        return sorted(out)

    def subdirs(self, rel: str) -> list[str]:
        fd = self.dir(rel)
        return sorted(n for n in os.listdir(fd) if stat.S_ISDIR(
            os.stat(n, dir_fd=fd, follow_symlinks=False).st_mode))

    # --- writing --------------------------------------------------------------------------------

    def work_file(self, name: str, create: bool = True) -> Path:
        """A new empty file in DIR/.incoming under a name no one else holds (or only the name,
        for a writer that creates it exclusively itself), removed when the run ends; returned
        as a descriptor path."""
        incoming = self.dir(INCOMING)
        unique = f"{secrets.token_hex(6)}-{name}"
        if create:
            fd = os.open(unique, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, FILE_MODE, dir_fd=incoming)
            os.close(fd)
        self._work.append(unique)
        return Path(f"/proc/self/fd/{incoming}") / unique

    def sweep(self) -> None:
        """Remove what a killed run left in DIR/.incoming (its work files, by their names);
        called under the mirror's lock, so no other builder's files are taken."""
        try:
            st = os.stat(INCOMING, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if not stat.S_ISDIR(st.st_mode):
            return  # refused when it is needed, naming it
        incoming = self.dir(INCOMING)
        for name in os.listdir(incoming):
            if _WORK_NAME.match(name):
                try:
                    if stat.S_ISREG(os.stat(name, dir_fd=incoming,
                                            follow_symlinks=False).st_mode):
                        os.unlink(name, dir_fd=incoming)
                except FileNotFoundError:
                    pass

    def place(self, work: Path, rel: str) -> None:
        """A finished work file under its final name DIR/rel: 0644, then renamed durably
        (durable.replace_durably), so a manifest never names bytes a power cut could lose."""
        incoming, name = self.dir(INCOMING), work.name
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=incoming)
        try:
            os.fchmod(fd, FILE_MODE)
        finally:
            os.close(fd)
        parent, _, final = rel.rpartition("/")
        replace_durably(Path(name), Path(final), src_dir_fd=incoming,
                        dst_dir_fd=self.dir(parent))
        self._work.remove(name)

    def write(self, rel: str, data: bytes) -> None:
        """DIR/rel replaced atomically with `data`, 0644 (durable.write_atomic, in the
        directory reached through its descriptor)."""
        parent, _, name = rel.rpartition("/")
        write_atomic(Path(name), data, FILE_MODE, dir_fd=self.dir(parent))

    @contextmanager
    def locked(self, timeout: float = DEFAULT_LOCK_TIMEOUT,
               on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
        """An exclusive flock on DIR itself, so two builders never interleave: waited for as
        a root's lock is (the same budget, and the same lines while waiting), then
        `lock-held`."""
        started = time.monotonic()
        delay, waited = 0.05, False
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not waited and on_wait is not None:
                    on_wait(waiting_line(self.root, self.fd, timeout))
                waited = True
            if time.monotonic() - started >= timeout:
                raise lock_held_error(self.root, timeout)
            time.sleep(delay)
            delay = min(delay * 2, 1.0)
        if waited and on_wait is not None:
            on_wait(got_line(self.root, started))
        try:
            yield
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)

    def close(self) -> None:
        """Remove this run's work files (and `.incoming/` when this run made it and it is
        empty), then close every descriptor."""
        incoming = self._dirs.get(INCOMING)
        if incoming is not None:
            for name in self._work:
                try:
                    os.unlink(name, dir_fd=incoming)
                except FileNotFoundError:
                    pass
            self._work.clear()
            if self._made_incoming:
                try:
                    os.rmdir(INCOMING, dir_fd=self.fd)
                except OSError:
                    pass  # something else is in it: not this run's to remove
        for rel, fd in self._dirs.items():
            if rel:
                os.close(fd)
        os.close(self.fd)
        self._dirs.clear()
