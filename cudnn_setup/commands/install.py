"""`install`: fetch the archive if it is a URL, place it into the CUDA root as one transaction,
make the loader find it, write Theano's config, verify.
"""
from __future__ import annotations

import os
from pathlib import Path

from cudnn_setup.archive.wheel import WHEEL
from cudnn_setup.errors import ArchiveRejected
from cudnn_setup.placement import engine
from cudnn_setup.steps.command_wrapper import command
from cudnn_setup.steps.context import Context, reading, which
from cudnn_setup.steps.by_version import (Release, archive_name, dependency_wheels, obtain,
                                          release_for)
from cudnn_setup.sources.base import Obtained
from cudnn_setup.fetch.checksums import Expected
from cudnn_setup.steps.fetching import check_sha256
from cudnn_setup.steps.command_facts import DRIVER
from cudnn_setup.steps.loader_step import (LoaderStep, change_to_try, changes_nothing_loaded,
                                           loader_step, on_path_for)
from cudnn_setup.facts.cuda import CudaRoot, find_cuda_root
from cudnn_setup.facts.ldresolve.loadable import NotLoadable, read_object
from cudnn_setup.parallel import Done, Later
from cudnn_setup.report import FAIL, Result
from cudnn_setup.state.plan import describe_action
from cudnn_setup.text import escape, plural
from cudnn_setup.settings import user_cache_dir


