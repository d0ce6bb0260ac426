"""The plan of an install: what to place, link, replace and back up; decided before any change.

`decide` is the decision table: for each file cuDNN needs, compare what the archive brings
with what stands in the root now (state/observe.py looked, before: deciding does no I/O) and
with what the manifest recorded, and choose:

| in the manifest? | in the root now                 | decision                                 |
|------------------|---------------------------------|------------------------------------------|
| no               | nothing                         | create                                   |
| no               | exactly the archive's file      | adopt: leave it, record it as an original |
|                  |                                 | found in place (uninstall leaves it)      |
| no               | something else                  | back it up as an original, then replace  |
| no, but an original waits to go back there | anything | refuse (unless --force)               |
| yes              | exactly the archive's file      | leave it                                 |
| yes              | what the tool installed         | replace (an original found in place moves |
|                  |                                 | to the originals store first)            |
| yes              | changed since it was installed  | refuse (unless --force)                  |

and for each file of the previous install the archive no longer has: remove it when unchanged
(an original found in place moves to the store), refuse when changed. A directory where a
file goes stops the plan (`directory-in-the-way`); a directory cuDNN's files go into that is
not there is created first. `decide_uninstall` is the same for uninstall. `make_plan` and
`uninstall_plan` look, then decide.
"""
from __future__ import annotations

import os
from pathlib import Path

from msgspec import Struct, field

from cudnn_setup.errors import InstallFailed
from cudnn_setup.state.journal import MKDIR, ORIGINALS, PUT, REMOVE, RMDIR, Op
from cudnn_setup.state.manifest import DIR, FILE, Content, FileRecord, Manifest, Original
from cudnn_setup.state.observe import Observed, observe_install, observe_uninstall, parents
from cudnn_setup.state.paths import STATE_DIR, damaged_error
from cudnn_setup.text import escape, plural


class Desired(Struct):
    path: str  # relative to the root
    kind: str  # file | symlink
    sha256: str | None = None
    target: str | None = None
    mode: int = 0o644
    source: Path | None = None  # staged bytes (absolute)
    blake3: str | None = None  # the bytes' content hash, where they were hashed so

    def content(self) -> Content:
        if self.kind == FILE:
            return Content(FILE, self.sha256, self.mode, blake3=self.blake3)
        return Content(self.kind, target=self.target)

    def matches(self, current: Content | None) -> bool:
        """Whether `current` is exactly this: same bytes and mode, or same link target."""
        return self.content().same(current) and (self.kind != FILE or current.mode == self.mode)


class Plan(Struct):
    ops: list[Op] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)  # changed since the tool installed them
    manual: list[str] = field(default_factory=list)  # not the tool's: backed up, kept for uninstall
    adopted: list[str] = field(default_factory=list)  # not the tool's, identical: left in place
    kept: list[str] = field(default_factory=list)  # uninstall: found in place, left in place
    originals: dict[str, Original] = field(default_factory=dict)
    created_dirs: list[str] = field(default_factory=list)
    record_changed: bool = False  # the manifest must be rewritten even without ops

    @property
    def changed(self) -> bool:
        return bool(self.ops) or bool(self.adopted) or self.record_changed

    def actions(self) -> list[dict]:
        """The plan for people: create / replace / link / remove / back up / adopt, in order."""
        out = []
        for op in self.ops:
            if op.action == PUT and op.source and op.source.startswith(_ORIGINALS):
                # uninstall putting back a file the tool found there and kept
                out.append({"action": "restore", "path": op.path, "from": op.source})
            elif op.action == PUT:
                verb = "replace" if op.backup else ("link" if op.kind == "symlink" else "create")
                if op.backup and op.original:
                    out.append({"action": "back up", "path": op.path})
                out.append({"action": verb, "path": op.path})
            elif op.action == REMOVE:
                if op.original:
                    out.append({"action": "back up", "path": op.path})
                out.append({"action": "remove", "path": op.path})
            elif op.action == MKDIR:
                out.append({"action": "create directory", "path": op.path})
            elif op.action == RMDIR:
                out.append({"action": "remove directory", "path": op.path})
        out += [{"action": "adopt", "path": p} for p in self.adopted]
        out += [{"action": "keep", "path": p} for p in self.kept]
        return out


_ORIGINALS = f"{STATE_DIR}/{ORIGINALS}/"


def describe_action(action: dict) -> str:
    """One plan line for people: "restore    include/cudnn.h (backed up in …)"."""
    line = f"  {action['action']:<16} {action['path']}"
    if action.get("from"):
        line += (f" (backed up in {action['from']} when cudnn-setup first installed over it; "
                 "put back as it was)")
    return line


def make_plan(root: Path, old: Manifest | None, desired: list[Desired], force: bool,
              deep: bool = False) -> Plan:
    """What to do so that `desired` is in `root`, given the manifest of the previous install:
    the root looked at (may raise OSError), then the decision. `deep`: every file hashed, even
    one whose stat is as recorded (state.files.describe_known)."""
    return decide(root, old, desired, force,
                  observe_install(root, old, [d.path for d in desired], deep=deep,
                                  hashes={d.path: d.content().hashes for d in desired}))


