"""`doctor`: everything about cuDNN on this machine, problems first, and Theano's startup line
explained.

It looks at every CUDA root and cuDNN copy, the GPUs and the driver, the frameworks of
`--python`, Theano's effective configuration, and runs verify's checks (but Theano's) on one
cuDNN: the one `--lib-dir` names, else the first usable root's. Nothing is changed: a
transaction a killed run left behind is a problem in the list, with the command that completes
it, and so is state it cannot use (damaged, unsafe, unreadable), not the end of the diagnosis.
Exit status 1 when a problem of severity fail is listed, else 0 (the `problems` check carries
it).
"""
from __future__ import annotations

from pathlib import Path

from msgspec import Struct, field

from cudnn_setup.probing.driver import DriverFacts, describe_gpus, has_driver
from cudnn_setup.checks.frameworks_check import frameworks_json, one_line
from cudnn_setup.installation.model import Installation
from cudnn_setup.installation.locate import describe, locate
from cudnn_setup.doctor_order import INFO, problems_from
from cudnn_setup.checks.check_facts import CheckFacts, Frameworks
from cudnn_setup.checks.suite import run_checks
from cudnn_setup.checks.theano_check import stale_dnn_paths
from cudnn_setup.steps.command_wrapper import command
from cudnn_setup.steps.context import Context, include_needs_lib_dir
from cudnn_setup.steps.recovery import root_installation
from cudnn_setup.steps.theano_step import theano_import_blocked
from cudnn_setup.facts import host, loader
from cudnn_setup.facts.cuda import CudaRoot
from cudnn_setup.facts.survey import all_cuda_roots, machine_cudnn
from cudnn_setup.errors import SetupError
from cudnn_setup.report import FAIL, PASS, WARN, Check, Result
from cudnn_setup.state.layout import StateDir
from cudnn_setup.state.view import Pending, command_line
from cudnn_setup.startup_line import explain
from cudnn_setup.theanorc_merge import effective_config
from cudnn_setup.settings import user_cache_dir


@command("doctor")
def doctor(result: Result, ctx: Context, message: str | None = None,
           cuda_root: Path | None = None, *, python: str | None = None,
           lib_dir: Path | None = None, include_dir: Path | None = None) -> None:
    include_needs_lib_dir(lib_dir, include_dir)
    python = python or ctx.python
    d = Diagnosis()
    d.system = host.describe()
    d.cuda_roots = all_cuda_roots(ctx.env, cuda_root)
    usable = [r for r in d.cuda_roots if r["usable"]]
    root = CudaRoot(Path(usable[0]["path"]), usable[0]["found_via"], usable[0].get("version"),
                    None) if usable else None  # --cuda-root first, when it is usable
    result.cuda_root = str(root.path) if root else None
    inst, damaged = None, None
    if lib_dir is not None:
        inst = locate(lib_dir, include_dir, root)
    elif root is not None:
        inst, damaged, view = root_installation(result, root)
        # staging under tx/ is the pending transaction's own, else what a kill left
        found = pending_finding(view.pending, root) if view.pending is not None \
            else leftover_finding(root)
        if found is not None:
            d.findings.append(found)
    ctx.status("looking for every CUDA root and cuDNN copy on this machine")
    survey(d, ctx, message)
    ctx.status("asking the NVIDIA driver about the GPUs")
    driver = ctx.facts.driver()
    ctx.status(f"importing the deep-learning frameworks of {python}")
    frameworks = ctx.facts.frameworks(python)
    if (blocked := theano_import_blocked(ctx, python)) is not None:
        d.findings.append(blocked)
    checks = [frameworks.check]
    if inst is not None:
        checks = run_checks(inst, CheckFacts(ctx.facts, python, theano=False,
                                             conf=ctx.ld_so_conf,
                                             cache_dir=user_cache_dir(ctx.env, ctx.home)),
                            status=ctx.status)
        result.cudnn_version = inst.version
    extra = d.findings
    if d.cache_error is not None and not any(c.data.get("cache_error") for c in checks):
        clause, hint = loader.cache_unread(d.cache_error)
        extra.append({"severity": WARN, "check": "loader",
                      "message": f"which cuDNN a program loads was {clause}", "fix": hint})
    if damaged is not None:
        extra.append({"severity": FAIL, "check": "state", "message": damaged.message,
                      "fix": damaged.hint})
    d.problems = problems_from(checks, driver=driver, explanation=d.explanation, extra=extra)
    for key, value in d.to_dict().items():
        result.add(key, value)
    if inst is not None:
        result.add("cudnn", describe(inst))
    result.add("driver", driver.to_dict())
    result.add("frameworks", frameworks_json(frameworks.entries))
    result.checks += d.checks() + [problems_check(d.problems)]
    _describe(result, d, driver, frameworks, inst)


