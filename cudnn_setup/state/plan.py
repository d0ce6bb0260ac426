"""The plan of an install: what to place, link, replace and back up; decided before any change.

`make_plan` is the decision table: for each file cuDNN needs, compare what the archive brings
with what is in the root now and with what the manifest recorded, and choose (leave, create,
replace, back up as an original, or refuse as changed since it was installed).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from cudnn_setup.errors import InstallFailed
from cudnn_setup.state.files import describe_known, same_content
from cudnn_setup.state.transaction import MKDIR, PUT, REMOVE, RMDIR, Op
from cudnn_setup.text import escape


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


def make_plan(root: Path, old: dict, desired: list[Desired], force: bool) -> Plan:
    """What to do so that `desired` is in `root`, given the manifest of the previous install."""
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


def conflict_error(conflicts: list[str], root: Path, verb: str) -> InstallFailed:
    shown = ", ".join(escape(c) for c in conflicts[:5]) + (" …" if len(conflicts) > 5 else "")
    return InstallFailed(f"{len(conflicts)} file(s) in {root} changed since cudnn-setup installed "
                         f"them: {shown}; nothing was {verb}",
                         f"look at them; --force {verb.rstrip('d')}s them anyway",
                         code="changed-files")


def uninstall_plan(root: Path, manifest: dict | None, originals_rel: str, force: bool) -> Plan:
    """Take out every file the manifest lists and put back the originals it displaced.

    `originals_rel` is the originals store relative to the root.
    """
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
        plan.ops.append(Op(PUT, path, f"{originals_rel}/{path}"))
    for d in reversed(manifest.get("created_dirs", [])):
        plan.ops.append(Op(RMDIR, d))
    return plan
