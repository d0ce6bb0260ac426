"""Which GPUs a cuDNN release supports, which driver a CUDA build needs, and whether they fit.

The tables are data with their sources; the functions below only read them.
"""
from __future__ import annotations

from typing import Iterable, Sequence

from packaging.version import InvalidVersion, Version

from msgspec import Struct

SM_760 = "https://docs.nvidia.com/deeplearning/cudnn/archives/cudnn_760/cudnn-support-matrix/index.html"
SM_803 = "https://docs.nvidia.com/deeplearning/cudnn/archives/cudnn-803/support-matrix/index.html"
SM_822 = "https://docs.nvidia.com/deeplearning/cudnn/archives/cudnn-822/support-matrix/index.html"
SM_850 = "https://docs.nvidia.com/deeplearning/cudnn/archives/cudnn-850/pdf/cuDNN-Support-Matrix.pdf"
SM_891 = "https://docs.nvidia.com/deeplearning/cudnn/archives/cudnn-891/support-matrix/index.html"
SM_896 = "https://docs.nvidia.com/deeplearning/cudnn/archives/cudnn-896/support-matrix"
SM_900 = "https://docs.nvidia.com/deeplearning/cudnn/backend/v9.0.0/reference/support-matrix.html"
SM_9102 = "https://docs.nvidia.com/deeplearning/cudnn/latest/support-matrix/index.html (9.10.2 edition)"
SM_9170 = "https://docs.nvidia.com/deeplearning/sdk/cudnn-support-matrix/index.html (9.17.0 edition)"
GUIDE_V2 = ("cuDNN Library User Guide, CUDNN_STATUS_ARCH_MISMATCH: \"cuDNN only supports devices "
            "with compute capabilities greater than or equal to 3.0\" (quoted in "
            "https://github.com/pluskid/Mocha.jl/issues/57)")
CUDA_12_8_NOTES = ("CUDA 12.8 release notes, Deprecated Architectures: Maxwell, Pascal and Volta "
                   "\"offline compilation and library support will be removed in the next major CUDA "
                   "Toolkit version release\" https://docs.nvidia.com/cuda/archive/12.8.1/"
                   "cuda-toolkit-release-notes/index.html")
KEPLER_THIRD_PARTY = ("NVIDIA's matrices for 8.6.0-8.9.0 were not found; a third-party Kepler build "
                      "names 8.7.0 the last cuDNN for Kepler "
                      "(https://github.com/jeremistderechte/PyTorch-Kepler-Wheels/releases)")
DRIVER_NOTES = "https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html#id5"
MINOR_COMPAT = "https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html"


class CudnnSupport(Struct, frozen=True):
    """Compute capabilities cuDNN releases first..last (inclusive) support, per CUDA build."""

    first: str
    last: str | None  # None: still current
    cuda: tuple[int, ...]  # CUDA majors of the builds the row is about (10 means 10.x builds)
    min_cc: str
    max_cc: str | None  # newest listed architecture; None: no limit (cuDNN 9 is forward compatible)
    verified: bool  # False: the row is inferred; a misfit from it is a warning, never a refusal
    source: str


CUDNN_SUPPORT: tuple[CudnnSupport, ...] = (
    CudnnSupport("1.0.0", "6.0.21", (6, 7, 8), "3.0", None, True, GUIDE_V2),
    CudnnSupport("7.0.0", "7.6.5", (8, 9, 10), "3.0", "7.5", True, SM_760 + " ; " + SM_803),
    CudnnSupport("8.0.0", "8.5.0", (10,), "3.0", None, True, SM_803 + " ; " + SM_822),
    CudnnSupport("8.0.0", "8.5.0", (11,), "3.5", None, True, SM_822 + " ; " + SM_850),
    CudnnSupport("8.6.0", "8.9.0", (11, 12), "3.5", "9.0", False, KEPLER_THIRD_PARTY),
    CudnnSupport("8.9.1", "8.9.7", (11, 12), "5.0", "9.0", True, SM_891 + " ; " + SM_896),
    CudnnSupport("9.0.0", "9.10.2", (11, 12), "5.0", None, True, SM_900 + " ; " + SM_9102),
    # Between 9.10.2 (5.0 and later, Maxwell/Pascal/Volta marked deprecated) and 9.17.0 (7.5 and
    # later) the CUDA 12 builds dropped them; which release did is not in the sources we hold.
    CudnnSupport("9.11.0", "9.16.99", (12,), "7.5", None, False, SM_9102 + " ; " + SM_9170),
    CudnnSupport("9.11.0", None, (13,), "7.5", None, True, SM_9170 + " ; " + CUDA_12_8_NOTES),
    CudnnSupport("9.17.0", None, (12,), "7.5", None, True, SM_9170),
)

