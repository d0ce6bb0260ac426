"""`theanorc`: write the cuDNN settings for a CUDA root into Theano's config."""
from __future__ import annotations

from pathlib import Path

from cudnn_setup.commands.base import Context, command
from cudnn_setup.commands.steps import recover_first, theanorc_path, theanorc_step
from cudnn_setup.facts.cuda import find_cuda_root
from cudnn_setup.report import FAIL, Result
from cudnn_setup.state.layout import StateDir
from cudnn_setup.theanorc import TheanorcRefused


@command("theanorc")
def theanorc(result: Result, ctx: Context, *, cuda_root: Path | None = None,
             theanorc: Path | None = None, dry_run: bool = False) -> None:
    root = find_cuda_root(ctx.env, cuda_root)
    result.cuda_root = str(root.path)
    recover_first(result, root, ctx)
    manifest = StateDir(root.path).manifest()
    result.cudnn_version = manifest.cudnn_version if manifest else None
    lib_dir = root.path / manifest.lib_dir if manifest else root.lib_dir()
    check = theanorc_step(result, theanorc_path(ctx, theanorc), root.path, lib_dir, dry_run)
    if check.status == FAIL:
        raise TheanorcRefused(check.detail, "")
    result.checks.append(check)
