"""`theanorc`: write the cuDNN settings for a CUDA root into Theano's config."""
from __future__ import annotations

from pathlib import Path

from cudnn_setup.installation.model import find_installation
from cudnn_setup.steps.command_wrapper import command
from cudnn_setup.steps.context import Context
from cudnn_setup.steps.recovery import look_at_state
from cudnn_setup.steps.theano_step import theanorc_path, theanorc_step
from cudnn_setup.facts.cuda import find_cuda_root
from cudnn_setup.errors import UsageError
from cudnn_setup.report import FAIL, WARN, Check, Result
from cudnn_setup.state.view import command_line
from cudnn_setup.theanorc_merge import TheanorcRefused


@command("theanorc")
def theanorc(result: Result, ctx: Context, *, cuda_root: Path | None = None,
             theanorc: Path | None = None, dry_run: bool = False,
             force_theano_cudnn: bool = False, python: str | None = None) -> None:
    root = find_cuda_root(ctx.env, cuda_root)
    result.cuda_root = str(root.path)
    view = look_at_state(result, root)  # a pending transaction is said, not finished here
    if view.problem is not None:
        raise view.problem
    inst = find_installation(root, view.manifest)  # the manifest's lib dir, else the root's
    result.cudnn_version = inst.version
    absent = no_cudnn(inst)
    if absent is not None and not dry_run:
        # optimizer_including=cudnn and [dnn] paths to a root without cuDNN make Theano stop
        raise UsageError(f"no cuDNN in {root.path} ({absent}); Theano's config was left "
                         "untouched", f"install cuDNN there first "
                         f"(`{command_line('install ARCHIVE', root.path)}`), or pass --cuda-root "
                         "naming the CUDA root that has it", code="no-cudnn")
    check = theanorc_step(result, theanorc_path(ctx, theanorc), root.path, inst.lib_dir, dry_run,
                          inst.version, ctx=ctx, python=python, cuda_version=root.version,
                          force_theano_cudnn=force_theano_cudnn)
    if check.status == FAIL:  # the step's own refusal, its code and hint kept
        raise TheanorcRefused(check.data["message"], check.data["hint"], code=check.data["code"])
    if absent is not None:  # a plan made before cuDNN is there (a check-mode run of a fleet)
        check = Check("theanorc", WARN, f"{check.detail}; but there is no cuDNN in {root.path} "
                      f"yet ({absent}): a real run refuses until cuDNN is installed there")
    result.checks.append(check)


def no_cudnn(inst) -> str | None:
    """What is missing for Theano to use the cuDNN of this root, or None when it is there."""
    if inst.library("libcudnn") is None:
        return f"no libcudnn.so.N in {inst.lib_dir}"
    if inst.header_file is None:
        return f"no cudnn.h (or cudnn_version.h) in {inst.include_dir}"
    return None
