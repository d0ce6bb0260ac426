"""The journal: every operation of a transaction, written before the first of them runs.

A run killed mid-transaction leaves it behind; the next command reads it (through
`Journal.load`, which accepts only what the tool writes) and rolls the transaction back or
forward. Each put records the inode of what it moves into place, so an undo can tell "the new
file is here" from "the old file is back" however many times recovery itself was interrupted.
"""
from __future__ import annotations

import os
from pathlib import Path

from msgspec import Struct, field

from cudnn_setup.state.fields import HEX_ID, Fields
from cudnn_setup.state.paths import STATE_DIR, Damaged, contained, is_within, relative

FORMAT = 1
PUT, REMOVE, MKDIR, RMDIR = "put", "remove", "mkdir", "rmdir"
TX, ORIGINALS = "tx", "originals"


class Op(Struct):
    action: str  # put | remove | mkdir | rmdir
    path: str  # relative to the root
    source: str | None = None  # for put: relative to the root (staging or originals store)
    backup: bool = False  # move what is at `path` aside first
    original: bool = False  # the backup is a file the tool did not install: keep it for uninstall
    kind: str = "file"  # what a put places: file | symlink
    ino: int | None = None  # for put: the inode of the source, which the rename keeps
    # the backup holds bytes someone changed after the install: repair keeps it (state/changed)
    keep: bool = False

    def to_dict(self) -> dict:
        return {"action": self.action, "path": self.path, "source": self.source,
                "backup": self.backup, "original": self.original, "kind": self.kind,
                "ino": self.ino, **({"keep": True} if self.keep else {})}


class Journal(Struct):
    txid: str
    ops: list[Op] = field(default_factory=list)
    # The commit point: the manifest of this txid is in place, or (None) no manifest is.
    manifest_txid: str | None = None
    format: int = FORMAT

    def to_dict(self) -> dict:
        commit = ({"manifest_txid": self.manifest_txid} if self.manifest_txid
                  else {"manifest_absent": True})
        return {"format": self.format, "txid": self.txid,
                "ops": [op.to_dict() for op in self.ops], "commit": commit}

    @staticmethod
    def load(data: object, root: Path) -> "Journal":
        f = Fields.record(data, "journal", FORMAT)
        txid = f.text("txid", pattern=HEX_ID)
        real_root = os.path.realpath(root)
        sources = (f"{STATE_DIR}/{TX}/{txid}", f"{STATE_DIR}/{ORIGINALS}")
        ops = []
        for where, item in f.items("ops"):
            o = Fields(item, where)
            path = relative(o.data.get("path"), f"{where}.path")
            contained(root, path, f"{where}.path", real_root)
            action = o.choice("action", (PUT, REMOVE, MKDIR, RMDIR))
            source = o.data.get("source")
            if action == PUT:
                source = relative(source, f"{where}.source")
                if not any(is_within(source, s) and source != s for s in sources):
                    raise Damaged(f"{where}.source {source!r} is neither staging nor the "
                                  "originals store")
            elif source is not None:
                raise Damaged(f"{where}.source is set for a {action}")
            ino = o.integer("ino", optional=action != PUT)
            ops.append(Op(action, path, source, o.flag("backup"), o.flag("original"),
                          o.choice("kind", ("file", "symlink")), ino, o.flag("keep")))
        commit = f.sub("commit")
        manifest_txid = commit.text("manifest_txid", optional=True, pattern=HEX_ID)
        if manifest_txid is None and commit.flag("manifest_absent") is not True:
            raise Damaged("commit says neither which manifest nor its absence commits it")
        return Journal(txid, ops, manifest_txid, FORMAT)