def decide(root: Path, old: Manifest | None, desired: list[Desired], force: bool,
           seen: Observed) -> Plan:
    """The decision table above, from what `seen` says stands in the root; no I/O. `root` only
    names paths in messages and makes the staged sources relative (both are absolute)."""
    old_files = {f.path: f for f in old.files} if old else {}
    originals = dict(old.originals) if old else {}
    plan = Plan(originals=originals, created_dirs=list(old.created_dirs) if old else [])
    wanted = {d.path for d in desired}
    for d in parents(wanted):
        if not seen.stands(d):
            plan.ops.append(Op(MKDIR, d))
            plan.created_dirs.append(d)
    for d in desired:
        prev = old_files.get(d.path)
        current = seen.content(d.path)
        if current is not None and current.type == DIR:
            raise InstallFailed(f"{root / d.path} is a directory where cuDNN puts a {d.kind}",
                                "move it away, then run again", code="directory-in-the-way")
        waiting = originals.get(d.path)
        if prev is None and current is not None and waiting and not force:
            plan.conflicts.append(d.path)  # an original waits to go back where this stands
            continue
        if d.matches(current) and not force:
            if prev is None:  # exactly the archive's file, put there by hand: leave it
                originals[d.path] = Original(current, in_place=True)
                plan.adopted.append(d.path)
            else:
                plan.unchanged.append(d.path)
            continue
        source = os.path.relpath(d.source, root) if d.source else None
        if current is None:
            plan.ops.append(Op(PUT, d.path, source, kind=d.kind))
            continue
        if prev is not None:
            if not current.same(prev.content) and not force:
                plan.conflicts.append(d.path)
                continue
            found = waiting is not None and waiting.in_place
            if found:  # the file found in place leaves: it goes to the originals store
                originals[d.path] = Original(current)
            plan.ops.append(Op(PUT, d.path, source, backup=True, original=found, kind=d.kind))
            continue
        original = waiting is None
        if original:
            originals[d.path] = Original(current)
            plan.manual.append(d.path)
        plan.ops.append(Op(PUT, d.path, source, backup=True, original=original, kind=d.kind))
    for path, prev in old_files.items():
        if path in wanted:
            continue
        current = seen.content(path)
        found = path in originals and originals[path].in_place
        if current is None:
            if found:  # the file found in place is gone: nothing to put back
                del originals[path]
                plan.record_changed = True
            continue
        if current.same(prev.content) or force:
            if found:
                originals[path] = Original(current)
            plan.ops.append(Op(REMOVE, path, backup=True, original=found))
        else:
            plan.conflicts.append(path)
    return plan


def conflict_error(conflicts: list[str], root: Path, verb: str) -> InstallFailed:
    shown = ", ".join(escape(c) for c in conflicts[:5]) + (" …" if len(conflicts) > 5 else "")
    return InstallFailed(f"{plural(len(conflicts), 'file')} in {root} changed since cudnn-setup installed "
                         f"them: {shown}; nothing was {verb}",
                         f"look at them; --force {verb.rstrip('d')}s them anyway",
                         code="changed-files")


def uninstall_plan(root: Path, manifest: Manifest | None, originals_rel: str, force: bool) -> Plan:
    """Take out every file the manifest lists and put back the originals it displaced: the
    root looked at (may raise OSError), then the decision."""
    return decide_uninstall(root, manifest, originals_rel, force,
                            observe_uninstall(root, manifest, originals_rel))


def decide_uninstall(root: Path, manifest: Manifest | None, originals_rel: str, force: bool,
                     seen: Observed) -> Plan:
    """The uninstall from what `seen` says stands in the root; no I/O.

    Originals found in place are left as they are; `originals_rel` is the originals store
    relative to the root.
    """
    plan = Plan()
    if manifest is None:
        return plan
    for entry in manifest.files:
        original = manifest.originals.get(entry.path)
        if original is not None and original.in_place:
            plan.kept.append(entry.path)
            continue
        current = seen.content(entry.path)
        if current is None:
            continue
        if current.same(entry.content) or force:
            plan.ops.append(Op(REMOVE, entry.path, backup=True))
        else:
            plan.conflicts.append(entry.path)
    installed = {entry.path for entry in manifest.files}
    for path, original in sorted(manifest.originals.items()):
        if original.in_place:
            continue
        if not seen.stands(f"{originals_rel}/{path}"):
            raise damaged_error(root, f"the original {path} is missing from {originals_rel}")
        if path not in installed and seen.stands(path) and not force:
            plan.conflicts.append(path)  # something new stands where the original goes back
            continue
        plan.ops.append(Op(PUT, path, f"{originals_rel}/{path}"))
    for d in reversed(manifest.created_dirs):
        plan.ops.append(Op(RMDIR, d))
    return plan


def files_of(desired: list[Desired], plan: Plan) -> list[FileRecord]:
    """The manifest's records of what the install leaves in place."""
    out = []
    for d in desired:
        original = plan.originals.get(d.path)
        out.append(FileRecord(d.path, d.content(), original.content if original else None))
    return out
