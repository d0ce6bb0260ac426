"""Placing a cuDNN archive into a CUDA root as one transaction, and taking it out again.

The engine under `install` and `uninstall`: stage and judge the archive inside the root's state
dir, check that it fits the root, plan against what is there, make the staged bytes durable,
apply the plan as a journaled transaction whose commit point is the manifest. The commands
decide what to do around it (fetching, the loader, Theano, verify).
"""
from __future__ import annotations

import datetime
import os
import stat
import tempfile
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

from cudnn_setup import __version__
from cudnn_setup.archive import read_package
from cudnn_setup.archive.package import Package
from cudnn_setup.archive.wheel import dependency_libraries
from cudnn_setup.checks.driver import DriverFacts, fit_before_install, install_refusal
from cudnn_setup.checks.probe import child_env, probe_module, run_probe
from cudnn_setup.digest import file_digest
from cudnn_setup.errors import ArchiveRejected, InstallFailed, os_error
from cudnn_setup.facts import cuda as cuda_facts
from cudnn_setup.facts import cudnn as gen
from cudnn_setup.facts.cuda import CudaRoot
from cudnn_setup.facts.ldresolve import NotLoadable, read_object
from cudnn_setup.fetch.checksums import Expected, mismatch
from cudnn_setup.fetch import known_releases
from cudnn_setup.state.files import record_stats
from cudnn_setup.state.journal import PUT
from cudnn_setup.state.layout import StateDir, remove_tree
from cudnn_setup.state.manifest import FILE, Manifest, Source
from cudnn_setup.state.paths import STATE_DIR, is_within
from cudnn_setup.state.plan import (Desired, Plan, conflict_error, files_of, make_plan,
                                    uninstall_plan)
from cudnn_setup.state.transaction import Filesystem, Transaction, recover
from cudnn_setup.text import escape, plural

PROBE_TIMEOUT = 60.0


# --- where cuDNN goes in the root -------------------------------------------------------------

def _link_on_the_way(root: Path, path: Path) -> str:
    """The first symlink between `root` and `path`, as `link -> target`."""
    if not path.is_relative_to(root):
        return str(path)
    current = root
    for part in path.relative_to(root).parts:
        current = current / part
        if current.is_symlink():
            return f"{current} -> {os.readlink(current)}"
    return str(path)


def inside_root(root: Path, path: Path, what: str) -> str:
    """`path` relative to the root's real tree, its symlinks followed; a directory that a
    symlink takes out of the root (or into the tool's state) is refused, naming the link."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    if is_within(real, real_root) and real != real_root:
        rel = os.path.relpath(real, real_root)
        if not is_within(rel, STATE_DIR):
            return rel
    raise InstallFailed(
        f"the {what} dir {_link_on_the_way(root, path)} leads out of the CUDA root {root} "
        f"(to {real}); cudnn-setup writes only inside the root",
        f"point --cuda-root at the toolkit the link leads into, or make {path.name} a "
        "directory of the root", code="link-outside-root")


def root_dirs(root: CudaRoot) -> tuple[str, str]:
    """The include and library dirs, relative to the root's real tree (links resolved), so
    that the manifest's paths never pass through a symlinked directory."""
    lib = root.lib_dir()
    for name in ("lib64", "lib"):  # the name in the root, not the resolved path, for messages
        candidate = root.path / name
        if candidate.is_dir() and os.path.realpath(candidate) == os.path.realpath(lib):
            lib = candidate
            break
    return (inside_root(root.path, root.include_dir, "include"),
            inside_root(root.path, lib, "library"))


