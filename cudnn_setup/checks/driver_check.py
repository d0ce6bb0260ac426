"""The `driver` check: whether a cuDNN build fits this machine's GPUs and NVIDIA driver.

skip without a driver; fail when the driver is too old for the CUDA major this cuDNN was built
for, or a GPU's compute capability is below what this cuDNN release supports
(facts/gpu_support.py, with its sources); warn where the support table is inferred, or for a
driver misfit on a machine without a GPU; pass listing the GPUs and the driver. The facts come
from probing/driver.py; the same judgement before `install` writes anything is
placement/fit.py's.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from cudnn_setup.facts import gpu_support as S
from cudnn_setup.installation.locate import skipped_without_cudnn
from cudnn_setup.installation.model import Installation
from cudnn_setup.probing.driver import DriverFacts, describe_gpus, has_driver
from cudnn_setup.probing.load_answer import LoadAnswer
from cudnn_setup.installation.built_for import built_for
from cudnn_setup.report import FAIL, PASS, SKIP, WARN, Check

if TYPE_CHECKING:
    from cudnn_setup.checks.check_facts import CheckFacts

NAME = "driver"


def check_driver(inst: Installation, facts: CheckFacts) -> Check:
    """The `driver` check of `inst` on the machine the command's driver probe describes, with
    the CUDA it was built for from its load (none is tried without a cuDNN)."""
    answer = None if skipped_without_cudnn(inst) else facts.machine.load(inst).answer
    return check_driver_with(inst, facts.machine.driver(), load_data=answer)


def check_driver_with(inst: Installation, driver: DriverFacts, *,
                      load_data: LoadAnswer | None = None) -> Check:
    """The `driver` check of `inst` on the machine `driver` (driver_facts) describes."""
    data = driver.to_dict()
    if driver.status == "error":
        return Check(NAME, FAIL, driver.reason or "the driver probe failed", data)
    if not has_driver(driver):
        return Check(NAME, SKIP, driver.reason or "no NVIDIA driver", data)
    seen = describe_gpus(driver)
    version = inst.version
    learnt = built_for(inst, load_data)
    variant, source = learnt.version, learnt.source
    data.update(cudnn_version=version, cuda_built_for=variant, cuda_built_for_source=source)
    if not version:
        return Check(NAME, SKIP, f"{seen}; no cuDNN to judge against them", data)
    gpus = driver.gpu_pairs
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
    misfits = S.fits(version, variant, gpus, driver.cuda_driver_version, driver.driver_version)
    data["misfits"] = [m.to_dict() for m in misfits]
    what = f"cuDNN {version} for CUDA {variant} ({source})"
    if not gpus:
        if misfits:
            return Check(NAME, WARN, f"{seen}; " + "; ".join(_say(m) for m in misfits), data)
        return Check(NAME, SKIP, f"{driver.reason or 'no GPU'}; driver "
                     f"{driver.driver_version or '?'} runs {what}", data)
    fails = [m for m in misfits if m.severity == FAIL]
    if fails:
        return Check(NAME, FAIL, f"{what} cannot run here: " + "; ".join(_say(m) for m in fails), data)
    if misfits:
        return Check(NAME, WARN, f"{seen}; " + "; ".join(_say(m) for m in misfits), data)
    return Check(NAME, PASS, f"{seen}; {what} supports them", data)


def _say(m: S.Misfit) -> str:
    return f"{m.subject}: {m.reason} ({m.hint})"
