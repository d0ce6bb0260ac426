"""Placing a cuDNN archive into a CUDA root as one transaction, and taking it out again.

The engine under `install` and `uninstall`: stage and judge the archive inside the root's state
dir, plan against what is there, apply the plan as a journaled transaction whose commit point is
the manifest. The commands decide what to do around it (fetching, the loader, Theano, verify).
"""
from __future__ import annotations

import datetime
import os
import tempfile
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from cudnn_setup import __version__
from cudnn_setup.archive import read_package
from cudnn_setup.archive.package import Package
from cudnn_setup.errors import ArchiveRejected, InstallFailed, os_error
from cudnn_setup.facts.cuda import CudaRoot
from cudnn_setup.fetch.checksums import Expected, mismatch
from cudnn_setup.state.files import with_stats
from cudnn_setup.state.layout import StateDir, permission_hint, remove_tree
from cudnn_setup.state.plan import Desired, Plan, conflict_error, make_plan, uninstall_plan
from cudnn_setup.state.transaction import Filesystem, Transaction, recover
from cudnn_setup.text import escape

MANIFEST_FORMAT = 1


def relative_lib_dir(root: CudaRoot) -> str:
    lib = root.lib_dir()
    real_root = root.path.resolve()
    real_lib = lib.resolve() if lib.exists() else real_root / lib.relative_to(root.path)
    try:
        return str(real_lib.relative_to(real_root))
    except ValueError:
        raise InstallFailed(f"the library dir {lib} lies outside the CUDA root {root.path}",
                            "pass --cuda-root the directory that holds the libraries") from None


def desired_entries(pkg: Package, lib_rel: str, links_dir: Path) -> list[Desired]:
    """Headers, libraries and the ldconfig-style link chains, as they should end up."""
    out = [Desired(f"include/{m.name}", "file", m.sha256, mode=(m.mode & 0o755) | 0o444,
                   source=m.staged) for m in pkg.headers]
    for lib in pkg.libraries:
        m = lib.member
        out.append(Desired(f"{lib_rel}/{m.name}", "file", m.sha256, mode=(m.mode & 0o755) | 0o444,
                           source=m.staged))
    for m in pkg.static_libraries:
        out.append(Desired(f"{lib_rel}/{m.name}", "file", m.sha256, mode=(m.mode & 0o755) | 0o444,
                           source=m.staged))
    for link, target in pkg.chains():
        out.append(Desired(f"{lib_rel}/{link}", "symlink", target=target,
                           source=links_dir / link))
    return out


@dataclass
class Outcome:
    """What install or uninstall did (or, with dry_run, would do)."""

    changed: bool
    plan: Plan
    package: Package | None = None
    manifest: dict | None = None
    recovered: str | None = None
    lib_dir: Path | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"plan": self.plan.actions(), "unchanged": len(self.plan.unchanged),
                "backed_up": self.plan.manual, "recovered": self.recovered,
                "lib_dir": str(self.lib_dir) if self.lib_dir else None, "notes": self.notes}


def _stage(archive: Path, staging: Path, expected: Expected | None,
           on_read: Callable[[int], None] | None, xz: str | None) -> Package:
    pkg = read_package(archive, staging, on_read=on_read, xz=xz)
    if expected and pkg.sha256 and pkg.sha256 != expected.digest:
        raise mismatch(escape(archive.name), expected, pkg.sha256)
    if not pkg.installable:
        errors = [p for p in pkg.problems if p.severity == "error"]
        first = errors[0]
        more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
        raise ArchiveRejected(f"{escape(archive.name)}: {first.message}{more}", first.hint,
                              problems=errors)
    return pkg


def _make_links(desired: list[Desired]) -> None:
    for d in desired:
        if d.kind == "symlink":
            d.source.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(d.target, d.source)


def _manifest(txid: str, pkg: Package, desired: list[Desired], plan: Plan, lib_rel: str,
              source_name: str) -> dict:
    return {
        "format": MANIFEST_FORMAT,
        "tool_version": __version__,
        "txid": txid,
        "installed_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cudnn_version": pkg.cudnn_version,
        "generation": pkg.generation,
        "cuda_version": pkg.cuda_version,
        "source": {"name": source_name, "sha256": pkg.sha256, "size": pkg.size},
        "lib_dir": lib_rel,
        "libraries": [lib.name for lib in pkg.libraries],
        "files": [dict(d.record(), replaced=plan.originals.get(d.path)) for d in desired],
        "originals": plan.originals,
        "created_dirs": plan.created_dirs,
    }