# CUDA toolkit (GA release) → minimum Linux x86_64 driver, from the release notes' table "CUDA
# Toolkit and Corresponding Driver Versions" (DRIVER_NOTES; rows up to 11.6 as reproduced in
# cuDNN-era copies of that table, 12.8 and 13.0 also in the cuDNN 9.10.2/9.17.0 matrices). The
# GA minimum is also the driver each toolkit's runfile bundles, as its name says
# (cuda_12.4.0_550.54.14_linux.run, cuda_11.8.0_520.61.05_linux.run…), which the 11.7–12.9 rows
# were checked against.
TOOLKIT_DRIVER: dict[str, str] = {
    "7.0": "346.46", "7.5": "352.31", "8.0": "367.48", "9.0": "384.81", "9.1": "390.46",
    "9.2": "396.26", "10.0": "410.48", "10.1": "418.39", "10.2": "440.33", "11.0": "450.36.06",
    "11.1": "455.23", "11.2": "460.27.03", "11.3": "465.19.01", "11.4": "470.42.01",
    "11.5": "495.29.05", "11.6": "510.39.01", "11.7": "515.43.04", "11.8": "520.61.05",
    "12.0": "525.60.13", "12.1": "530.30.02", "12.2": "535.54.03", "12.3": "545.23.06",
    "12.4": "550.54.14", "12.5": "555.42.02", "12.6": "560.28.03", "12.8": "570.26",
    "12.9": "575.51.03", "13.0": "580.65.06",
}

# From CUDA 11 on, a build for any X.y runs on a driver of the X family at least this new
# ("minor version compatibility", MINOR_COMPAT; exact numbers from the cuDNN support matrices).
MINOR_COMPAT_DRIVER: dict[int, str] = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}


def _v(text: str) -> Version:
    return Version(text)


def cc_version(cc: str) -> Version:
    return Version(cc)


def cuda_of_driver(driver_cuda: int) -> str:
    """cuDriverGetVersion()'s integer → the newest CUDA it runs: 13000 → "13.0", 12040 → "12.4"."""
    return f"{driver_cuda // 1000}.{driver_cuda % 1000 // 10}"


def _rows_for(cudnn_version: str, cuda_major: int) -> list[CudnnSupport]:
    v = _v(cudnn_version)
    return [r for r in CUDNN_SUPPORT
            if cuda_major in r.cuda and _v(r.first) <= v and (r.last is None or v <= _v(r.last))]


def support_for(cudnn_version: str, cuda_major: int) -> CudnnSupport | None:
    """The row for a cuDNN release built for a CUDA major (verified rows first)."""
    rows = _rows_for(cudnn_version, cuda_major)
    rows.sort(key=lambda r: not r.verified)
    return rows[0] if rows else None


class Misfit(Struct, frozen=True):
    kind: str  # "gpu" or "driver"
    subject: str  # the GPU ("Tesla K80 (3.7)") or the driver
    severity: str  # "fail" refuses an install (unless --force); "warn" only says so
    reason: str
    hint: str
    source: str = ""

    def to_dict(self) -> dict:
        return {"kind": self.kind, "subject": self.subject, "severity": self.severity,
                "reason": self.reason, "hint": self.hint, "source": self.source}


def _release_for_cc(cc: Version, cuda_major: int | None) -> str | None:
    """The newest verified release (per CUDA build) that supports a compute capability."""
    best: tuple[tuple[Version, int], str] | None = None
    for r in CUDNN_SUPPORT:
        if not r.verified or cc < cc_version(r.min_cc) or (r.max_cc and cc > cc_version(r.max_cc)):
            continue
        for major in r.cuda:
            if cuda_major is not None and major != cuda_major:
                continue
            key = (_v(r.last) if r.last else Version("999"), major)  # newest, then newest CUDA
            name = (f"cuDNN {r.last} for CUDA {major}" if r.last
                    else f"the current cuDNN {r.first.split('.')[0]} for CUDA {major}")
            if best is None or key > best[0]:
                best = (key, name)
    return best[1] if best else None


def _variant(cuda_variant: str) -> tuple[int, Version]:
    v = _v(cuda_variant)
    return v.major, v


def driver_fits(cuda_variant: str, driver_cuda: int | None,
                driver_version: str | None = None) -> tuple[bool, str, str]:
    """(fits, reason, needed driver) for a cuDNN built for `cuda_variant` ("12", "11.8", "10.2")."""
    major, v = _variant(cuda_variant)
    if major >= 11:
        needed_cuda, needed_driver = major * 1000, MINOR_COMPAT_DRIVER.get(major)
        if needed_driver is None:  # a CUDA major newer than the table: assume X.0's driver
            needed_driver = TOOLKIT_DRIVER.get(f"{major}.0")
    else:
        key = f"{v.major}.{v.minor}"
        needed_cuda, needed_driver = v.major * 1000 + v.minor * 10, TOOLKIT_DRIVER.get(key)
    if driver_version and needed_driver:
        try:
            if _v(driver_version) < _v(needed_driver):
                return False, (f"driver {driver_version} is older than {needed_driver}, the oldest "
                               f"that runs CUDA {cuda_variant} builds"), needed_driver
        except InvalidVersion:
            pass
    if driver_cuda is not None and driver_cuda < needed_cuda:
        return False, (f"the driver supports CUDA {cuda_of_driver(driver_cuda)} at most; this cuDNN "
                       f"is built for CUDA {cuda_variant}"), needed_driver or ""
    return True, "", needed_driver or ""


