"""Placing a plan as one transaction, and its commit point.

The staged files are made durable before the journal names them; the transaction renames them
into the root and then commits by writing the manifest (commit_manifest) or, for an uninstall,
removing it (commit_removal). Before that step a killed run is rolled back, after it rolled
forward (state/transaction.py).
"""
from __future__ import annotations

import datetime
import os
from functools import partial
from pathlib import Path
from typing import Callable

from cudnn_setup import __version__
from cudnn_setup.archive.package import Package
from cudnn_setup.durable import make_dirs, make_durable
from cudnn_setup.facts.cuda import BuiltFor
from cudnn_setup.state.files import record_stats
from cudnn_setup.state.journal import PUT
from cudnn_setup.state.layout import StateDir
from cudnn_setup.state.manifest import Manifest, Source
from cudnn_setup.state.plan import Desired, Plan, files_of
from cudnn_setup.state.transaction import Filesystem, Transaction
from cudnn_setup.state.view import command_line


def manifest_for(txid: str, pkg: Package, desired: list[Desired], plan: Plan, include_rel: str,
                 lib_rel: str, source_name: str, built: BuiltFor, provenance: dict | None,
                 source_stat: tuple[int, int, int, int, int] | None = None) -> Manifest:
    """The manifest that, once written, says this install happened."""
    return Manifest(
        tool_version=__version__,
        txid=txid,
        installed_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        cudnn_version=pkg.cudnn_version,
        generation=pkg.generation,
        cuda_version=built.version,
        cuda_source=built.source if built.version else None,
        source=Source(source_name, pkg.sha256, pkg.size, source_stat, provenance),
        include_dir=include_rel,
        lib_dir=lib_rel,
        libraries=[lib.name for lib in pkg.libraries],
        files=files_of(desired, plan),
        originals=plan.originals,
        created_dirs=plan.created_dirs,
    )


def commit_manifest(root: Path, manifest_path: Path, manifest: Manifest, fs: Filesystem) -> None:
    """The install's commit point: the placed files' stats recorded, the manifest written
    (atomically): from here on the install stands."""
    record_stats(root, manifest.files)
    fs.write_manifest(manifest_path, manifest)


def commit_removal(manifest_path: Path, fs: Filesystem) -> None:
    """The uninstall's commit point: the manifest removed."""
    fs.unlink(manifest_path)


def make_links(desired: list[Desired]) -> None:
    """The link chains staged beside the files, so that they are renamed in like them."""
    for d in desired:
        if d.kind == "symlink":
            make_dirs(d.source.parent)
            os.symlink(d.target, d.source)


def place(state: StateDir, txid: str, desired: list[Desired], plan: Plan, manifest: Manifest,
          fs: Filesystem | None = None, on_commit: Callable[[], None] = lambda: None
          ) -> list[str]:
    """Apply `plan` to the root as the transaction `txid`, committed by writing `manifest`;
    the staged bytes are on disk before the journal names them. Notes when tidying up after
    the commit failed."""
    make_links(desired)
    make_durable([state.root / op.source for op in plan.ops if op.action == PUT],
                 state.tx_dir(txid))
    transaction = Transaction(state, txid, fs)
    transaction.run(plan.ops, partial(commit_manifest, state.root, state.manifest_path, manifest),
                    txid, on_commit)
    return unfinished(transaction)


def remove(state: StateDir, txid: str, plan: Plan, fs: Filesystem | None = None,
           on_commit: Callable[[], None] = lambda: None) -> list[str]:
    """Apply an uninstall's `plan` as the transaction `txid`, committed by removing the
    manifest."""
    transaction = Transaction(state, txid, fs)
    transaction.run(plan.ops, partial(commit_removal, state.manifest_path), None, on_commit)
    return unfinished(transaction)


def unfinished(transaction: Transaction) -> list[str]:
    if transaction.unfinished is None:
        return []
    root = transaction.root
    return [f"the change is committed, but tidying up after it failed "
            f"({transaction.unfinished}); `{command_line('repair', root)}` finishes it, as "
            "does the next install or uninstall there"]
