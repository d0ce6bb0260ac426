"""Putting a managed install back as its manifest records it, as one transaction.

Every file and link the manifest lists is looked at (every file hashed: a damaged disk moves no
ctime) and each that differs is put back: a missing or changed file from the archive the
install read (staged again and checked against the recorded sha256), a file whose mode alone
changed from a copy of its own bytes, a link from its recorded target. The archive is asked
for (`obtain`) only when some file's bytes are needed. A file whose bytes someone changed is
kept, not dropped: the transaction moves it to `.cudnn-setup/changed/<txid>/` after its commit
point, and uninstall takes that directory out with the rest (state/changed.py), so the root
still goes back to what it was before the first install. The commit point is the manifest written again
under the repair's txid, with the stats of the files as they now stand; a run killed before it
is rolled back, after it rolled forward, as install's (state/transaction.py).
"""
from __future__ import annotations

import os
import shutil
from functools import partial
from pathlib import Path
from typing import Callable, Mapping

from msgspec import Struct, field

from cudnn_setup.archive.listing import Progress
from cudnn_setup.archive.package import Package
from cudnn_setup.durable import make_dirs, make_durable
from cudnn_setup.errors import ArchiveRejected, InstallFailed, UsageError
from cudnn_setup.facts.cuda import CudaRoot
from cudnn_setup.fetch.checksums import Expected
from cudnn_setup.placement.commit import commit_manifest, unfinished
from cudnn_setup.placement.engine import PENDING_FIRST, _rolled_back_errors
from cudnn_setup.placement.judge import stage
from cudnn_setup.placement.targets import desired_entries, root_dirs
from cudnn_setup.records import replace
from cudnn_setup.state.changed import kept_rel
from cudnn_setup.state.journal import MKDIR, PUT, Op
from cudnn_setup.state.layout import StateDir
from cudnn_setup.state.paths import damaged_error
from cudnn_setup.state.manifest import DIR, FILE, SYMLINK, Content, FileRecord, Manifest
from cudnn_setup.state.files import describe, describe_known
from cudnn_setup.state.transaction import (Filesystem, Transaction, new_txid, recover,
                                           tidied_after)
from cudnn_setup.text import escape, plural

MISSING, CHANGED_BYTES, MODE, REPLACED, LINK_MISSING, REPOINTED = (
    "missing", "changed", "mode", "replaced", "link-missing", "re-pointed")
NEEDS_ARCHIVE = (MISSING, CHANGED_BYTES, REPLACED)


class Damage(Struct, frozen=True):
    """One recorded path that is not as the manifest says."""

    record: FileRecord
    kind: str  # MISSING, CHANGED_BYTES, MODE, REPLACED, LINK_MISSING, REPOINTED
    found: Content | None  # what stands there now

    @property
    def path(self) -> str:
        return self.record.path

    @property
    def kept(self) -> bool:
        """Whether what stands there holds bytes someone may want back: a copy is kept."""
        return self.found is not None and self.found.type in (FILE, SYMLINK) and \
            self.kind in (CHANGED_BYTES, REPLACED)

    @property
    def needs_archive(self) -> bool:
        return self.record.type == FILE and self.kind in NEEDS_ARCHIVE

    def describe(self) -> str:
        want = self.record.content
        if self.kind == MISSING:
            return "missing"
        if self.kind == LINK_MISSING:
            return f"link to {want.target} missing"
        if self.kind == REPOINTED:
            return f"link points to {self.found.target}, not {want.target}"
        if self.kind == MODE:
            return f"mode {self.found.mode:04o}, not {want.mode:04o}"
        if self.kind == REPLACED:
            what = {FILE: "a file", SYMLINK: f"a link to {self.found.target}"}.get(
                self.found.type, f"a {self.found.type}")
            return f"{what} stands where cudnn-setup placed a {want.type}"
        return "bytes changed since cudnn-setup installed it"

    def to_dict(self) -> dict:
        return {"path": self.path, "damage": self.kind, "detail": self.describe()}


