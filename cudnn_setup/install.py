"""`install` and `uninstall`: plan what to place, link and replace; apply it as one transaction."""
from __future__ import annotations

import datetime
import os
import stat
import tempfile
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from cudnn_setup import __version__
from cudnn_setup.cuda import CudaRoot
from cudnn_setup.checksums import Expected, file_digest, mismatch
from cudnn_setup.errors import ArchiveRejected, InstallFailed
from cudnn_setup.inspection import read_package
from cudnn_setup.package import Package
from cudnn_setup.problems import escape
from cudnn_setup.state import StateDir, permission_hint, remove_tree
from cudnn_setup.transaction import MKDIR, PUT, REMOVE, RMDIR, Filesystem, Op, Transaction, recover

MANIFEST_FORMAT = 1


@dataclass
class Desired:
    path: str  # relative to the root
    kind: str  # file | symlink
    sha256: str | None = None
    target: str | None = None
    mode: int = 0o644
    source: Path | None = None  # staged bytes (absolute)

    def record(self) -> dict:
        out = {"path": self.path, "type": self.kind}
        if self.kind == "file":
            out.update(sha256=self.sha256, mode=self.mode)
        else:
            out["target"] = self.target
        return out


@dataclass
class Plan:
    ops: list[Op] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)  # changed since the tool installed them
    manual: list[str] = field(default_factory=list)  # not the tool's: backed up, kept for uninstall
    originals: dict[str, dict] = field(default_factory=dict)
    created_dirs: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.ops)

    def actions(self) -> list[dict]:
        """The plan for people: create / replace / link / remove / back up, in order."""
        out = []
        for op in self.ops:
            if op.action == PUT:
                verb = "replace" if op.backup else ("link" if op.kind == "symlink" else "create")
                if op.backup and op.original:
                    out.append({"action": "back up", "path": op.path})
                out.append({"action": verb, "path": op.path})
            elif op.action == REMOVE:
                out.append({"action": "remove", "path": op.path})
            elif op.action == MKDIR:
                out.append({"action": "create directory", "path": op.path})
            elif op.action == RMDIR:
                out.append({"action": "remove directory", "path": op.path})
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