class Diagnosis(Struct):
    cuda_roots: list[dict] = field(default_factory=list)
    cudnn_copies: list[dict] = field(default_factory=list)
    loads: list[dict] = field(default_factory=list)
    theano_config: dict = field(default_factory=dict)
    findings: list[dict] = field(default_factory=list)  # the survey's own, for problems_from
    cache_error: str | None = None  # why the loader cache could not be read (`ldconfig -p`)
    problems: list[dict] = field(default_factory=list)
    explanation: list[dict] = field(default_factory=list)
    system: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"cuda_roots": self.cuda_roots, "cudnn_copies": self.cudnn_copies,
                "loads": self.loads, "theano_config": self.theano_config,
                "problems": self.problems, "explanation": self.explanation,
                "system": self.system}

    def checks(self) -> list[Check]:
        usable = list({r["real"]: r for r in reversed(self.cuda_roots) if r["usable"]}.values())[::-1]
        checks = [Check("cuda-roots", PASS if usable else FAIL,
                        "; ".join(f"{r['path']} (CUDA {r.get('version') or '?'}, via "
                                  f"{r['found_via']})" for r in usable) or "none")]
        copies = "; ".join(f"{c['path']} ({c.get('version') or '?'}, {c['via']})"
                           for c in self.cudnn_copies)
        checks.append(Check("cudnn-copies", PASS if self.cudnn_copies else WARN,
                            copies or "none found"))
        for load in self.loads:
            first = load["would_load"]
            detail = (f"{first['path']} (via {first['via']})" if first
                      else self.not_loaded(load["name"]))
            settled = first is not None and (self.cache_error is None
                                             or loader.found_before_the_cache(first))
            if self.cache_error is not None:
                detail += f"; {loader.cache_unread(self.cache_error)[0]}"
            checks.append(Check(f"loads-{load['name']}", PASS if settled else WARN, detail))
        eff = self.theano_config.get("effective", {})
        shown = ", ".join(f"{k}={v['value']} ({v['from']})" for k, v in eff.items()) or "defaults"
        errors = self.theano_config.get("errors", [])
        checks.append(Check("theano-config", WARN if errors else PASS,
                            f"read {', '.join(self.theano_config['read']) or 'no file'}; {shown}"
                            + "".join(f"; {e}" for e in errors)))
        return checks


    def not_loaded(self, name: str) -> str:
        """Why a loads-… check warns, in words: what was looked for, where, and what it means."""
        major = name.rsplit(".", 1)[-1]
        copies = [c["path"] for c in self.cudnn_copies
                  if (c.get("version") or "").split(".")[0] == major]
        shown = ", ".join(copies[:3]) + (" …" if len(copies) > 3 else "")
        cache = "" if self.cache_error is not None else " the ldconfig cache,"
        return (f"a program started without help would not find {name}: it is in none of "
                f"LD_LIBRARY_PATH,{cache} the ld.so.conf directories and the default "
                f"ones; the cuDNN {major} found here ({shown or 'none'}) is loaded only by "
                "programs that name its directory themselves (LD_LIBRARY_PATH, an RPATH, a "
                "framework's own loader)")


def pending_finding(pending: Pending, root: CudaRoot) -> dict:
    """A journal in the root's state: a run at work now, or one a kill interrupted, which
    `install`, `uninstall` or `repair` completes (doctor does not)."""
    if pending.holder is not None:
        return {"severity": INFO, "check": "state", "message": pending.describe(root.path),
                "fix": ""}
    return {"severity": WARN if pending.committed else FAIL, "check": "state",
            "message": pending.describe(root.path),
            "fix": f"run `{pending.finish_with(root.path)}`"}


def leftover_finding(root: CudaRoot) -> dict | None:
    """Staging under <root>/.cudnn-setup/tx: a run at work now (the lock is held), or what a
    killed run left, which the next install, uninstall or repair removes."""
    state = StateDir(root.path)
    try:
        left = state.leftovers()
        holder = state.lock_held() if left is not None else None
    except SetupError:  # damaged state: reported as such by root_installation
        return None
    if left is None:
        return None
    what = left.describe(state.path)
    if holder is not None:
        return {"severity": INFO, "check": "state",
                "message": f"a cudnn-setup run is working on {root.path} ({holder}): {what} "
                           "is its staging", "fix": ""}
    return {"severity": WARN, "check": "state",
            "message": f"{what} left by a cudnn-setup run that was killed before it finished",
            "fix": f"`{command_line('repair', root.path)}` removes them (and says so), as "
                   "does the next `install` or `uninstall` on that root"}


