"""Whether this user may write where an install writes, asked before anything is fetched: a
root the user cannot write is said at once, not after a download of hundreds of MB."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from cudnn_setup.errors import InstallFailed
from cudnn_setup.state.layout import permission_hint
from cudnn_setup.state.paths import STATE_DIR
from cudnn_setup.text import escape


def _nearest(path: Path) -> Path:
    """`path`, or its nearest ancestor that exists (where a missing directory would be made)."""
    while not os.path.lexists(path) and path != path.parent:
        path = path.parent
    return path


def cannot_write(root: Path, rels: Iterable[str]) -> InstallFailed | None:
    """The error for the first place an install into `root` writes that this user may not
    (the state dir, else the root; each of `rels`, the dirs files go into), or None.

    access(2) answers for the real user and its capabilities, so root and a user who owns
    the root pass, a read-only filesystem does not; the transaction still handles every
    OSError, this only says it early."""
    places = [root / STATE_DIR if os.path.isdir(root / STATE_DIR) else root]
    places += [root / rel for rel in rels]
    for place in places:
        where = _nearest(place)
        if os.access(where, os.W_OK | os.X_OK):
            continue
        try:
            read_only = bool(os.statvfs(where).f_flag & os.ST_RDONLY)
        except OSError:
            read_only = False
        if read_only:
            return InstallFailed(f"read-only filesystem: {escape(str(where))}; nothing was "
                                 "downloaded or changed", "remount it read-write, or pick a "
                                 "CUDA root on a writable filesystem with --cuda-root",
                                 code="read-only-filesystem")
        return InstallFailed(f"permission denied: {escape(str(where))} is not writable by "
                             "this user; nothing was downloaded or changed",
                             permission_hint(root), code="permission-denied")
    return None
