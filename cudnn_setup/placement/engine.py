"""Placing a cuDNN archive into a CUDA root as one transaction, and taking it out again.

The engine under `install` and `uninstall`, in named steps: stage and judge the archive inside
the root's state dir (judge.py: refuse what does not fit the root or this machine), plan
against what is there (plan_install), make the staged bytes durable and apply the plan as a
journaled transaction whose commit point is the manifest (commit.py). The same archive again,
all in place, is answered from the manifest without reading it (same_archive.py); a release
not fetched yet is asked about first (installed_already), so that it is not fetched at all.
The commands decide what to do around it (fetching, the loader, Theano, verify).
"""
from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from functools import partial
from typing import TYPE_CHECKING, Callable, Iterator, Mapping, Sequence

from msgspec import Struct, field

from cudnn_setup.archive.decoders import Growing
from cudnn_setup.archive.listing import Progress
from cudnn_setup.archive.package import Package
from cudnn_setup.errors import COMMITTED_STANDS, SetupError, os_error
from cudnn_setup.facts.cuda import BuiltFor, CudaRoot
from cudnn_setup.fetch.checksums import Expected
from cudnn_setup.placement.commit import manifest_for, place, remove
from cudnn_setup.placement.judge import Judged, stage_and_judge
from cudnn_setup.placement.same_archive import archive_stat, plan_again
from cudnn_setup.placement.targets import dependency_entries, desired_entries, root_dirs
from cudnn_setup.state import changed, writable
from cudnn_setup.state.layout import StateDir
from cudnn_setup.state.manifest import Manifest
from cudnn_setup.state.plan import Desired, Plan, conflict_error, make_plan, uninstall_plan
from cudnn_setup.state.transaction import Filesystem, new_txid, recover, tidied_after
from cudnn_setup.text import plural

if TYPE_CHECKING:
    from cudnn_setup.probing.driver import DriverFacts


class Outcome(Struct):
    """What install or uninstall did (or, with dry_run, would do)."""

    changed: bool
    plan: Plan
    package: Package | None = None
    manifest: dict | None = None  # as written to manifest.json
    recovered: str | None = None
    lib_dir: Path | None = None
    built_for: BuiltFor | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def cudnn_version(self) -> str | None:
        """The version installed (or that would be): the archive's, else the manifest's when
        the archive was known without reading it."""
        if self.package is not None:
            return self.package.cudnn_version
        return (self.manifest or {}).get("cudnn_version")

    @property
    def generation(self) -> str | None:
        if self.package is not None:
            return self.package.generation
        return (self.manifest or {}).get("generation")

    def to_dict(self) -> dict:
        out = {"plan": self.plan.actions(), "unchanged": len(self.plan.unchanged),
               "backed_up": self.plan.manual, "adopted": self.plan.adopted,
               "kept": self.plan.kept, "recovered": self.recovered,
               "lib_dir": str(self.lib_dir) if self.lib_dir else None, "notes": self.notes}
        if self.built_for is not None:
            out["built_for_cuda"] = self.built_for.to_dict()
        return out


def _no_driver() -> DriverFacts | None:
    return None


def _no_clients() -> Sequence[str] | None:
    return None