def survey(d: Diagnosis, ctx: Context, message: str | None) -> None:
    """The machine's CUDA roots, cuDNN copies and Theano config, and the findings in them."""
    env = ctx.env
    if not any(r["usable"] for r in d.cuda_roots):
        d.findings.append({"severity": FAIL, "check": "cuda-roots",
                           "message": "no CUDA toolkit found",
                           "fix": "install the CUDA toolkit or pass --cuda-root"})
    d.cudnn_copies = machine_cudnn(d.cuda_roots, ctx.ld_so_conf)
    majors = sorted({c["version"].split(".")[0] for c in d.cudnn_copies if c.get("version")})
    if majors:  # the cache read once, as the loader check reads it
        environment = ctx.facts.loader()
        d.cache_error = environment.cache_error
        cache = loader.named(environment.cache)
    for major in majors:
        name = f"libcudnn.so.{major}"
        chain = loader.copies_of(name, env, ctx.ld_so_conf, cache)
        d.loads.append({"name": name, "would_load": chain[0] if chain else None, "candidates": chain})
    if len({c["version"] for c in d.cudnn_copies if c.get("version")}) > 1:
        listing = "; ".join(f"{c['path']} ({c['version']}, {c['via']})" for c in d.cudnn_copies)
        d.findings.append({"severity": WARN, "check": "cudnn-copies",
                           "message": f"several cuDNN versions on this machine: {listing}",
                           "fix": "make sure each program loads the one its headers match "
                                  "(`cudnn-setup verify` checks the loader)"})
    d.theano_config = effective_config(env, ctx.home)
    for error in d.theano_config["errors"]:
        d.findings.append({"severity": FAIL, "check": "theano-config",
                           "message": f"Theano's config: {error}",
                           "fix": "fix or remove that file (or $THEANORC entry), then run "
                                  "`cudnn-setup theanorc`"})
    eff = d.theano_config["effective"]
    d.findings += stale_dnn_paths(eff)
    including = eff.get("global.optimizer_including", {}).get("value", "")
    if "cudnn" not in including.split(":"):
        d.findings.append({"severity": INFO, "check": "theano-config",
                           "message": "Theano's optimizer_including lacks cudnn: Theano falls "
                                      "back silently when cuDNN cannot be used",
                           "fix": "run `cudnn-setup theanorc`"})
    if eff.get("global.device", {}).get("value", "cpu").startswith("cpu"):
        d.findings.append({"severity": INFO, "check": "theano-config",
                           "message": "Theano's device is cpu: cuDNN is never used",
                           "fix": "set [global] device=cuda (needs a GPU and pygpu)"})
    if message:
        d.explanation = explain(message)


def problems_check(problems: list[dict]) -> Check:
    """doctor's verdict as a check, so that its exit status is 1 exactly when a problem of
    severity fail is listed."""
    counts = {s: sum(p["severity"] == s for p in problems) for s in (FAIL, WARN, INFO)}
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "none"
    status = FAIL if counts[FAIL] else WARN if counts[WARN] else PASS
    first = f"; first: {problems[0]['message']}" if problems else ""
    return Check("problems", status, summary + first)


def _describe(result: Result, d: Diagnosis, driver: DriverFacts, frameworks: Frameworks,
              inst: Installation | None) -> None:
    if inst is not None:
        managed = "installed by cudnn-setup" if inst.manifest else "not installed by cudnn-setup"
        result.lines.append(f"cuDNN examined: {inst.version or 'none'} in {inst.lib_dir} "
                            f"({managed})")
    result.lines.append("GPUs and driver: " + (describe_gpus(driver) if has_driver(driver)
                                               else driver.reason or "no NVIDIA driver"))
    if frameworks.entries:
        result.lines.append(f"frameworks of {frameworks.check.data.get('python')}:")
        result.lines += [f"  {one_line(e)}" for e in frameworks.entries]
    else:
        result.lines.append(f"frameworks: {frameworks.check.detail}")
    if d.explanation:
        result.lines.append("explanation:")
        result.lines += [f"  {p['part']}: {p['meaning']}" for p in d.explanation]
    result.lines.append("problems, most important first:" if d.problems else "no problems found")
    for p in d.problems:
        result.lines.append(f"  [{p['severity']}] {p['message']}")
        if p["fix"]:
            result.lines.append(f"      fix: {p['fix']}")
