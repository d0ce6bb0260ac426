"""Any cuDNN on the machine, not only the one cudnn-setup installed.

Builds the Installation that verify's checks look at for a cuDNN the tool did not install:

* a library directory the user names (`--lib-dir DIR [--include-dir DIR]`): a hand-copied
  cuDNN, a conda environment, an unpacked archive;
* the distribution packages' multiarch layout (NVIDIA's libcudnn9-cuda-12 / libcudnn9-dev-cuda-12
  on Debian and Ubuntu): libraries in /usr/lib/<triple>/, headers as
  /usr/include/<triple>/cudnn_v9.h and cudnn_version_v9.h, reached as /usr/include/cudnn.h and
  cudnn_version.h through update-alternatives links (/etc/alternatives/libcudnn,
  /etc/alternatives/cudnn_version_h). The links are followed and reported, never changed;
* a pip wheel's directory (nvidia-cudnn-cu11/-cu12/-cu13): site-packages/nvidia/cudnn/{lib,include},
  whose regular files are named libcudnn*.so.N (no full version in the name), so the version
  comes from cudnn_version.h (and, once loaded, cudnnGetVersion()); the wheel's dist-info name
  says which CUDA major it was built for.

Nothing here writes anything. Checks that need the tool's manifest (what was installed, with
hashes) report UNMANAGED for such a cuDNN instead of failing; every other check runs as usual.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterable

from cudnn_setup.installation.model import UNREAD, Installation, find_installation
from cudnn_setup.errors import UsageError
from cudnn_setup.facts import cudnn as gen
from cudnn_setup.facts.cuda import CudaRoot
from cudnn_setup.report import SKIP, Check
from cudnn_setup.untrusted import read_regular

UNMANAGED = "not installed by cudnn-setup: contents not recorded"
LIB_DIR, MULTIARCH, WHEEL = "lib-dir", "multiarch", "wheel"
MULTIARCH_TRIPLES = ("x86_64-linux-gnu", "aarch64-linux-gnu", "powerpc64le-linux-gnu")
MAX_HEADER_BYTES = 1 << 20  # cuDNN's version headers are a few kB
MAX_LINK_HOPS = 40  # as the kernel's limit on symlinks in a path
_WHEEL_DIST = re.compile(r"^nvidia_cudnn(?:_cu(?P<cuda>\d+))?-(?P<version>\d+(?:\.\d+)+)\.dist-info\Z")
_TRIPLE = re.compile(r"^[a-z0-9_]+-linux-gnu[a-z]*\Z")


def locate(lib_dir: Path, include_dir: Path | None = None,
           cuda_root: CudaRoot | None = None, manifest: object = UNREAD) -> Installation:
    """The cuDNN in `lib_dir` (headers in `include_dir`, else where its layout keeps them).

    `cuda_root`: the CUDA toolkit programs build against (for the `cuda` check); without one
    the Installation's root is a stand-in with no CUDA version; `manifest`: the root's, when
    already read (find_installation). Raises UsageError (code
    `no-cudnn`, exit 2) when `lib_dir` holds no libcudnn.so.N."""
    lib_dir = Path(lib_dir)
    if cuda_root is not None and include_dir is None and lib_dir.is_dir() and \
            os.path.realpath(lib_dir) == os.path.realpath(cuda_root.lib_dir()):
        return find_installation(cuda_root, manifest)  # the root's own cuDNN, with its manifest
    if not lib_dir.is_dir():
        raise UsageError(f"--lib-dir {lib_dir} is not a directory", "name the directory that "
                         "holds libcudnn.so.N", code="no-cudnn")
    libraries, majors, chosen = _libraries(lib_dir)
    if not libraries:
        raise UsageError(f"no cuDNN in {lib_dir}: no libcudnn.so.N file there",
                         "name the directory that holds libcudnn.so.N (for a pip wheel: "
                         "site-packages/nvidia/cudnn/lib)", code="no-cudnn")
    origin = origin_of(lib_dir)
    facts: dict = {"lib_dir": str(lib_dir)}
    if len(majors) > 1:
        facts["other_majors"] = sorted(m for m in majors if m != chosen)
    wheel = wheel_dist(lib_dir) if origin == WHEEL else None
    if wheel:
        facts["wheel"] = wheel
    include_dirs = [Path(include_dir)] if include_dir is not None else default_include_dirs(lib_dir)
    version, header, chain = header_version_in(include_dirs, chosen)
    if header is not None:
        facts["header"] = {"path": str(header), "links": chain,
                           "alternatives": any("/etc/alternatives/" in hop for hop in chain[1:])}
    if version is None and wheel:
        version = ".".join(wheel["version"].split(".")[:3])
        facts["version_from"] = "wheel metadata"
    elif version is not None:
        facts["version_from"] = str(header)
    include_path = Path(include_dir) if include_dir is not None else _compile_include(include_dirs, header)
    root = cuda_root or CudaRoot(_base_of(lib_dir, origin), origin, None, None)
    return Installation(root=root, lib_dir=lib_dir, manifest=None, header_version=version,
                        header_file=header, libraries=libraries, include_path=include_path,
                        origin=origin, origin_facts=facts)


def find_multiarch(prefix: Path = Path("/"), triples: Iterable[str] = MULTIARCH_TRIPLES,
                   cuda_root: CudaRoot | None = None) -> Installation | None:
    """The distribution packages' cuDNN under `prefix` (/ on a real system), or None."""
    prefix = Path(prefix)
    for triple in triples:
        for lib_dir in (prefix / "usr" / "lib" / triple, prefix / "lib" / triple):
            if lib_dir.is_dir() and _libraries(lib_dir)[0]:
                return locate(lib_dir, None, cuda_root)
    return None


