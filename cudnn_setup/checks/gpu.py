"""The `gpu` check: cuDNN run on the GPU the way frameworks call it, each result against numpy.

One child process (probes/gpu_steps.py, with a time limit) loads cuDNN and runs each step: a
convolution through the graph API with heuristics mode A and its backward data and filter
(what PyTorch, TensorFlow and JAX do: libcudnn_graph, libcudnn_heuristic, an engine library),
a batch normalization (libcudnn_ops), an RNN (libcudnn_adv), the legacy convolution
(libcudnn_cnn: Theano, ONNX Runtime) and a fused conv+bias+ReLU on an engine compiled at run
time (libcudnn_engines_runtime_compiled). The detail names, for a step that failed, the
sub-library it points to and the clients that would break; a step that could not run for a
reason outside cuDNN (no NVRTC for the runtime-compiled engine) is a warn naming it.
"""
from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Mapping

from cudnn_setup.probing.answer_values import shown
from cudnn_setup.probing.driver import no_driver
from cudnn_setup.installation.model import Installation
from cudnn_setup.checks.native import find_cudart
from cudnn_setup.probing.probe import child_env, loads_key, probe_module, run_probe
from cudnn_setup.child import Runner
from cudnn_setup.facts import cudnn as gen
from cudnn_setup.facts import ldresolve as L
from cudnn_setup.facts import gpu_support as S
from cudnn_setup.report import FAIL, PASS, SKIP, WARN, Check

NAME = "gpu"
TIMEOUT = 120.0
# Each step the probe runs: what it is, in words, and who calls cuDNN that way.
STEPS = {
    "graph_conv_fwd": ("a convolution through the graph API (heuristics mode A)",
                       "PyTorch, TensorFlow and JAX convolutions"),
    "graph_conv_bwd_data": ("its backward-data pass", "training in PyTorch, TensorFlow, JAX"),
    "graph_conv_bwd_filter": ("its backward-filter pass", "training in PyTorch, TensorFlow, JAX"),
    "batchnorm_fwd": ("a batch normalization", "PyTorch's and TensorFlow's batchnorm"),
    "rnn_fwd": ("an RNN", "PyTorch's RNN, LSTM and GRU"),
    "legacy_conv_fwd": ("a legacy-API convolution (cudnnConvolutionForward)",
                        "Theano, ONNX Runtime and other legacy-API clients"),
    "fused_runtime_compiled": ("a fused conv+bias+ReLU on a runtime-compiled engine",
                               "fused operations (cudnn-frontend, TensorRT, torch.compile)"),
}
_STEP_LINE = re.compile(r"^gpu-step: (\w{1,64})$", re.M)
_LIB = re.compile(r"^lib[\w]{1,64}\Z")


def _libs(value) -> list[str]:
    return [v for v in value if isinstance(v, str) and _LIB.match(v)][:8] \
        if isinstance(value, list) else []


def steps_of(data: dict) -> list[dict]:
    """The probe's steps, kept only where they are well-formed and named as the probe names
    them; everything shown is bounded."""
    out = []
    raw = data.get("steps")
    for entry in raw if isinstance(raw, list) else []:
        if not isinstance(entry, dict) or entry.get("name") not in STEPS:
            continue
        status = entry.get("status")
        if status not in (PASS, WARN, FAIL, SKIP):
            status = FAIL
        err = entry.get("max_rel_error")
        out.append({"name": entry["name"], "status": status,
                    "sublibraries": _libs(entry.get("sublibraries")),
                    "stage": shown(entry.get("stage"), 20) if isinstance(entry.get("stage"), str) else None,
                    "reason": shown(entry["reason"]) if isinstance(entry.get("reason"), str) else None,
                    "blamed": shown(entry["blamed"], 120) if isinstance(entry.get("blamed"), str) else None,
                    "max_rel_error": err if isinstance(err, float) else None,
                    "engine": entry.get("engine") if isinstance(entry.get("engine"), dict) else None,
                    "mapped": [m for m in entry.get("mapped", []) if isinstance(m, str)][:16]
                    if isinstance(entry.get("mapped"), list) else [],
                    "seconds": _seconds(entry.get("seconds")),
                    "plan": shown(entry["plan"], 120) if isinstance(entry.get("plan"), str) else None,
                    "timings": _timings(entry.get("timings"))})
    return out


def _seconds(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        and 0 <= value < 1e6 else None


def _timings(value) -> dict[str, float]:
    """Where a step's (or the probe's) time went, by phase: known names, bounded numbers."""
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in ((k, _seconds(value.get(k))) for k in _PHASES) if v is not None}


_PHASES = ("device", "load", "graph", "plan", "execute")


def plan_cache(cache_dir: Path | None) -> Path | None:
    """Where the probe keeps the runtime-compiled engine's plan: in the user's cache."""
    return cache_dir / "gpu-plans" if cache_dir is not None else None


def _crashed_in(stderr: str) -> str | None:
    found = _STEP_LINE.findall(stderr)
    return found[-1] if found and found[-1] in STEPS else None


