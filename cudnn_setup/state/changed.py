"""Copies of files someone changed after cudnn-setup installed them, kept when repair put the
installed bytes back: `<root>/.cudnn-setup/changed/<txid>/<path>`. The transaction moves them
there after its commit point, as it moves originals to their store; an uninstall's removes
them with the rest, so that the root goes back to what it was before the first install."""
from __future__ import annotations

from cudnn_setup.state.paths import STATE_DIR

CHANGED_REL = f"{STATE_DIR}/changed"


def kept_rel(txid: str) -> str:
    """Where one repair's copies go, relative to the root."""
    return f"{CHANGED_REL}/{txid}"