def find_wheel(site_dir: Path, cuda_root: CudaRoot | None = None) -> Installation | None:
    """The cuDNN of an nvidia-cudnn-cuNN wheel installed in `site_dir`, or None."""
    lib_dir = Path(site_dir) / "nvidia" / "cudnn" / "lib"
    if lib_dir.is_dir() and _libraries(lib_dir)[0]:
        return locate(lib_dir, None, cuda_root)
    return None


def origin_of(lib_dir: Path) -> str:
    parts = Path(lib_dir).parts
    if parts[-3:] == ("nvidia", "cudnn", "lib"):
        return WHEEL
    if _TRIPLE.match(parts[-1]) and len(parts) >= 2 and parts[-2] == "lib":
        return MULTIARCH
    return LIB_DIR


def default_include_dirs(lib_dir: Path) -> list[Path]:
    """Where a layout keeps the headers that belong to `lib_dir`, in the order a compiler given
    `-I` for them looks: for the multiarch layout /usr/include first, where cudnn.h and
    cudnn_version.h are the alternatives links the dev package made."""
    lib_dir = Path(lib_dir)
    origin = origin_of(lib_dir)
    if origin == MULTIARCH:
        triple = lib_dir.name
        usr = lib_dir.parent.parent
        if usr.name != "usr":  # /lib/<triple> on a merged-/usr system
            usr = usr / "usr"
        return [usr / "include", usr / "include" / triple]
    return [lib_dir.parent / "include"]


def _base_of(lib_dir: Path, origin: str) -> Path:
    if origin == MULTIARCH:
        return default_include_dirs(lib_dir)[0].parent
    return lib_dir.parent


def _libraries(lib_dir: Path) -> tuple[list[Path], set[int], int | None]:
    """Regular files libcudnn*.so.N[.M.P] of one cuDNN major (the one libcudnn.so selects, else
    the newest), one per library: the one with the longest version in its name."""
    by_major: dict[int, dict[str, Path]] = {}
    try:
        entries = list(os.scandir(lib_dir))
    except OSError:
        return [], set(), None
    for entry in entries:
        m = gen.LIBRARY_NAME.match(entry.name)
        if not m or not entry.is_file(follow_symlinks=False):
            continue
        major = int(m["ver"].split(".")[0])
        kept = by_major.setdefault(major, {})
        old = kept.get(m["stem"])
        if old is None or _version_key(entry.name) > _version_key(old.name):
            kept[m["stem"]] = Path(entry.path)
    if not by_major:
        return [], set(), None
    chosen = _selected_major(lib_dir, set(by_major)) or max(by_major)
    libs = by_major[chosen]
    if "libcudnn" not in libs:
        return [], set(by_major), chosen
    return sorted(libs.values()), set(by_major), chosen


def _version_key(name: str) -> tuple[int, ...]:
    m = gen.LIBRARY_NAME.match(name)
    return tuple(int(x) for x in m["ver"].split(".")) if m else ()


def _selected_major(lib_dir: Path, majors: set[int]) -> int | None:
    """The major the development link libcudnn.so points at, when it resolves to one we have."""
    target = os.path.realpath(lib_dir / "libcudnn.so")
    m = gen.LIBRARY_NAME.match(os.path.basename(target))
    if m and m["stem"] == "libcudnn":
        major = int(m["ver"].split(".")[0])
        return major if major in majors else None
    return None


