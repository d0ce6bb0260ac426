"""Apply a list of filesystem operations to a CUDA root all-or-nothing, even across SIGKILL.

Before the first change a journal listing every operation is written to the state dir. Every
operation is a rename within one filesystem, so each is atomic, and each can be undone by looking
at what is on disk: whatever was at a destination is first renamed into the transaction's backup
dir, and a put records the inode it moves into place. The commit point is one atomic step
(writing or removing the manifest); a journal found later is rolled back when that step did not
happen, and rolled forward when it did.

Recovery is idempotent, so a kill during recovery is repaired by the next one: every undo step
first looks whether it is still needed (is the put's inode at the destination? is the backup
still there?), and a finished recovery removes the journal before the transaction's dir, so a
kill between the two leaves only leftovers that any later run sweeps away.
"""
from __future__ import annotations

import os
import secrets
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from cudnn_setup.durable import DIR_MODE, fsync_dir, make_dirs, sync_dirs
from cudnn_setup.errors import Interrupted, LeftUnfinished, SetupError, os_error
from cudnn_setup.state import changed
from cudnn_setup.state.journal import MKDIR, PUT, REMOVE, RMDIR, Journal, Op
from cudnn_setup.state.layout import StateDir, write_manifest
from cudnn_setup.state.manifest import Manifest
from cudnn_setup.state.paths import Damaged, contained
from cudnn_setup.state.view import command_line
from cudnn_setup.text import escape
from cudnn_setup.trees import remove_tree

__all__ = ["Filesystem", "Transaction", "Op", "PUT", "REMOVE", "MKDIR", "RMDIR", "rollback",
           "finish", "recover", "tidied_after"]



def new_txid() -> str:
    """A transaction's id: 12 random hex digits, unique among the root's transactions (the
    name of its dir under tx/)."""
    return secrets.token_hex(6)

class Filesystem:
    """Every change made under a CUDA root goes through here, so tests can inject faults
    (an OSError, or a SIGKILL) at any step of a transaction or of its recovery."""

    def replace(self, src: Path, dst: Path) -> None:
        os.replace(src, dst)

    def mkdir(self, path: Path) -> None:
        os.mkdir(path, DIR_MODE)
        os.chmod(path, DIR_MODE)  # not the umask's

    def rmdir(self, path: Path) -> None:
        os.rmdir(path)

    def makedirs(self, path: Path) -> None:
        make_dirs(path)

    def write_manifest(self, path: Path, manifest: Manifest) -> None:
        write_manifest(path, manifest)

    def unlink(self, path: Path) -> None:
        os.unlink(path)

    def remove_tree(self, path: Path) -> None:
        remove_tree(path)

    def fsync_dir(self, path: Path) -> None:
        fsync_dir(path)


def _is_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def _empty_dir(path: Path) -> bool:
    if not _is_dir(path):
        return False
    with os.scandir(path) as entries:
        return next(entries, None) is None


def _ino(path: Path) -> int | None:
    try:
        return os.lstat(path).st_ino
    except FileNotFoundError:
        return None


class _Paths:
    """The absolute paths one journal's operations touch, each checked right before use."""

    def __init__(self, state: StateDir, txid: str):
        self.state = state
        self.root = state.root
        self.real_root = os.path.realpath(state.root)
        self.tx_rel = state.tx_rel(txid)

    def dest(self, op: Op) -> Path:
        try:
            contained(self.root, op.path, "the path", self.real_root)
        except Damaged as exc:
            raise self.state.damaged(str(exc)) from None
        return self.root / op.path

    def source(self, op: Op) -> Path:
        assert op.source is not None
        return self.state.inside(op.source)

    def backup(self, op: Op) -> Path:
        return self.state.inside(f"{self.tx_rel}/backup/{op.path}")

    def kept(self, op: Op) -> Path:
        return self.state.inside(f"{self.state.originals_rel}/{op.path}")