def fits(cudnn_version: str, cuda_variant: str, gpus: Sequence[str | tuple[str, str]],
         driver_cuda: int | None, driver_version: str | None = None) -> list[Misfit]:
    """What keeps a cuDNN build from running here: GPUs it does not support, a driver too old.
    `gpus`: compute capabilities ("3.7") or (name, cc) pairs. No GPUs, no driver: no misfits."""
    major, _ = _variant(cuda_variant)
    out: list[Misfit] = []
    row = support_for(cudnn_version, major)
    for gpu in gpus:
        name, cc = (gpu if isinstance(gpu, tuple) else ("GPU", gpu))
        subject = f"{name} (compute capability {cc})"
        ccv = cc_version(cc)
        if row is None:
            continue
        severity = "fail" if row.verified else "warn"
        if ccv < cc_version(row.min_cc):
            fit = _release_for_cc(ccv, major) or _release_for_cc(ccv, None)
            hint = (f"{fit} supports compute capability {cc}" if fit else
                    f"no cuDNN release supports compute capability {cc}: every one needs 3.0 or newer")
            out.append(Misfit("gpu", subject, severity,
                              f"cuDNN {cudnn_version} for CUDA {major} needs compute capability "
                              f"{row.min_cc} or newer", hint, row.source))
        elif row.max_cc and ccv > cc_version(row.max_cc):
            newer = next((r for r in CUDNN_SUPPORT if r.verified and major in r.cuda
                          and _v(r.first) > _v(cudnn_version)
                          and (r.max_cc is None or ccv <= cc_version(r.max_cc))), None)
            hint = (f"cuDNN {newer.first} for CUDA {major} or newer lists it" if newer else
                    "use a newer cuDNN release")
            out.append(Misfit("gpu", subject, "warn",
                              f"cuDNN {cudnn_version} lists compute capabilities up to {row.max_cc}; "
                              "newer GPUs run it only through PTX JIT, if at all", hint, row.source))
    if driver_cuda is not None or driver_version:
        ok, reason, needed = driver_fits(cuda_variant, driver_cuda, driver_version)
        if not ok:
            alt = ""
            if driver_cuda is not None:
                have = driver_cuda // 1000
                rel = _newest_release_for(have)
                alt = f", or use {rel}" if rel and have != major else ""
            subject = f"driver {driver_version}" if driver_version or driver_cuda is None \
                else f"driver for CUDA {cuda_of_driver(driver_cuda)}"
            out.append(Misfit("driver", subject, "fail", reason,
                              f"install NVIDIA driver {needed} or newer{alt}",
                              MINOR_COMPAT if major >= 11 else DRIVER_NOTES))
    return out


def _newest_release_for(cuda_major: int) -> str | None:
    rows = [r for r in CUDNN_SUPPORT if cuda_major in r.cuda and r.verified]
    if not rows:
        return None
    r = max(rows, key=lambda r: _v(r.last) if r.last else Version("999"))
    return f"cuDNN {r.last} for CUDA {cuda_major}" if r.last else \
        f"the current cuDNN {r.first.split('.')[0]} for CUDA {cuda_major}"


def lowest_supported_cc(cudnn_version: str, cuda_major: int) -> str | None:
    row = support_for(cudnn_version, cuda_major)
    return row.min_cc if row else None


def below_every_build(cudnn_version: str, cc: str) -> str | None:
    """For a release whose CUDA build is not known: the oldest compute capability any of its
    builds supports, when `cc` is older than that by every row of the table for the release and
    every such row is verified; None when some build may run on it (or the version is unknown)."""
    try:
        v, ccv = _v(cudnn_version), cc_version(cc)
    except InvalidVersion:
        return None
    rows = [r for r in CUDNN_SUPPORT if _v(r.first) <= v and (r.last is None or v <= _v(r.last))]
    if not rows or any(not r.verified or ccv >= cc_version(r.min_cc) for r in rows):
        return None
    return min((r.min_cc for r in rows), key=cc_version)


def gpus_from(items: Iterable[dict]) -> list[tuple[str, str]]:
    """(name, cc) pairs from the driver probe's "gpus" list, skipping malformed entries."""
    out = []
    for g in items:
        name, cc = g.get("name"), g.get("compute_capability")
        if isinstance(name, str) and isinstance(cc, str):
            try:
                cc_version(cc)
            except InvalidVersion:
                continue
            out.append((name, cc))
    return out