class RepairOutcome(Struct):
    """What repair found and did (or, with dry_run, would do)."""

    changed: bool
    damage: list[Damage] = field(default_factory=list)
    manifest: Manifest | None = None
    recovered: str | None = None
    kept_in: str | None = None  # where the copies of changed files went, relative to the root
    archive: str | None = None  # the archive the bytes came from
    notes: list[str] = field(default_factory=list)

    def actions(self) -> list[dict]:
        out = []
        for d in self.damage:
            if d.kept:
                out.append({"action": "back up", "path": d.path,
                            **({"to": f"{self.kept_in}/{d.path}"} if self.kept_in else {})})
            verb = "link" if d.record.type == SYMLINK else "chmod" if d.kind == MODE else \
                "restore"
            out.append({"action": verb, "path": d.path})
        return out

    def to_dict(self) -> dict:
        return {"damage": [d.to_dict() for d in self.damage], "plan": self.actions(),
                "kept_in": self.kept_in, "archive": self.archive,
                "recovered": self.recovered, "notes": self.notes}


Obtain = Callable[[Manifest], Path]


def not_managed(root: Path) -> UsageError:
    return UsageError(f"cudnn-setup has not installed cuDNN in {escape(str(root))}: there is no "
                      "manifest of an install to put back",
                      "install it with `cudnn-setup install VERSION|ARCHIVE --cuda-root "
                      f"{escape(str(root))}`; cuDNN copied by hand is not the tool's to repair",
                      code="no-cudnn")


def survey(root: Path, manifest: Manifest) -> list[Damage]:
    """Every recorded path that differs from its record, in the manifest's order. Every file is
    hashed (never trusted by its stat). A directory where a record goes stops the repair."""
    out = []
    for record in manifest.files:
        if (why := _not_installs(record)) is not None:
            raise damaged_error(root, f"{escape(record.path)}: {why}, which no install records")
        found = describe(root / record.path, record.content.hashes)
        kind = _damage(record, found)
        if kind == DIR:
            raise InstallFailed(f"{root / record.path} is a directory where cuDNN puts a "
                                f"{record.type}", "move it away, then run again",
                                code="directory-in-the-way")
        if kind is not None:
            out.append(Damage(record, kind, found))
    return out


def _not_installs(record: FileRecord) -> str | None:
    """What of a record repair would put in place that no install writes: set-id or sticky
    bits, a file anyone may write, or a link leading out of the root. Repair takes modes and
    link targets from the manifest alone; a record that asks for these was not written by an
    install (which writes at most 0755; a file adopted as it stood keeps its own mode), so
    nothing of it is applied."""
    want = record.content
    if record.type == FILE and want.mode is not None and want.mode & 0o7002:
        return f"mode {want.mode:04o}"
    if record.type == SYMLINK:
        target = want.target or ""
        inside = os.path.normpath(os.path.join(os.path.dirname(record.path), target))
        if not target or os.path.isabs(target) or inside == ".." or inside.startswith("../"):
            return f"a link to {escape(target)}, outside the root"
    return None


def _damage(record: FileRecord, found: Content | None) -> str | None:
    want = record.content
    if found is not None and found.type == DIR:
        return DIR
    if record.type == SYMLINK:
        if found is None:
            return LINK_MISSING
        if found.type != SYMLINK:
            return REPLACED
        return None if found.target == want.target else REPOINTED
    if found is None:
        return MISSING
    if found.type != FILE:
        return REPLACED
    if not want.same(found):
        return CHANGED_BYTES
    return None if found.mode == want.mode else MODE


