"""Copies of files someone changed after cudnn-setup installed them, kept when repair put the
installed bytes back: `<root>/.cudnn-setup/changed/<txid>/<path>`. The transaction moves them
there after its commit point, as it moves originals to their store; an uninstall's removes
them with the rest, so that the root goes back to what it was before the first install."""
from __future__ import annotations

import os
from pathlib import Path

from cudnn_setup.state.paths import STATE_DIR

CHANGED_REL = f"{STATE_DIR}/changed"


def kept_rel(txid: str) -> str:
    """Where one repair's copies go, relative to the root."""
    return f"{CHANGED_REL}/{txid}"


def uninstall_note(root: Path, done: bool) -> list[str]:
    """What an uninstall says of the copies it takes out (nothing when there are none)."""
    if not os.path.isdir(root / CHANGED_REL):
        return []
    return [f"{'removed' if done else 'removes'} {CHANGED_REL}/: the files changed since "
            "install that repair replaced and kept"]
