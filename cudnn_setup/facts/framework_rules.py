"""Which cuDNN each deep-learning framework accepts, by the framework's own rule.

A framework is built against one cuDNN (its headers' CUDNN_MAJOR.MINOR.PATCH) and at run time
uses whichever libcudnn the loader found. Each framework decides differently whether that pair
works; each rule below says where it comes from, so the tool's verdict is the framework's.
"""
from __future__ import annotations

import re
import shlex
from typing import Callable, Sequence, Tuple, Union

from msgspec import Struct

Version = Tuple[int, ...]  # 1 to 3 parts: (9,) when only the major is known
VersionLike = Union[int, str, Sequence[int], None]

COMPATIBLE, INCOMPATIBLE, UNKNOWN = "compatible", "incompatible", "unknown"

# NVIDIA's promise for applications built against cuDNN >= 7: same major, and a library minor at
# least the one built against; patch releases are interchangeable.
NVIDIA_RULE_URL = ("https://docs.nvidia.com/deeplearning/cudnn/latest/developer/"
                   "forward-compatibility.html#cudnn-api-compatibility")
TORCH_RULE_URL = ("https://github.com/pytorch/pytorch/blob/main/torch/backends/cudnn/"
                  "__init__.py")
XLA_RULE_URL = ("https://github.com/openxla/xla/blob/main/xla/stream_executor/cuda/"
                "cuda_dnn.cc")
JAX_RULE_URL = "https://github.com/jax-ml/jax/blob/main/jax_plugins/cuda/__init__.py"
ORT_RULE_URL = ("https://onnxruntime.ai/docs/execution-providers/"
                "CUDA-ExecutionProvider.html#requirements")

_DOTTED = re.compile(r"^\s*v?(\d{1,3})(?:\.(\d{1,3}))?(?:\.(\d{1,4}))?(?:\.\d+)*\s*\Z")


def decode_version_number(number: int) -> Version | None:
    """cudnnGetVersion()'s integer as (major, minor, patch).

    CUDNN_VERSION is MAJOR*1000 + MINOR*100 + PATCH up to cuDNN 8 and MAJOR*10000 + MINOR*100 +
    PATCH from cuDNN 9 on (cudnn_version.h of each release), so 8907 is 8.9.7 and 91900 9.19.0.
    """
    if isinstance(number, bool) or not isinstance(number, int) or not 1000 <= number < 1000000:
        return None
    if number >= 90000:
        return number // 10000, number // 100 % 100, number % 100
    if number < 10000:
        return number // 1000, number // 100 % 10, number % 100
    return None  # 10000-89999 is neither encoding


