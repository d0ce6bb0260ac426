"""Facts about every cuDNN archive generation NVIDIA shipped, and what an archive's name says."""
from __future__ import annotations

import re
from dataclasses import dataclass

R1 = "R1"
V2 = "v2"
V3 = "v3"
V4_V7 = "v4-v7"
V8_EARLY = "8.0-8.3.0"
V8_LATE = "8.3.1+"
V9 = "9.x"

SUB_LIBS_8 = ("ops_infer", "ops_train", "cnn_infer", "cnn_train", "adv_infer", "adv_train")
SUB_LIBS_9 = (
    "adv", "cnn", "ops", "graph", "heuristic", "engines_precompiled", "engines_runtime_compiled",
)


def shared_libs_of(generation: str) -> tuple[str, ...]:
    """Library stems (`libcudnn`, `libcudnn_ops_infer`…) a complete package of that generation has."""
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
        if layout == "archive" or (minor, patch) >= (3, 1):
            return V8_LATE
        return V8_EARLY
    return V9


def version_follows_cuda(generation: str) -> bool:
    """Up to v3 the library file name and SONAME carry the CUDA version, not cuDNN's."""
    return generation in (R1, V2, V3)


_OLD_NAME = re.compile(
    r"^cudnn-(?P<cuda>\d+\.\d+)-(?P<os>linux|osx|windows\d*)"
    r"-(?:(?P<arch>x64|x86_64|ppc64le|aarch64sbsa|sbsa|aarch64)-)?"
    r"(?P<ver>R\d+|v\d+(?:\.\d+)*)(?:-(?P<tag>prod|rc\d*|ga))?"
    r"\.(?P<ext>tgz|tar\.gz|tar\.xz|tar|zip)$"
)
_NEW_NAME = re.compile(
    r"^cudnn-(?P<os>linux|windows)-(?P<arch>x86_64|sbsa|ppc64le|aarch64)"
    r"-(?P<ver>\d+\.\d+\.\d+(?:\.\d+)?)_cuda(?P<cuda>\d+(?:\.\d+)?)"
    r"-archive\.(?P<ext>tar\.xz|tar\.gz|tgz|tar|zip)$"
)
_ARCH = {"x64": "x86_64", "x86_64": "x86_64", "ppc64le": "ppc64le", "sbsa": "aarch64",
         "aarch64sbsa": "aarch64", "aarch64": "aarch64"}


@dataclass(frozen=True)
class NameFacts:
    """What NVIDIA's file name says about an archive (users may rename files, so all optional)."""

    os: str  # linux | osx | windows
    arch: str  # x86_64 | ppc64le | aarch64
    cuda_version: str  # "10.2", "12"
    cudnn_version: str | None  # "7.6.5.32", "3.0", None for R1
    release_tag: str | None  # prod, rc, …
    extension: str

    def to_dict(self) -> dict:
        return {
            "os": self.os, "arch": self.arch, "cuda_version": self.cuda_version,
            "cudnn_version": self.cudnn_version, "release_tag": self.release_tag,
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
            release_tag=None, extension=m["ext"],
        )
    return None
