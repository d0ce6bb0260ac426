"""The state of a root as the commands that only look see it: read once, never written, no lock.

`verify`, `doctor`, `list`, `inspect`, `bench` and `theanorc` never change a root or its state:
any user who can read the files runs them. They take the manifest once (validated like every
read) and learn whether an interrupted transaction waits; they report it with the command that
completes it (`install`, `uninstall` and `repair` do, under the lock) instead of performing it.
State they cannot use (damaged, unsafe, unreadable) is a finding for them, not the end.
"""
from __future__ import annotations

import shlex
from pathlib import Path

from msgspec import Struct

from cudnn_setup.errors import SetupError
from cudnn_setup.state.layout import StateDir
from cudnn_setup.state.manifest import Manifest


def command_line(command: str, root: Path | str) -> str:
    """`cudnn-setup COMMAND --cuda-root ROOT` as a hint gives it: the user's root kept, quoted
    for a shell."""
    return f"cudnn-setup {command} --cuda-root {shlex.quote(str(root))}"


class Pending(Struct, frozen=True):
    """A journal in the state dir: a transaction not finished."""

    txid: str
    committed: bool  # its commit point was reached: only tidying up is left
    uninstalling: bool  # its commit removes the manifest
    holder: str | None  # the run working on it now (the lock is held), or None: interrupted

    def finish_with(self, root: Path) -> str:
        """The command that completes it."""
        return command_line("uninstall" if self.uninstalling else "repair", root)

    def describe(self, root: Path) -> str:
        if self.holder is not None:
            return (f"a cudnn-setup run is changing {root} now ({self.holder}): what is checked "
                    "may change under it")
        done = ("was committed but not tidied up" if self.committed
                else "was left half done: the root holds part of it")
        other = "" if self.uninstalling else " (an `install` or `uninstall` completes it too)"
        return (f"transaction {self.txid} of an interrupted cudnn-setup run {done}; run "
                f"`{self.finish_with(root)}` to complete it{other}")

    def to_dict(self, root: Path) -> dict:
        return {"transaction": self.txid, "committed": self.committed,
                "running": self.holder is not None,
                "finish_with": None if self.holder is not None else self.finish_with(root)}


class StateView(Struct, frozen=True):
    manifest: Manifest | None = None
    pending: Pending | None = None
    problem: SetupError | None = None  # damaged, unsafe or unreadable: no manifest is used


def look(root: Path) -> StateView:
    """The manifest and any pending transaction of `root`, read without writing or locking."""
    state = StateDir(root)
    try:
        if not state.check():
            return StateView()
        manifest = state.manifest()
        journal = state.journal()
        holder = state.lock_held() if journal is not None else None
    except SetupError as exc:
        return StateView(problem=exc)
    if journal is None:
        return StateView(manifest)
    if journal.manifest_txid is not None:
        committed = manifest is not None and manifest.txid == journal.manifest_txid
    else:
        committed = manifest is None
    return StateView(manifest, Pending(journal.txid, committed, journal.manifest_txid is None,
                                       holder))
