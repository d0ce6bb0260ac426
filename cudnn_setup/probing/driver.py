"""GPUs and the NVIDIA driver, as the driver probe (probes/driver.py) answers in a child.

driver_facts(): each GPU (name, compute capability), the driver's release and the newest CUDA
it runs, from probes/driver.py in a child (NVML through ctypes on libnvidia-ml.so.1, under a
short limit of its own; else, in a second child, cuDriverGetVersion and the device attributes
on libcuda.so.1; nvidia-smi only when libcuda cannot be used). Whatever the children answer is
checked and bounded before anything uses it. The `driver` check (checks/driver_check.py) and
the install's fit (placement/fit.py) judge these facts.
"""
from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path
from typing import Mapping

from msgspec import Struct, field

from cudnn_setup.child import Runner
from cudnn_setup.facts import gpu_support as S
from cudnn_setup.facts.ldresolve.environment import Environment
from cudnn_setup.facts.ldresolve.process import Process
from cudnn_setup.probing.answer_values import Fields
from cudnn_setup.probing.probe import ProbeResult, run_probe, stdlib_probe
from cudnn_setup.records import replace
from cudnn_setup.report import PASS, SKIP

PROC_DRIVER = Path("/proc/driver/nvidia/version")  # there when the NVIDIA kernel module is loaded
TIMEOUT = 60.0
NVML_TIMEOUT = 10.0  # NVML answers in tens of milliseconds; this long means it hangs
NVML_KEY = "asks NVML"  # the runner's memo: a hung NVML is not asked again in the command
# Set, these make CUDA see other GPUs (or in another order) than NVML lists: CUDA is asked
# (probes/driver.py keeps the same list: a probe cannot import the package).
CUDA_DEVICE_ENV = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")
MAX_GPUS = 64
_DRIVER_RELEASE = re.compile(r"^\d{2,4}(?:\.\d{1,4}){1,3}\Z")


def no_driver(env: Mapping[str, str], loader: Environment | None = None,
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
        from cudnn_setup.facts.loader import loader_environment

        loader = loader_environment(env)
    found = Process(loader).find("libcuda.so.1", None)[0]
    if found.found:
        return None
    return (f"no NVIDIA driver: libcuda.so.1 cannot be loaded ({found.error})"
            + ("; nvidia-smi is not on PATH" if smi else ""))


class Gpu(Struct, frozen=True):
    index: int
    name: str
    compute_capability: str

    def to_dict(self) -> dict:
        return {"index": self.index, "name": self.name,
                "compute_capability": self.compute_capability}


class DriverFacts(Struct, frozen=True):
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
    args = stdlib_probe("driver")
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
    facts = DriverFacts.from_answer(Fields(result.data, "the driver probe's answer"))
    nvml = DriverFacts.from_answer(answer)
    if not facts.driver_version and nvml.driver_version:
        facts = replace(facts, driver_version=nvml.driver_version, driver_version_from="NVML")
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


def describe_gpus(facts: DriverFacts) -> str:
    gpus = "; ".join(f"{g.name} (compute capability {g.compute_capability})"
                     for g in facts.gpus) or "no GPU"
    driver = facts.driver_version or "?"
    cuda = facts.cuda
    return f"{gpus}; driver {driver}" + (f" (runs CUDA {cuda} at most)" if cuda else "")
