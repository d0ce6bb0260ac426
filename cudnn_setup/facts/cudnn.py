"""Facts about cuDNN itself: generations, library names and SONAMEs, version numbers and macros.

Every other module asks here; nothing else spells these rules out again.

Generations (what NVIDIA's archives looked like, release by release):

| generation | example name                                        | top dir          | libs          |
|------------|-----------------------------------------------------|------------------|---------------|
| R1         | cudnn-6.5-linux-R1.tgz                              | flat             | libcudnn only |
| v2         | cudnn-6.5-linux-x64-v2.tgz                          | flat             | libcudnn only |
| v3         | cudnn-7.0-linux-x64-v3.0-prod.tgz                   | cuda/            | libcudnn only |
| v4-v7      | cudnn-10.2-linux-x64-v7.6.5.32.tgz                  | cuda/            | libcudnn only |
| 8.0-8.3.0  | cudnn-11.2-linux-x64-v8.1.1.33.tgz                  | cuda/            | + 6 sub-libs  |
| 8.3.1+     | cudnn-linux-x86_64-8.9.7.29_cuda12-archive.tar.xz   | the archive name | + 6 sub-libs  |
| 9.x        | cudnn-linux-x86_64-9.3.0.75_cuda12-archive.tar.xz   | the archive name | + 7 sub-libs  |

Up to v3 the library's file name and SONAME carry the CUDA version (libcudnn.so.7.0.64, SONAME
libcudnn.so.7.0); from v4 on they carry cuDNN's (libcudnn.so.7.6.5, SONAME libcudnn.so.7).
R1's cudnn.h has no version macros; v2 wrote CUDNN_VERSION literally; later headers define
CUDNN_MAJOR/MINOR/PATCHLEVEL (cudnn_version.h from 8.0). CUDNN_VERSION is
MAJOR*1000+MINOR*100+PATCH up to 8.x and MAJOR*10000+MINOR*100+PATCH from 9.0.
"""
from __future__ import annotations

import os
import re

from packaging.version import InvalidVersion, Version

R1 = "R1"
V2 = "v2"
V3 = "v3"
V4_V7 = "v4-v7"
V8_EARLY = "8.0-8.3.0"
V8_LATE = "8.3.1+"
V9 = "9.x"
GENERATIONS = (R1, V2, V3, V4_V7, V8_EARLY, V8_LATE, V9)

SUB_LIBS_8 = ("ops_infer", "ops_train", "cnn_infer", "cnn_train", "adv_infer", "adv_train")
SUB_LIBS_9 = (
    "adv", "cnn", "ops", "graph", "heuristic", "engines_precompiled", "engines_runtime_compiled",
)
# cuDNN 9.12 on also comes as a JIT flavour (`cudnn_jit-…` archives): the front library, the
# graph API and the runtime-compiled engines only. Both flavours are floors: a release's own
# libraries say what else it needs (facts/composition.py).
FULL, JIT = "full", "jit"
JIT_LIBS = ("libcudnn", "libcudnn_graph", "libcudnn_engines_runtime_compiled")
R1_VERSION = "1.0.0"  # R1 has no version macros; it is reported as 1.0.0, saying why

# A shared library's file name: stem, then .so, then an optional dotted version. \Z, not $:
# "$" would also match before a trailing newline, and names on disk may hold one.
SHARED_NAME = re.compile(r"^(?P<stem>lib[A-Za-z0-9_]+)\.so(?:\.(?P<ver>\d+(?:\.\d+)*))?\Z")
# A regular cuDNN library file as installed: libcudnn[_sub].so.X.Y[.Z]
LIBRARY_FILE = re.compile(r"^(?P<stem>libcudnn[a-z_]*)\.so\.(?P<ver>\d+(?:\.\d+)+)\Z")
# Any cuDNN library name with a version, the SONAME form too: pip wheels ship the regular
# files as libcudnn_ops.so.9, with no full version in the name.
LIBRARY_NAME = re.compile(r"^(?P<stem>libcudnn[a-z_]*)\.so\.(?P<ver>\d+(?:\.\d+)*)\Z")
# The one rule for which cuDNN library a name is of (library_stem): as archives, DT_NEEDED
# entries and the names a library dlopens spell it, so a future sub-library with a digit in its
# name still counts (facts/composition.py); the development name (no version) when asked.
_STEM_NAME = re.compile(r"^(?P<stem>libcudnn[A-Za-z0-9_]*)\.so(?P<ver>\.\d+(?:\.\d+)*)?\Z")
# Blanks within a line only ([ \t], not \s, which spans newlines): `^\s*#` over a header of a
# million empty lines would try every line start against all the lines after it.
_MACRO = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(CUDNN_MAJOR|CUDNN_MINOR|CUDNN_PATCHLEVEL|CUDNN_VERSION)"
                    r"[ \t]+\(?[ \t]*(\d{1,9})[ \t]*\)?[ \t\r]*$", re.M)