@command("install")
def install(result: Result, ctx: Context, source: str, *, cuda_root: Path | None = None,
            sha256: str | None = None, theanorc: Path | None = None, no_theanorc: bool = False,
            python: str | None = None, no_verify: bool = False, dry_run: bool = False,
            force: bool = False, ldconfig: bool = False, headers: list[str] | None = None,
            cache_dir: Path | None = None, cuda: str | None = None,
            mirror: str | None = None, no_frameworks: bool = False, from_: str | None = None,
            index_url: str | None = None, with_deps: bool = False,
            verify_content: bool = False, force_theano_cudnn: bool = False) -> None:
    check_sha256(sha256)
    root = find_cuda_root(ctx.env, cuda_root)
    result.cuda_root = str(root.path)
    python = python or ctx.python
    facts = ctx.facts
    # The GPUs and driver the build must fit, asked once, by a child that starts the driver
    # (half a second on a GPU machine): it runs while the archive is read, and is waited for
    # when the staged build is judged, before anything is placed. When the install fails or is
    # interrupted first, it is not waited for: the command's runner kills it as the command
    # ends (steps/command_wrapper.py).
    if not dry_run and (refused := engine.cannot_write(root)) is not None:
        raise refused  # before the driver is asked or a byte is fetched
    facts.prefetch(DRIVER)
    # What --python's numpy says of its BLAS build, for the [blas] ldflags of Theano's config:
    # a child of a quarter second, asked while the archive is read, like the driver.
    numpy_info = None
    if not no_theanorc:
        from cudnn_setup.steps.theano_step import numpy_asked_early

        numpy_info = numpy_asked_early(ctx, python, theanorc)
    # SOURCE is offered (a release chosen and said, nothing fetched), the engine asked whether
    # that very release is installed, all in place, and only then is the archive obtained: a
    # path, a URL, a version from a tree, a mirror or a PyPI index, as a local file, the
    # checksum it must have as it is read, and its provenance (sources/).
    release = release_for(result, ctx, source, root, cuda=cuda, mirror=mirror, sha256=sha256,
                          headers=headers, cache_dir=cache_dir, from_=from_,
                          index_url=index_url)
    known = release.known if release is not None else None
    outcome = None
    if known is not None and not (force or with_deps):
        outcome = engine.installed_already(root, known, facts.driver,
                                           verify_content=verify_content, dry_run=dry_run,
                                           lock_timeout=ctx.lock_timeout,
                                           on_status=ctx.status)
    name = archive_name(source, release)
    obtained = None
    if outcome is None and not (dry_run or with_deps) and name is not None and _overlaps(name):
        outcome, obtained = _install_arriving(result, ctx, source, release, root, sha256=sha256,
                                    headers=headers, cache_dir=cache_dir, force=force,
                                    known=known, verify_content=verify_content,
                                    no_frameworks=no_frameworks, python=python)
    if outcome is None:
        obtained = obtained or obtain(result, ctx, source, release, sha256=sha256,
                                      headers=headers, cache_dir=cache_dir)
        archive, expected = obtained.path, obtained.expected
        provenance = obtained.provenance.to_dict()
        deps = dependency_wheels(result, ctx, obtained, root, headers=headers,
                                 cache_dir=cache_dir, from_=from_,
                                 index_url=index_url) if with_deps else []
        if with_deps:
            provenance["with_deps"] = [{"wheel": d.path.name, "sha256": d.provenance.sha256,
                                        "location": d.provenance.location,
                                        "checksum_from": d.provenance.checksum_from}
                                       for d in deps]
        result.add("provenance", provenance)
        outcome = engine.install(engine.Request(
            archive, root, force=force, dry_run=dry_run, expected=expected,
            on_read=reading(ctx, archive), xz=which(ctx, "xz"), env=ctx.env,
            driver=facts.driver, on_status=ctx.status, provenance=provenance,
            extra_wheels=[d.path for d in deps], known=known, verify_content=verify_content,
            clients=(lambda: None) if no_frameworks else (lambda: framework_names(ctx, python)),
            on_commit=lambda: setattr(result, "changed", True)))
    pkg = outcome.package
    if pkg is not None and pkg.compression == WHEEL and not dry_run:
        outcome.notes += wheel_runpath_notes(pkg, outcome.lib_dir or root.lib_dir(), root.path)
    result.cudnn_version = outcome.cudnn_version
    # finishing or rolling back what a killed run left changed the root too
    result.changed = (outcome.changed or outcome.recovered is not None) and not dry_run
    result.add("install", outcome.to_dict())
    result.add("would_change", outcome.changed if dry_run else None)
    _describe(result, outcome, root, dry_run)
    lib_dir = outcome.lib_dir or root.lib_dir()
    step = None
    verifying = not no_verify and not dry_run
    step_later = checks_later = None
    if not dry_run:
        on_path = on_path_for(ctx, lib_dir, ldconfig)
        # What the frameworks load now and would after the loader step's change, asked at
        # once: the step waits for it, and verify's frameworks check takes it as its report.
        change = None if no_frameworks else change_to_try(lib_dir, ldconfig, on_path)
        if change is not None:
            facts.start_look_ahead(python, change)
        step_later = Later(loader_step, ctx, lib_dir, ldconfig, verify_follows=not no_verify,
                           what_if=None if no_frameworks else (
                               lambda c: facts.look_ahead(python, c).what_if),
                           force=force, on_path=on_path)
    # Theano's config and verify: their modules (ConfigUpdater's merge, every check) are
    # imported only by an install that goes on to them. The config is written before verify
    # starts, which reads it.
    rc = theano_config = None
    if not no_theanorc:
        from cudnn_setup.steps.theano_step import theanorc_path, theanorc_step

        rc = theanorc_path(ctx, theanorc)
    if rc is not None:
        theano_config = theanorc_step(result, rc, root.path, lib_dir, dry_run,
                                      result.cudnn_version, ctx=ctx, python=python,
                                      cuda_version=root.version,
                                      force_theano_cudnn=force_theano_cudnn,
                                      numpy_info=numpy_info.result if numpy_info else None)
    if step_later is not None and verifying and changes_nothing_loaded(ldconfig, on_path):
        # The step only advises, so verify need not wait for it: its checks run while the
        # frameworks are imported for the advice, and take their report when it is made.
        checks_later = Later(_verify, ctx, root, python, rc, step_later, no_frameworks)
    if step_later is not None:
        try:
            step = step_later.result()
        except BaseException:  # interrupted, say: the config written is still said
            if theano_config is not None:
                result.checks.append(theano_config)
            raise
        result.checks.append(step.check)
        if step.changed_loader:  # ldconfig ran: what verify asks of the loader is asked again
            facts.loader_changed()
        if step.what_if:
            result.add("frameworks_what_if", [w.to_dict() for w in step.what_if])
    if theano_config is not None:
        result.checks.append(theano_config)
    if checks_later is not None:
        result.checks += checks_later.result()
    elif verifying:
        result.checks += _verify(ctx, root, python, rc, Done(step), no_frameworks)
    failed = [c.name for c in result.checks if c.status == FAIL]
    if failed:  # after "installed …", exit 1 is said in words, as verify says it
        result.lines.append(f"cuDNN in {root.path}: FAILED ({', '.join(failed)})")
    if step is not None and step.refused:
        raise step.refused