def desired_entries(pkg: Package, include_rel: str, lib_rel: str, links_dir: Path) -> list[Desired]:
    """Headers, libraries and the ldconfig-style link chains, as they should end up."""
    out = [Desired(f"{include_rel}/{m.name}", FILE, m.sha256, mode=(m.mode & 0o755) | 0o444,
                   source=m.staged) for m in pkg.headers]
    for m in [lib.member for lib in pkg.libraries] + pkg.static_libraries:
        out.append(Desired(f"{lib_rel}/{m.name}", FILE, m.sha256, mode=(m.mode & 0o755) | 0o444,
                           source=m.staged))
    for link, target in pkg.chains():
        out.append(Desired(f"{lib_rel}/{link}", "symlink", target=target,
                           source=links_dir / link))
    return out


def dependency_entries(wheels: Sequence[Path], work: Path, root: Path, lib_rel: str,
                       links_dir: Path, desired: list[Desired]) -> list[Desired]:
    """The shared libraries of the dependency wheels, staged under `work`, as files in the lib
    dir under their SONAME with the development link, recorded like cuDNN's own files. Each
    must be an ELF shared object whose SONAME is its file name."""
    taken = {d.path for d in desired}
    out: list[Desired] = []
    for i, wheel in enumerate(wheels):
        for name, staged, sha in dependency_libraries(wheel, work / str(i)):
            try:
                elf = read_object(staged)
            except NotLoadable as exc:
                raise ArchiveRejected(f"{escape(wheel.name)}: {escape(name)} is not a library "
                                      f"({escape(str(exc)[:120])})", "do not use this wheel") from None
            if elf.soname != name:
                continue  # not under its SONAME (a builtins variant, a stub): not what loads
            path = f"{lib_rel}/{name}"
            if path in taken:
                raise ArchiveRejected(f"{escape(wheel.name)} holds {escape(name)}, which another "
                                      "wheel placed already", "do not use these wheels together")
            taken.add(path)
            out.append(Desired(path, FILE, sha, mode=0o755, source=staged))
            stem = gen.SHARED_NAME.match(name)
            dev = f"{lib_rel}/{stem['stem']}.so" if stem else None
            if dev and dev not in taken and not os.path.lexists(root / dev):
                taken.add(dev)
                out.append(Desired(dev, "symlink", target=name,
                                   source=links_dir / f"{stem['stem']}.so"))
    return out


# --- does the archive fit the root? -----------------------------------------------------------

@dataclass
class BuiltFor:
    """The CUDA version an archive's cuDNN was built for, and how that was learnt."""

    version: str | None
    source: str

    def to_dict(self) -> dict:
        return {"version": self.version, "source": self.source}


def built_for(pkg: Package, work: Path, env: Mapping[str, str] | None) -> BuiltFor:
    """From the archive's name; else from cudnnGetCudartVersion() of the staged library, asked
    in a child process (native code from an archive never runs in this one).

    The child loads the library through links named by SONAME in `work`, so a cuDNN 8/9 finds
    its sub-libraries there instead of abort()ing.
    """
    if pkg.cuda_version:
        return BuiltFor(pkg.cuda_version, "archive name")
    main = pkg.library("libcudnn")
    if main is None or main.member.staged is None:
        return BuiltFor(None, "unknown: no library to ask")
    work.mkdir(parents=True, exist_ok=True)
    for lib in pkg.libraries:
        for name in {lib.name, lib.elf.soname if lib.elf and lib.elf.soname else lib.name}:
            if not os.path.lexists(work / name):
                os.symlink(os.path.abspath(lib.member.staged), work / name)
    target = main.elf.soname if main.elf and main.elf.soname else main.name
    result = run_probe(probe_module("load") + [str(work / target)], PROBE_TIMEOUT,
                       child_env(work, env or {}))
    number = (result.data or {}).get("cudnnGetCudartVersion")
    if type(number) is int and 1000 <= number < 1000000:
        return BuiltFor(cuda_facts.version_text(number), "cudnnGetCudartVersion() of the library")
    why = "no cudnnGetCudartVersion" if result.data else result.failure()
    return BuiltFor(None, f"unknown: the name does not say and the library answered nothing "
                          f"({why[:200]})")


