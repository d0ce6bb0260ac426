"""Layers about the machine around the root: which copy the loader picks, and CUDA versions."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from cudnn_setup.installation.model import Installation
from cudnn_setup.facts import cuda, loader
from cudnn_setup.probing.load_answer import LoadAnswer
from cudnn_setup.report import FAIL, PASS, SKIP, WARN, Check


def check_loader(inst: Installation, env: Mapping[str, str],
                 conf: Path = Path("/etc/ld.so.conf"), fix: str | None = None,
                 cache: list[tuple[str, str]] | None = None) -> Check:
    """Whether a program started from `env` loads this cuDNN; `fix` replaces the advice to put
    its directory on LD_LIBRARY_PATH (install gives one when that would break a framework);
    `cache`: the loader cache's (soname, path) pairs, when the caller has read it."""
    ours = inst.soname_path()
    if ours is None:
        return Check("loader", SKIP, "no libcudnn installed")
    return judge_loader(ours, os.path.realpath(ours), inst.lib_dir,
                        loader.copies_of(ours.name, env, conf, cache),
                        fix or loader.ld_library_path_line(inst.lib_dir),
                        "" if fix else other_fix(inst))


def judge_loader(ours: Path, ours_real: str, lib_dir: Path, copies: list[dict], fix: str,
                 also: str = "") -> Check:
    """The `loader` check from what was seen, with no I/O: `copies` (facts/loader.copies_of)
    in the loader's order, each {path, real, version, via}; `ours` the installed libcudnn by
    its SONAME, `ours_real` the file it resolves to; `fix` the advice when programs would not
    load ours, and `also` (other_fix) the other way, said when none would find it."""
    data = {"name": ours.name, "ours": str(ours), "copies": copies}
    if not copies:
        return Check("loader", WARN, f"a program started without help would not find "
                     f"{ours.name}: {lib_dir} is not on the loader path; fix: {fix}{also}",
                     data)
    first = copies[0]
    others = [c for c in copies if c["real"] != ours_real]
    listing = "; ".join(f"{c['path']} ({c['version'] or '?'}, via {c['via']})" for c in others)
    if first["real"] != ours_real:
        return Check("loader", WARN, f"programs would load {first['path']} (cuDNN "
                     f"{first['version'] or '?'}, via {first['via']}), not ours in {lib_dir}; "
                     f"fix: {fix}" + (f"; other copies: {listing}" if listing else ""), data)
    detail = f"programs load ours ({first['path']}, via {first['via']})"
    if others:
        detail += f"; other copies on this machine: {listing}"
    return Check("loader", PASS, detail, data)


def other_fix(inst: Installation) -> str:
    """The loader fix besides LD_LIBRARY_PATH that applies to this cuDNN, if any.

    `install --ldconfig` registers a root's library dir; it does nothing for a cuDNN the tool
    does not place: a pip wheel's directory (it moves with every upgrade of the wheel, and is
    found by the frameworks through their own RPATH), or a directory given with --lib-dir."""
    if inst.origin is None:
        return " (or, as root, install with --ldconfig)"
    if inst.origin == "wheel":
        return (" (a wheel's directory is set per program, not registered with ldconfig: pip "
                "moves it with every upgrade)")
    return (f" (or, as root, list {inst.lib_dir} in a file under /etc/ld.so.conf.d/ and run "
            "ldconfig)")


def check_cuda(inst: Installation, load_data: LoadAnswer | None) -> Check:
    root_version = inst.root.version
    built_for = inst.manifest.cuda_version if inst.manifest else None
    source = inst.manifest.cuda_learnt_from if inst.manifest else ""
    if not built_for and load_data is not None and load_data.cuda:
        built_for, source = load_data.cuda, "cudnnGetCudartVersion()"
    if not root_version or not built_for:
        return Check("cuda", SKIP, "CUDA version of the root or of cuDNN's build unknown",
                     {"root": root_version, "cudnn_built_for": built_for})
    data = {"root": root_version, "cudnn_built_for": built_for, "source": source,
            "root_path": str(inst.root.path), "root_found_via": inst.root.found_via}
    root = root_phrase(inst)
    if not cuda.same_major(built_for, root_version):
        if inst.origin is None:  # the root's own cuDNN: another archive is the fix
            hint = (f"install the build for CUDA {root_version.split('.')[0]}: `cudnn-setup "
                    f"install {inst.major or 'VERSION'} --cuda-root {inst.root.path}` picks it")
        else:  # a cuDNN elsewhere, judged against a toolkit it may not be meant for
            hint = (f"pass --cuda-root naming the CUDA {built_for.split('.')[0]} toolkit your "
                    f"programs build against, or use a cuDNN built for CUDA "
                    f"{root_version.split('.')[0]}")
        return Check("cuda", FAIL, f"this cuDNN was built for CUDA {built_for} ({source}) but "
                     f"{root} is CUDA {root_version}", dict(data, hint=hint))
    return Check("cuda", PASS, f"built for CUDA {built_for} ({source}); {root} is CUDA "
                 f"{root_version}", data)


def root_phrase(inst: Installation) -> str:
    """The CUDA root a check judged against, and whether the user named it: a cuDNN outside a
    root (--lib-dir) is judged against a discovered one unless --cuda-root is given."""
    if inst.origin is None:
        return "the root"
    how = ("given by --cuda-root" if inst.root.found_via == "--cuda-root" else
           f"discovered via {inst.root.found_via}, not given; --cuda-root names another")
    return f"the CUDA root {inst.root.path} ({how})"
