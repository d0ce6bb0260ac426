"""`bench`: what cuDNN buys — Theano with and without it, and cuDNN's own algorithm timings."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Mapping

from msgspec import Struct

from cudnn_setup.probing.answer_values import BadAnswer, Fields
from cudnn_setup.installation.model import Installation, find_cudart
from cudnn_setup.probing.gpu_answer import BenchAnswer
from cudnn_setup.probing.probe import (ProbeResult, child_env, numpy_path, probe_module,
                                       run_probe, stdlib_probe)
from cudnn_setup.child import Runner, Unanswered
from cudnn_setup.checks.theano_check import (INSTALL_HINT, has_theano, scratch_compiledir,
                                              with_fixed_hash_seed)
from cudnn_setup.report import FAIL, PASS, SKIP, WARN, Check
from cudnn_setup.theanorc_merge import unreadable_for_theano

BENCH_TIMEOUT = 900.0
MAX_STEP_S = 1e6  # a step time past this (or not above 0) is no measurement


class TheanoTimings(Struct, frozen=True):
    """What probes/theano_bench.py answers, the fields the checks use; BadAnswer when one of
    them is missing or of another type (a step time must be above 0: it divides)."""

    device: str
    uses_cudnn: bool
    conv_ops: list[str]
    conv_step_s: float
    mlp_step_s: float
    # shown in the JSON, not judged
    theano_version: str | None = None
    optimizer_including: str | None = None
    optimizer_excluding: str | None = None
    conv_compile_s: float | None = None
    steps: int | None = None

    @classmethod
    def read(cls, answer: Fields) -> TheanoTimings:
        device, uses = answer.need_text("device", 100), answer.need_flag("uses_cudnn")
        answer.need_list("conv_ops")
        return cls(device, uses, answer.strings("conv_ops", 100, 64),
                   _step(answer, "conv_step_s"), _step(answer, "mlp_step_s"),
                   answer.text("theano_version", 100),
                   answer.text("optimizer_including", 10000),
                   answer.text("optimizer_excluding", 10000),
                   answer.number("conv_compile_s", 0.0, MAX_STEP_S),
                   answer.integer("steps", 0, 10**6))

    def to_dict(self) -> dict:
        """One run's part of the theano-conv check's data, with the keys the probe answers."""
        return {"theano_version": self.theano_version, "device": self.device,
                "optimizer_including": self.optimizer_including,
                "optimizer_excluding": self.optimizer_excluding, "conv_ops": self.conv_ops,
                "uses_cudnn": self.uses_cudnn, "conv_step_s": self.conv_step_s,
                "conv_compile_s": self.conv_compile_s, "mlp_step_s": self.mlp_step_s,
                "steps": self.steps}


def _step(answer: Fields, key: str) -> float:
    value = answer.need_number(key, 0.0, MAX_STEP_S)
    if value <= 0:
        raise BadAnswer(f"{answer.what}'s {key!r} is {value:g}, no time a step can take")
    return value


def theano_env(base: Mapping[str, str], theanorc: Path | None, lib_dir: Path) -> dict[str, str]:
    """The bench's environment: it measures cuDNN against none, so the root's cuDNN is put on
    the loader path and an unset blas.ldflags is set empty (Theano 1.0.5 stops at import on a
    numpy without blas_opt_info otherwise); whether the user's own config runs is the theano
    check's question."""
    env = child_env(lib_dir, with_fixed_hash_seed(base))
    if theanorc is not None:
        env["THEANORC"] = str(theanorc)
    flags = env.get("THEANO_FLAGS", "")
    if "blas.ldflags" not in flags:
        env["THEANO_FLAGS"] = ",".join(f for f in (flags, "blas.ldflags=") if f)
    return env


def _theano_run(python: str, env: dict, flag: str,
                runner: Runner | None = None) -> tuple[TheanoTimings | None, str]:
    """The timings read from the answer, or what went wrong."""
    run_env = dict(env)
    run_env["THEANO_FLAGS"] = ",".join(f for f in (env.get("THEANO_FLAGS", ""), flag) if f)
    result = run_probe(probe_module("theano_bench"), BENCH_TIMEOUT, run_env, python=python,
                       runner=runner)
    if result.data is None:
        return None, result.last_error_line()
    try:
        return TheanoTimings.read(result.answer("the benchmark's answer")), ""
    except BadAnswer as exc:
        return None, f"its answer cannot be used: {exc}"


