"""The tool's state inside a CUDA root: `<root>/.cudnn-setup/` (manifest, journal, lock, staging).

Living inside the root keeps every rename on one filesystem (so atomic) and lets the state
travel with the root.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from cudnn_setup.atomic import write_atomic
from cudnn_setup.errors import InstallFailed

STATE_DIR = ".cudnn-setup"
MANIFEST = "manifest.json"
JOURNAL = "journal.json"
ORIGINALS = "originals"
TX = "tx"
DEFAULT_LOCK_TIMEOUT = 300.0


def write_json_atomic(path: Path, data: dict) -> None:
    # anyone may read what is installed; only the writer may change it
    write_atomic(path, (json.dumps(data, indent=1, sort_keys=True) + "\n").encode(), 0o644)


def read_json(path: Path) -> dict | None:
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise InstallFailed(f"{path} is damaged ({exc})",
                            "move it aside and reinstall; the files it listed stay in place") from None


def permission_hint(path: Path) -> str:
    return (f"run as a user who may write {path} (e.g. with sudo), or pick a CUDA root you own "
            "with --cuda-root")


class StateDir:
    def __init__(self, root: Path):
        self.root = root
        self.path = root / STATE_DIR

    @property
    def manifest_path(self) -> Path:
        return self.path / MANIFEST

    @property
    def journal_path(self) -> Path:
        return self.path / JOURNAL

    @property
    def originals(self) -> Path:
        return self.path / ORIGINALS

    @property
    def originals_rel(self) -> str:
        """The originals store relative to the root."""
        return f"{STATE_DIR}/{ORIGINALS}"

    def tx_dir(self, txid: str) -> Path:
        return self.path / TX / txid

    def manifest(self) -> dict | None:
        return read_json(self.manifest_path)

    def journal(self) -> dict | None:
        return read_json(self.journal_path)

    def ensure(self) -> bool:
        """Create the state dir; True when this call created it."""
        try:
            self.path.mkdir()
            return True
        except FileExistsError:
            return False
        except PermissionError:
            raise InstallFailed(f"permission denied creating {self.path}",
                                permission_hint(self.root), code="permission-denied") from None

    def tidy(self) -> None:
        """Drop the transactions dir once no transaction uses it."""
        tx = self.path / TX
        if tx.is_dir() and not any(tx.iterdir()):
            tx.rmdir()

    def remove_if_empty(self) -> None:
        """Drop leftovers the tool owns, then the dir itself if nothing is left."""
        self.tidy()
        try:
            self.path.rmdir()
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
                raise

    @contextmanager
    def locked(self, timeout: float = DEFAULT_LOCK_TIMEOUT) -> Iterator[None]:
        """Hold an exclusive flock on the state dir itself, waiting up to `timeout` seconds.

        Locking the directory rather than a lock file leaves nothing behind once uninstall has
        emptied the dir; a waiter whose dir was removed meanwhile starts over on the new one.
        """
        deadline = time.monotonic() + timeout
        delay = 0.05
        while True:
            self.ensure()
            try:
                fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
            except FileNotFoundError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                if time.monotonic() >= deadline:
                    raise InstallFailed(
                        f"another cudnn-setup run holds the lock on {self.root} "
                        f"(waited {timeout:.0f} s)",
                        "wait for it to finish, then run again", code="lock-held") from None
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            break
        try:
            yield
        finally:
            os.close(fd)


def remove_tree(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)
