"""GPUs and the NVIDIA driver, and whether a cuDNN build fits them.

* driver_facts(): each GPU (name, compute capability), the driver's release and the newest CUDA
  it runs, from probes/driver.py in a child (NVML through ctypes on libnvidia-ml.so.1, else
  cuDriverGetVersion and the device attributes on libcuda.so.1; nvidia-smi only when libcuda
  cannot be used). Whatever the child answers is checked and bounded before anything uses it.
* check_driver(): the `driver` check. skip without a driver; fail when the driver is too old
  for the CUDA major this cuDNN was built for, or a GPU's compute capability is below what this
  cuDNN release supports (facts/gpu_support.py, with its sources); warn where the support
  table is inferred, or for a driver misfit on a machine without a GPU; pass listing the GPUs
  and the driver.
* fit_before_install() and install_refusal(): the same judgement before `install` writes
  anything, as exit 3 (`gpu-unsupported` / `driver-too-old`) with a hint naming a release that
  fits. No GPU on the machine: no refusal.
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Mapping

from cudnn_setup.archive.problems import Problem
from cudnn_setup.checks.answer_values import integer, nonempty
from cudnn_setup.checks.installation import Installation
from cudnn_setup.checks.probe import probe_module, run_probe
from cudnn_setup.errors import ArchiveRejected
from cudnn_setup.facts import cuda as cuda_facts
from cudnn_setup.facts import gpu_support as S
from cudnn_setup.facts import ldresolve as L
from cudnn_setup.report import FAIL, PASS, SKIP, WARN, Check

NAME = "driver"
PROC_DRIVER = Path("/proc/driver/nvidia/version")  # there when the NVIDIA kernel module is loaded
TIMEOUT = 60.0
GPU_UNSUPPORTED, DRIVER_TOO_OLD = "gpu-unsupported", "driver-too-old"
MAX_GPUS = 64
_DRIVER_RELEASE = re.compile(r"^\d{2,4}(?:\.\d{1,4}){1,3}\Z")


def no_driver(env: Mapping[str, str], loader: L.Environment | None = None,
              smi: bool = True) -> str | None:
    """Why there is nothing for the driver probe to ask, found without starting it: no NVIDIA
    kernel module, no libcuda.so.1 that the loader would find for a program started from `env`
    (facts/ldresolve.py; `loader` when the caller has its environment), no nvidia-smi on its
    PATH. None when any of them is there."""
    if PROC_DRIVER.exists():
        return None
    if smi and shutil.which("nvidia-smi", path=env.get("PATH", os.defpath)):
        return None
    if loader is None:
        loader = L.Environment(ld_library_path=env.get("LD_LIBRARY_PATH") or None,
                               cache=L.read_cache(), facts=L.probe_loader())
    found = L.Process(loader).find("libcuda.so.1", None)[0]
    if found.found:
        return None
    return (f"no NVIDIA driver: libcuda.so.1 cannot be loaded ({found.error})"
            + ("; nvidia-smi is not on PATH" if smi else ""))


def driver_facts(env: Mapping[str, str], *, python: str | None = None,
                 timeout: float = TIMEOUT, smi: bool = True,
                 loader: L.Environment | None = None, runner=None) -> dict:
    """What the driver says, checked: `status` pass (GPUs listed) | skip (no driver or no GPU,
    `reason` says which) | error (the probe itself failed); `gpus` [{index, name,
    compute_capability}]; `driver_version` ("580.65.06"); `cuda_driver_version` (13000) and
    `cuda` ("13.0"), the newest CUDA the driver runs; `found_via`. `env` is the user's: it
    decides which libcuda.so.1 and which nvidia-smi the child finds. On a machine with no
    trace of a driver (no_driver) no child is started."""
    out: dict = {"status": "error", "reason": None, "gpus": [], "driver_version": None,
                 "driver_version_from": None, "cuda_driver_version": None, "cuda": None,
                 "found_via": None}
    absent = no_driver(env, loader, smi)
    if absent is not None:
        out.update(status=SKIP, reason=absent)
        return out
    # standard library only: no site, no user's PYTHON* settings (a third of the child's start)
    args = ["-I", "-S", *probe_module("driver")] + ([] if smi else ["--no-smi"])
    result = run_probe(args, timeout, dict(env), python, runner=runner)
    data = result.data
    if data is None:
        out["reason"] = f"the driver probe {result.failure()}"[:500]
        return out
    status = data.get("status")
    out["status"] = status if status in (PASS, SKIP) else "error"
    out["reason"] = nonempty(data.get("reason"), 500)
    if out["status"] == "error" and not out["reason"]:
        out["reason"] = f"the driver probe answered status {str(status)[:40]!r}"
    number = data.get("cuda_driver_version")
    if integer(number, 1000, 100000) is not None:
        out["cuda_driver_version"], out["cuda"] = number, S.cuda_of_driver(number)
    release = data.get("driver_version")
    if isinstance(release, str) and _DRIVER_RELEASE.match(release):
        out["driver_version"] = release
        out["driver_version_from"] = nonempty(data.get("driver_version_from"), 100)
    out["found_via"] = nonempty(data.get("found_via"), 100)
    raw = data.get("gpus") if isinstance(data.get("gpus"), list) else []
    for i, (name, cc) in enumerate(S.gpus_from(g for g in raw[:MAX_GPUS] if isinstance(g, dict))):
        out["gpus"].append({"index": i, "name": name[:200], "compute_capability": cc})
    if out["status"] == PASS and not out["gpus"]:
        out["status"], out["reason"] = SKIP, out["reason"] or "the driver lists no usable GPU"
    return out


def has_driver(facts: dict) -> bool:
    return bool(facts.get("cuda_driver_version") or facts.get("driver_version") or facts.get("gpus"))


def driver_present(facts: dict | None = None) -> bool:
    """Whether this machine has an NVIDIA driver: the driver probe's facts when they found
    one, else the kernel module's /proc entry. The one rule for every check that treats a
    missing libcuda.so.1 as "no driver here" (a skip) rather than as a failure: a machine
    with the driver loaded whose libcuda.so.1 cannot be found still fails."""
    if facts is not None and has_driver(facts):
        return True
    return PROC_DRIVER.exists()


def built_for_cuda(inst: Installation, load_data: dict | None = None) -> tuple[str | None, str | None]:
    """(CUDA version this cuDNN was built for, where that came from): cudnnGetCudartVersion()
    of the loaded library, else the archive name the manifest kept, else the wheel's name."""
    number = (load_data or {}).get("cudnnGetCudartVersion")
    if integer(number, 1000, 100000) is not None:
        return cuda_facts.version_text(number), "cudnnGetCudartVersion()"
    recorded = inst.manifest.cuda_version if inst.manifest else None
    if isinstance(recorded, str) and re.fullmatch(r"\d+(?:\.\d+)?", recorded):
        return recorded, "archive name"
    major = (inst.origin_facts.get("wheel") or {}).get("cuda_major")
    if isinstance(major, int):
        return str(major), "wheel name"
    return None, None