# The headers a version is read from, in order: cudnn_version.h from 8.0 on, cudnn.h before.
HEADERS_WITH_VERSION = ("cudnn_version.h", "cudnn.h")


def shared_libs_of(generation: str, flavour: str | None = None) -> tuple[str, ...]:
    """Library stems (`libcudnn`, `libcudnn_ops_infer`…) every complete package of that
    generation (and flavour) has: the floor; a release's own libraries may name more."""
    if flavour == JIT and generation == V9:
        return JIT_LIBS
    subs: tuple[str, ...] = ()
    if generation in (V8_EARLY, V8_LATE):
        subs = SUB_LIBS_8
    elif generation == V9:
        subs = SUB_LIBS_9
    return ("libcudnn",) + tuple(f"libcudnn_{s}" for s in subs)


def generation_for(major: int, layout: str, minor: int = 0, patch: int = 0) -> str:
    """Generation from the cuDNN version and the archive layout (`flat`, `cuda`, `archive`)."""
    if major <= 1:
        return R1
    if major == 2:
        return V2
    if major == 3:
        return V3
    if major <= 7:
        return V4_V7
    if major == 8:
        if layout == "cuda":
            return V8_EARLY
        if layout == "archive" or (minor, patch) >= (3, 1):
            return V8_LATE
        return V8_EARLY
    return V9


def generation_of_version(version: str) -> str | None:
    """The generation of an installed "M.m.p" version (no archive layout to go by)."""
    parts = split_version(version)
    if parts is None:
        return None
    return generation_for(parts[0], "archive", parts[1], parts[2])


def version_follows_cuda(generation: str | None) -> bool:
    """Up to v3 the library file name and SONAME carry the CUDA version, not cuDNN's."""
    return generation in (R1, V2, V3)


def expected_soname(stem: str, file_version: str | None, generation: str | None) -> str | None:
    """The SONAME a library file should have: `libcudnn.so.7.0` up to v3, `libcudnn.so.7` after."""
    if not file_version:
        return None
    parts = file_version.split(".")
    keep = 2 if version_follows_cuda(generation) else 1
    return f"{stem}.so.{'.'.join(parts[:keep])}"


def library_stem(name: str, *, unversioned: bool = False, path: bool = False) -> str | None:
    """The cuDNN library a file name is of: "libcudnn_ops" for libcudnn_ops.so.9 and
    libcudnn_ops.so.9.1.0; with `unversioned`, for the development name libcudnn_ops.so too.
    None for any other name. `name` is a base name; with `path`, the last part of a path."""
    m = _STEM_NAME.match(os.path.basename(name) if path else name)
    return m["stem"] if m and (unversioned or m["ver"]) else None


def so_base(name: str) -> str:
    """Any library's name up to ".so", the part all its versions share: "libcublasLt.so" for
    libcublasLt.so.12, "libcudnn_ops.so" for libcudnn_ops.so.9; a name without ".so" as it is.
    The loader's run-time requests, the dependency table and the sub-library checks group
    names by it."""
    i = name.find(".so")
    return name[:i + 3] if i >= 0 else name


def library_file_version(name: str) -> str | None:
    """The version in a library file's name: "7.6.5" for libcudnn.so.7.6.5, "9" for a wheel's
    libcudnn.so.9."""
    m = LIBRARY_NAME.match(name)
    return m["ver"] if m else None


