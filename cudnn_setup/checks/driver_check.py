"""GPUs and the NVIDIA driver, and whether a cuDNN build fits them.

* driver_facts(): each GPU (name, compute capability), the driver's release and the newest CUDA
  it runs, from probes/driver.py in a child (NVML through ctypes on libnvidia-ml.so.1, under a
  short limit of its own; else, in a second child, cuDriverGetVersion and the device attributes
  on libcuda.so.1; nvidia-smi only when libcuda cannot be used). Whatever the children answer
  is checked and bounded before anything uses it.
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
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping

from cudnn_setup.archive.problems import Problem
from cudnn_setup.checks.answer_values import Fields, integer
from cudnn_setup.checks.installation import Installation
from cudnn_setup.checks.probe import ProbeResult, probe_module, run_probe
from cudnn_setup.child import Runner
from cudnn_setup.errors import ArchiveRejected
from cudnn_setup.facts import cuda as cuda_facts
from cudnn_setup.facts import gpu_support as S
from cudnn_setup.facts.ldresolve.environment import Environment
from cudnn_setup.facts.ldresolve.ldconfig import read_cache
from cudnn_setup.facts.ldresolve.loader_facts import probe_loader
from cudnn_setup.facts.ldresolve.process import Process
from cudnn_setup.report import FAIL, PASS, SKIP, WARN, Check

NAME = "driver"
PROC_DRIVER = Path("/proc/driver/nvidia/version")  # there when the NVIDIA kernel module is loaded
TIMEOUT = 60.0
NVML_TIMEOUT = 10.0  # NVML answers in tens of milliseconds; this long means it hangs
NVML_KEY = "asks NVML"  # the runner's memo: a hung NVML is not asked again in the command
# Set, these make CUDA see other GPUs (or in another order) than NVML lists: CUDA is asked
# (probes/driver.py keeps the same list: a probe cannot import the package).
CUDA_DEVICE_ENV = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")
GPU_UNSUPPORTED, DRIVER_TOO_OLD = "gpu-unsupported", "driver-too-old"
MAX_GPUS = 64
_DRIVER_RELEASE = re.compile(r"^\d{2,4}(?:\.\d{1,4}){1,3}\Z")


def no_driver(env: Mapping[str, str], loader: Environment | None = None,
              smi: bool = True) -> str | None:
    """Why there is nothing for the driver probe to ask, found without starting it: no NVIDIA
    kernel module, no libcuda.so.1 that the loader would find for a program started from `env`
    (facts/ldresolve/; `loader` when the caller has its environment), no nvidia-smi on its
    PATH. None when any of them is there."""
    if PROC_DRIVER.exists():
        return None
    if smi and shutil.which("nvidia-smi", path=env.get("PATH", os.defpath)):
        return None
    if loader is None:
        loader = Environment(ld_library_path=env.get("LD_LIBRARY_PATH") or None,
                             cache=read_cache(), facts=probe_loader())
    found = Process(loader).find("libcuda.so.1", None)[0]
    if found.found:
        return None
    return (f"no NVIDIA driver: libcuda.so.1 cannot be loaded ({found.error})"
            + ("; nvidia-smi is not on PATH" if smi else ""))


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    compute_capability: str

    def to_dict(self) -> dict:
        return {"index": self.index, "name": self.name,
                "compute_capability": self.compute_capability}


@dataclass(frozen=True)
class DriverFacts:
    """What the driver says, checked: `status` pass (GPUs listed) | skip (no driver or no GPU,
    `reason` says which) | error (the probe itself failed); `gpus`; `driver_version`
    ("580.65.06") and where it was read; `cuda_driver_version` (13000) and `cuda` ("13.0"),
    the newest CUDA the driver runs; `found_via`. Every field has a default: an answer that
    lacks a key leaves it unknown."""

    status: str = "error"
    reason: str | None = None
    gpus: tuple[Gpu, ...] = field(default_factory=tuple)
    driver_version: str | None = None
    driver_version_from: str | None = None
    cuda_driver_version: int | None = None
    cuda: str | None = None
    found_via: str | None = None

    def to_dict(self) -> dict:
        """The JSON form (doctor's `driver`, the driver check's data)."""
        return {"status": self.status, "reason": self.reason,
                "gpus": [g.to_dict() for g in self.gpus], "driver_version": self.driver_version,
                "driver_version_from": self.driver_version_from,
                "cuda_driver_version": self.cuda_driver_version, "cuda": self.cuda,
                "found_via": self.found_via}

    @property
    def gpu_pairs(self) -> list[tuple[str, str]]:
        """(name, compute capability) of each GPU, as facts/gpu_support.py takes them."""
        return [(g.name, g.compute_capability) for g in self.gpus]

    @classmethod
    def from_answer(cls, answer: Fields) -> DriverFacts:
        """The facts in probes/driver.py's answer, each field checked and bounded."""
        status = answer.raw("status")
        state = status if status in (PASS, SKIP) else "error"
        reason = answer.nonempty("reason", 500)
        if state == "error" and not reason:
            reason = f"the driver probe answered status {str(status)[:40]!r}"
        number = answer.integer("cuda_driver_version", 1000, 100000)
        release = answer.text("driver_version", 100)
        if release is None or not _DRIVER_RELEASE.match(release):
            release = None
        gpus = tuple(Gpu(i, name[:200], cc) for i, (name, cc) in enumerate(
            S.gpus_from({"name": g.raw("name"), "compute_capability": g.raw("compute_capability")}
                        for g in answer.items("gpus", MAX_GPUS))))
        if state == PASS and not gpus:
            state, reason = SKIP, reason or "the driver lists no usable GPU"
        return cls(state, reason, gpus, release,
                   answer.nonempty("driver_version_from", 100) if release else None,
                   number, S.cuda_of_driver(number) if number is not None else None,
                   answer.nonempty("found_via", 100))


