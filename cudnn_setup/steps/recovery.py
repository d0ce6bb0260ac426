"""Finishing what a killed run left behind, before a command looks at the root."""
from __future__ import annotations

from cudnn_setup.checks.installation import Installation, find_installation
from cudnn_setup.errors import SetupError
from cudnn_setup.facts.cuda import CudaRoot
from cudnn_setup.placement.engine import recover_pending
from cudnn_setup.report import Result
from cudnn_setup.steps.context import Context

STATE_DAMAGED = "state-damaged"


def recover_first(result: Result, root: CudaRoot, ctx: Context, sweep: bool = True) -> None:
    """Finish a transaction a killed run left behind, before anything looks at the root."""
    said = recover_pending(root, ctx.lock_timeout, sweep=sweep, on_wait=ctx.status)
    if said:
        result.lines.append(said)
        result.add("recovered", said)


def root_installation(result: Result, root: CudaRoot, ctx: Context,
                      sweep: bool = True) -> tuple[Installation | None, SetupError | None]:
    """The root's cuDNN after recovery, for commands that look without changing anything
    (doctor, bench): damaged state there is a finding, (None, the error), not the end."""
    try:
        recover_first(result, root, ctx, sweep)
        return find_installation(root), None
    except SetupError as exc:
        if exc.code != STATE_DAMAGED:
            raise
        return None, exc