def install(archive: Path, root: CudaRoot, *, force: bool = False, dry_run: bool = False,
            expected: Expected | None = None, fs: Filesystem | None = None,
            lock_timeout: float = 300.0, tmp_dir: Path | None = None,
            on_read: Callable[[int], None] | None = None, xz: str | None = None) -> Outcome:
    state = StateDir(root.path)
    lib_rel = relative_lib_dir(root)
    if dry_run:
        with tempfile.TemporaryDirectory(prefix="cudnn-setup-plan-", dir=tmp_dir) as tmp:
            staging = Path(tmp)
            pkg = _stage(archive, staging / "staging", expected, on_read, xz)
            desired = desired_entries(pkg, lib_rel, staging / "links")
            plan = make_plan(root.path, state.manifest() or {}, desired, force)
            notes = ["an interrupted transaction will be rolled back first"] if \
                state.journal_path.exists() else []
            return Outcome(plan.changed, plan, pkg, lib_dir=root.path / lib_rel, notes=notes)
    created_state = not state.path.exists()
    with _rolled_back_errors(root.path, "install", "free disk space or fix the error above"), \
            state.locked(lock_timeout):
        recovered = recover(state)
        txid = uuid.uuid4().hex[:12]
        tx = state.tx_dir(txid)
        try:
            pkg = _stage(archive, tx / "staging", expected, on_read, xz)
            desired = desired_entries(pkg, lib_rel, tx / "links")
            plan = make_plan(root.path, state.manifest() or {}, desired, force)
            if plan.conflicts:
                raise conflict_error(plan.conflicts, root.path, "replaced")
            manifest = _manifest(txid, pkg, desired, plan, lib_rel, archive.name)
            if plan.changed or state.manifest() is None:
                _make_links(desired)
                Transaction(state, txid, fs).run(
                    plan.ops,
                    lambda f: f.write_manifest(state.manifest_path, with_stats(root.path, manifest)),
                    {"manifest_txid": txid})
            else:
                manifest = state.manifest()
        finally:
            if tx.exists():
                remove_tree(tx)
            state.tidy()
            if created_state and not state.manifest_path.exists():
                state.remove_if_empty()
    return Outcome(plan.changed, plan, pkg, manifest, recovered, lib_dir=root.path / lib_rel)


@contextmanager
def _rolled_back_errors(root: Path, what: str, hint: str) -> Iterator[None]:
    """OSErrors of a transaction as the tool's exit-5 error, said by errno (errors.os_error)."""
    try:
        yield
    except OSError as exc:
        raise os_error(exc, f"{what} failed") from None


def recover_pending(root: CudaRoot, lock_timeout: float = 300.0) -> str | None:
    """Finish a transaction a killed run left behind, before anything else looks at the root."""
    state = StateDir(root.path)
    if not state.journal_path.exists() and not (state.path / "tx").exists():
        return None
    try:
        with state.locked(lock_timeout):
            said = recover(state)
            state.tidy()
            return said
    except PermissionError as exc:
        raise InstallFailed(f"an interrupted transaction in {root.path} needs rolling back, but: "
                            f"permission denied ({exc.filename})", permission_hint(root.path),
                            code="permission-denied") from None


def uninstall(root: CudaRoot, *, force: bool = False, dry_run: bool = False,
              fs: Filesystem | None = None, lock_timeout: float = 300.0) -> Outcome:
    state = StateDir(root.path)
    if dry_run:
        plan = uninstall_plan(root.path, state.manifest(), state.originals_rel, force)
        return Outcome(plan.changed, plan, manifest=state.manifest())
    if not state.path.exists():
        return Outcome(False, Plan(), notes=["cudnn-setup has installed nothing here"])
    with _rolled_back_errors(root.path, "uninstall", "fix the error above"), \
            state.locked(lock_timeout):
        recovered = recover(state)
        manifest = state.manifest()
        plan = uninstall_plan(root.path, state.manifest(), state.originals_rel, force)
        if plan.conflicts:
            raise conflict_error(plan.conflicts, root.path, "removed")
        try:
            if manifest is not None:
                Transaction(state, uuid.uuid4().hex[:12], fs).run(
                    plan.ops, lambda f: f.unlink(state.manifest_path),
                    {"manifest_absent": True})
        finally:
            state.tidy()
        state.remove_if_empty()
    return Outcome(plan.changed, plan, manifest=manifest, recovered=recovered)