def _install_arriving(result: Result, ctx: Context, source: str, release: Release | None,
                      root: CudaRoot, *, sha256: str | None, headers: list[str] | None,
                      cache_dir: Path | None, force: bool, known: Expected | None,
                      verify_content: bool,
                      no_frameworks: bool, python: str
                      ) -> tuple[engine.Outcome | None, Obtained | None]:
    """The archive downloaded on a thread while its members are staged as they arrive
    (steps/overlap.py), the commit held until the download matched its checksum; with no
    outcome when nothing arrived to follow (found complete in the cache, or on disk): the
    caller then reads the file obtained as it is."""
    from cudnn_setup.steps.overlap import Download

    download = Download(lambda arriving: obtain(result, ctx, source, release, sha256=sha256,
                                                headers=headers, cache_dir=cache_dir,
                                                arriving=arriving))
    if not download.streaming:  # the download's error, if it failed before a byte was written
        return None, download.result()
    dest = download.arriving.dest
    assert dest is not None
    try:
        outcome = engine.install(engine.Request(
            dest, root, force=force, xz=which(ctx, "xz"), env=ctx.env, driver=ctx.facts.driver,
            on_status=ctx.status, known=known, verify_content=verify_content,
            clients=(lambda: None) if no_frameworks else (lambda: framework_names(ctx, python)),
            follow=download.follow, arrived=download.provenance,
            on_commit=lambda: setattr(result, "changed", True)))
        obtained = download.result()  # the verdict, when the root had it already
    except ArchiveRejected:
        # judged from bytes no checksum has vouched for yet: the download's verdict comes
        # first (a mismatch says so and removes its part, which a next run would resume)
        if download.arriving.rewound:
            return None, download.result()
        download.result()
        raise
    except Exception:
        if download.arriving.rewound:  # a server that ignored Range sent it all again
            return None, download.result()  # read once whole; the staging was discarded
        failed = download.failure()
        if failed is not None:  # the stream ended because the download did: say why
            raise failed from None
        raise
    except BaseException:  # interrupted: said as such, the download stopped
        download.failure()
        raise
    finally:
        download.arriving.close()
    result.add("provenance", obtained.provenance.to_dict())
    return outcome, obtained


def framework_names(ctx: Context, python: str) -> list[str] | None:
    """The frameworks `python` could import (none is imported), or None when it cannot say."""
    from cudnn_setup.probing.framework_probe import importable_frameworks
    from cudnn_setup.errors import SetupError, UsageError

    try:
        listed = importable_frameworks(python, ctx.env, runner=ctx.runner)
    except (SetupError, UsageError):
        return None
    return [f.name for f in listed if f.importable]


def _verify(ctx: Context, root: CudaRoot, python: str, rc: Path | None,
            step: Later[LoaderStep] | Done[LoaderStep], no_frameworks: bool) -> list:
    """verify's checks of the root after the install, asked of the command's facts (the
    driver asked for the install, the frameworks' report the loader step made unless it
    changed what programs load); the loader check takes the step's advice once it is there."""
    from cudnn_setup.installation.model import find_installation
    from cudnn_setup.checks.check_facts import CheckFacts
    from cudnn_setup.checks.suite import run_checks

    return run_checks(find_installation(root), CheckFacts(
        ctx.facts, python, rc, frameworks=not no_frameworks, conf=ctx.ld_so_conf,
        cache_dir=user_cache_dir(ctx.env, ctx.home),
        loader_fix=lambda: step.result().loader_fix), status=ctx.status)