class Transaction:
    def __init__(self, state: StateDir, txid: str, fs: Filesystem | None = None):
        self.state = state
        self.root = state.root
        self.txid = txid
        self.fs = fs or Filesystem()
        self.paths = _Paths(state, txid)
        self.backup_dir = state.tx_dir(txid) / "backup"
        self.unfinished: str | None = None  # why tidying up after the commit point failed

    def run(self, ops: list[Op], commit: Callable[[Filesystem], None],
            manifest_txid: str | None, on_commit: Callable[[], None] = lambda: None) -> None:
        """Apply `ops`, then `commit`; on any exception (even KeyboardInterrupt) undo it all,
        unless the commit point was reached: the disk says (`committed`), not how far this
        code got, so an interrupt in the commit's last fsync or just after it is no rollback.

        When that question cannot be answered (the state dir unreadable) once the commit was
        begun, or the rollback itself fails, nothing is undone or finished further and
        `LeftUnfinished` says so (exit 1, `changed`): the journal stays, and the next run
        that takes the lock settles it by what the disk then says. Before the commit was
        begun nothing can have committed it, so an unanswered question there is a rollback.

        `manifest_txid`: the commit writes the manifest of that txid; None: it removes it.
        `on_commit` is told as soon as the change stands, before anything else may be
        interrupted (the tidying after it included), so the caller never reports a committed
        change as rolled back."""
        self.state.check()
        for op in ops:  # a missing source fails here, before the journal names it
            if op.action == PUT:
                op.ino = os.lstat(self.paths.source(op)).st_ino
        journal = Journal(self.txid, ops, manifest_txid)
        self.fs.makedirs(self.backup_dir)
        self.state.write_journal(journal)
        committing = False
        try:
            for op in ops:
                self._apply(op)
            self._sync(ops)
            committing = True
            commit(self.fs)
            on_commit()
        except BaseException as failure:
            try:
                stands = committed(self.state, journal)
            except BaseException as unread:
                if committing:  # the commit may have been written: neither undo nor finish
                    raise self._unfinished(failure, "whether it was committed cannot be read "
                                           f"back ({_said(unread)})") from failure
                stands = False  # the commit point was never reached: nothing can stand
            if stands:  # it stands: tell, then let the error go on
                on_commit()
                raise
            try:
                _undo(self.state, journal, self.fs)
            except BaseException as undoing:
                raise self._unfinished(failure, "rolling it back failed too "
                                       f"({_said(undoing)})") from failure
            _drop(self.state, journal, self.fs)  # the root is as it was: leftovers at worst
            raise
        try:
            finish(self.state, journal, self.fs)
        except OSError as exc:  # committed: the change stands, the next run tidies up
            self.unfinished = str(exc)

    def _unfinished(self, failure: BaseException, then: str) -> LeftUnfinished:
        """The transaction failed, then could not be settled either way: its journal stays
        for the next run, which rolls it back or finishes it by what the disk then says."""
        return LeftUnfinished(
            f"{_said(failure)}; {then}, so the change was neither rolled back nor finished: "
            f"{self.root} may hold part of it, and the journal {self.state.journal_path} is "
            "kept",
            f"once {self.state.path} can be read and written again, run the command again: "
            "it first rolls back or finishes this transaction; "
            f"`{command_line('verify', self.root)}` says what stands meanwhile")

    def _apply(self, op: Op) -> None:
        dest = self.paths.dest(op)
        if op.action == MKDIR:
            self.fs.mkdir(dest)
            return
        if op.action == RMDIR:
            if _empty_dir(dest):
                self.fs.rmdir(dest)
            return
        if op.backup and os.path.lexists(dest):
            backup = self.paths.backup(op)
            self.fs.makedirs(backup.parent)
            self.fs.replace(dest, backup)
        if op.action == PUT:
            self.fs.makedirs(dest.parent)
            self.fs.replace(self.paths.source(op), dest)

    def _sync(self, ops: list[Op]) -> None:
        """Make the renames durable before the commit point claims them (a power cut after
        "installed" must not bring back the old directory entries)."""
        dirs = {self.paths.dest(op).parent for op in ops}
        dirs |= {self.paths.backup(op).parent for op in ops if op.backup}
        sync_dirs(dirs, self.fs.fsync_dir)


@contextmanager
def tidied_after(state: StateDir, tx: Path | None = None,
                 drop_if_empty: bool = False) -> Iterator[None]:
    """Tidies the state dir once the block ends, however it ends, except by a transaction left
    unfinished: its state dir (journal, staging, backups) is then left exactly as it is, for
    the next run to settle. `tx`, the transaction's dir, goes unless a journal still needs it
    (a rollback, or the tidying after the commit, failed: the next run finishes the job with
    it); `drop_if_empty` removes a state dir this run created and left with no manifest."""
    unfinished = False
    try:
        yield
    except LeftUnfinished:
        unfinished = True
        raise
    finally:
        if not unfinished:
            if tx is not None and os.path.lexists(tx) and not os.path.lexists(state.journal_path):
                remove_tree(tx)
            if state.exists():
                state.tidy()
                if drop_if_empty and not os.path.lexists(state.manifest_path):
                    state.remove_if_empty()