def driver_facts(env: Mapping[str, str], *, python: str | None = None,
                 timeout: float = TIMEOUT, smi: bool = True,
                 loader: Environment | None = None, runner=None) -> DriverFacts:
    """What the driver says (DriverFacts). `env` is the user's: it decides which libcuda.so.1
    and which nvidia-smi the child finds. On a machine with no trace of a driver (no_driver)
    no child is started.

    NVML is asked alone first, under NVML_TIMEOUT: its answer is the whole answer in tens of
    milliseconds, and where it hangs (a GPU fallen off the bus) that costs the short limit once
    per command (the runner remembers it), not the probe's whole limit each time. Where it
    does not answer, a child that never touches NVML asks the CUDA driver API (then
    nvidia-smi) in what is left of `timeout`."""
    absent = no_driver(env, loader, smi)
    if absent is not None:
        return DriverFacts(status=SKIP, reason=absent)
    runner = runner or Runner()
    # standard library only: no site, no user's PYTHON* settings (a third of the child's start)
    args = ["-I", "-S", *probe_module("driver")]
    started, limit = time.monotonic(), min(NVML_TIMEOUT, timeout)
    hidden = [name for name in CUDA_DEVICE_ENV if name in env]
    asked = ProbeResult(None, None, "") if hidden else run_probe(
        [*args, "--nvml"], limit, dict(env), python, runner=runner, key=NVML_KEY,
        what="asking NVML (nvmlInit_v2)")
    answer = asked.answer("NVML's answer")
    if answer.raw("status") in (PASS, SKIP):
        return DriverFacts.from_answer(answer)
    hung = asked.timed_out or asked.known is not None
    if hidden:
        nvml_why = f"{hidden[0]} is set"
    elif asked.timed_out:
        nvml_why = f"NVML did not answer in {limit:.0f} s"
    elif asked.known is not None:
        nvml_why = f"NVML was not asked: {asked.known}"
    else:
        nvml_why = answer.nonempty("reason", 300) or f"NVML's probe {asked.failure()}"
    rest = max(timeout - (time.monotonic() - started), limit)
    result = run_probe([*args, "--no-nvml"] + ([] if smi else ["--no-smi"]), rest, dict(env),
                       python, runner=runner)
    if result.data is None:
        return DriverFacts(reason=(f"{nvml_why}; the CUDA driver API's probe {result.failure()}; "
                                   "the driver is not judged")[:500])
    data = dict(result.data)
    if not data.get("driver_version") and answer.raw("driver_version"):
        data.update(driver_version=answer.raw("driver_version"), driver_version_from="NVML")
    facts = DriverFacts.from_answer(Fields(data, "the driver probe's answer"))
    if hung and facts.reason is None:  # said where the facts are shown (doctor's `driver`)
        facts = replace(facts, reason=f"{nvml_why}; the CUDA driver API answered"[:500])
    return facts