def header_version(text: str) -> tuple[int, int, int] | None:
    """MAJOR, MINOR, PATCH from a cuDNN header's macros; None when it has none (R1)."""
    macros = {name: int(value) for name, value in _MACRO.findall(text)}
    if "CUDNN_MAJOR" in macros:
        return (macros["CUDNN_MAJOR"], macros.get("CUDNN_MINOR", 0),
                macros.get("CUDNN_PATCHLEVEL", 0))
    if "CUDNN_VERSION" in macros:  # v2 wrote the number literally: 2000 for 2.0.0
        return split_number(macros["CUDNN_VERSION"], major_hint=2)
    return None


def split_version(version: str | None) -> tuple[int, int, int] | None:
    """(major, minor, patch) of "M.m.p" (extra parts ignored); None when it is not a version."""
    if not version:
        return None
    try:
        release = Version(version).release
    except InvalidVersion:
        return None
    return (tuple(release) + (0, 0, 0))[:3]  # type: ignore[return-value]


def major_of(version: str | None) -> int | None:
    parts = split_version(version)
    return parts[0] if parts else None


def version_number(version: str) -> int:
    """CUDNN_VERSION of "M.m.p": M*1000+m*100+p up to 8, M*10000+m*100+p from 9."""
    parts = split_version(version)
    if parts is None:
        raise ValueError(f"not a cuDNN version: {version!r}")
    major, minor, patch = parts
    return major * (10000 if major >= 9 else 1000) + minor * 100 + patch


def split_number(number: int, major_hint: int | None = None) -> tuple[int, int, int]:
    """The inverse of version_number: 8907 → (8, 9, 7), 91900 → (9, 19, 0)."""
    if number >= 10000 and (major_hint is None or major_hint >= 9):
        return number // 10000, (number % 10000) // 100, number % 100
    return number // 1000, (number % 1000) // 100, number % 100


def version_text(number: int) -> str:
    return "%d.%d.%d" % split_number(number)


def same_release(a: str | None, b: str | None) -> bool:
    """Whether two "M.m.p" versions name the same release (a shorter one is a prefix)."""
    if not a or not b:
        return False
    pa, pb = a.split("."), b.split(".")
    n = min(len(pa), len(pb))
    return pa[:n] == pb[:n]


_OLD_NAME = re.compile(
    r"^cudnn-(?P<cuda>\d+\.\d+)-(?P<os>linux|osx|windows\d*)"
    r"-(?:(?P<arch>x64|x86_64|ppc64le|aarch64sbsa|sbsa|aarch64)-)?"
    r"(?P<ver>R\d+|v\d+(?:\.\d+)*)(?:-(?P<tag>prod|rc\d*|ga))?"
    r"\.(?P<ext>tgz|tar\.gz|tar\.xz|tar|zip)\Z"
)
_NEW_NAME = re.compile(
    r"^cudnn(?P<jit>_jit)?-(?P<os>linux|windows)-(?P<arch>x86_64|sbsa|ppc64le|aarch64)"
    r"-(?P<ver>\d+\.\d+\.\d+(?:\.\d+)?)_cuda(?P<cuda>\d+(?:\.\d+)?)"
    r"-archive\.(?P<ext>tar\.xz|tar\.gz|tgz|tar|zip)\Z"
)
_ARCH = {"x64": "x86_64", "x86_64": "x86_64", "ppc64le": "ppc64le", "sbsa": "aarch64",
         "aarch64sbsa": "aarch64", "aarch64": "aarch64"}


class NameFacts:
    """What NVIDIA's file name says about an archive (users may rename files, so all optional)."""

    __slots__ = ("os", "arch", "cuda_version", "cudnn_version", "release_tag", "extension",
                 "flavour")

    def __init__(self, os: str, arch: str, cuda_version: str, cudnn_version: str | None,
                 release_tag: str | None, extension: str, flavour: str = FULL):
        self.os = os  # linux | osx | windows
        self.arch = arch  # x86_64 | ppc64le | aarch64
        self.cuda_version = cuda_version  # "10.2", "12"
        self.cudnn_version = cudnn_version  # "7.6.5.32", "3.0", None for R1
        self.release_tag = release_tag  # prod, rc, …
        self.extension = extension
        self.flavour = flavour  # full | jit (`cudnn_jit-…`)

    @property
    def cuda_major(self) -> int:
        return int(self.cuda_version.split(".")[0])

    def to_dict(self) -> dict:
        return {
            "os": self.os, "arch": self.arch, "cuda_version": self.cuda_version,
            "cudnn_version": self.cudnn_version, "release_tag": self.release_tag,
            "flavour": self.flavour,
        }


