"""`verify`: check, layer by layer, that cuDNN is installed right and works: the cuDNN in a CUDA
root, or any other one named with --lib-dir (a hand-copied one, the distribution's packages, a
pip wheel's directory). Read-only: it never writes to a root or its state, nor takes its lock;
a transaction a killed run left is reported (the `state` check) with the command that completes
it."""
from __future__ import annotations

import os
from pathlib import Path

from cudnn_setup.installation.model import UNREAD, find_installation
from cudnn_setup.installation.locate import describe, locate
from cudnn_setup.checks.check_facts import CheckFacts
from cudnn_setup.checks.suite import run_checks
from cudnn_setup.steps.command_wrapper import command
from cudnn_setup.steps.context import Context, include_needs_lib_dir, root_if_any
from cudnn_setup.steps.recovery import look_at_state, state_check
from cudnn_setup.steps.theano_step import theanorc_path
from cudnn_setup.facts.cuda import find_cuda_root
from cudnn_setup.report import FAIL, Result
from cudnn_setup.settings import user_cache_dir


@command("verify")
def verify(result: Result, ctx: Context, *, cuda_root: Path | None = None,
           theanorc: Path | None = None, python: str | None = None, no_theano: bool = False,
           deep: bool = False, lib_dir: Path | None = None, include_dir: Path | None = None,
           no_frameworks: bool = False) -> None:
    include_needs_lib_dir(lib_dir, include_dir)
    state = None
    if lib_dir is None:
        root = find_cuda_root(ctx.env, cuda_root)
        view = look_at_state(result, root)
        state = state_check(view, root)
        inst = find_installation(root, view.manifest)
    else:
        root = root_if_any(ctx, cuda_root)
        manifest = UNREAD
        if root is not None and include_dir is None and \
                os.path.realpath(lib_dir) == os.path.realpath(root.lib_dir()):
            view = look_at_state(result, root)  # the root's own cuDNN, with its manifest
            state, manifest = state_check(view, root), view.manifest
        inst = locate(lib_dir, include_dir, root, manifest)
        if root is None:
            result.lines.append("no CUDA root found: the cuda check is skipped and compile uses "
                                "only the cuDNN's own headers (--cuda-root names one)")
        elif cuda_root is None:
            result.lines.append(f"CUDA root for the cuda and compile checks: {root.path}, "
                                f"discovered via {root.found_via} (not given; --cuda-root "
                                "names another)")
    result.cuda_root = str(root.path) if root is not None else None
    result.checks += [state] if state is not None else []
    result.checks += run_checks(inst, CheckFacts(
        ctx.facts, python or ctx.python, theanorc_path(ctx, theanorc), theano=not no_theano,
        frameworks=not no_frameworks, conf=ctx.ld_so_conf, deep=deep,
        cache_dir=user_cache_dir(ctx.env, ctx.home)), status=ctx.status)
    result.cudnn_version = inst.version
    result.add("cudnn", describe(inst))
    failed = [c.name for c in result.checks if c.status == FAIL]
    where = root.path if lib_dir is None else inst.lib_dir
    result.lines.append(f"cuDNN in {where}: " + (f"FAILED ({', '.join(failed)})" if failed
                                                  else "ok"))

