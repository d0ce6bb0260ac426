"""Everything about CUDA and cuDNN on this machine, found without changing anything: every CUDA
root a discovery step names, every libcudnn in those roots, the loader's directories and pip
wheels.
"""
from __future__ import annotations

import os
import re
from importlib import metadata
from pathlib import Path
from typing import Mapping

from cudnn_setup.facts import loader
from cudnn_setup.facts.cuda import CudaRoot, cuda_version, discovery_steps, why_not_toolkit
from cudnn_setup.facts.cudnn import library_file_version


def all_cuda_roots(env: Mapping[str, str], explicit: Path | None) -> list[dict]:
    """Every discovery step's candidate, usable or not, in discovery order."""
    out: list[dict] = []
    for step in discovery_steps(env, explicit):
        path, via, why = step()
        if path is None:
            out.append({"path": None, "found_via": via, "usable": False, "why": why})
            continue
        why = why_not_toolkit(path)
        entry = {"path": str(path), "real": os.path.realpath(path), "found_via": via,
                 "usable": why is None, "why": why}
        if why is None:
            entry["version"] = cuda_version(path, env)[0]
        out.append(entry)
    return out


def wheel_cudnn() -> list[dict]:
    """cuDNN shipped inside pip wheels (nvidia-cudnn-cu11/12/13) of this interpreter."""
    found = []
    for dist in metadata.distributions():
        # an email Message: get() is None for a missing key, where [] raises from Python 3.12
        name = (dist.metadata.get("Name") or "").lower()  # type: ignore[attr-defined]
        if not name.startswith("nvidia-cudnn"):
            continue
        libs = [f for f in (dist.files or []) if re.search(r"libcudnn\.so\.\d+$", str(f))]
        for lib in libs:
            found.append({"path": str(dist.locate_file(lib)), "via": f"pip wheel {name} {dist.version}",
                          "version": dist.version})
    return found


def machine_cudnn(roots: list[dict], conf: Path) -> list[dict]:
    """Every libcudnn.so.N file in CUDA roots, the loader's directories, and wheels."""
    seen: set[str] = set()
    copies = []
    dirs = []
    for r in roots:
        if r.get("usable"):
            root = CudaRoot(Path(r["path"]), r["found_via"], r.get("version"), None)
            dirs.append((root.lib_dir(), f"CUDA root {r['path']}"))
    dirs += [(Path(d), "loader path") for d in loader.search_dirs(conf)]
    for directory, via in dirs:
        if not directory.is_dir():
            continue
        for lib in sorted(directory.glob("libcudnn.so.*")):
            real = os.path.realpath(lib)
            if real in seen or not re.fullmatch(r"libcudnn\.so\.\d+", lib.name):
                continue
            seen.add(real)
            copies.append({"path": str(lib), "real": real, "via": via,
                           "version": library_file_version(os.path.basename(real))})
    for w in wheel_cudnn():
        real = os.path.realpath(w["path"])
        if real not in seen:
            seen.add(real)
            copies.append(dict(w, real=real))
    return copies