def has_driver(facts: DriverFacts) -> bool:
    return bool(facts.cuda_driver_version or facts.driver_version or facts.gpus)


def driver_present(facts: DriverFacts | None = None) -> bool:
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
    number = integer((load_data or {}).get("cudnnGetCudartVersion"), 1000, 100000)
    if number is not None:
        return cuda_facts.version_text(number), "cudnnGetCudartVersion()"
    recorded = inst.manifest.cuda_version if inst.manifest else None
    if isinstance(recorded, str) and re.fullmatch(r"\d+(?:\.\d+)?", recorded):
        return recorded, "archive name"
    major = (inst.origin_facts.get("wheel") or {}).get("cuda_major")
    if isinstance(major, int):
        return str(major), "wheel name"
    return None, None


def describe_gpus(facts: DriverFacts) -> str:
    gpus = "; ".join(f"{g.name} (compute capability {g.compute_capability})"
                     for g in facts.gpus) or "no GPU"
    driver = facts.driver_version or "?"
    cuda = facts.cuda
    return f"{gpus}; driver {driver}" + (f" (runs CUDA {cuda} at most)" if cuda else "")


def check_driver(inst: Installation, facts: DriverFacts, *,
                 load_data: dict | None = None) -> Check:
    """The `driver` check of `inst` on the machine `facts` (driver_facts) describe."""
    data = facts.to_dict()
    if facts.status == "error":
        return Check(NAME, FAIL, facts.reason or "the driver probe failed", data)
    if not has_driver(facts):
        return Check(NAME, SKIP, facts.reason or "no NVIDIA driver", data)
    seen = describe_gpus(facts)
    version = inst.version
    variant, source = built_for_cuda(inst, load_data)
    data.update(cudnn_version=version, cuda_built_for=variant, cuda_built_for_source=source)
    if not version:
        return Check(NAME, SKIP, f"{seen}; no cuDNN to judge against them", data)
    gpus = facts.gpu_pairs
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
    misfits = S.fits(version, variant, gpus, facts.cuda_driver_version, facts.driver_version)
    data["misfits"] = [m.to_dict() for m in misfits]
    what = f"cuDNN {version} for CUDA {variant} ({source})"
    if not gpus:
        if misfits:
            return Check(NAME, WARN, f"{seen}; " + "; ".join(_say(m) for m in misfits), data)
        return Check(NAME, SKIP, f"{facts.reason or 'no GPU'}; driver "
                     f"{facts.driver_version or '?'} runs {what}", data)
    fails = [m for m in misfits if m.severity == FAIL]
    if fails:
        return Check(NAME, FAIL, f"{what} cannot run here: " + "; ".join(_say(m) for m in fails), data)
    if misfits:
        return Check(NAME, WARN, f"{seen}; " + "; ".join(_say(m) for m in misfits), data)
    return Check(NAME, PASS, f"{seen}; {what} supports them", data)


def _say(m: S.Misfit) -> str:
    return f"{m.subject}: {m.reason} ({m.hint})"


def fit_before_install(cudnn_version: str, cuda_variant: str,
                       facts: DriverFacts) -> list[S.Misfit]:
    """What keeps this build from running on this machine's GPUs and driver. No GPU: nothing
    (a machine without one is not refused anything)."""
    gpus = facts.gpu_pairs
    if not gpus:
        return []
    return S.fits(cudnn_version, cuda_variant, gpus, facts.cuda_driver_version,
                  facts.driver_version)


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