class Request(Struct, frozen=True):
    """One install: `archive` into `root`. `expected`: the checksum the archive must have as it
    is read; `provenance` (sources.base.Provenance) is recorded in the manifest; the libraries
    of `extra_wheels` (the wheels cuDNN's wheel declares, such as nvidia-cublas-cu12) are placed
    beside cuDNN in the same transaction; `env` is the environment of the child process that
    asks a library which CUDA it was built for, when the archive's name does not say;
    `driver` waits for the GPUs and driver the build must fit (asked while the archive is
    read); `on_status` hears a line for each step and for a wait on the lock; `known`: the
    checksum published for the release asked for, by which an archive already installed is
    known without reading it (same_archive); `verify_content`: hash the installed files to
    judge them, not only their stat; `clients` names the frameworks on this machine, asked
    when a JIT flavour is judged (judge.flavour_notes). While the archive is still being
    downloaded (then `archive` is where it will be): `follow` opens it as it arrives (archive.decoders.Growing), and
    `arrived` waits for the download's verdict (its checksum matched, or its error raised)
    and gives the provenance to record; nothing outside staging changes before it answers."""

    archive: Path
    root: CudaRoot
    force: bool = False
    dry_run: bool = False
    expected: Expected | None = None
    on_read: Progress | None = None
    xz: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    driver: Callable[[], DriverFacts | None] = _no_driver
    on_status: Callable[[str], None] = field(default=lambda line: None)
    provenance: dict | None = None
    extra_wheels: Sequence[Path] = ()
    known: Expected | None = None
    verify_content: bool = False
    clients: Callable[[], Sequence[str] | None] = _no_clients
    on_commit: Callable[[], None] = field(default=lambda: None)  # told when the change stands
    lock_timeout: float = 300.0
    follow: Callable[[], Growing] | None = None
    arrived: Callable[[], dict | None] | None = None


class Asked(Struct, frozen=True):
    """A request and the include and library dirs inside the root's real tree (root_dirs),
    for the install's steps."""

    request: Request
    include_rel: str
    lib_rel: str

    @property
    def lib_dir(self) -> Path:
        return self.request.root.path / self.lib_rel


def install(request: Request, fs: Filesystem | None = None,
            tmp_dir: Path | None = None) -> Outcome:
    """Install as `request` says (with `dry_run`, the plan only, judged in `tmp_dir`); `fs`
    does the transaction's file operations."""
    include_rel, lib_rel = root_dirs(request.root)
    asked = Asked(request, include_rel, lib_rel)
    state = StateDir(request.root.path)
    if request.dry_run:
        return _dry_run(asked, state, tmp_dir)
    return _install(asked, state, fs)


def installed_already(root: CudaRoot, known: Expected, driver: Callable[[], DriverFacts | None],
                      *, verify_content: bool = False, dry_run: bool = False,
                      lock_timeout: float = 300.0,
                      on_status: Callable[[str], None] = lambda line: None) -> Outcome | None:
    """The release whose published checksum is `known`, when it is the archive installed in
    `root`, all in place: its Outcome, answered from the manifest before anything is fetched;
    None when the archive is needed. Without `dry_run` an interrupted transaction is finished
    first, under the root's lock, as an install would."""
    include_rel, lib_rel = root_dirs(root)
    asked = Asked(Request(Path(), root, known=known, driver=driver,
                          verify_content=verify_content), include_rel, lib_rel)
    state = StateDir(root.path)
    if dry_run:
        return None if state.pending() else _again(asked, state.manifest(), unread=True)
    if not state.exists():
        return None
    with _rolled_back_errors("install"), state.locked(lock_timeout, on_status):
        recovered = recover(state)
        if recovered:
            on_status(recovered)
        state.check()
        same = _again(asked, state.manifest(), recovered, unread=True)
        state.tidy()
        return same


def cannot_write(root: CudaRoot) -> SetupError | None:
    """Why this user could not install into `root` (state/writable.py), said before anything
    is fetched; None when it may."""
    return writable.cannot_write(root.path, root_dirs(root))


def _again(asked: Asked, old: Manifest | None, recovered: str | None = None,
           unread: bool = False) -> Outcome | None:
    """The same archive again, all in place: answered from the manifest without decoding the
    archive (`unread`: without looking at it at all)."""
    request = asked.request
    if request.force or request.extra_wheels:
        return None
    arriving = request.follow is not None  # nothing at `archive` to look at yet
    found = plan_again(None if unread or arriving else request.archive, request.root, old,
                       asked.include_rel, asked.lib_rel, request.known, request.driver,
                       request.verify_content)
    if found is None:
        return None
    plan, how = found
    assert old is not None  # plan_again answers only from a manifest
    return Outcome(False, plan, None, old.to_dict(), recovered, lib_dir=asked.lib_dir,
                   built_for=BuiltFor(old.cuda_version, old.cuda_learnt_from),
                   notes=[f"the archive was not read again: {how}"])