def describe_gpus(facts: dict) -> str:
    gpus = "; ".join(f"{g['name']} (compute capability {g['compute_capability']})"
                     for g in facts.get("gpus", [])) or "no GPU"
    driver = facts.get("driver_version") or "?"
    cuda = facts.get("cuda")
    return f"{gpus}; driver {driver}" + (f" (runs CUDA {cuda} at most)" if cuda else "")


def check_driver(inst: Installation, facts: dict, *, load_data: dict | None = None) -> Check:
    """The `driver` check of `inst` on the machine `facts` (driver_facts) describe."""
    data = dict(facts)
    if facts.get("status") == "error":
        return Check(NAME, FAIL, facts.get("reason") or "the driver probe failed", data)
    if not has_driver(facts):
        return Check(NAME, SKIP, facts.get("reason") or "no NVIDIA driver", data)
    seen = describe_gpus(facts)
    version = inst.version
    variant, source = built_for_cuda(inst, load_data)
    data.update(cudnn_version=version, cuda_built_for=variant, cuda_built_for_source=source)
    if not version:
        return Check(NAME, SKIP, f"{seen}; no cuDNN to judge against them", data)
    gpus = [(g["name"], g["compute_capability"]) for g in facts.get("gpus", [])]
    if variant is None:
        data["misfits"] = []
        floors = [(f"{n} (compute capability {cc})", S.below_every_build(version, cc))
                  for n, cc in gpus]
        unsupported = [(gpu, floor) for gpu, floor in floors if floor]
        note = ("the CUDA version this cuDNN was built for is unknown (it did not load), so the "
                "driver is not judged")
        if unsupported:
            return Check(NAME, FAIL, f"cuDNN {version} does not support "
                         f"{', '.join(gpu for gpu, _ in unsupported)}: every build of it needs "
                         f"compute capability {unsupported[0][1]} or newer; {note}", data)
        return Check(NAME, WARN if gpus else SKIP, f"{seen}; {note}", data)
    misfits = S.fits(version, variant, gpus, facts.get("cuda_driver_version"),
                     facts.get("driver_version"))
    data["misfits"] = [m.to_dict() for m in misfits]
    what = f"cuDNN {version} for CUDA {variant} ({source})"
    if not gpus:
        if misfits:
            return Check(NAME, WARN, f"{seen}; " + "; ".join(_say(m) for m in misfits), data)
        return Check(NAME, SKIP, f"{facts.get('reason') or 'no GPU'}; driver "
                     f"{facts.get('driver_version') or '?'} runs {what}", data)
    fails = [m for m in misfits if m.severity == FAIL]
    if fails:
        return Check(NAME, FAIL, f"{what} cannot run here: " + "; ".join(_say(m) for m in fails), data)
    if misfits:
        return Check(NAME, WARN, f"{seen}; " + "; ".join(_say(m) for m in misfits), data)
    return Check(NAME, PASS, f"{seen}; {what} supports them", data)


def _say(m: S.Misfit) -> str:
    return f"{m.subject}: {m.reason} ({m.hint})"


def fit_before_install(cudnn_version: str, cuda_variant: str, facts: dict) -> list[S.Misfit]:
    """What keeps this build from running on this machine's GPUs and driver. No GPU: nothing
    (a machine without one is not refused anything)."""
    gpus = [(g["name"], g["compute_capability"]) for g in facts.get("gpus", [])]
    if not gpus:
        return []
    return S.fits(cudnn_version, cuda_variant, gpus, facts.get("cuda_driver_version"),
                  facts.get("driver_version"))


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