def describe(path: Path) -> dict | None:
    """What is at `path` now, in the manifest's terms."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return {"type": "symlink", "target": os.readlink(path)}
    if stat.S_ISREG(st.st_mode):
        return {"type": "file", "sha256": file_digest(path), "mode": stat.S_IMODE(st.st_mode)}
    if stat.S_ISDIR(st.st_mode):
        return {"type": "dir"}
    return {"type": "other"}


def stat_key(path: Path) -> list[int]:
    st = os.lstat(path)
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def describe_known(path: Path, record: dict | None) -> dict | None:
    """describe(), trusting the recorded hash while inode, size, mtime and ctime are unchanged.

    Any write or chmod moves ctime, which no user can set back, so an unchanged stat means
    unchanged bytes (git's index relies on the same); everything else is hashed.
    """
    if record and record.get("type") == "file" and record.get("stat"):
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        if stat.S_ISREG(st.st_mode) and \
                [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns] == record["stat"]:
            return {"type": "file", "sha256": record["sha256"], "mode": stat.S_IMODE(st.st_mode)}
    return describe(path)


def with_stats(root: Path, manifest: dict) -> dict:
    """The manifest with each installed file's stat, taken once the files are in place."""
    for entry in manifest["files"]:
        if entry["type"] == "file":
            entry["stat"] = stat_key(root / entry["path"])
    return manifest


def same_content(current: dict | None, record: dict) -> bool:
    if current is None or current["type"] != record["type"]:
        return False
    if record["type"] == "symlink":
        return current["target"] == record["target"]
    return current.get("sha256") == record.get("sha256")


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


def make_plan(root: Path, state: StateDir, desired: list[Desired], force: bool) -> Plan:
    old = state.manifest() or {}
    old_files = {e["path"]: e for e in old.get("files", [])}
    plan = Plan(originals=dict(old.get("originals", {})),
                created_dirs=list(old.get("created_dirs", [])))
    wanted_paths = {d.path for d in desired}
    for d in sorted({str(Path(d.path).parent) for d in desired}):
        if not (root / d).exists():
            plan.ops.append(Op(MKDIR, d))
            plan.created_dirs.append(d)
    for d in desired:
        current = describe_known(root / d.path, old_files.get(d.path))
        record = d.record()
        if current is not None and current["type"] == "dir":
            raise InstallFailed(f"{root / d.path} is a directory where cuDNN puts a "
                                f"{d.kind}", "move it away, then run again")
        if same_content(current, record) and current.get("mode", d.mode) == d.mode and not force:
            plan.unchanged.append(d.path)
            continue
        source = os.path.relpath(d.source, root) if d.source else None
        if current is None:
            plan.ops.append(Op(PUT, d.path, source, kind=d.kind))
            continue
        ours = d.path in old_files and same_content(current, old_files[d.path])
        if d.path in old_files and not ours and not force:
            plan.conflicts.append(d.path)
            continue
        original = False
        if d.path not in old_files:
            if d.path in plan.originals and not force:
                plan.conflicts.append(d.path)
                continue
            if d.path not in plan.originals:
                original = True
                plan.originals[d.path] = current
                plan.manual.append(d.path)
        plan.ops.append(Op(PUT, d.path, source, backup=True, original=original, kind=d.kind))
    for path, entry in old_files.items():
        if path in wanted_paths:
            continue
        current = describe_known(root / path, entry)
        if current is None:
            continue
        if same_content(current, entry) or force:
            plan.ops.append(Op(REMOVE, path, backup=True))
        else:
            plan.conflicts.append(path)
    return plan


def _conflict_error(conflicts: list[str], root: Path, verb: str) -> InstallFailed:
    shown = ", ".join(escape(c) for c in conflicts[:5]) + (" …" if len(conflicts) > 5 else "")
    return InstallFailed(f"{len(conflicts)} file(s) in {root} changed since cudnn-setup installed "
                         f"them: {shown}; nothing was {verb}",
                         f"look at them; --force {verb.rstrip('d')}s them anyway")


def _stage(archive: Path, staging: Path, expected: Expected | None,
           on_read: Callable[[int], None] | None) -> Package:
    pkg = read_package(archive, staging, on_read=on_read)
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
            on_read: Callable[[int], None] | None = None) -> Outcome:
    state = StateDir(root.path)
    lib_rel = relative_lib_dir(root)
    if dry_run:
        with tempfile.TemporaryDirectory(prefix="cudnn-setup-plan-", dir=tmp_dir) as tmp:
            staging = Path(tmp)
            pkg = _stage(archive, staging / "staging", expected, on_read)
            desired = desired_entries(pkg, lib_rel, staging / "links")
            plan = make_plan(root.path, state, desired, force)
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
            pkg = _stage(archive, tx / "staging", expected, on_read)
            desired = desired_entries(pkg, lib_rel, tx / "links")
            plan = make_plan(root.path, state, desired, force)
            if plan.conflicts:
                raise _conflict_error(plan.conflicts, root.path, "replaced")
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
    """OSErrors of a transaction (already rolled back by then) as the tool's exit-5 error."""
    try:
        yield
    except PermissionError as exc:
        raise InstallFailed(f"permission denied: {exc.filename or exc}",
                            permission_hint(root)) from None
    except OSError as exc:
        raise InstallFailed(f"{what} failed and was rolled back: {exc}",
                            f"{hint}, then run again") from None


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
                            f"permission denied ({exc.filename})", permission_hint(root.path)) from None


def uninstall(root: CudaRoot, *, force: bool = False, dry_run: bool = False,
              fs: Filesystem | None = None, lock_timeout: float = 300.0) -> Outcome:
    state = StateDir(root.path)
    if dry_run:
        plan = _uninstall_plan(root.path, state, force)
        return Outcome(plan.changed, plan, manifest=state.manifest())
    if not state.path.exists():
        return Outcome(False, Plan(), notes=["cudnn-setup has installed nothing here"])
    with _rolled_back_errors(root.path, "uninstall", "fix the error above"), \
            state.locked(lock_timeout):
        recovered = recover(state)
        manifest = state.manifest()
        plan = _uninstall_plan(root.path, state, force)
        if plan.conflicts:
            raise _conflict_error(plan.conflicts, root.path, "removed")
        try:
            if manifest is not None:
                Transaction(state, uuid.uuid4().hex[:12], fs).run(
                    plan.ops, lambda f: f.unlink(state.manifest_path),
                    {"manifest_absent": True})
        finally:
            state.tidy()
        state.remove_if_empty()
    return Outcome(plan.changed, plan, manifest=manifest, recovered=recovered)


def _uninstall_plan(root: Path, state: StateDir, force: bool) -> Plan:
    manifest = state.manifest()
    plan = Plan()
    if manifest is None:
        return plan
    for entry in manifest["files"]:
        current = describe_known(root / entry["path"], entry)
        if current is None:
            continue
        if same_content(current, entry) or force:
            plan.ops.append(Op(REMOVE, entry["path"], backup=True))
        else:
            plan.conflicts.append(entry["path"])
    installed = {entry["path"] for entry in manifest["files"]}
    for path in sorted(manifest.get("originals", {})):
        if path not in installed and os.path.lexists(root / path) and not force:
            plan.conflicts.append(path)  # something new stands where the original goes back
            continue
        plan.ops.append(Op(PUT, path, str((state.originals / path).relative_to(root))))
    for d in reversed(manifest.get("created_dirs", [])):
        plan.ops.append(Op(RMDIR, d))
    return plan