def variant_name(name: str, version: str | None, major: int) -> str | None:
    """The name of the same cuDNN built for CUDA `major`, when NVIDIA published one: looked up
    in the table of NVIDIA's archives, never made from this file's name (a renamed or
    repacked archive's extension, say .tar.gz where NVIDIA ships .tar.xz, names a file that
    does not exist). None when the table lists no such build."""
    facts = gen.parse_archive_name(name)
    if facts is None or facts.cudnn_version is None:
        return None
    for release in known_releases.releases():
        other = gen.parse_archive_name(release.file_name)
        if other and other.cudnn_version == facts.cudnn_version and other.cuda_major == major \
                and other.arch == facts.arch and other.os == facts.os:
            return release.file_name
    return None


def cuda_mismatch(pkg: Package, built: BuiltFor, root: CudaRoot, name: str,
                  old: Manifest | None) -> ArchiveRejected | None:
    """The refusal of a cuDNN built for another CUDA major than the root's, or None.

    cuDNN is built against one CUDA major (a build for 11.x serves every 11.x); another major
    fails to load or to run. NVIDIA's support matrix lists the pairs:
    https://docs.nvidia.com/deeplearning/cudnn/backend/latest/reference/support-matrix.html
    """
    if not built.version or root.version is None or root.major is None:
        return None
    major = int(built.version.split(".")[0])
    if major == root.major:
        return None
    replaces = ""
    if old is not None and old.cuda_version and old.cuda_version.split(".")[0] == str(root.major):
        replaces = f"; it would replace cuDNN {old.cudnn_version}, which is built for this CUDA"
    variant = variant_name(name, pkg.cudnn_version, root.major)
    if variant:
        fetch = (f"download the cuDNN {pkg.cudnn_version} archive for CUDA {root.major} "
                 f"({escape(variant)}), or a cuDNN release made for CUDA {root.major}")
    else:  # nothing published under a name the table knows: say where to look, not a guess
        fetch = (f"install a cuDNN release built for CUDA {root.major} (`cudnn-setup list "
                 f"--cuda {root.major}` shows those published)")
    return ArchiveRejected(
        f"{escape(name)} is cuDNN {pkg.cudnn_version} built for CUDA {built.version} "
        f"({built.source}), but {root.path} is CUDA {root.version}{replaces}; nothing was changed",
        f"{fetch}; --force installs this one anyway", code="cuda-mismatch")


def machine_fit(pkg: Package, built: BuiltFor, driver: DriverFacts | None,
                force: bool) -> tuple[ArchiveRejected | None, list[str]]:
    """Whether the build runs on this machine's GPUs and driver (checks/driver.py): the refusal
    (None with --force, or when nothing misfits) and notes for what only warns or was forced."""
    if not driver or not built.version or not pkg.cudnn_version:
        return None, []
    misfits = fit_before_install(pkg.cudnn_version, built.version, driver)
    refusal = None if force else install_refusal(misfits, pkg.cudnn_version, built.version)
    return refusal, [("installed anyway (--force): " if m.severity == "fail" else "")
                     + f"{m.subject}: {m.reason} ({m.hint})" for m in misfits]


# --- install and uninstall --------------------------------------------------------------------

@dataclass
class Outcome:
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


def _stage(archive: Path, staging: Path, expected: Expected | None,
           on_read: Callable[[int], None] | None, xz: str | None,
           env: Mapping[str, str]) -> Package:
    pkg = read_package(archive, staging, on_read=on_read, xz=xz, env=env,
                       expected_sha256=expected.digest if expected and
                       expected.algorithm == "sha256" else None)
    if expected and pkg.sha256 and pkg.sha256 != expected.digest:
        raise mismatch(escape(archive.name), expected, pkg.sha256)
    if not pkg.installable:
        errors = [p for p in pkg.problems if p.severity == "error"]
        first = errors[0]
        more = f" (and {plural(len(errors) - 1, 'more problem')})" if len(errors) > 1 else ""
        raise ArchiveRejected(f"{escape(archive.name)}: {first.message}{more}", first.hint,
                              problems=errors)
    return pkg