def _said(exc: BaseException) -> str:
    """What went wrong, in the words the tool would say it with on its own."""
    if isinstance(exc, SetupError):
        return exc.message
    if isinstance(exc, OSError):
        return os_error(exc).message
    if isinstance(exc, (KeyboardInterrupt, Interrupted)):
        return "interrupted"
    return escape(f"{type(exc).__name__}: {str(exc)[:200]}")


def rollback(state: StateDir, journal: Journal, fs: Filesystem | None = None) -> None:
    """Undo whatever part of the journal's operations reached the disk, newest first.

    Safe to repeat after a kill at any step: each undo acts only if its effect is still there.
    """
    fs = fs or Filesystem()
    _undo(state, journal, fs)
    _drop(state, journal, fs)


def _undo(state: StateDir, journal: Journal, fs: Filesystem) -> None:
    """The root put back as it was before the journal's operations; the journal kept."""
    paths = _Paths(state, journal.txid)
    for op in reversed(journal.ops):
        dest = paths.dest(op)
        if op.action == MKDIR:
            if _empty_dir(dest):
                fs.rmdir(dest)
            continue
        if op.action == RMDIR:
            if not os.path.lexists(dest):
                fs.mkdir(dest)
            continue
        if op.action == PUT and op.ino is not None and _ino(dest) == op.ino:
            source = paths.source(op)
            fs.makedirs(source.parent)
            fs.replace(dest, source)
        if op.backup:
            backup = paths.backup(op)
            if os.path.lexists(backup):
                fs.replace(backup, dest)


def finish(state: StateDir, journal: Journal, fs: Filesystem | None = None) -> None:
    """After the commit point: keep originals the tool displaced, and the changed files a
    repair replaced; drop everything else. Once no manifest is left (an uninstall) neither
    store has anything left to serve."""
    fs = fs or Filesystem()
    paths = _Paths(state, journal.txid)
    for op in journal.ops:
        if not (op.original or op.keep):
            continue
        backup = paths.backup(op)
        if os.path.lexists(backup):
            kept = paths.kept(op) if op.original else \
                state.inside(f"{changed.kept_rel(journal.txid)}/{op.path}")
            fs.makedirs(kept.parent)
            fs.replace(backup, kept)
    if state.manifest() is None:
        for store in (state.originals, state.inside(changed.CHANGED_REL)):
            if _is_dir(store):
                fs.remove_tree(store)
    _drop(state, journal, fs)


def _drop(state: StateDir, journal: Journal, fs: Filesystem) -> None:
    # The journal goes first: once it is gone, the transaction's dir is a leftover that any
    # later run removes; the other way round, a kill in between would replay the journal
    # against staging that no longer exists.
    if os.path.lexists(state.journal_path):
        fs.unlink(state.journal_path)
    tx = state.tx_dir(journal.txid)
    if os.path.lexists(tx):
        fs.remove_tree(tx)


def committed(state: StateDir, journal: Journal) -> bool:
    manifest = state.manifest()
    if journal.manifest_txid is not None:
        return manifest is not None and manifest.txid == journal.manifest_txid
    return manifest is None


def recover(state: StateDir, fs: Filesystem | None = None) -> str | None:
    """Finish a transaction a killed run left behind; say what was done, or None.

    The caller holds the lock.
    """
    fs = fs or Filesystem()
    if not state.check():
        return None
    state.trust_trees()  # what recovery and uninstall move into the root
    journal = state.journal()
    said = None
    if journal is not None and committed(state, journal):
        finish(state, journal, fs)
        said = f"finished transaction {journal.txid} that an interrupted run had committed"
    elif journal is not None:
        rollback(state, journal, fs)
        said = f"rolled back transaction {journal.txid} that an interrupted run left unfinished"
    if state.check() and _is_dir(state.tx_path):  # staging of runs killed before or after a journal
        left = state.leftovers()
        for leftover in sorted(os.listdir(state.tx_path)):
            fs.remove_tree(state.tx_path / leftover)
        if left is not None:
            swept = (f"removed what an interrupted run left: {left.describe(state.path)}")
            said = f"{said}; {swept}" if said else swept
    return said
