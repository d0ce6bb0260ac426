"""`verify`: check, layer by layer, that cuDNN in a CUDA root is installed right and works."""
from __future__ import annotations

from pathlib import Path

from cudnn_setup.checks.suite import run_checks
from cudnn_setup.commands.base import Context, command
from cudnn_setup.commands.steps import recover_first, theanorc_path
from cudnn_setup.facts.cuda import find_cuda_root
from cudnn_setup.report import FAIL, Result
from cudnn_setup.state.layout import StateDir


@command("verify")
def verify(result: Result, ctx: Context, *, cuda_root: Path | None = None,
           theanorc: Path | None = None, python: str | None = None, no_theano: bool = False,
           deep: bool = False) -> None:
    root = find_cuda_root(ctx.env, cuda_root)
    result.cuda_root = str(root.path)
    recover_first(result, root, ctx)
    result.checks += run_checks(root, python=python or ctx.python, env=ctx.env,
                                theanorc=theanorc_path(ctx, theanorc), theano=not no_theano,
                                conf=ctx.ld_so_conf, deep=deep)
    manifest = StateDir(root.path).manifest()
    result.cudnn_version = manifest.cudnn_version if manifest else None
    failed = [c.name for c in result.checks if c.status == FAIL]
    result.lines.append(f"cuDNN in {root.path}: " + (f"FAILED ({', '.join(failed)})" if failed
                                                     else "ok"))