def judged_in(asked: Asked, work: Path, state: StateDir) -> Judged:
    """The archive staged and judged under `work` (judge.stage_and_judge), refused (exit 3)
    when it does not fit."""
    r = asked.request
    return stage_and_judge(r.archive, work, r.root, state, expected=r.expected,
                           on_read=r.on_read, xz=r.xz, env=r.env, driver=r.driver,
                           force=r.force, say=r.on_status, clients=r.clients,
                           source=r.follow() if r.follow is not None else None)


def plan_install(asked: Asked, judged: Judged, work: Path) -> tuple[list[Desired], Plan]:
    """What should end up in the root (cuDNN's entries, the dependency wheels' libraries),
    staged under `work`, and the plan that gets it there from what is there now."""
    r = asked.request
    links = work / "links"
    desired = desired_entries(judged.package, asked.include_rel, asked.lib_rel, links)
    left_alone: list[str] = []
    desired += dependency_entries(r.extra_wheels, work / "deps", r.root.path,
                                  asked.lib_rel, links, desired,
                                  owned=[f.path for f in judged.old.files] if judged.old else (),
                                  left_alone=left_alone)
    judged.notes.extend(n for n in left_alone if n not in judged.notes)
    plan = make_plan(r.root.path, judged.old, desired, r.force, deep=r.verify_content)
    return desired, plan


def _dry_run(asked: Asked, state: StateDir, tmp_dir: Path | None) -> Outcome:
    """What the install would do: judged and planned in a temporary dir, the root untouched."""
    pending = state.pending()
    if not pending and (same := _again(asked, state.manifest())) is not None:
        return same
    with tempfile.TemporaryDirectory(prefix="cudnn-setup-plan-", dir=tmp_dir) as tmp:
        judged = judged_in(asked, Path(tmp), state)
        _, plan = plan_install(asked, judged, Path(tmp))
        notes = ["an interrupted transaction will be rolled back first"] if pending else []
        return Outcome(plan.changed, plan, judged.package, lib_dir=asked.lib_dir,
                       built_for=judged.built, notes=notes + judged.notes)


def _install(asked: Asked, state: StateDir, fs: Filesystem | None) -> Outcome:
    """The install under the root's lock: recover, answer the same archive again from the
    manifest, else stage and judge, plan, and place the plan as one transaction."""
    r = asked.request
    before = archive_stat(r.archive)
    created_state = not state.exists()
    committed: list[bool] = []
    with _rolled_back_errors("install", committed), state.locked(r.lock_timeout, r.on_status):
        recovered = recover(state)
        if recovered:
            r.on_status(recovered)
        state.check()
        if (same := _again(asked, state.manifest(), recovered)) is not None:
            state.tidy()
            return same
        txid = new_txid()
        tx = state.tx_dir(txid)
        with tidied_after(state, tx, drop_if_empty=created_state):
            state.check()
            judged = judged_in(asked, tx, state)
            desired, plan = plan_install(asked, judged, tx)
            notes = list(judged.notes)  # with the dependency libraries left alone
            if plan.conflicts:
                raise conflict_error(plan.conflicts, r.root.path, "replaced")
            # the commit point: an archive still arriving must have matched its checksum
            provenance = r.arrived() if r.arrived is not None else r.provenance
            if r.arrived is not None:  # the file read as it grew is now whole, in its place
                before = archive_stat(r.archive)
            if plan.changed or judged.old is None:
                r.on_status(f"placing cuDNN {judged.package.cudnn_version} into "
                            f"{r.root.path}: {plural(len(plan.ops), 'change')} in one "
                            "transaction")
                # the file's stat, when it was the same before and after it was read
                after = archive_stat(r.archive)
                manifest = manifest_for(txid, judged.package, desired, plan, asked.include_rel,
                                        asked.lib_rel, r.archive.name, judged.built,
                                        provenance, before if before == after else None)
                notes += place(state, txid, desired, plan, manifest, fs,
                               partial(_tell, committed, r.on_commit))
            else:
                manifest = judged.old
    return Outcome(plan.changed, plan, judged.package, manifest.to_dict(), recovered,
                   lib_dir=asked.lib_dir, built_for=judged.built, notes=notes)


