"""Whether an archive's cuDNN fits: the CUDA it was built for (from its name, else asked of the
staged library in a child), the root's CUDA major, and this machine's GPUs and driver.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from cudnn_setup.archive.package import Package
from cudnn_setup.facts import gpu_support as S
from cudnn_setup.probing.driver import DriverFacts
from cudnn_setup.probing.load_answer import WHAT as LOAD_ANSWER, LoadAnswer
from cudnn_setup.probing.probe import child_env, run_probe, stdlib_probe
from cudnn_setup.archive.problems import Problem
from cudnn_setup.durable import make_dirs
from cudnn_setup.errors import ArchiveRejected
from cudnn_setup.facts import cuda as cuda_facts
from cudnn_setup.facts import cudnn as gen
from cudnn_setup.facts.cuda import BuiltFor, CudaRoot
from cudnn_setup.fetch import known_releases
from cudnn_setup.state.manifest import Manifest
from cudnn_setup.report import FAIL
from cudnn_setup.text import escape

PROBE_TIMEOUT = 60.0
GPU_UNSUPPORTED, DRIVER_TOO_OLD = "gpu-unsupported", "driver-too-old"


def built_for(pkg: Package, work: Path, env: Mapping[str, str] | None) -> BuiltFor:
    """From the archive's name; else from cudnnGetCudartVersion() of the staged library, asked
    in a child process (native code from an archive never runs in this one).

    The child loads the library through links named by SONAME in `work`, so a cuDNN 8/9 finds
    its sub-libraries there instead of abort()ing.
    """
    if pkg.cuda_version:
        return BuiltFor(pkg.cuda_version, cuda_facts.FROM_NAME)
    main = pkg.library("libcudnn")
    if main is None or main.member.staged is None:
        return BuiltFor(None, "unknown: no library to ask")
    make_dirs(work)
    for lib in pkg.libraries:
        for name in {lib.name, lib.elf.soname if lib.elf and lib.elf.soname else lib.name}:
            if not os.path.lexists(work / name):
                os.symlink(os.path.abspath(lib.member.staged), work / name)
    target = main.elf.soname if main.elf and main.elf.soname else main.name
    result = run_probe(stdlib_probe("load") + [str(work / target)], PROBE_TIMEOUT,
                       child_env(work, env or {}))
    cuda = LoadAnswer.read(result.answer(LOAD_ANSWER)).cuda
    if cuda is not None:
        return BuiltFor(cuda, cuda_facts.FROM_LIBRARY)
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
    if root.version is None or cuda_facts.same_major(built.version, root.major) is not False:
        return None
    replaces = ""
    if old is not None and cuda_facts.same_major(old.cuda_version, root.major):
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
    """Whether the build runs on this machine's GPUs and driver (fit_before_install, install_refusal): the refusal
    (None with --force, or when nothing misfits) and notes for what only warns or was forced."""
    if driver is not None and driver.status == "error":  # a probe that died, hung or lied
        return None, [f"the GPUs and the driver could not be asked ({driver.reason or 'no answer'})"
                      ": whether this build runs on them was not judged"]
    if not driver or not built.version or not pkg.cudnn_version:
        return None, []
    misfits = fit_before_install(pkg.cudnn_version, built.version, driver)
    refusal = None if force else install_refusal(misfits, pkg.cudnn_version, built.version)
    return refusal, [("installed anyway (--force): " if m.severity == "fail" else "")
                     + f"{m.subject}: {m.reason} ({m.hint})" for m in misfits]


def fit_before_install(cudnn_version: str, cuda_variant: str,
                       facts: DriverFacts) -> list[S.Misfit]:
    """What keeps this build from running on this machine's GPUs and driver. No GPU: nothing
    (a machine without one is not refused anything)."""
    gpus = facts.gpu_pairs
    if not gpus:
        return []
    return S.fits(cudnn_version, cuda_variant, gpus, facts.cuda_driver_version,
                  facts.driver_version)


def install_refusal(misfits: list[S.Misfit], cudnn_version: str,
                    cuda_variant: str) -> ArchiveRejected | None:
    """The exit-3 error `install` raises before writing anything (unless --force) when a misfit
    is rated fail; None when nothing refuses. Misfits rated warn are for the install's notes."""
    fails = [m for m in misfits if m.severity == FAIL]
    if not fails:
        return None
    problems = [Problem(GPU_UNSUPPORTED if m.kind == "gpu" else DRIVER_TOO_OLD,
                        f"{m.subject}: {m.reason}", m.hint) for m in fails]
    message = (f"cuDNN {cudnn_version} for CUDA {cuda_variant} cannot run on this machine: "
               + "; ".join(f"{m.subject}: {m.reason}" for m in fails))
    hint = "; ".join(dict.fromkeys(m.hint for m in fails)) + "; --force installs it anyway"
    if any(m.kind == "gpu" for m in fails):  # a GPU no driver update can fix comes first
        return ArchiveRejected(message, hint, problems=problems, code="gpu-unsupported")
    return ArchiveRejected(message, hint, problems=problems, code="driver-too-old")
