"""Steps several commands take: finishing an interrupted transaction, Theano's config, the loader."""
from __future__ import annotations

from pathlib import Path

from cudnn_setup.commands.base import Context
from cudnn_setup.commands.placement import recover_pending
from cudnn_setup.facts import loader
from cudnn_setup.facts.cuda import CudaRoot
from cudnn_setup.errors import os_error
from cudnn_setup.report import FAIL, PASS, SKIP, WARN, Check, Result
from cudnn_setup.text import show_path
from cudnn_setup.theanorc import TheanorcRefused, configure, default_path


def recover_first(result: Result, root: CudaRoot, ctx: Context) -> None:
    """Finish a transaction a killed run left behind, before anything looks at the root."""
    said = recover_pending(root, ctx.lock_timeout)
    if said:
        result.lines.append(said)
        result.add("recovered", said)


def theanorc_path(ctx: Context, explicit: Path | None) -> Path:
    return explicit or default_path(ctx.env, ctx.home)


def theanorc_step(result: Result, path: Path, root: Path, lib_dir: Path, dry_run: bool) -> Check:
    """Merge the cuDNN settings into Theano's config; a refusal is a failed check, not an error."""
    try:
        change = configure(path, root, lib_dir, dry_run=dry_run)
    except TheanorcRefused as exc:  # also what an OSError became: the install still stands
        return Check("theanorc", FAIL, f"{exc.message} — {exc.hint}",
                     {"code": exc.code, "hint": exc.hint})
    result.add("theanorc", change.to_dict())
    if dry_run and change.changed:
        result.lines += change.diff.rstrip("\n").splitlines()
    if change.changed and not dry_run:
        result.changed = True
    verb = ("would update" if dry_run else "updated") if change.changed else "already up to date:"
    detail = f"{verb} {change.path}" + (f" (backup {change.backup})" if change.backup else "")
    detail += "".join(f"; {w}" for w in change.warnings)
    return Check("theanorc", WARN if change.warnings else PASS, detail)


def loader_step(ctx: Context, lib_dir: Path, register: bool, verify_follows: bool = False) -> Check:
    """Make programs find the new libraries: ldconfig where allowed, else say how.

    When verification follows, its `loader` check gives the LD_LIBRARY_PATH line (with every
    copy of cuDNN it found), so it is not printed twice.
    """
    if register:
        try:
            conf = loader.write_conf(ctx.ld_conf_dir, lib_dir)
        except OSError as exc:
            error = os_error(exc, f"cannot register {show_path(lib_dir)} with the loader")
            return Check("ldconfig", FAIL, f"{error.message} — {error.hint}",
                         {"code": error.code, "hint": error.hint})
        ok, out = loader.run_ldconfig()
        return Check("ldconfig", PASS if ok else FAIL,
                     f"wrote {conf} and ran ldconfig" if ok else f"ldconfig failed: {out}")
    if loader.on_loader_path(lib_dir, ctx.ld_so_conf):
        if ctx.euid == 0:
            ok, out = loader.run_ldconfig()
            return Check("ldconfig", PASS if ok else WARN,
                         "ran ldconfig: programs find the new libraries" if ok
                         else f"ldconfig failed: {out}")
        return Check("ldconfig", WARN, f"{lib_dir} is on the loader path but only root can "
                     "refresh its cache: run `sudo ldconfig`")
    if verify_follows:
        return Check("ldconfig", SKIP, f"{lib_dir} is not on the system loader path; the loader "
                     "check below says how programs can find it (or install with --ldconfig, "
                     "as root, to register it)")
    return Check("ldconfig", SKIP, f"{lib_dir} is not on the system loader path; to load cuDNN "
                 f"from it, run: {loader.ld_library_path_line(lib_dir)}  (or install with "
                 "--ldconfig, as root, to register it)")
