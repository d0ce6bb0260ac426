"""Find the CUDA toolkit to install into, and tell which CUDA version it is.

Discovery is a list of small steps, each returning a candidate path and how it was found; the
first candidate that looks like a toolkit wins, and when none does, the error lists every step.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Callable, Mapping

from msgspec import Struct

from cudnn_setup.child import run_command
from cudnn_setup.errors import NoCudaRoot
from cudnn_setup.text import show_path
from cudnn_setup.untrusted import read_regular

TARGET_TRIPLES = ("x86_64-linux", "ppc64le-linux", "sbsa-linux", "aarch64-linux")
# How the CUDA version a cuDNN was built for is learnt, as install says it and its manifest keeps
FROM_NAME = "archive name"
FROM_LIBRARY = "cudnnGetCudartVersion() of the library"
FROM_WHEEL_NAME = "wheel name"  # only the major, from nvidia-cudnn-cuNN
_CUDA_HEADERS = ("cuda.h", "cuda_runtime.h", "cuda_runtime_api.h")
_EXEC_LINE = re.compile(r"^[ \t]*exec[ \t]+(?P<path>/\S+/bin/nvcc)\b", re.M)


class BuiltFor(Struct, frozen=True):
    """The CUDA version a cuDNN was built for ("12.4", or only the major "12" from a wheel's
    name), and how that was learnt (FROM_NAME, FROM_LIBRARY, FROM_WHEEL_NAME, the manifest's
    record), as the install and the checks say it: an archive's, before it is installed, by
    placement/fit.py; an installed one's by installation/built_for.py."""

    version: str | None
    source: str | None

    def to_dict(self) -> dict:
        return {"version": self.version, "source": self.source}


class CudaRoot(Struct, frozen=True):
    path: Path
    found_via: str
    version: str | None
    version_source: str | None

    @property
    def major(self) -> int | None:
        return int(self.version.split(".")[0]) if self.version else None

    @property
    def include_dir(self) -> Path:
        return self.path / "include"

    def lib_dir(self) -> Path:
        return library_dir(self.path)

    def to_dict(self) -> dict:
        return {"path": str(self.path), "found_via": self.found_via, "version": self.version,
                "version_source": self.version_source, "lib_dir": str(self.lib_dir())}


def library_dir(root: Path) -> Path:
    """lib64 (through its symlink), else lib, else targets/<triple>/lib, else lib64 to create."""
    for name in ("lib64", "lib"):
        candidate = root / name
        if candidate.is_dir():
            return candidate.resolve() if candidate.is_symlink() else candidate
    for triple in TARGET_TRIPLES:
        candidate = root / "targets" / triple / "lib"
        if candidate.is_dir():
            return candidate
    return root / "lib64"


def why_not_toolkit(path: Path) -> str | None:
    """None when `path` looks like a CUDA toolkit, else the reason it does not."""
    try:
        return _why_not_toolkit(path)
    except OSError as exc:  # a name too long, a directory we may not enter…
        return f"{show_path(path)} cannot be examined ({exc.strerror or exc})"


def _why_not_toolkit(path: Path) -> str | None:
    if not path.exists():
        return f"{path} does not exist"
    if not path.is_dir():
        return f"{path} is not a directory"
    include = path / "include"
    if not include.is_dir():
        return f"{path} has no include/ directory"
    if not any((include / h).is_file() for h in _CUDA_HEADERS):
        return f"{include} has no CUDA headers (cuda.h, cuda_runtime.h)"
    libs = [path / "lib64", path / "lib"] + [path / "targets" / t / "lib" for t in TARGET_TRIPLES]
    if not any(p.is_dir() for p in libs):
        return f"{path} has no lib64/, lib/ or targets/<triple>/lib directory"
    return None


Step = Callable[[], "tuple[Path | None, str, str | None]"]
"""A discovery step: (candidate or None, found_via, why there is no candidate)."""


