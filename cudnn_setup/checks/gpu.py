"""The `gpu` check: cuDNN run on the GPU the way frameworks call it, each result against numpy.

One child process (probes/gpu_steps.py, with a time limit) loads cuDNN and runs each step: a
convolution through the graph API with heuristics mode A and its backward data and filter
(what PyTorch, TensorFlow and JAX do: libcudnn_graph, libcudnn_heuristic, an engine library),
a batch normalization (libcudnn_ops), an RNN (libcudnn_adv), the legacy convolution
(libcudnn_cnn: ONNX Runtime; Theano with cuDNN v5 to v7) and a fused conv+bias+ReLU on an
engine compiled at run time (libcudnn_engines_runtime_compiled). The detail names, for a step
that failed, the sub-library it points to and the clients that would break; a step that could
not run for a reason outside cuDNN (no NVRTC for the runtime-compiled engine) is a warn naming
it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from cudnn_setup.probing.answer_values import shown
from cudnn_setup.probing.gpu_answer import GpuAnswer
from cudnn_setup.probing.driver import no_driver
from cudnn_setup.installation.model import Installation, find_cudart
from cudnn_setup.probing.probe import (child_env, loads_key, numpy_path, run_probe,
                                       stdlib_probe)
from cudnn_setup.child import Runner
from cudnn_setup.facts import cudnn as gen
from cudnn_setup.facts.ldresolve.environment import Environment
from cudnn_setup.facts import gpu_support as S
from cudnn_setup.facts import theano as theano_facts
from cudnn_setup.records import replace
from cudnn_setup.report import FAIL, PASS, SKIP, WARN, Check

if TYPE_CHECKING:
    from cudnn_setup.checks.check_facts import CheckFacts

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


def callers(step: str, version: str | None) -> str:
    """Who calls cuDNN the way `step` does, with this release: Theano 1.0.5 uses cuDNN v5 to
    v7 only (facts/theano.py), so with any other the legacy step protects the other legacy-API
    clients."""
    who = STEPS[step][1]
    parts = gen.split_version(version)
    if step == "legacy_conv_fwd" and parts is not None and \
            not theano_facts.rule_for(parts).usable:
        return "ONNX Runtime and other legacy-API clients"
    return who


@dataclass  # as Check is
class GpuCheck(Check):
    """The gpu check, with the probe's answer it was judged from (not part of the JSON: the
    theano check words from it why Theano may not use cuDNN here)."""

    answer: GpuAnswer | None = None


def plan_cache(cache_dir: Path | None) -> Path | None:
    """Where the probe keeps the runtime-compiled engine's plan: in the user's cache."""
    return cache_dir / "gpu-plans" if cache_dir is not None else None


def _crashed_in(stderr: str) -> str | None:
    found = _STEP_LINE.findall(stderr)
    return found[-1] if found and found[-1] in STEPS else None


def without_driver(inst: Installation, env: Mapping[str, str],
                   loader: Environment) -> str | None:
    """Why the probe could only skip, known without starting it, in the words it would say:
    no NVIDIA kernel module and no libcuda.so.1 that its loader (the library's directory
    first on LD_LIBRARY_PATH) would find (probing/driver.no_driver, the driver probe's rule)."""
    probe_env = child_env(inst.lib_dir, env)
    loader = replace(loader, ld_library_path=probe_env["LD_LIBRARY_PATH"])
    return no_driver(probe_env, loader, smi=False)


def check_gpu(inst: Installation, facts: CheckFacts) -> Check:
    """cuDNN run on the GPU in a child, after the load check (skipped when libcudnn does not
    load), never started on a machine whose loader would find no driver."""
    if facts.machine.load(inst).answer is None:
        return Check(NAME, SKIP, "libcudnn does not load (see load)")
    return check_gpu_with(inst, facts.env, facts.runner, loader=facts.machine.loader(),
                          cache_dir=facts.cache_dir)


def check_gpu_with(inst: Installation, env: Mapping[str, str], runner: Runner | None = None,
                   timeout: float = TIMEOUT, probe: list[str] | None = None,
                   loader: Environment | None = None, cache_dir: Path | None = None) -> Check:
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
        said = GpuAnswer(status=SKIP, reason=absent)  # what the probe would have answered
        return GpuCheck(NAME, SKIP, absent, said.to_dict(), said)
    args = probe or stdlib_probe("gpu_steps") + numpy_path()
    comp = inst.composition() if inst.generation else None
    jit = comp is not None and comp.flavour == gen.JIT
    if comp is not None and jit:  # no legacy API, heuristics or precompiled engines: those steps cannot run
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
            what, who = STEPS[step][0], callers(step, inst.version)
            where = f" during {what} ({step}; {who} would break)"
        detail = ("did not finish in time" if result.timed_out else
                  f"the GPU probe died ({result.crashed or result.returncode}){where}: "
                  f"{result.last_error_line()}")
        return Check(NAME, FAIL, detail, {"crashed_in": step})
    answer = GpuAnswer.read(result.data, STEPS)
    if answer.status == SKIP:
        return GpuCheck(NAME, SKIP, shown(answer.reason or "no GPU"), answer.to_dict(), answer)
    cc = answer.compute_capability
    gpu = f"{shown(answer.gpu or '?', 80)} (compute capability {shown(cc or '?', 10)})"
    floor = S.below_every_build(inst.version, cc) if cc and inst.version else None
    if floor:
        return GpuCheck(NAME, FAIL, f"{gpu}: every build of cuDNN {inst.version} needs compute "
                        f"capability {floor} or newer", dict(answer.to_dict(), supported=False),
                        answer)
    steps = answer.steps
    if not jit:  # only a release without some sub-libraries may have steps left out
        steps = tuple(replace(s, status=FAIL, reason=f"the probe left it out ({s.reason or 'no reason'})")
                      if s.status == SKIP else s for s in steps)
        answer = replace(answer, steps=steps)
    data = answer.to_dict()
    if not steps:
        return GpuCheck(NAME, FAIL, f"{gpu}: {shown(answer.reason or 'the probe ran no step')}",
                        data, answer)
    data["supported"] = True
    failed = [s for s in steps if s.status == FAIL]
    warned = [s for s in steps if s.status == WARN]
    if failed:
        parts = []
        for s in failed:
            what, who = STEPS[s.name][0], callers(s.name, inst.version)
            parts.append(f"{what} failed at {s.stage or '?'}: {s.reason or 'no reason given'}"
                         f" — points to {s.blamed or ', '.join(s.sublibraries)}; {who} "
                         "would break")
        return GpuCheck(NAME, FAIL, f"{gpu}: " + "; ".join(parts), data, answer)
    ran = "; ".join(f"{STEPS[s.name][0]} ({', '.join(x.removeprefix('libcudnn_') for x in s.sublibraries)})"
                    for s in steps if s.status == PASS)
    worst = max((s.max_rel_error for s in steps if s.max_rel_error is not None), default=None)
    detail = (f"on {gpu}, each matched numpy"
              + (f" (largest relative error {worst:.2g})" if worst is not None else "")
              + f": {ran}")
    skipped = [s for s in steps if s.status == SKIP]
    if skipped:
        detail += "; not part of this release: " + "; ".join(
            f"{STEPS[s.name][0]} ({s.reason})" for s in skipped)
    if not any(s.status == PASS for s in steps):
        return GpuCheck(NAME, WARN if warned else SKIP, detail, data, answer)
    if warned:
        detail += "; not run: " + "; ".join(f"{STEPS[s.name][0]}: {s.reason}" for s in warned)
        return GpuCheck(NAME, WARN, detail, data, answer)
    return GpuCheck(NAME, PASS, detail, data, answer)