def wheel_runpath_notes(pkg, lib_dir: Path, root: Path) -> list[str]:
    """What the RUNPATH NVIDIA gave a wheel's libraries means once they sit in the root.

    In the wheel they sit in site-packages/nvidia/cudnn/lib and find cuBLAS and NVRTC beside it
    ($ORIGIN/../../cublas/lib). Placed in <root>/lib, `$ORIGIN` is the root's own lib dir, and
    the other entries name directories next to the root, outside it, which the loader searches
    before its cache: the deps check judges the root as it is, those directories included."""
    entries: list[str] = []
    for lib in pkg.libraries:
        try:
            runpath = read_object(lib_dir / lib.name).runpath or ()
        except NotLoadable:
            continue
        entries += [e for e in runpath if e and e not in entries]
    if not entries:
        return []
    outside = []
    for e in entries:
        if "$ORIGIN" not in e and "${ORIGIN}" not in e:
            outside.append((e, Path(e)))
            continue
        where = Path(os.path.normpath(str(lib_dir / e.replace("${ORIGIN}", ".").replace(
            "$ORIGIN", "."))))
        if not (where == lib_dir or str(where).startswith(str(root) + os.sep)):
            outside.append((e, where))
    if not outside:
        return []
    said = ", ".join(f"{e} = {escape(str(w))}" + (" (it exists: libraries there come before "
                                                    "the system's)" if w.is_dir() else "")
                     for e, w in outside)
    return [f"the wheel's libraries keep NVIDIA's RUNPATH ({':'.join(entries)}), made for "
            f"site-packages: in {escape(str(lib_dir))} $ORIGIN finds cuBLAS and NVRTC placed "
            f"in the root, and the other entries name directories outside the root ({said}); "
            "the deps check judges the root as it is"]


def _describe(result: Result, outcome: engine.Outcome, root: CudaRoot, dry_run: bool) -> None:
    if outcome.recovered:
        result.lines.append(outcome.recovered)
    what = (f"cuDNN {outcome.cudnn_version} ({outcome.generation})" if outcome.cudnn_version
            else "cuDNN")
    where = f"{root.path} (found via {root.found_via})"
    if dry_run:
        result.lines.append(f"plan for {what} into {where}:" if outcome.changed
                            else f"{what} is already installed in {where}; nothing to do")
        result.lines += [describe_action(a) for a in outcome.plan.actions()]
        result.lines += [f"note: {n}" for n in outcome.notes]
        return
    plan = outcome.plan
    if plan.ops:
        result.lines.append(f"installed {what} into {where}: {plural(len(plan.ops), 'change')}, "
                            f"{plural(len(plan.unchanged) + len(plan.adopted), 'file')} already "
                            "in place")
    elif outcome.changed:
        result.lines.append(f"{what} was already in {where}, copied there by hand: nothing "
                            "written but cudnn-setup's record of it")
    else:
        result.lines.append(f"{what} is already installed in {where}; nothing changed")
    for path in plan.manual:
        result.lines.append(f"backed up {path}: it was not installed by cudnn-setup "
                            "(uninstall puts it back)")
    result.lines += [f"note: {n}" for n in outcome.notes]
    if plan.adopted:
        result.lines.append(f"left {plural(len(plan.adopted), 'file')} as they were: identical to the "
                            "archive's but not installed by cudnn-setup, so uninstall leaves "
                            "them (" + ", ".join(plan.adopted[:3])
                            + (" …" if len(plan.adopted) > 3 else "") + ")")


def _overlaps(name: str) -> bool:
    """steps/overlap.overlaps, imported only for an archive that is fetched: a local install
    loads neither it nor the download's threads."""
    from cudnn_setup.steps.overlap import overlaps

    return overlaps(name)
