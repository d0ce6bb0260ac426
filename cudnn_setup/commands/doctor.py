"""`doctor`: everything about cuDNN on this machine, problems first, and Theano's startup line
explained.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from cudnn_setup.checks.suite import run_checks
from cudnn_setup.commands.base import Context, command
from cudnn_setup.commands.steps import recover_first
from cudnn_setup.facts import gpus, host, loader
from cudnn_setup.facts.cuda import CudaRoot, find_cuda_root, why_not_toolkit
from cudnn_setup.facts.survey import all_cuda_roots, machine_cudnn
from cudnn_setup.report import FAIL, PASS, WARN, Check, Result
from cudnn_setup.startup_line import explain
from cudnn_setup.theanorc import effective_config


@command("doctor")
def doctor(result: Result, ctx: Context, message: str | None = None,
           cuda_root: Path | None = None) -> None:
    if cuda_root is not None and why_not_toolkit(cuda_root) is None:
        recover_first(result, find_cuda_root(ctx.env, cuda_root), ctx)
    d = diagnose(ctx.env, ctx.home, ctx.python, cuda_root, message, ctx.ld_so_conf)
    first = next((r for r in d.cuda_roots if r["usable"]), None)
    result.cuda_root = first["path"] if first else None
    for key, value in d.to_dict().items():
        result.add(key, value)
    result.checks += findings_as_checks(d)
    if d.explanation:
        result.lines.append("explanation:")
        result.lines += [f"  {p['part']}: {p['meaning']}" for p in d.explanation]
    problems = d.ordered()
    result.lines.append("problems, most important first:" if problems else "no problems found")
    for f in problems:
        result.lines.append(f"  [{f.severity}] {f.message}")
        if f.fix:
            result.lines.append(f"      fix: {f.fix}")


@dataclass
class Finding:
    severity: str  # fail | warn | info
    message: str
    fix: str = ""

    def to_dict(self) -> dict:
        return {"severity": self.severity, "message": self.message, "fix": self.fix}


@dataclass
class Diagnosis:
    cuda_roots: list[dict] = field(default_factory=list)
    cudnn_copies: list[dict] = field(default_factory=list)
    loads: list[dict] = field(default_factory=list)
    theano_config: dict = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    explanation: list[dict] = field(default_factory=list)
    system: dict = field(default_factory=dict)

    def ordered(self) -> list[Finding]:
        rank = {"fail": 0, "warn": 1, "info": 2}
        return sorted(self.findings, key=lambda f: rank[f.severity])

    def to_dict(self) -> dict:
        return {"cuda_roots": self.cuda_roots, "cudnn_copies": self.cudnn_copies,
                "loads": self.loads, "theano_config": self.theano_config,
                "problems": [f.to_dict() for f in self.ordered()],
                "explanation": self.explanation, "system": self.system}


def diagnose(env: Mapping[str, str], home: Path, python: str, explicit: Path | None = None,
             message: str | None = None, conf: Path = Path("/etc/ld.so.conf")) -> Diagnosis:
    d = Diagnosis()
    d.system = host.describe()
    d.cuda_roots = all_cuda_roots(env, explicit)
    usable = [r for r in d.cuda_roots if r["usable"]]
    if not usable:
        d.findings.append(Finding("fail", "no CUDA toolkit found",
                                  "install the CUDA toolkit or pass --cuda-root"))
    d.cudnn_copies = machine_cudnn(d.cuda_roots, conf)
    majors = sorted({c["version"].split(".")[0] for c in d.cudnn_copies if c.get("version")})
    for major in majors:
        name = f"libcudnn.so.{major}"
        chain = loader.copies_of(name, env, conf)
        d.loads.append({"name": name, "would_load": chain[0] if chain else None, "candidates": chain})
    if len({c["version"] for c in d.cudnn_copies if c.get("version")}) > 1:
        listing = "; ".join(f"{c['path']} ({c['version']}, {c['via']})" for c in d.cudnn_copies)
        d.findings.append(Finding("warn", f"several cuDNN versions on this machine: {listing}",
                                  "make sure each program loads the one its headers match "
                                  "(`cudnn-setup verify` checks the loader)"))
    if usable:
        root = CudaRoot(Path(usable[0]["path"]), usable[0]["found_via"], usable[0].get("version"),
                        None)
        for check in run_checks(root, python=python, theano=False, env=env, conf=conf):
            if check.status in (FAIL, WARN) and check.name != "theano":
                d.findings.append(Finding(check.status, f"{check.name}: {check.detail}",
                                          (check.data or {}).get("hint", "")))
    d.theano_config = effective_config(env, home)
    for error in d.theano_config["errors"]:
        d.findings.append(Finding("fail", f"Theano's config: {error}",
                                  "fix or remove that file (or $THEANORC entry), then run "
                                  "`cudnn-setup theanorc`"))
    eff = d.theano_config["effective"]
    including = eff.get("global.optimizer_including", {}).get("value", "")
    if "cudnn" not in including.split(":"):
        d.findings.append(Finding("info", "Theano's optimizer_including lacks cudnn: Theano falls "
                                  "back silently when cuDNN cannot be used",
                                  "run `cudnn-setup theanorc`"))
    if eff.get("global.device", {}).get("value", "cpu").startswith("cpu"):
        d.findings.append(Finding("info", "Theano's device is cpu: cuDNN is never used",
                                  "set [global] device=cuda (needs a GPU and pygpu)"))
    if message:
        d.explanation = explain(message)
        for part in d.explanation:
            cc = part.get("compute_capability")
            if cc and gpus.cc_tuple(cc) < gpus.cc_tuple(gpus.THEANO_MIN_CC):
                d.findings.append(Finding("fail", f"{part['part']} (compute capability {cc}) "
                                          "cannot run cuDNN", "use a GPU of compute capability "
                                          f"{gpus.THEANO_MIN_CC} or newer for cuDNN"))
    return d


def findings_as_checks(d: Diagnosis) -> list[Check]:
    usable = list({r["real"]: r for r in reversed(d.cuda_roots) if r["usable"]}.values())[::-1]
    checks = [Check("cuda-roots", PASS if usable else FAIL,
                    "; ".join(f"{r['path']} (CUDA {r.get('version') or '?'}, via {r['found_via']})"
                              for r in usable) or "none")]
    copies = "; ".join(f"{c['path']} ({c.get('version') or '?'}, {c['via']})" for c in d.cudnn_copies)
    checks.append(Check("cudnn-copies", PASS if d.cudnn_copies else WARN, copies or "none found"))
    for load in d.loads:
        first = load["would_load"]
        checks.append(Check(f"loads-{load['name']}", PASS if first else WARN,
                            f"{first['path']} (via {first['via']})" if first else "not found"))
    eff = d.theano_config.get("effective", {})
    shown = ", ".join(f"{k}={v['value']} ({v['from']})" for k, v in eff.items()) or "defaults"
    errors = d.theano_config.get("errors", [])
    checks.append(Check("theano-config", WARN if errors else PASS,
                        f"read {', '.join(d.theano_config['read']) or 'no file'}; {shown}"
                        + "".join(f"; {e}" for e in errors)))
    return checks