def _env_step(env: Mapping[str, str], name: str) -> Step:
    def step():
        value = env.get(name)
        if not value:
            return None, f"${name}", f"${name} is not set"
        return Path(value), f"${name}", None
    return step


def nvcc_toolkit(nvcc: Path) -> Path | None:
    """The toolkit an nvcc belongs to, through symlinks and `exec …/bin/nvcc` wrapper scripts."""
    real = nvcc.resolve()
    if real.parent.name == "bin" and why_not_toolkit(real.parent.parent) is None:
        return real.parent.parent
    try:
        head = read_regular(real, 4096)  # a FIFO would block a plain read
    except OSError:
        return None
    if head.startswith(b"#!"):
        m = _EXEC_LINE.search(head.decode(errors="replace"))
        if m:
            return Path(m["path"]).resolve().parent.parent
    return real.parent.parent


def _nvcc_step(env: Mapping[str, str]) -> Step:
    def step():
        found = shutil.which("nvcc", path=env.get("PATH", ""))
        if not found:
            return None, "nvcc on PATH", "no nvcc on PATH"
        toolkit = nvcc_toolkit(Path(found))
        if toolkit is None:
            return None, "nvcc on PATH", f"cannot tell which toolkit {found} belongs to"
        return toolkit, f"nvcc on PATH ({found})", None
    return step


def _fixed_step(path: Path) -> Step:
    return lambda: (path, str(path), None)


def _newest_versioned_step(base: Path) -> Step:
    def step():
        found = []
        for p in base.glob("cuda-*"):
            m = re.fullmatch(r"cuda-(\d+)\.(\d+)", p.name)
            if m and p.is_dir():
                found.append(((int(m[1]), int(m[2])), p))
        if not found:
            return None, f"newest {base}/cuda-X.Y", f"no {base}/cuda-X.Y directory"
        best = max(found)[1]
        return best, f"newest {base}/cuda-X.Y", None
    return step


def discovery_steps(env: Mapping[str, str], explicit: Path | None = None,
                    prefix: Path = Path("/")) -> list[Step]:
    """The discovery steps in order. `prefix` relocates the fixed locations, for tests."""
    steps: list[Step] = []
    if explicit is not None:
        steps.append(lambda: (explicit, explicit_via(env, explicit), None))
    steps += [_env_step(env, n) for n in ("CUDA_ROOT", "CUDA_PATH", "CUDA_HOME")]
    steps.append(_nvcc_step(env))
    local = prefix / "usr" / "local"
    steps += [_fixed_step(local / "cuda"), _newest_versioned_step(local),
              _fixed_step(prefix / "opt" / "cuda")]
    return steps


FLEET_ROOT = "CUDNN_SETUP_CUDA_ROOT"  # the fleet's setting: --cuda-root's default


def explicit_via(env: Mapping[str, str], explicit: Path) -> str:
    """How the root given to the command was given: `--cuda-root`, or `$CUDNN_SETUP_CUDA_ROOT`
    when it is that variable's value (the option's default; a user who never typed the option
    is not told to change it)."""
    fleet = env.get(FLEET_ROOT)
    if fleet and os.path.abspath(fleet) == os.path.abspath(explicit):
        return f"${FLEET_ROOT}"
    return "--cuda-root"


def find_cuda_root(env: Mapping[str, str], explicit: Path | None = None,
                   prefix: Path = Path("/")) -> CudaRoot:
    tried: list[str] = []
    passed_over: list[str] = []  # a variable the user set that names no toolkit
    for step in discovery_steps(env, explicit, prefix):
        path, via, why = step()
        if path is not None:
            path = Path(os.path.abspath(path))
            why = why_not_toolkit(path)
            if why is None:
                version, source = cuda_version(path, env)
                if passed_over:  # said wherever the root is: not the one the user set
                    via += f", not {'; '.join(passed_over)}"
                return CudaRoot(path=path, found_via=via, version=version, version_source=source)
            if via.startswith("$"):
                passed_over.append(f"{via} {path} ({why})")
        tried.append(f"{via}: {why}")
        if explicit is not None and via == explicit_via(env, explicit):
            if why and "Permission denied" in why:  # a toolkit this user may not read, not none
                raise NoCudaRoot(f"{via} {explicit} cannot be read by this user: {why}",
                                 "run as a user who may read it, or make the root and its "
                                 "include/ and lib dirs readable (chmod a+rX)")
            raise NoCudaRoot(f"{via} {explicit} is not a CUDA toolkit: {why}",
                             f"point {via} at the directory holding include/ and lib64/")
    raise NoCudaRoot("no CUDA toolkit found; tried " + "; ".join(tried),
                     "install the CUDA toolkit, or pass --cuda-root DIR (or set $CUDA_ROOT)")