def without_driver(inst: Installation, env: Mapping[str, str],
                   loader: L.Environment) -> str | None:
    """Why the probe could only skip, known without starting it, in the words it would say:
    no NVIDIA kernel module and no libcuda.so.1 that its loader (the library's directory
    first on LD_LIBRARY_PATH) would find (checks/driver.no_driver, the driver probe's rule)."""
    probe_env = child_env(inst.lib_dir, env)
    return no_driver(probe_env, replace(loader, ld_library_path=probe_env["LD_LIBRARY_PATH"]),
                     smi=False)


def check_gpu(inst: Installation, env: Mapping[str, str], runner: Runner | None = None,
              timeout: float = TIMEOUT, probe: list[str] | None = None,
              loader: L.Environment | None = None, cache_dir: Path | None = None) -> Check:
    """`runner`: the command's (it skips the probe when loading this libcudnn hung earlier);
    `probe`: the probe's command line before its arguments (default: probes/gpu_steps.py under
    this interpreter's run_probe); `loader`: the loader's environment for `env`, given when
    the probe is not to be started on a machine it would find no driver on; `cache_dir`: the
    user's cache, where the runtime-compiled engine's plan is kept between runs."""
    target = inst.soname_path()
    if target is None:
        return Check(NAME, SKIP, "no libcudnn to run")
    absent = without_driver(inst, env, loader) if loader is not None else None
    if absent is not None:
        return Check(NAME, SKIP, absent, {"status": SKIP, "reason": absent})
    args = probe or probe_module("gpu_steps")
    comp = inst.composition() if inst.generation else None
    jit = comp is not None and comp.flavour == gen.JIT
    if jit:  # no legacy API, no heuristics or precompiled engines: those steps cannot run
        args = args + ["--have", ",".join(comp.required)]
    plans = plan_cache(cache_dir)
    if plans is not None:
        args = args + ["--plan-cache", str(plans)]
    args = args + [str(target)]
    cudart = find_cudart(inst)
    if cudart:
        args.append(cudart)
    # Skipped when loading it hung; a slow convolution is no hang of the library's.
    result = run_probe(args, timeout, child_env(inst.lib_dir, env), runner=runner,
                       key=loads_key(target), remember=False)
    if result.data is None and result.known:
        return Check(NAME, FAIL, f"not run: {result.known}")
    if result.data is None:
        step = _crashed_in(result.stderr)
        where = ""
        if step:
            what, who = STEPS[step]
            where = f" during {what} ({step}; {who} would break)"
        detail = ("did not finish in time" if result.timed_out else
                  f"the GPU probe died ({result.crashed or result.returncode}){where}: "
                  f"{result.last_error_line()}")
        return Check(NAME, FAIL, detail, {"crashed_in": step})
    data = result.data
    status = data.get("status")
    if status == "skip":
        return Check(NAME, SKIP, shown(data.get("reason", "no GPU")), data)
    gpu = f"{shown(data.get('gpu'), 80)} (compute capability {shown(data.get('compute_capability'), 10)})"
    cc = data.get("compute_capability")
    floor = S.below_every_build(inst.version, cc) if isinstance(cc, str) and inst.version else None
    if floor:
        data["supported"] = False
        return Check(NAME, FAIL, f"{gpu}: every build of cuDNN {inst.version} needs compute "
                     f"capability {floor} or newer", data)
    steps = steps_of(data)
    if not jit:  # only a release without some sub-libraries may have steps left out
        for s in steps:
            if s["status"] == SKIP:
                s.update(status=FAIL, reason=f"the probe left it out ({s['reason'] or 'no reason'})")
    data["steps"] = steps
    data["timings"] = _timings(data.get("timings"))
    if not steps:
        return Check(NAME, FAIL, f"{gpu}: {shown(data.get('reason') or 'the probe ran no step')}", data)
    data["supported"] = True
    failed = [s for s in steps if s["status"] == FAIL]
    warned = [s for s in steps if s["status"] == WARN]
    if failed:
        parts = []
        for s in failed:
            what, who = STEPS[s["name"]]
            parts.append(f"{what} failed at {s['stage'] or '?'}: {s['reason'] or 'no reason given'}"
                         f" — points to {s['blamed'] or ', '.join(s['sublibraries'])}; {who} "
                         "would break")
        return Check(NAME, FAIL, f"{gpu}: " + "; ".join(parts), data)
    ran = "; ".join(f"{STEPS[s['name']][0]} ({', '.join(x.removeprefix('libcudnn_') for x in s['sublibraries'])})"
                    for s in steps if s["status"] == PASS)
    worst = max((s["max_rel_error"] for s in steps if s["max_rel_error"] is not None), default=None)
    detail = (f"on {gpu}, each matched numpy"
              + (f" (largest relative error {worst:.2g})" if worst is not None else "")
              + f": {ran}")
    skipped = [s for s in steps if s["status"] == SKIP]
    if skipped:
        detail += "; not part of this release: " + "; ".join(
            f"{STEPS[s['name']][0]} ({s['reason']})" for s in skipped)
    if not any(s["status"] == PASS for s in steps):
        return Check(NAME, WARN if warned else SKIP, detail, data)
    if warned:
        detail += "; not run: " + "; ".join(f"{STEPS[s['name']][0]}: {s['reason']}" for s in warned)
        return Check(NAME, WARN, detail, data)
    return Check(NAME, PASS, detail, data)