def theano_checks(inst: Installation | None, python: str, theanorc: Path | None,
                  env: Mapping[str, str],
                  status: Callable[[str], None] = lambda line: None,
                  runner: Runner | None = None) -> list[Check]:
    try:
        installed = has_theano(python, env, runner)
    except Unanswered as silent:
        return [Check("theano-conv", FAIL, f"could not ask {python} whether Theano is "
                                           f"installed: {silent}")]
    if not installed:
        return [Check("theano-conv", SKIP, f"Theano is not installed for {python}; {INSTALL_HINT}")]
    if (why := unreadable_for_theano(theanorc)) is not None:
        return [Check("theano-conv", FAIL, f"Theano cannot start with its config: {why}")]
    lib_dir = inst.lib_dir if inst else Path("/nonexistent")
    base = theano_env(env, theanorc, lib_dir)
    status("bench step 1 of 2: Theano's conv net and MLP with cuDNN allowed (the first run "
           "compiles them)")
    with scratch_compiledir(base) as base:
        with_dnn, err1 = _theano_run(python, base, "optimizer_including=cudnn", runner)
        status("bench step 2 of 2: the same with cuDNN excluded")
        without, err2 = _theano_run(python, base, "optimizer_excluding=cudnn", runner)
    if with_dnn is None or without is None:
        return [Check("theano-conv", FAIL, f"the Theano benchmark failed: {err1 or err2}")]
    data: dict = {"with_cudnn": with_dnn.to_dict(), "without_cudnn": without.to_dict()}
    cpu_only = not with_dnn.uses_cudnn and not without.uses_cudnn
    conv = (f"conv net step {with_dnn.conv_step_s * 1000:.1f} ms with cuDNN allowed "
            f"({', '.join(with_dnn.conv_ops)}) vs {without.conv_step_s * 1000:.1f} ms without "
            f"({', '.join(without.conv_ops)})")
    mlp = (f"MLP 784-1000-500-10 step {with_dnn.mlp_step_s * 1000:.1f} ms vs "
           f"{without.mlp_step_s * 1000:.1f} ms")
    if cpu_only:
        why = (f"both runs used the CPU (device={with_dnn.device}): the comparison says nothing "
               "about cuDNN here")
        return [Check("theano-conv", WARN, f"{conv}; {why}", data),
                Check("theano-mlp", WARN, f"{mlp}; {why}")]
    speedup = without.conv_step_s / with_dnn.conv_step_s
    data["conv_speedup"] = speedup
    return [Check("theano-conv", PASS, f"{conv}: cuDNN is {speedup:.2f}x as fast", data),
            Check("theano-mlp", PASS, f"{mlp} (no convolutions: cuDNN has nothing to speed up)")]


def theano_without_gpu(theanorc: Path | None, why: str) -> Check:
    """The Theano comparison where there is no GPU: not run (both runs would use the CPU),
    unless Theano's config could not even be read, which is worth saying anyway."""
    if (unreadable := unreadable_for_theano(theanorc)) is not None:
        return Check("theano-conv", FAIL, f"Theano cannot start with its config: {unreadable}")
    return Check("theano-conv", SKIP, f"{why}: Theano would run both nets on the CPU, which "
                 "says nothing about cuDNN")


def algorithm_check(inst: Installation | None, env: Mapping[str, str],
                    unusable: str | None = None, runner: Runner | None = None) -> Check:
    """cuDNN's forward algorithms timed on the GPU; `unusable` says why the root's cuDNN cannot
    be looked at (its state is damaged)."""
    target = inst.soname_path() if inst else None
    if inst is None or target is None:
        return Check("cudnn-algorithms", SKIP, f"the root's cuDNN cannot be used: {unusable}"
                     if unusable else "no cuDNN installed in the CUDA root")
    args = stdlib_probe("gpu_steps") + ["--bench", *numpy_path(), str(target)]
    cudart = find_cudart(inst)
    if cudart:
        args.append(cudart)
    return algorithm_verdict(run_probe(args, BENCH_TIMEOUT, child_env(inst.lib_dir, env),
                                       runner=runner))


def algorithm_verdict(result: ProbeResult) -> Check:
    """The `cudnn-algorithms` check from probes/gpu_steps.py --bench's answer: each layer's fastest
    forward algorithm. An answer without what it is judged on is a failure saying so."""
    if result.data is None:
        return Check("cudnn-algorithms", FAIL, f"the GPU benchmark died: {result.last_error_line()}")
    data = BenchAnswer.read(result.data).to_dict()  # the JSON: what was read, nothing else
    answer = result.answer("the GPU benchmark's answer")
    status = answer.raw("status")
    if status == "skip":
        return Check("cudnn-algorithms", SKIP, answer.text("reason") or "no reason given", data)
    if status != "pass":
        return Check("cudnn-algorithms", FAIL, answer.text("reason") or "failed", data)
    try:
        gpu = answer.need_text("gpu", 200)
        parts = []
        for name, layer in answer.need_fields("layers").entries(64):
            fastest = layer.fields("fastest")
            if not fastest:
                continue
            parts.append(f"{name[:100]} {layer.shown('input', 40)}*{layer.shown('filter', 40)}: "
                         f"fastest {fastest.shown('algo', 80)} "
                         f"{fastest.need_number('ms', 0.0):.3f} ms")
    except BadAnswer as exc:
        return Check("cudnn-algorithms", FAIL, f"the GPU benchmark ran but its answer cannot be "
                     f"judged: {exc}", data)
    return Check("cudnn-algorithms", PASS, f"on {gpu}: " + "; ".join(parts), data)
