"""`bench`: what cuDNN buys — Theano with and without it, and cuDNN's own algorithm timings."""
from __future__ import annotations

from pathlib import Path

from cudnn_setup.benchmarks import algorithm_check, theano_checks, theano_without_gpu
from cudnn_setup.steps.command_wrapper import command
from cudnn_setup.steps.context import Context, root_if_any
from cudnn_setup.steps.recovery import root_installation
from cudnn_setup.steps.theano_step import theanorc_path
from cudnn_setup.report import SKIP, Check, Result


@command("bench")
def bench(result: Result, ctx: Context, *, cuda_root: Path | None = None,
          theanorc: Path | None = None, python: str | None = None,
          no_theano: bool = False) -> None:
    root = root_if_any(ctx, cuda_root)
    inst, damaged, _ = root_installation(result, root) if root else (None, None, None)
    if damaged is not None:
        result.lines.append(f"benchmarking without the root's cuDNN: {damaged.message}")
    result.cuda_root = str(root.path) if root else None
    result.cudnn_version = inst.version if inst else None
    env = dict(ctx.env)
    ctx.status("asking the NVIDIA driver about the GPUs")
    driver = ctx.facts.driver()
    if driver.status == SKIP:
        # Both Theano runs would use the CPU and cuDNN's timings need a GPU: minutes spent
        # to conclude nothing, so it is said at once.
        why = driver.reason or "the driver lists no GPU"
        result.lines.append(f"nothing to measure here: {why}. bench compares Theano's conv net "
                            "with and without cuDNN and times cuDNN's algorithms, on a GPU")
        if not no_theano:
            result.checks.append(theano_without_gpu(theanorc_path(ctx, theanorc), why))
        result.checks.append(Check("cudnn-algorithms", SKIP, f"the root's cuDNN cannot be used: "
                                   f"{damaged.message}" if damaged else f"{why}: nothing to time"))
        return
    if not no_theano:
        result.checks += theano_checks(inst, python or ctx.python, theanorc_path(ctx, theanorc),
                                       env, ctx.status, ctx.runner)
    ctx.status("timing cuDNN's convolution algorithms on the GPU (skipped without one)")
    result.checks.append(algorithm_check(inst, env, damaged.message if damaged else None,
                                         ctx.runner))
