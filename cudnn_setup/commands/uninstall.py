"""`uninstall`: take the tool's cuDNN out of the root and put back what it replaced."""
from __future__ import annotations

from pathlib import Path

from cudnn_setup.placement import engine
from cudnn_setup.steps.command_wrapper import command
from cudnn_setup.steps.context import Context
from cudnn_setup.steps.theano_step import theanorc_path
from cudnn_setup.facts import loader
from cudnn_setup.facts.cuda import find_cuda_root
from cudnn_setup.report import Result
from cudnn_setup.state.plan import describe_action
from cudnn_setup.theanorc_merge import BACKUP_SUFFIX, mentions
from cudnn_setup.text import plural


@command("uninstall")
def uninstall(result: Result, ctx: Context, *, cuda_root: Path | None = None,
              dry_run: bool = False, force: bool = False) -> None:
    root = find_cuda_root(ctx.env, cuda_root)
    result.cuda_root = str(root.path)
    outcome = engine.uninstall(root, force=force, dry_run=dry_run,
                               lock_timeout=ctx.lock_timeout, on_status=ctx.status,
                               on_commit=lambda: setattr(result, "changed", True))
    version = (outcome.manifest or {}).get("cudnn_version")
    result.cudnn_version = version
    # finishing or rolling back what a killed run left changed the root too
    result.changed = (outcome.changed or outcome.recovered is not None) and not dry_run
    if outcome.recovered:
        result.lines.append(outcome.recovered)
    if outcome.manifest is None:
        result.add("uninstall", outcome.to_dict())
        # "besides that" only after a killed run's transaction, completed or to be: a root
        # never installed into has a note too, which says just what the line does
        if outcome.recovered is not None or outcome.changed:
            result.lines += [f"note: {n}" for n in outcome.notes]
            result.lines.append(f"cudnn-setup has installed nothing in {root.path} besides "
                                "that")
        else:
            result.lines.append(f"cudnn-setup has installed nothing in {root.path}; nothing "
                                "to do")
        return
    head = "plan:" if dry_run else f"removed cuDNN {version or '(version not recorded)'} from {root.path}:"
    # what is said after the root changed goes into the answer's notes too: a fleet reads those
    rc = theanorc_path(ctx, None)
    if not dry_run and mentions(rc, str(root.path)):
        backup = rc.with_name(rc.name + BACKUP_SUFFIX)
        before = (f"its version before cudnn-setup is {backup}" if backup.exists()
                  else "cudnn-setup created it")
        outcome.notes.append(f"{rc} still points Theano at {root.path} with "
                             f"optimizer_including=cudnn ({before})")
    lib_dir = root.path / outcome.manifest.get("lib_dir", "lib64")
    if not dry_run and outcome.changed and loader.remove_conf(ctx.ld_conf_dir, lib_dir):
        ok, out = loader.run_ldconfig(binary=ctx.ldconfig)
        outcome.notes.append(f"removed {ctx.ld_conf_dir / loader.CONF_NAME}; ldconfig "
                             + ("ran" if ok else f"failed: {out}"))
    result.add("uninstall", outcome.to_dict())
    result.lines.append(head)
    result.lines += [describe_action(a) for a in outcome.plan.actions()]
    result.lines += [f"note: {n}" for n in outcome.notes]
    if outcome.plan.kept:
        result.lines.append(f"left {plural(len(outcome.plan.kept), 'file')} in place: they were there, "
                            "identical, before cudnn-setup installed this cuDNN")