def cuda_version(root: Path, env: Mapping[str, str]) -> tuple[str | None, str | None]:
    """CUDA version of a toolkit from version.json, version.txt, cuda.h or nvcc --version (run
    in `env`, the command's environment: nvcc is often a wrapper script that needs its PATH).

    Each file is read only if it is a regular file, and only its first MiBs: the version is
    near the top, and a root may hold anything.
    """
    vj = root / "version.json"
    text = _head(vj)
    if text is not None:
        try:
            data = json.loads(text)
            version = data.get("cuda", {}).get("version") or data.get("cuda_cudart", {}).get("version")
            if isinstance(version, str) and _VERSION.fullmatch(version):
                return _short(version), str(vj)
        except (ValueError, AttributeError, RecursionError):
            pass
    vt = root / "version.txt"
    m = re.search(rf"CUDA Version\s+({_VERSION.pattern})(?![0-9])", _head(vt) or "")
    if m:
        return _short(m[1]), str(vt)
    header = root / "include" / "cuda.h"
    m = re.search(r"^#define[ \t]+CUDA_VERSION[ \t]+([0-9]{1,7})(?![0-9])", _head(header) or "",
                  re.M)
    if m:
        return version_text(int(m[1])), f"CUDA_VERSION in {header}"
    nvcc = root / "bin" / "nvcc"
    if nvcc.is_file() and os.access(nvcc, os.X_OK):
        out = run_command([str(nvcc), "--version"], 30, env).out
        m = re.search(r"release ([0-9]{1,4}\.[0-9]{1,4})(?![0-9])", out)
        if m:
            return m[1], f"{nvcc} --version"
    return None, None


# What a toolkit's version can be, read from its files: ASCII digits (`\d` takes any script's,
# which int() reads too), bounded (int() refuses more than 4,300 digits), nothing after it (a
# newline or an escape sequence would reach every message naming the root's CUDA). The third
# part is a build number or, in the version.json of CUDA 11 and 12, a date (11.8.20220929).
_VERSION = re.compile(r"[0-9]{1,4}\.[0-9]{1,4}(?:\.[0-9]{1,8})?")


def _head(path: Path, limit: int = 4 << 20) -> str | None:
    """The start of a regular file as text; None when it is missing, unreadable or not a file."""
    try:
        return read_regular(path, limit).decode("utf-8", errors="replace")
    except OSError:
        return None


def version_text(number: int) -> str:
    """CUDA's version integer (CUDA_VERSION, CUDART_VERSION, cuDriverGetVersion) as "M.m":
    12040 → "12.4", 11080 → "11.8"."""
    return f"{number // 1000}.{(number % 1000) // 10}"


def same_major(built_for: str | None, root: str | int | None) -> bool | None:
    """Whether a cuDNN built for CUDA `built_for` ("12.4") fits a root of CUDA `root` ("12.8",
    or its major): cuDNN is built against one CUDA major and serves every minor of it. None
    where either is unknown."""
    major = (built_for or "").split(".")[0]
    other = str(root).split(".")[0] if root is not None else ""
    if not major.isdigit() or not other.isdigit():
        return None
    return int(major) == int(other)


def _short(version: str) -> str:
    return ".".join(version.split(".")[:2])