def parse_version(value: object) -> Version | None:
    """A cuDNN version from what frameworks and files say: 91900, "9.19.0", "9", (9, 19, 0);
    None for anything else (what a child sent is passed as it came)."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        if value >= 1000:
            return decode_version_number(value)
        return (value,) if 0 <= value < 100 else None
    if isinstance(value, str):
        m = _DOTTED.match(value)
        if m:
            return tuple(int(part) for part in m.groups() if part is not None)
        digits = value.strip()
        # int() refuses more than 4300 digits (ValueError): no version is longer than a few
        return decode_version_number(int(digits)) if digits.isdigit() and len(digits) < 20 \
            else None
    if isinstance(value, (tuple, list)) and 1 <= len(value) <= 4 and all(
            isinstance(part, int) and not isinstance(part, bool) and 0 <= part < 10000
            for part in value):
        return tuple(value[:3])
    return None


def version_text(version: Version | None) -> str | None:
    return ".".join(str(part) for part in version) if version else None


class Rule(Struct, frozen=True):
    framework: str
    summary: str  # the rule in one line, for people
    source: str  # where the framework states or enforces it
    check: Callable[[Version, Version], Tuple[str, str]]

    def describe(self) -> str:
        return f"{self.summary} ({self.source})"


def _minor_at_least(built: Version, loaded: Version, who: str) -> Tuple[str, str]:
    if loaded[0] != built[0]:
        return INCOMPATIBLE, f"{who} needs cuDNN major {built[0]}, this one is {loaded[0]}"
    if len(built) < 2 or len(loaded) < 2:
        which = "it was built against" if len(built) < 2 else "of the loaded cuDNN"
        return UNKNOWN, (f"same major ({built[0]}), but the minor {which} is not known and "
                         f"{who}'s rule compares minors")
    if loaded[1] < built[1]:
        return INCOMPATIBLE, (f"{who} was built against cuDNN {version_text(built)} and needs a "
                              f"{built[0]}.x at least that new; {version_text(loaded)} is older")
    return COMPATIBLE, (f"same major, minor {loaded[1]} >= {built[1]}: {who}'s rule is met")


def _torch(built: Version, loaded: Version) -> Tuple[str, str]:
    # torch/backends/cudnn/__init__.py, _init(): different majors are incompatible; below
    # cuDNN 7 (and on ROCm) the minors must be equal; from 7 on runtime_minor >= compile_minor.
    # Failing it raises "cuDNN version incompatibility: PyTorch was compiled against ... but
    # found runtime version ..." from torch.backends.cudnn.version() and the first cuDNN op.
    if built[0] < 7 and loaded[0] == built[0]:
        if len(built) < 2 or len(loaded) < 2:
            return UNKNOWN, "below cuDNN 7 PyTorch needs the exact minor, which is not known"
        if loaded[1] != built[1]:
            return INCOMPATIBLE, (f"below cuDNN 7 PyTorch needs the minor it was built with "
                                  f"({version_text(built)}), not {version_text(loaded)}")
        return COMPATIBLE, "same major and minor: PyTorch's rule is met"
    return _minor_at_least(built, loaded, "PyTorch")


def _xla(who: str) -> Callable[[Version, Version], Tuple[str, str]]:
    # xla/stream_executor/cuda/cuda_dnn.cc, IsSourceCompatibleWithCudnnLibrary(): the loaded
    # major must equal the source's and its minor be >= the source's; patch levels never matter.
    # Failing it logs "Loaded runtime CuDNN library: X but source was compiled with: Y" and the
    # DNN support does not initialise (TensorFlow and jaxlib's CUDA plugin share this code).
    def check(built: Version, loaded: Version) -> Tuple[str, str]:
        return _minor_at_least(built, loaded, who)
    return check


def _jax(built: Version, loaded: Version) -> Tuple[str, str]:
    # jax_plugins/cuda/__init__.py, _check_cuda_versions(): besides XLA's check at DNN start-up,
    # a runtime cuDNN 9.10.0 with a build version other than 9.10.0 is refused ("cuDNN 9.10.0 had
    # a binary backward-compatibility issue"). Its generic _version_check compares
    # build_version // 100 with the unscaled runtime version, so for cuDNN it never refuses.
    if len(loaded) == 3 and loaded == (9, 10, 0) and len(built) == 3 and built != (9, 10, 0):
        return INCOMPATIBLE, ("JAX refuses cuDNN 9.10.0 when built against another version "
                              "(a binary backward-compatibility issue fixed in 9.10.1)")
    return _minor_at_least(built, loaded, "JAX")


def _nvidia(who: str) -> Callable[[Version, Version], Tuple[str, str]]:
    def check(built: Version, loaded: Version) -> Tuple[str, str]:
        if loaded[0] != built[0]:
            return INCOMPATIBLE, f"{who} needs cuDNN major {built[0]}, this one is {loaded[0]}"
        if len(built) < 2 or len(loaded) < 2:
            return COMPATIBLE, (f"same major ({built[0]}); {who} states only the major it needs")
        return _minor_at_least(built, loaded, who)
    return check


RULES = {
    "torch": Rule("torch", "same major; from cuDNN 7 a runtime minor >= the compiled minor "
                  "(below 7: the same minor)", TORCH_RULE_URL, _torch),
    "tensorflow": Rule("tensorflow", "same major and a loaded minor >= the source minor",
                       XLA_RULE_URL, _xla("TensorFlow")),
    "jax": Rule("jax", "same major and a loaded minor >= the build minor; never a runtime 9.10.0 "
                "with another build version", JAX_RULE_URL, _jax),
    # ONNX Runtime checks nothing at run time; its requirements page says builds for cuDNN 8.x
    # and 9.x do not mix. Within a major, NVIDIA's rule applies where both minors are known.
    "onnxruntime": Rule("onnxruntime", "same major (ONNX Runtime's requirements); NVIDIA's "
                        "minor rule where both minors are known", ORT_RULE_URL,
                        _nvidia("ONNX Runtime")),
    # CuPy (up to v13; v14 removed cuDNN) links libcudnn.so.N and checks nothing further; NVIDIA's
    # API-compatibility rule is what holds for it.
    "cupy": Rule("cupy", "NVIDIA's rule: same major and a library minor >= the build minor",
                 NVIDIA_RULE_URL, _nvidia("CuPy")),
}
DEFAULT_RULE = Rule("*", "NVIDIA's rule: same major and a library minor >= the build minor",
                    NVIDIA_RULE_URL, _nvidia("the program"))


def rule_for(framework: str) -> Rule:
    return RULES.get(framework, DEFAULT_RULE)


def judge(framework: str, built_for: VersionLike, loaded: VersionLike) -> Tuple[str, str]:
    """(compatible | incompatible | unknown, why) for a framework built against one cuDNN and
    loading another, by that framework's own rule."""
    built, got = parse_version(built_for), parse_version(loaded)
    if built is None:
        return UNKNOWN, "the cuDNN version it was built against is not known"
    if got is None:
        return UNKNOWN, "the version of the cuDNN it loads is not known"
    return rule_for(framework).check(built, got)


def safe_alternative(built_for: VersionLike, directory: str | None = None) -> str:
    """What to do instead of giving a framework an older cuDNN."""
    built = parse_version(built_for)
    if built and len(built) > 1:
        newer = f"a cuDNN {version_text(built)} or newer {built[0]}.x"
    elif built:
        newer = f"a cuDNN {built[0]}.x at least as new as the one it was built against"
    else:
        newer = "a cuDNN at least as new as the one it was built against"
    where = shlex.quote(directory) if directory else "DIR"
    return ("set the library path only for the programs that need this cuDNN (a per-program "
            f"environment: `env LD_LIBRARY_PATH={where} program`), or install {newer}")
