"""Which cuDNN Theano 1.0.5 (its last release) can use, each rule with the reason it holds, and
which cuDNN release would serve it on a given CUDA."""
from __future__ import annotations

from typing import Iterable, Optional, Sequence

from msgspec import Struct

THEANO = "1.0.5"
DNN_SOURCE = "theano/gpuarray/dnn.py"


class CudnnRule(Struct, frozen=True):
    """cuDNN releases from `first` to `last` (major, minor; inclusive, None: no end) and what
    Theano 1.0.5 does with them: `usable`, and `reason` (a format string taking `version`;
    None when there is nothing to say); `ask_by_default`: whether the config the tool writes
    asks Theano for cuDNN (optimizer_including=cudnn) unless told otherwise."""

    first: tuple[int, int]
    last: Optional[tuple[int, int]]
    usable: bool
    reason: Optional[str]
    ask_by_default: bool = True

    def covers(self, major_minor: tuple[int, int]) -> bool:
        return self.first <= major_minor and (self.last is None or major_minor <= self.last)


# One table: theano/gpuarray/dnn.py of Theano 1.0.5 (_dnn_check_version, and the cuDNN calls
# its C code makes). Optimizer_including=cudnn turns "cannot use" into an error on a GPU. The
# releases before v5 are still asked for by default: the Theano releases of their day (0.7 to
# 0.9, whose old backend takes cuDNN from v2) use them, and their configs are written as ever.
CUDNN_RULES: tuple[CudnnRule, ...] = (
    CudnnRule((0, 0), (4, 99), False,
              f"Theano {THEANO} needs cuDNN v5 or newer and refuses cuDNN {{version}} ('cuDNN "
              f"version is too old', {DNN_SOURCE}); with optimizer_including=cudnn it stops "
              "instead of running without cuDNN"),
    CudnnRule((5, 0), (7, 1), True, None),
    CudnnRule((7, 2), (7, 99), True,
              f"Theano {THEANO} warns that cuDNN {{version}} is more recent than it (from 7.2), "
              "and uses it"),
    CudnnRule((8, 0), None, False,
              f"Theano {THEANO} supports cuDNN v5 to v7; this is cuDNN {{version}}: v8 removed "
              "cudnnGetConvolutionForwardAlgorithm, which Theano's convolution code calls, so "
              "its cuDNN ops do not compile, and with optimizer_including=cudnn Theano stops "
              "instead of running without cuDNN", ask_by_default=False),
)
USABLE_MAJORS = (5, 7)  # the majors of the usable rows, for words and release look-ups


def rule_for(parts: Sequence[int]) -> CudnnRule:
    """The table's row for a cuDNN version given as (major, minor, ...) or (major,)."""
    key = (parts[0], parts[1] if len(parts) > 1 else 0)
    return next(r for r in CUDNN_RULES if r.covers(key))


class Serving(Struct, frozen=True):
    """The cuDNN release that serves Theano on a CUDA major, or why none does."""

    version: Optional[str]
    file_name: Optional[str]
    text: str


def serving_release(releases: Iterable, cuda_version: Optional[str],
                    platform: str = "linux-x86_64") -> Serving:
    """The newest cuDNN Theano can use (the last usable major) built for the root's CUDA major,
    from `releases` (known_releases.releases(): version, cuda_variant "cuda10.2", platform,
    file_name); when none is, the newest CUDA that has one."""
    def numbers(text: str) -> tuple[int, ...]:
        return tuple(int(p) for p in text.split(".") if p.isdigit())

    usable = [r for r in releases if r.platform == platform
              and USABLE_MAJORS[0] <= numbers(r.version)[0] <= USABLE_MAJORS[1]]
    if not usable:
        return Serving(None, None, f"no cuDNN v{USABLE_MAJORS[0]} to v{USABLE_MAJORS[1]} for "
                                   f"{platform} is known")

    def cuda_of(r) -> tuple[int, ...]:
        return numbers(r.cuda_variant.replace("cuda", ""))

    def newest(rows):
        return max(rows, key=lambda r: (numbers(r.version), cuda_of(r)))

    cuda = numbers(cuda_version or "")
    # a build for the root's own CUDA minor first (cuDNN 7 was built per minor), else its major
    fitting = [r for r in usable if cuda[:2] and cuda_of(r)[:2] == cuda[:2]] or \
        [r for r in usable if cuda[:1] and cuda_of(r)[:1] == cuda[:1]]
    if fitting:
        best = newest(fitting)
        short = ".".join(best.version.split(".")[:3])
        return Serving(best.version, best.file_name,
                       f"cuDNN {short} ({best.file_name}) is the newest cuDNN Theano {THEANO} can "
                       f"use for CUDA {cuda_version}")
    last_cuda = max(cuda_of(r) for r in usable)
    best = newest([r for r in usable if cuda_of(r) == last_cuda])
    short = ".".join(best.version.split(".")[:3])
    cuda_text = ".".join(map(str, last_cuda))
    where = f"CUDA {cuda_version}" if cuda_version else "this CUDA"
    return Serving(None, None,
                   f"no cuDNN Theano {THEANO} can use is built for {where}; the newest one is "
                   f"cuDNN {short} for CUDA {cuda_text} ({best.file_name})")
