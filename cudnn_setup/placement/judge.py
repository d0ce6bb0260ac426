"""Stage and judge: read the archive into a staging dir (checked as it is read), refuse what
cannot be installed, and refuse a build that does not fit the root or this machine (exit 3),
before anything in the root is touched.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from msgspec import Struct, field

from cudnn_setup.archive import check_readable, read_package
from cudnn_setup.archive.decoders import Growing
from cudnn_setup.archive.listing import Progress
from cudnn_setup.archive.package import Package
from cudnn_setup.digest import content_hash
from cudnn_setup.errors import ArchiveRejected
from cudnn_setup.facts import clients as client_facts
from cudnn_setup.facts import cudnn as gen
from cudnn_setup.facts.cuda import BuiltFor, CudaRoot
from cudnn_setup.fetch.checksums import Expected, mismatch
from cudnn_setup.placement.fit import built_for, cuda_mismatch, machine_fit
from cudnn_setup.state.layout import StateDir
from cudnn_setup.state.manifest import Manifest
from cudnn_setup.text import escape, plural

if TYPE_CHECKING:
    from cudnn_setup.probing.driver import DriverFacts


class Judged(Struct):
    """An archive staged and found fit to install, with what it was judged against."""

    package: Package
    built: BuiltFor
    old: Manifest | None  # the root's manifest when it was judged (None: nothing installed)
    notes: list[str] = field(default_factory=list)  # misfits that only warn, or were forced


def stage(archive: Path, staging: Path, expected: Expected | None,
          on_read: Progress | None, xz: str | None,
          env: Mapping[str, str], source: Growing | None = None) -> Package:
    """The archive read into `staging` (from `source` as it arrives, when given); its
    checksum and its installability checked."""
    pkg = read_package(archive, staging, on_read=on_read, xz=xz, env=env,
                       expected_sha256=expected.digest if expected and
                       expected.algorithm == "sha256" else None,
                       content_hash=content_hash(), source=source)
    refusal = package_refusal(pkg, archive.name, expected)
    if refusal is not None:
        raise refusal
    return pkg


def package_refusal(pkg: Package, name: str, expected: Expected | None) -> ArchiveRejected | None:
    """Why the archive itself cannot be installed (its checksum, then its contents), as
    install refuses it and inspect reports it."""
    if expected and pkg.sha256 and pkg.sha256 != expected.digest:
        return mismatch(escape(name), expected, pkg.sha256)
    if not pkg.installable:
        errors = [p for p in pkg.problems if p.severity == "error"]
        first = errors[0]
        more = f" (and {plural(len(errors) - 1, 'more problem')})" if len(errors) > 1 else ""
        return ArchiveRejected(f"{escape(name)}: {first.message}{more}", first.hint,
                               problems=errors)
    return None


def fit_refusal(pkg: Package, built: BuiltFor, root: CudaRoot, name: str, old: Manifest | None,
                driver: Callable[[], DriverFacts | None],
                force: bool) -> tuple[ArchiveRejected | None, list[str]]:
    """Whether the build fits the root (its CUDA major) and this machine (`driver` waits for
    its facts): the refusal (None with `force`) and the notes of what
    only warns, as install judges it and inspect reports it."""
    refusal = None if force else cuda_mismatch(pkg, built, root, name, old)
    unfit, notes = machine_fit(pkg, built, driver(), force)
    return refusal or unfit, notes


def stage_and_judge(archive: Path, work: Path, root: CudaRoot, state: StateDir, *,
                    expected: Expected | None, on_read: Progress | None,
                    xz: str | None, env: Mapping[str, str],
                    driver: Callable[[], DriverFacts | None], force: bool,
                    say: Callable[[str], None],
                    clients: Callable[[], Sequence[str] | None],
                    source: Growing | None = None) -> Judged:
    """Stage the archive under `work` and judge it against the root (its CUDA major) and this
    machine (`driver` waits for its facts); a misfit is refused unless `force`. `clients`
    names the frameworks on this machine, asked only when the release is the JIT flavour
    (flavour_notes)."""
    if source is None:  # a path that is no file is said so, not named in a step first
        check_readable(archive)
    # the step a log names again while the members are decoded after the bytes are read
    say(f"staging {escape(archive.name)}: reading, checking and writing its members")
    pkg = stage(archive, work / "staging", expected, on_read, xz, env, source)
    say(f"judging cuDNN {pkg.cudnn_version or '(version unknown)'}: whether it fits "
        f"{root.path} and this machine's GPUs and driver")
    built = built_for(pkg, work / "probe", env)
    old = state.manifest()
    refusal, notes = fit_refusal(pkg, built, root, archive.name, old, driver, force)
    if refusal is not None:
        raise refusal
    for note in flavour_notes(pkg, clients):
        say(note)
        notes.append(note)
    return Judged(pkg, built, old, notes)


def flavour_notes(pkg: Package, clients: Callable[[], Sequence[str] | None]) -> list[str]:
    """What the JIT flavour does not serve of the frameworks on this machine, said before
    anything is written. A warning, not a refusal: a framework usually loads the cuDNN of its
    own wheels, not this root's, and the JIT flavour is a deliberate choice for the clients it
    serves; verify's clients check fails where one present would break with this cuDNN."""
    comp = pkg.composition
    if comp is None or comp.flavour != gen.JIT:
        return []
    present = set(comp.required)
    out = []
    for name in dict.fromkeys(clients() or ()):
        if name not in client_facts.FRAMEWORK_KIND:
            continue
        works, why = client_facts.framework_verdict(name, present, pkg.generation)
        if not works:
            out.append(f"the JIT flavour does not serve all of {name} here: {why}; the full "
                       "flavour of this release does")
    return out
