"""Apply a list of filesystem operations to a CUDA root all-or-nothing, even across SIGKILL.

Before the first change a journal listing every operation is written to the state dir. Every
operation is a rename within one filesystem, so each is atomic, and each can be undone by looking
at what is on disk: whatever was at a destination is first renamed into the transaction's backup
dir. The commit point is one atomic step (writing or removing the manifest); a journal found later
is rolled back when that step did not happen, and rolled forward when it did.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from cudnn_setup.state.layout import StateDir, remove_tree, write_json_atomic

PUT, REMOVE, MKDIR, RMDIR = "put", "remove", "mkdir", "rmdir"


class Filesystem:
    """Every change made under a CUDA root goes through here, so tests can inject faults."""

    def replace(self, src: Path, dst: Path) -> None:
        os.replace(src, dst)

    def mkdir(self, path: Path) -> None:
        os.mkdir(path)

    def rmdir(self, path: Path) -> None:
        os.rmdir(path)

    def makedirs(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)

    def write_manifest(self, path: Path, data: dict) -> None:
        write_json_atomic(path, data)

    def unlink(self, path: Path) -> None:
        os.unlink(path)


@dataclass
class Op:
    action: str  # put | remove | mkdir | rmdir
    path: str  # relative to the root
    source: str | None = None  # for put: relative to the root (staging or originals store)
    backup: bool = False  # move what is at `path` aside first
    original: bool = False  # the backup is a file the tool did not install: keep it for uninstall
    kind: str = "file"  # what a put places: file | symlink

    @staticmethod
    def from_dict(data: dict) -> "Op":
        return Op(**data)


class Transaction:
    def __init__(self, state: StateDir, txid: str, fs: Filesystem | None = None):
        self.state = state
        self.root = state.root
        self.txid = txid
        self.fs = fs or Filesystem()
        self.backup_dir = state.tx_dir(txid) / "backup"

    def run(self, ops: list[Op], commit: Callable[[Filesystem], None], commit_check: dict) -> None:
        """Apply `ops`, then `commit`; on any exception (even KeyboardInterrupt) undo it all."""
        journal = {"txid": self.txid, "ops": [asdict(op) for op in ops], "commit": commit_check}
        self.fs.makedirs(self.backup_dir)
        write_json_atomic(self.state.journal_path, journal)
        try:
            for op in ops:
                self._apply(op)
            commit(self.fs)
        except BaseException:
            rollback(self.state, journal)
            raise
        finish(self.state, journal)

    def _apply(self, op: Op) -> None:
        dest = self.root / op.path
        if op.action == MKDIR:
            self.fs.mkdir(dest)
            return
        if op.action == RMDIR:
            if dest.is_dir() and not any(dest.iterdir()):
                self.fs.rmdir(dest)
            return
        if op.backup and os.path.lexists(dest):
            backup = self.backup_dir / op.path
            self.fs.makedirs(backup.parent)
            self.fs.replace(dest, backup)
        if op.action == PUT:
            assert op.source is not None
            self.fs.makedirs(dest.parent)
            self.fs.replace(self.root / op.source, dest)


def _committed(state: StateDir, journal: dict) -> bool:
    check = journal.get("commit", {})
    manifest = state.manifest()
    if "manifest_txid" in check:
        return manifest is not None and manifest.get("txid") == check["manifest_txid"]
    if check.get("manifest_absent"):
        return manifest is None
    return False


def rollback(state: StateDir, journal: dict) -> None:
    """Undo whatever part of the journal's operations reached the disk, newest first."""
    root = state.root
    backup_dir = state.tx_dir(journal["txid"]) / "backup"
    for op in reversed([Op.from_dict(d) for d in journal["ops"]]):
        dest = root / op.path
        if op.action == MKDIR:
            if dest.is_dir() and not dest.is_symlink() and not any(dest.iterdir()):
                os.rmdir(dest)
            continue
        if op.action == RMDIR:
            if not os.path.lexists(dest):
                os.mkdir(dest)
            continue
        if op.action == PUT and op.source:
            source = root / op.source
            if os.path.lexists(dest) and not os.path.lexists(source):
                source.parent.mkdir(parents=True, exist_ok=True)
                os.replace(dest, source)
        backup = backup_dir / op.path
        if op.backup and os.path.lexists(backup):
            os.replace(backup, dest)
    _drop_journal(state, journal)


def finish(state: StateDir, journal: dict) -> None:
    """After the commit point: keep originals the tool displaced, drop everything else."""
    backup_dir = state.tx_dir(journal["txid"]) / "backup"
    for op in (Op.from_dict(d) for d in journal["ops"]):
        backup = backup_dir / op.path
        if op.original and os.path.lexists(backup):
            kept = state.originals / op.path
            kept.parent.mkdir(parents=True, exist_ok=True)
            os.replace(backup, kept)
    if state.manifest() is None and state.originals.exists():
        shutil.rmtree(state.originals)
    _drop_journal(state, journal)


def _drop_journal(state: StateDir, journal: dict) -> None:
    remove_tree(state.tx_dir(journal["txid"]))
    if state.journal_path.exists():
        os.unlink(state.journal_path)


def recover(state: StateDir) -> str | None:
    """Finish a transaction a killed run left behind; say what was done, or None."""
    journal = state.journal()
    said = None
    if journal is not None and _committed(state, journal):
        finish(state, journal)
        said = f"finished transaction {journal['txid']} that an interrupted run had committed"
    elif journal is not None:
        rollback(state, journal)
        said = f"rolled back transaction {journal['txid']} that an interrupted run left unfinished"
    tx = state.path / "tx"
    if tx.is_dir():  # staging of a run killed before its journal was written
        for leftover in tx.iterdir():
            remove_tree(leftover)
    return said