def parse_archive_name(name: str) -> NameFacts | None:
    m = _OLD_NAME.match(name)
    if m:
        os_name = "windows" if m["os"].startswith("windows") else m["os"]
        ver = m["ver"]
        return NameFacts(
            os=os_name, arch=_ARCH.get(m["arch"] or "x64", "x86_64"), cuda_version=m["cuda"],
            cudnn_version=None if ver.startswith("R") else ver[1:], release_tag=m["tag"],
            extension=m["ext"],
        )
    m = _NEW_NAME.match(name)
    if m:
        return NameFacts(
            os=m["os"], arch=_ARCH[m["arch"]], cuda_version=m["cuda"], cudnn_version=m["ver"],
            release_tag=None, extension=m["ext"], flavour=JIT if m["jit"] else FULL,
        )
    return None


def flavour_of_name(name: str) -> str | None:
    """full or jit, from NVIDIA's archive name (or the name of its top directory); None when
    the name is not NVIDIA's."""
    facts = parse_archive_name(name)
    if facts is None:
        facts = parse_archive_name(name + ".tar.xz")  # a top directory: the name without .tar.xz
    return facts.flavour if facts else None


# How libcudnn opens its sub-libraries (read from NVIDIA's binaries with strings and readelf,
# and watched with LD_DEBUG=libs: 8.9.6.50 of nvidia-cudnn-cu11, 9.24.0.43 of nvidia-cudnn-cu13).
# 8.x: libcudnn.so.8 keeps each sub-library's SONAME as a literal (libcudnn_ops_infer.so.8) and
#   dlopens that name through its DT_RUNPATH $ORIGIN: a missing .so.8 link is a missing
#   sub-library, and 8.9 aborts the calling process.
# 9.x: libcudnn.so.9 keeps the base names (libcudnn_ops.so …) and the formats "%s.%d.%d.%d",
#   "%s.%d.%d", "%s.%d", and dlopens base.M.m.p, base.M.m, base.M, then the base, with its own
#   version, through its DT_RPATH $ORIGIN; libcudnn_graph.so.9 opens heuristic and the engines
#   the same way. The .so.9 links are the fallback only. The sub-libraries list
#   libcudnn_graph.so.9 (and cnn and adv libcudnn_ops.so.9) as DT_NEEDED; ld.so matches those
#   to the libraries already loaded by their SONAME, and a client's first call loads graph and
#   ops first (PyTorch 2.11 with cuDNN 9.19 ran with lib/libcudnn_graph.so.9 deleted and mapped
#   only the 9.19.0 files), so the links do not matter to cuDNN itself either.
OPENED_FIRST = {V9: ("libcudnn_graph", "libcudnn_ops")}


def names_opened(stem: str, version: str | None, generation: str | None) -> tuple[str, ...]:
    """The names libcudnn (or libcudnn_graph) of `generation` and `version` tries, in order,
    for sub-library `stem`: the SONAME alone before 9, base.M.m.p … base from 9 on."""
    if generation == V9 and version:
        parts = version.split(".")[:3]
        base = f"{stem}.so"
        return tuple(f"{base}.{'.'.join(parts[:n])}" for n in range(len(parts), 0, -1)) + (base,)
    soname = expected_soname(stem, version, generation)
    return (soname,) if soname else ()


def opens_by_soname(generation: str | None) -> bool:
    """Whether libcudnn of `generation` opens its sub-libraries by their SONAME links (8.x) or
    by their full file names (9.x: the links are for other programs)."""
    return generation in (V8_EARLY, V8_LATE)


def version_check_function(stem: str) -> str:
    """cudnnOpsVersionCheck for libcudnn_ops, cudnnOpsInferVersionCheck for
    libcudnn_ops_infer: the function of libcudnn that loads that sub-library its own way."""
    return "cudnn" + "".join(p.title() for p in stem[len("libcudnn_"):].split("_")) + \
        "VersionCheck"
