"""`bench`: what cuDNN buys — Theano with and without it, and cuDNN's own algorithm timings."""
from __future__ import annotations

from pathlib import Path

from cudnn_setup.checks.benchmarks import algorithm_check, theano_checks
from cudnn_setup.steps.command_wrapper import command
from cudnn_setup.steps.context import Context, root_if_any
from cudnn_setup.steps.recovery import root_installation
from cudnn_setup.steps.theano_step import theanorc_path
from cudnn_setup.report import Result


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
    if not no_theano:
        result.checks += theano_checks(inst, python or ctx.python, theanorc_path(ctx, theanorc),
                                       env, ctx.status, ctx.runner)
    ctx.status("timing cuDNN's convolution algorithms on the GPU (skipped without one)")
    result.checks.append(algorithm_check(inst, env, damaged.message if damaged else None,
                                         ctx.runner))
