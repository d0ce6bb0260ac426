"""What a killed run left behind, as the commands that only look report it: never finished by
them (install, uninstall and repair do that, under the root's lock)."""
from __future__ import annotations

from cudnn_setup.installation.model import Installation, find_installation
from cudnn_setup.errors import SetupError
from cudnn_setup.facts.cuda import CudaRoot
from cudnn_setup.report import FAIL, WARN, Check, Result
from cudnn_setup.state.paths import STATE_DIR
from cudnn_setup.state.view import StateView, look

PERMISSION_DENIED = "permission-denied"


def look_at_state(result: Result, root: CudaRoot) -> StateView:
    """The root's state read once, without the lock; a pending transaction is said (and kept
    under `pending` in the JSON) with the command that completes it."""
    view = look(root.path)
    if view.pending is not None:
        result.lines.append(view.pending.describe(root.path))
        result.add("pending", view.pending.to_dict(root.path))
    return view


def state_check(view: StateView, root: CudaRoot) -> Check | None:
    """verify's `state` check: fail for state it could not use or a transaction left half
    done, warn for state this user may not read, or a transaction only tidying is left of (or
    one running now); None when all is well."""
    problem = view.problem
    if problem is not None and problem.code == PERMISSION_DENIED:
        # a state dir an earlier release made 0700 under umask 077: only its owner reads it
        state = root.path / STATE_DIR
        return Check("state", WARN, f"{problem.message}: the checks ran without the manifest",
                     {"code": problem.code, "hint": f"run as the owner of {state}, or have "
                      f"them make it readable (`chmod -R a+rX {state}`)"})
    if problem is not None:
        return Check("state", FAIL, f"{problem.message} (the checks ran without it)",
                     {"code": problem.code, "hint": problem.hint})
    pending = view.pending
    if pending is None:
        return None
    status = WARN if pending.committed or pending.holder is not None else FAIL
    return Check("state", status, pending.describe(root.path), pending.to_dict(root.path))


def root_installation(result: Result, root: CudaRoot
                      ) -> tuple[Installation | None, SetupError | None, StateView]:
    """The root's cuDNN with the manifest read once, for commands that look without changing
    anything (doctor, bench): state they cannot use is a finding, (None, the error), not the
    end."""
    view = look_at_state(result, root)
    if view.problem is not None:
        return None, view.problem, view
    return find_installation(root, view.manifest), None, view
