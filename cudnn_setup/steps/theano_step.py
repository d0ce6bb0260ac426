"""Theano's config file as a step of install and theanorc: merge cuDNN's settings into it."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from cudnn_setup.checks.theano_check import theano_range_note, theano_supports
from cudnn_setup.report import FAIL, PASS, WARN, Check, Result
from cudnn_setup.steps.context import Context
from cudnn_setup.theanorc_merge import TheanorcRefused, configure, default_path


def theanorc_path(ctx: Context, explicit: Path | None) -> Path:
    return explicit or default_path(ctx.env, ctx.home)


def theanorc_step(result: Result, path: Path, root: Path, lib_dir: Path, dry_run: bool,
                  cudnn_version: str | None = None) -> Check:
    """Merge the cuDNN settings into Theano's config; a refusal is a failed check, not an error.
    The config asks for cuDNN (optimizer_including=cudnn), so a cuDNN Theano 1.0.5 cannot use
    is said here: Theano would stop on it instead of running without."""
    try:
        change = configure(path, root, lib_dir, dry_run=dry_run)
    except TheanorcRefused as exc:  # also what an OSError became: the install still stands
        return Check("theanorc", FAIL, f"{exc.message} — {exc.hint}",
                     {"code": exc.code, "message": exc.message, "hint": exc.hint})
    if cudnn_version and not theano_supports(cudnn_version):
        change = replace(change, warnings=(*change.warnings, theano_range_note(cudnn_version)))
    result.add("theanorc", change.to_dict())
    if dry_run and change.changed:
        result.lines += change.diff.rstrip("\n").splitlines()
    if change.changed and not dry_run:
        result.changed = True
    verb = ("would update" if dry_run else "updated") if change.changed else "already up to date:"
    detail = f"{verb} {change.path}" + (f" (backup {change.backup})" if change.backup else "")
    detail += "".join(f"; {w}" for w in change.warnings)
    return Check("theanorc", WARN if change.warnings else PASS, detail)