def header_version_in(include_dirs: Iterable[Path], major: int | None = None) \
        -> tuple[str | None, Path | None, list[str]]:
    """(M.m.p, the header it came from, its symlink chain) from the first header with version
    macros, in the order cuDNN keeps them (cudnn_version.h from 8.0, cudnn.h before), the
    distributions' _vN copies after each; a header of another major than `major` only when no
    header of that major exists. R1's cudnn.h has no macros: 1.0.0."""
    names: list[str] = []
    suffixes = [f"_v{major}"] if major else []
    for base in gen.HEADERS_WITH_VERSION:
        stem = base[:-2]
        names += [base] + [f"{stem}{s}.h" for s in suffixes]
    found: list[tuple[str, Path]] = []
    r1: Path | None = None
    for directory in include_dirs:
        for name in names:
            path = Path(directory) / name
            text = _read_header(path)
            if text is None:
                continue
            parts = gen.header_version(text)
            if parts is None:
                if name == "cudnn.h" and r1 is None:
                    r1 = path
                continue
            found.append(("%d.%d.%d" % parts, path))
    for version, path in found:
        if major is None or gen.major_of(version) == major:
            return version, path, link_chain(path)
    if found:
        return found[0][0], found[0][1], link_chain(found[0][1])
    if r1 is not None:
        return gen.R1_VERSION, r1, link_chain(r1)
    return None, None, []


def _read_header(path: Path) -> str | None:
    try:
        return read_regular(path, MAX_HEADER_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return None


def _compile_include(include_dirs: list[Path], header: Path | None) -> Path | None:
    """The directory a compiler needs (-I) for `#include <cudnn.h>`: the one holding cudnn.h
    (through the alternatives link on Debian), else the one the version header is in."""
    for directory in include_dirs:
        if (directory / "cudnn.h").is_file():
            return directory
    return header.parent if header is not None else None


def link_chain(path: Path, limit: int = MAX_LINK_HOPS) -> list[str]:
    """`path` and every symlink hop after it (/usr/include/cudnn.h → /etc/alternatives/libcudnn
    → /usr/include/x86_64-linux-gnu/cudnn_v9.h), read with readlink only."""
    chain = [str(path)]
    current = str(path)
    for _ in range(limit):
        try:
            target = os.readlink(current)
        except OSError:
            break
        current = os.path.normpath(os.path.join(os.path.dirname(current), target))
        chain.append(current)
    return chain


def wheel_dist(lib_dir: Path) -> dict | None:
    """Name, version and CUDA major of the nvidia-cudnn wheel that `lib_dir` belongs to,
    from its dist-info directory in the same site-packages."""
    site = Path(lib_dir).parent.parent.parent
    try:
        names = sorted(e.name for e in os.scandir(site) if e.is_dir())
    except OSError:
        return None
    for name in names:
        m = _WHEEL_DIST.match(name)
        if m:
            cuda = int(m["cuda"]) if m["cuda"] else None
            dist = "nvidia-cudnn" + (f"-cu{cuda}" if cuda else "")
            return {"name": dist, "version": m["version"], "cuda_major": cuda,
                    "dist_info": str(site / name)}
    return None


def describe(inst: Installation) -> dict:
    """What verify and doctor report about where the cuDNN under test came from."""
    return {"origin": inst.origin or "cuda-root", "managed": inst.manifest is not None,
            "lib_dir": str(inst.lib_dir), "include_dir": str(inst.include_dir),
            "version": inst.version, **{k: v for k, v in inst.origin_facts.items()
                                        if k not in ("lib_dir",)}}


# What each check says when the installation holds no cuDNN at all (verify on a bare root):
# `files` is the one failure ("no cuDNN in ROOT", hint: install); `driver` still reports the
# machine (GPUs, driver; "no cuDNN to judge against them"); `theano` still runs Theano's graphs
# when Theano is installed (the reason it gives is this one); every check below is skipped
# with this reason instead of its own generic one ("no library to examine", "CUDA version of
# the root or of cuDNN's build unknown", "libcudnn does not load (see load)").
NEED_CUDNN = ("elf", "versions", "load", "loader", "cuda", "compile", "gpu", "coherence", "deps")


def absent(inst: Installation) -> str | None:
    """Why there is nothing to check, when `inst` holds no cuDNN at all; None when it does."""
    if inst.header_file is None and not inst.libraries:
        return (f"no cuDNN in {inst.root.path}: no libcudnn.so.N in {inst.lib_dir} and no "
                f"cudnn.h in {inst.include_dir}")
    return None


def skipped_without_cudnn(inst: Installation) -> dict[str, Check] | None:
    """The NEED_CUDNN checks, each skipped with the real reason, when `inst` holds no cuDNN."""
    reason = absent(inst)
    if reason is None:
        return None
    return {name: Check(name, SKIP, reason) for name in NEED_CUDNN}
