"""The problems a diagnosis lists, most important first.

Order (rank, lowest first):

0. a GPU that cannot run cuDNN at all: its compute capability is below what every cuDNN release
   needs (3.0), so no install, driver or setting can help. Found in the driver facts or in a
   Theano startup line being explained; listed above everything else.
1. problems of severity fail, then 2. warn, then 3. info. Within one severity, by check, root
   causes before what they cause: driver, files, elf, versions, load, coherence, deps, cuda,
   loader, compile, gpu, theano, then any other check by name.

`doctor` exits 1 when it lists a problem of severity fail, else 0 (warnings and notes do not
fail it: nothing there is broken); its `problems` check (commands/doctor.py) carries that.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

from packaging.version import InvalidVersion

from cudnn_setup.facts import gpu_support as S
from cudnn_setup.report import FAIL, WARN, Check

if TYPE_CHECKING:
    from cudnn_setup.probing.driver import DriverFacts

INFO = "info"
SEVERITY_RANK = {FAIL: 1, WARN: 2, INFO: 3}
CHECK_ORDER = ("driver", "files", "elf", "versions", "load", "coherence", "deps", "cuda",
               "loader", "compile", "gpu", "theano")
# The lowest compute capability any cuDNN release supports (facts/gpu_support.CUDNN_SUPPORT).
ANY_CUDNN_MIN_CC = min((S.cc_version(r.min_cc) for r in S.CUDNN_SUPPORT))


def cannot_run_cudnn(cc: str | None) -> bool:
    """Whether a GPU of this compute capability can run no cuDNN release at all."""
    try:
        return cc is not None and S.cc_version(cc) < ANY_CUDNN_MIN_CC
    except InvalidVersion:
        return False


def _gpu_problem(name: str, cc: str) -> dict:
    return {"severity": FAIL, "check": "gpu",
            "message": f"{name} (compute capability {cc}) cannot run cuDNN at all: every cuDNN "
                       f"release needs compute capability {ANY_CUDNN_MIN_CC} or newer",
            "fix": f"use a GPU of compute capability {ANY_CUDNN_MIN_CC} or newer for cuDNN",
            "rank": 0}


def fix_of(check: Check) -> str:
    """The fix a check's data offers: its `hint`, else the first fix of a missing dependency."""
    data = check.data or {}
    hint = data.get("hint")
    if isinstance(hint, str) and hint:
        return hint
    for dep in data.get("dependencies") or []:
        if isinstance(dep, dict) and not dep.get("found") and dep.get("severity") == check.status:
            fixes = dep.get("fixes") or []
            if fixes and isinstance(fixes[0], dict):
                return str(fixes[0].get("text", ""))
    return ""


def problems_from(checks: Iterable[Check], *, driver: DriverFacts | None = None,
                  explanation: Iterable[dict] = (), extra: Iterable[dict] = ()) -> list[dict]:
    """Every problem, most important first: `{severity, check, message, fix, rank}`.

    `checks`: verify's checks (fail and warn become problems); `driver`: driver_facts(), whose
    GPUs are looked at for rank 0; `explanation`: startup_line.explain() parts (a part with a
    `compute_capability` is a GPU); `extra`: problems the caller found itself, as dicts with
    severity (fail | warn | info), message, fix and optionally check."""
    out: list[dict] = []
    seen_gpus: set[str] = set()
    gpus: list[tuple[Any, Any]] = list(driver.gpu_pairs) if driver else []
    gpus += [(p.get("part"), p.get("compute_capability")) for p in explanation]
    for name, cc in gpus:
        if isinstance(name, str) and cannot_run_cudnn(cc) and name not in seen_gpus:
            seen_gpus.add(name)
            out.append(_gpu_problem(name, cc))
    for check in checks:
        if check.status in (FAIL, WARN):
            out.append({"severity": check.status, "check": check.name,
                        "message": f"{check.name}: {check.detail}", "fix": fix_of(check),
                        "rank": SEVERITY_RANK[check.status]})
    for p in extra:
        severity = p.get("severity", INFO)
        out.append({"severity": severity, "check": p.get("check", ""),
                    "message": p.get("message", ""), "fix": p.get("fix", ""),
                    "rank": SEVERITY_RANK.get(severity, 3)})
    order = {name: i for i, name in enumerate(CHECK_ORDER)}
    return sorted(out, key=lambda p: (p["rank"], order.get(p["check"], len(order)), p["check"]))