def _make_links(desired: list[Desired]) -> None:
    for d in desired:
        if d.kind == "symlink":
            d.source.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(d.target, d.source)


def make_durable(sources: list[Path], top: Path) -> None:
    """fsync every staged file that goes into the root, then every directory from theirs up to
    `top`, before the journal and the manifest can claim them: after a power cut an installed
    library is whole, never empty (dpkg does the same before its renames)."""
    dirs: set[Path] = set()
    for source in sources:
        if stat.S_ISREG(os.lstat(source).st_mode):
            fd = os.open(source, os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        parent = source.parent
        while parent != top and top in parent.parents:
            dirs.add(parent)
            parent = parent.parent
    for directory in sorted(dirs, key=lambda p: len(p.parts), reverse=True) + [top]:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def archive_stat(archive: Path) -> tuple[int, int, int, int, int] | None:
    """What identifies the archive file without reading it: device, inode, size, mtime and
    ctime (a write, a rename onto it or a chmod moves ctime, which no user can set back)."""
    try:
        st = os.stat(archive)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def same_archive(archive: Path | None, source: Source,
                 known: Expected | None = None) -> str | None:
    """How `archive` is known to be the one the manifest's install read, or None.

    The file it was read from, unchanged (its recorded stat); else a checksum published for
    the release the user asked for (`known`, from the table or the mirror's manifest, never
    from the file's name alone) that is the recorded one; else the same size and the same
    sha256 (reading the file once, a few seconds per GB, instead of decoding it). `archive`
    None: no file to look at (a release not fetched), only `known` can tell."""
    if not source.sha256:
        return None
    if known is not None and known.algorithm == "sha256" and known.digest == source.sha256:
        return f"its published sha256 ({known.source}) is the installed archive's"
    if archive is None:
        return None
    if source.stat is not None and archive_stat(archive) == source.stat:
        return "the file it was installed from, unchanged since (device, inode, size, mtime, ctime)"
    st = archive_stat(archive)
    if st is None or st[2] != source.size:
        return None
    try:
        if file_digest(archive) == source.sha256:
            return "its sha256 is the installed archive's"
    except OSError:
        return None
    return None


def _again(archive: Path, root: CudaRoot, old: Manifest | None, include_rel: str, lib_rel: str,
           known: Expected | None, driver, deep: bool,
           unread: bool = False) -> tuple[Plan, str] | None:
    """The plan for installing the very archive the manifest records again, worked out from
    the manifest alone, when that is sure to be the plan reading the archive would make: the
    same tool version (same rules) and layout, a build that fits this root and machine
    without a note, every file as recorded (stat, mode, link target; `deep`: hashed). None
    sends the install the long way, which reports whatever differs as it always has."""
    if old is None or old.tool_version != __version__ or (old.include_dir, old.lib_dir) != (
            include_rel, lib_rel):
        return None
    major = old.cuda_version.split(".")[0] if old.cuda_version else None
    if major is None or root.major is None or int(major) != root.major:
        return None
    facts = driver() if callable(driver) else driver
    if facts and fit_before_install(old.cudnn_version, old.cuda_version, facts):
        return None
    how = same_archive(None if unread else archive, old.source, known)
    if how is None:
        return None
    desired = [Desired(f.path, f.type, f.content.sha256, f.content.target,
                       f.content.mode if f.content.mode is not None else 0o644)
               for f in old.files]
    plan = make_plan(root.path, old, desired, False, deep=deep)
    if plan.changed or plan.conflicts:
        return None
    return plan, how


def _manifest(txid: str, pkg: Package, desired: list[Desired], plan: Plan, include_rel: str,
              lib_rel: str, source_name: str, built: BuiltFor,
              provenance: dict | None,
              source_stat: tuple[int, int, int, int, int] | None = None) -> Manifest:
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


def install(archive: Path, root: CudaRoot, *, force: bool = False, dry_run: bool = False,
            expected: Expected | None = None, fs: Filesystem | None = None,
            lock_timeout: float = 300.0, tmp_dir: Path | None = None,
            on_read: Callable[[int], None] | None = None, xz: str | None = None,
            env: Mapping[str, str] | None = None,
            driver: Callable[[], DriverFacts | None] | DriverFacts | None = None,
            on_status: Callable[[str], None] | None = None,
            provenance: dict | None = None, extra_wheels: Sequence[Path] = (),
            known: Expected | None = None, verify_content: bool = False,
            unread_only: bool = False) -> Outcome | None:
    """Install `archive` into `root`; `provenance` (sources.base.Provenance) is recorded in
    the manifest; the libraries of `extra_wheels` (the wheels cuDNN's wheel declares, such as
    nvidia-cublas-cu12) are placed beside cuDNN in the same transaction. `env` is the
    environment of the child process that asks
    a library which CUDA it was built for, when the archive's name does not say; `driver`
    (checks.driver.driver_facts, or a function that waits for them) the GPUs and driver the
    build must fit; `on_status` hears a line for each step and for a wait on the lock;
    `known`: the checksum published for the release the user asked for, by which an archive
    already installed is known without reading it (same_archive); `verify_content`: hash the
    installed files to judge them, not only their stat; `unread_only`: answer only when that
    needs no archive (None otherwise)."""
    state = StateDir(root.path)
    say = on_status or (lambda line: None)
    include_rel, lib_rel = root_dirs(root)
    lib_dir = root.path / lib_rel
    before = None if unread_only else archive_stat(archive)

    def again(old: Manifest | None, recovered: str | None = None) -> Outcome | None:
        """The same archive again, all in place: answered from the manifest, unread."""
        found = None if force or extra_wheels else _again(archive, root, old, include_rel,
                                                          lib_rel, known,
                                          driver, verify_content, unread_only)
        if found is None:
            return None
        plan, how = found
        return Outcome(False, plan, None, old.to_dict(), recovered, lib_dir=lib_dir,
                       built_for=BuiltFor(old.cuda_version, old.cuda_source or "manifest"),
                       notes=[f"the archive was not read again: {how}"])

    def judged(work: Path) -> tuple[Package, BuiltFor, Manifest | None, list[str]]:
        """Stage and judge the archive under `work`; refuse what does not fit (exit 3)."""
        pkg = _stage(archive, work / "staging", expected, on_read, xz, env or {})
        say(f"judging cuDNN {pkg.cudnn_version or '(version unknown)'}: whether it fits "
            f"{root.path} and this machine's GPUs and driver")
        built = built_for(pkg, work / "probe", env)
        old = state.manifest()
        refusal = None if force else cuda_mismatch(pkg, built, root, archive.name, old)
        unfit, fit_notes = machine_fit(pkg, built, driver() if callable(driver) else driver,
                                       force)
        if refusal or unfit:
            raise refusal or unfit
        return pkg, built, old, fit_notes

    if dry_run:
        pending = state.pending()
        if not pending and (same := again(state.manifest())) is not None:
            return same
        if unread_only:
            return None
        with tempfile.TemporaryDirectory(prefix="cudnn-setup-plan-", dir=tmp_dir) as tmp:
            staging = Path(tmp)
            pkg, built, old, fit_notes = judged(staging)
            desired = desired_entries(pkg, include_rel, lib_rel, staging / "links")
            desired += dependency_entries(extra_wheels, staging / "deps", root.path, lib_rel,
                                          staging / "links", desired)
            plan = make_plan(root.path, old, desired, force, deep=verify_content)
            notes = ["an interrupted transaction will be rolled back first"] if pending else []
            notes += fit_notes
            return Outcome(plan.changed, plan, pkg, lib_dir=lib_dir, built_for=built, notes=notes)
    created_state = not state.exists()
    if unread_only and not state.exists():
        return None
    with _rolled_back_errors("install"), state.locked(lock_timeout, on_status):
        recovered = recover(state)
        if recovered:
            say(recovered)
        state.check()
        if (same := again(state.manifest(), recovered)) is not None or unread_only:
            state.tidy()
            return same
        txid = uuid.uuid4().hex[:12]
        tx = state.tx_dir(txid)
        notes: list[str] = []
        try:
            state.check()
            pkg, built, old, fit_notes = judged(tx)
            notes += fit_notes
            desired = desired_entries(pkg, include_rel, lib_rel, tx / "links")
            desired += dependency_entries(extra_wheels, tx / "deps", root.path, lib_rel,
                                          tx / "links", desired)
            plan = make_plan(root.path, old, desired, force, deep=verify_content)
            if plan.conflicts:
                raise conflict_error(plan.conflicts, root.path, "replaced")
            if plan.changed or old is None:
                say(f"placing cuDNN {pkg.cudnn_version} into {root.path}: "
                    f"{plural(len(plan.ops), 'change')} in one transaction")
                # the file's stat, when it was the same before and after it was read
                after = archive_stat(archive)
                manifest = _manifest(txid, pkg, desired, plan, include_rel, lib_rel,
                                     archive.name, built, provenance,
                                     before if before == after else None)
                _make_links(desired)
                make_durable([root.path / op.source for op in plan.ops if op.action == PUT], tx)

                def commit(f: Filesystem) -> None:
                    record_stats(root.path, manifest.files)
                    f.write_manifest(state.manifest_path, manifest)

                transaction = Transaction(state, txid, fs)
                transaction.run(plan.ops, commit, txid)
                notes += _unfinished(transaction)
            else:
                manifest = old
        finally:
            # A journal still there (a rollback or the tidying after the commit failed) needs
            # the transaction's dir: the next run finishes the job with it.
            if os.path.lexists(tx) and not os.path.lexists(state.journal_path):
                remove_tree(tx)
            if state.exists():
                state.tidy()
                if created_state and not os.path.lexists(state.manifest_path):
                    state.remove_if_empty()
    return Outcome(plan.changed, plan, pkg, manifest.to_dict(), recovered, lib_dir=lib_dir,
                   built_for=built, notes=notes)


def _unfinished(transaction: Transaction) -> list[str]:
    if transaction.unfinished is None:
        return []
    return [f"the change is committed, but tidying up after it failed "
            f"({transaction.unfinished}); the next cudnn-setup command finishes it"]


@contextmanager
def _rolled_back_errors(what: str) -> Iterator[None]:
    """OSErrors of a transaction as the tool's exit-5 error, said by errno (errors.os_error)."""
    try:
        yield
    except OSError as exc:
        raise os_error(exc, f"{what} failed") from None


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
              on_status: Callable[[str], None] | None = None) -> Outcome:
    state = StateDir(root.path)
    if dry_run:
        manifest = state.manifest()
        plan = uninstall_plan(root.path, manifest, state.originals_rel, force)
        return Outcome(manifest is not None, plan,
                       manifest=manifest.to_dict() if manifest else None)
    if not state.exists():
        return Outcome(False, Plan(), notes=["cudnn-setup has installed nothing here"])
    with _rolled_back_errors("uninstall"), state.locked(lock_timeout, on_status):
        recovered = recover(state)
        manifest = state.manifest()
        plan = uninstall_plan(root.path, manifest, state.originals_rel, force)
        if plan.conflicts:
            raise conflict_error(plan.conflicts, root.path, "removed")
        notes: list[str] = []
        try:
            if manifest is not None:
                transaction = Transaction(state, uuid.uuid4().hex[:12], fs)
                transaction.run(plan.ops, lambda f: f.unlink(state.manifest_path), None)
                notes += _unfinished(transaction)
        finally:
            if state.exists():
                state.tidy()
        state.remove_if_empty()
    return Outcome(manifest is not None, plan, manifest=manifest.to_dict() if manifest else None,
                   recovered=recovered, notes=notes)