def repair(root: CudaRoot, obtain: Obtain, *, dry_run: bool = False,
           fs: Filesystem | None = None, lock_timeout: float = 300.0,
           on_status: Callable[[str], None] | None = None,
           on_commit: Callable[[], None] = lambda: None,
           on_read: Progress | None = None, xz: str | None = None,
           env: Mapping[str, str] | None = None) -> RepairOutcome:
    """Put the install the root's manifest records back; `obtain(manifest)` gives the local
    file of the archive it was installed from (from the cache, or fetched again), asked only
    when a file's bytes are needed. With `dry_run` nothing is written, locked or recovered."""
    if root.include_dir.exists() or root.lib_dir().exists():
        root_dirs(root)  # a dir a link takes out of the root: said as such, before the state
    state = StateDir(root.path)
    say = on_status or (lambda line: None)
    if dry_run:
        manifest = state.manifest() if state.exists() else None
        if manifest is None:
            if state.pending():  # what the real run does: complete it, which may be all
                return RepairOutcome(True, [], None, notes=[PENDING_FIRST])
            raise not_managed(root.path)
        notes = [PENDING_FIRST] if state.pending() else []
        damage = survey(root.path, manifest)
        return RepairOutcome(bool(damage), damage, manifest, notes=notes)
    if not state.exists() or not os.path.lexists(state.manifest_path):
        state.check()
        if not state.pending():
            raise not_managed(root.path)
    # A download can take minutes: done before the lock, where install does its own, when a
    # look by stat shows bytes will be needed; what the lock then finds decides.
    ahead = _fetched_ahead(state, obtain)
    with _rolled_back_errors("repair"), state.locked(lock_timeout, on_status):
        recovered = recover(state)
        if recovered:
            say(recovered)
        state.check()
        manifest = state.manifest()
        if manifest is None:
            state.tidy()
            if recovered:  # an install killed before its commit, rolled back: that was all
                return RepairOutcome(True, [], None, recovered)
            raise not_managed(root.path)
        damage = survey(root.path, manifest)
        if not damage:
            state.tidy()
            return RepairOutcome(recovered is not None, [], manifest, recovered)
        txid = new_txid()
        tx = state.tx_dir(txid)
        with tidied_after(state, tx):
            outcome = _repair(state, manifest, damage, txid, obtain, ahead, fs, say, on_commit,
                              on_read, xz, env or {})
            outcome.recovered = recovered
    return outcome


def _fetched_ahead(state: StateDir, obtain: Obtain) -> dict[str, Path]:
    """The archive, by its recorded sha256, obtained before the lock when the manifest (read
    without it) records files that are missing or whose stat changed; nothing when a
    transaction is pending (its recovery may change what is recorded)."""
    if state.pending():
        return {}
    manifest = state.manifest()
    if manifest is None or not manifest.source.sha256:
        return {}
    for record in manifest.files:
        if record.type != FILE:
            continue
        found = describe_known(state.root / record.path, record)
        if found is None or found.type != FILE or not record.content.same(found):
            return {manifest.source.sha256: obtain(manifest)}
    return {}