@contextmanager
def _rolled_back_errors(what: str, committed: Sequence[bool] = ()) -> Iterator[None]:
    """OSErrors of a transaction as the tool's error, said by errno (errors.os_error); once
    `committed` holds anything (the transaction's on_commit put it there), one that comes
    after says the change stands."""
    try:
        yield
    except OSError as exc:
        raise os_error(exc, f"{what} failed",
                       outcome=COMMITTED_STANDS if committed else "") from None


def _tell(committed: list[bool], on_commit: Callable[[], None]) -> None:
    """The transaction's commit, noted in `committed` and told to `on_commit`."""
    committed.append(True)
    on_commit()


PENDING_FIRST = ("an interrupted transaction will be completed first (rolled back, or finished "
                 "where it was committed, as its journal says)")


def recover_pending(root: CudaRoot, lock_timeout: float = 300.0,
                    fs: Filesystem | None = None, sweep: bool = True,
                    on_wait: Callable[[str], None] | None = None) -> str | None:
    """Finish a transaction a killed run left behind, before anything else looks at the root.
    `sweep` False leaves staging without a journal where it is (doctor reports it instead)."""
    state = StateDir(root.path)
    if not state.pending():
        return None
    if not sweep and not os.path.lexists(state.journal_path):
        return None
    with _rolled_back_errors("finishing an interrupted transaction"), \
            state.locked(lock_timeout, on_wait):
        said = recover(state, fs)
        state.tidy()
        return said


def uninstall(root: CudaRoot, *, force: bool = False, dry_run: bool = False,
              fs: Filesystem | None = None, lock_timeout: float = 300.0,
              on_status: Callable[[str], None] | None = None,
              on_commit: Callable[[], None] = lambda: None) -> Outcome:
    if root.include_dir.exists() or root.lib_dir().exists():
        root_dirs(root)  # a dir a link takes out of the root: said as such, before the state
    state = StateDir(root.path)
    if dry_run:
        manifest = state.manifest()
        plan = uninstall_plan(root.path, manifest, state.originals_rel, force)
        # what the real run does first, which may be all it does
        pending = [PENDING_FIRST] if state.exists() and state.pending() else []
        return Outcome(manifest is not None or bool(pending), plan,
                       manifest=manifest.to_dict() if manifest else None,
                       notes=pending + (changed.uninstall_note(root.path, False)
                                        if manifest else []))
    if not state.exists():
        return Outcome(False, Plan())  # the command says so, once
    committed: list[bool] = []
    with _rolled_back_errors("uninstall", committed), state.locked(lock_timeout, on_status):
        recovered = recover(state)
        manifest = state.manifest()
        plan = uninstall_plan(root.path, manifest, state.originals_rel, force)
        if plan.conflicts:
            raise conflict_error(plan.conflicts, root.path, "removed")
        notes: list[str] = []
        with tidied_after(state):
            if manifest is not None:
                kept = changed.uninstall_note(root.path, True)
                notes += remove(state, new_txid(), plan, fs,
                                partial(_tell, committed, on_commit)) + kept
        state.remove_if_empty()
    return Outcome(manifest is not None, plan, manifest=manifest.to_dict() if manifest else None,
                   recovered=recovered, notes=notes)