def _repair(state: StateDir, manifest: Manifest, damage: list[Damage], txid: str,
            obtain: Obtain, ahead: dict[str, Path], fs: Filesystem | None,
            say: Callable[[str], None], on_commit: Callable[[], None], on_read, xz,
            env) -> RepairOutcome:
    """The repair of `damage` as the transaction `txid`; the archive is the one obtained
    before the lock (`ahead`, by sha256) when the manifest still records it, else obtained."""
    root = state.root
    tx = state.tx_dir(txid)
    tx_rel = state.tx_rel(txid)
    make_dirs(tx)  # 0755 whatever the umask: what is staged here goes into the root
    archive = None
    staged: dict[str, Path] = {}
    if any(d.needs_archive for d in damage):
        if not manifest.source.sha256:
            raise ArchiveRejected(
                f"the manifest records no sha256 of the archive {escape(manifest.source.name)}, "
                "so no copy of it can be shown to be the one installed; nothing was changed",
                "install it again with --force from the archive", code="no-checksum")
        path = ahead.get(manifest.source.sha256) or obtain(manifest)
        archive = str(path)
        say(f"reading {escape(path.name)} again for the files to put back")
        expected = Expected("sha256", manifest.source.sha256,
                            "the manifest's record of the archive installed")
        pkg = stage(path, tx / "staging", expected, on_read, xz, env)
        staged = _from_archive(pkg, manifest, [d for d in damage if d.needs_archive], tx)
    ops: list[Op] = []
    sources: list[Path] = []
    for d in damage:
        source = tx / "put" / d.path
        make_dirs(source.parent)
        want = d.record.content
        if d.record.type == SYMLINK:
            os.symlink(want.target, source)
        elif d.needs_archive:
            os.replace(staged[d.path], source)
            os.chmod(source, want.mode)
        else:  # the mode alone: the bytes are the recorded ones, copied as they stand
            _copy_checked(root / d.path, source, d.record)
        sources.append(source)
    ops += [Op(MKDIR, p) for p in _missing_dirs(root, [d.path for d in damage])]
    # what stood there goes to the transaction's backup; a changed file's is kept (finish)
    ops += [Op(PUT, d.path, f"{tx_rel}/put/{d.path}", backup=d.found is not None,
               kind=d.record.type, keep=d.kept) for d in damage]
    kept_in = kept_rel(txid) if any(d.kept for d in damage) else None
    make_durable(sources, tx)
    repaired = replace(manifest, txid=txid,
                       files=[FileRecord(f.path, f.content, f.replaced) for f in manifest.files])
    for d in damage:  # a person's change is named before anything replaces it
        if d.kept:
            say(f"{escape(d.path)} changed since cudnn-setup installed it: keeping it in "
                f"{kept_in}/, then putting the installed one back")
    say(f"putting back {plural(len(damage), 'file and link', 'files and links')} in {root}: "
        "one transaction")
    transaction = Transaction(state, txid, fs)
    transaction.run(ops, partial(commit_manifest, root, state.manifest_path, repaired), txid,
                    on_commit)
    return RepairOutcome(True, damage, repaired, kept_in=kept_in, archive=archive,
                         notes=unfinished(transaction))


def _from_archive(pkg: Package, manifest: Manifest, wanted: list[Damage],
                  tx: Path) -> dict[str, Path]:
    """The staged file for each damaged record, whose bytes must be the recorded ones."""
    desired = {d.path: d for d in desired_entries(pkg, manifest.include_dir, manifest.lib_dir,
                                                  tx / "links")}
    out = {}
    for d in wanted:
        entry = desired.get(d.path)
        content = entry.content() if entry is not None and entry.kind == FILE else None
        common = content is not None and set(content.hashes) & set(d.record.content.hashes)
        if not common or not d.record.content.same(content):
            raise ArchiveRejected(
                f"{escape(d.path)} is not in the archive {escape(pkg.archive_name)} as "
                "cudnn-setup installed it (placed from another wheel, or another layout); "
                "nothing was changed",
                "install again with --force from the source it came from",
                code="not-in-archive")
        out[d.path] = entry.source
    return out


def _copy_checked(src: Path, dest: Path, record: FileRecord) -> None:
    """A copy of the file at `src` with the recorded mode, its bytes checked again once
    copied (they may change between the look and the copy)."""
    shutil.copyfile(src, dest, follow_symlinks=False)
    os.chmod(dest, record.content.mode)
    if not record.content.same(describe(dest, record.content.hashes)):
        raise InstallFailed(f"{src} changed while it was being repaired; nothing was changed",
                            "run repair again", code="install-failed")


def _missing_dirs(root: Path, paths: list[str]) -> list[str]:
    """The directories above `paths`, outermost first, that do not stand in the root."""
    out: list[str] = []
    for path in paths:
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            d = "/".join(parts[:i])
            if d not in out and not os.path.lexists(root / d):
                out.append(d)
    return out

