"""The loader advice, case by case, from facts alone: the loader step's plan
(steps/loader_step.decide_loader) and its application against a real conf directory and a real
program standing in for ldconfig, and the loader check's verdict (checks/loader_check.judge_loader)."""
from __future__ import annotations

from pathlib import Path

import pytest

from cudnn_setup.checks.framework_whatif import LD_LIBRARY_PATH, LDCONFIG, WhatIf
from cudnn_setup.steps.context import Context
from cudnn_setup.steps.loader_step import (ADVISE, ASK_ROOT, REFRESH, REFUSE, REGISTER,
                                           LoaderFacts, apply_plan, change_to_try,
                                           decide_loader, loader_step)

LIB = Path("/opt/cuda/lib64")
TORCH = "torch 2.11.0 would break: would load cuDNN 9.1.0. Instead: use 9.19.0 or newer"
JAX = "jax 0.7 would break: would load cuDNN 9.1.0. Instead: use 9.19.0 or newer"


@pytest.mark.parametrize("register, on_path, expected", [
    (True, None, (LDCONFIG, str(LIB))),
    (True, True, (LDCONFIG, str(LIB))),  # registering asks the ldconfig question either way
    (False, False, (LD_LIBRARY_PATH, str(LIB))),
    (False, True, None),  # on the loader path: no change to try
])
def test_the_change_to_try(register, on_path, expected):
    change = change_to_try(LIB, register, on_path)
    assert (None if change is None else (change.kind, change.directory)) == expected


# register, on the path, root, breaking, force, verify follows →
# action, check status, words in the detail, refusal code, words in the per-program fix
CASES = [
    ("register, nothing breaks", (True, None, True, (), False, False),
     REGISTER, "pass", "", None, None),
    ("register, a framework breaks: refused", (True, None, True, (TORCH,), False, False),
     REFUSE, "fail", f"did not register {LIB} with the loader: {TORCH} (--force registers it "
     "anyway)", "would-break-frameworks", "torch would load this cuDNN"),
    ("register, two break: both named, first in the error", (True, None, True, (TORCH, JAX),
                                                              False, False),
     REFUSE, "fail", f"{TORCH}; {JAX}", "would-break-frameworks", "torch, jax would load"),
    ("register, a framework breaks, forced", (True, None, True, (TORCH,), True, False),
     REGISTER, "pass", "", None, None),
    ("on the path as root: ldconfig refreshes", (False, True, True, (), False, False),
     REFRESH, "pass", "", None, None),
    ("on the path, not root", (False, True, False, (), False, True),
     ASK_ROOT, "warn", f"{LIB} is on the loader path but only root can refresh its cache: "
     "run `sudo ldconfig`", None, None),
    ("off the path, LD_LIBRARY_PATH would break a framework",
     (False, False, False, (TORCH,), False, True),
     ADVISE, "warn", "putting it on LD_LIBRARY_PATH for every program would break a framework: "
     + TORCH, None, f"`env LD_LIBRARY_PATH={LIB} program`"),
    ("off the path, verify follows: its loader check gives the line",
     (False, False, True, (), False, True),
     ADVISE, "skip", "the loader check below says how programs can find it", None, None),
    ("off the path, no verify: the line itself", (False, False, False, (), False, False),
     ADVISE, "skip", f"run: export LD_LIBRARY_PATH={LIB}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}",
     None, None),
]


@pytest.mark.parametrize("facts, action, status, says, code, fix", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_plan(facts, action, status, says, code, fix):
    register, on_path, root, breaking, force, verify_follows = facts
    plan = decide_loader(LoaderFacts(LIB, register, on_path, root, breaking, force,
                                     verify_follows))
    assert (plan.action, plan.check.status) == (action, status)
    assert says in plan.check.detail
    assert (plan.refused.code if plan.refused else None) == code
    if fix is None:
        assert plan.loader_fix is None
    else:
        assert fix in plan.loader_fix
        assert plan.check.data["hint"] == plan.loader_fix
    if plan.refused is not None:
        assert plan.refused.exit_code == 5
        assert plan.refused.message.startswith(f"{LIB} was not registered with the loader: {TORCH}")
        assert plan.refused.hint.endswith("; --force registers it anyway")
        assert ("(and 1 more framework)" in plan.refused.message) == (len(breaking) == 2)


def fake_ldconfig(tmp_path: Path, status: int) -> str:
    prog = tmp_path / f"ldconfig-{status}"
    prog.write_text(f"#!/bin/sh\necho 'ldconfig said this'\nexit {status}\n")
    prog.chmod(0o755)
    return str(prog)


@pytest.mark.parametrize("status, check_status", [(0, "pass"), (1, "fail")])
def test_registering_writes_the_conf_file_and_runs_ldconfig(tmp_path, home, status,
                                                            check_status):
    conf_dir = tmp_path / "ld.so.conf.d"
    conf_dir.mkdir()
    ctx = Context(env={}, home=home, python="python3", ld_conf_dir=conf_dir,
                  ldconfig=fake_ldconfig(tmp_path, status))
    plan = decide_loader(LoaderFacts(LIB, True, None, True, (TORCH,), force=True))
    check, changed = apply_plan(plan, ctx)
    assert changed and check.status == check_status
    assert (conf_dir / "cudnn-setup.conf").read_text().splitlines()[-1] == str(LIB)
    assert check.detail.endswith(f"; registered although {TORCH}")
    if status:
        assert "ldconfig failed: ldconfig said this" in check.detail


def test_a_plan_that_changes_nothing_is_applied_as_it_is(tmp_path, home):
    conf_dir = tmp_path / "ld.so.conf.d"
    conf_dir.mkdir()
    ctx = Context(env={}, home=home, python="python3", ld_conf_dir=conf_dir,
                  ldconfig=str(tmp_path / "never-run"))
    for facts in (LoaderFacts(LIB, True, None, True, (TORCH,)),
                  LoaderFacts(LIB, False, True, False), LoaderFacts(LIB, False, False, True)):
        plan = decide_loader(facts)
        assert apply_plan(plan, ctx) == (plan.check, False)
    assert list(conf_dir.iterdir()) == []


def test_the_step_tries_the_change_the_plan_needs(tmp_path, home):
    """loader_step: the what-if is asked about the one change the plan is decided on, and a
    refusal carries what it said."""
    asked = []

    def what_if(change):
        asked.append(change.kind)
        return [WhatIf("torch", "2.11.0", change.describe(), "9.19.0", None, breaks=True,
                       reason="would load cuDNN 9.1.0", safe_alternative="use 9.19.0 or newer")]

    conf_dir = tmp_path / "ld.so.conf.d"
    conf_dir.mkdir()
    ctx = Context(env={}, home=home, python="python3", ld_conf_dir=conf_dir,
                  ld_so_conf=tmp_path / "no-ld.so.conf")
    step = loader_step(ctx, LIB, register=True, what_if=what_if)
    assert asked == [LDCONFIG] and step.refused is not None and not step.changed_loader
    assert step.breaking == [TORCH] and step.loader_fix and list(conf_dir.iterdir()) == []
    step = loader_step(ctx, tmp_path / "lib64", register=False, what_if=what_if)
    assert asked == [LDCONFIG, LD_LIBRARY_PATH] and step.check.status == "warn"
    assert step.refused is None and "env LD_LIBRARY_PATH=" in step.loader_fix


OURS = LIB / "libcudnn.so.9"
REAL = str(LIB / "libcudnn.so.9.1.0")
LINE = f"export LD_LIBRARY_PATH={LIB}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"
OTHER = {"path": "/usr/lib/x86_64-linux-gnu/libcudnn.so.9",
         "real": "/usr/lib/x86_64-linux-gnu/libcudnn.so.9.0.0", "version": "9.0.0",
         "via": "ldconfig cache"}
MINE = {"path": str(OURS), "real": REAL, "version": "9.1.0", "via": "LD_LIBRARY_PATH"}


@pytest.mark.parametrize("copies, status, detail", [
    ([], "warn", f"a program started without help would not find libcudnn.so.9: {LIB} is not on "
     f"the loader path; fix: {LINE} (or, as root, install with --ldconfig)"),
    ([OTHER], "warn", f"programs would load {OTHER['path']} (cuDNN 9.0.0, via ldconfig cache), "
     f"not ours in {LIB}; fix: {LINE}; other copies: {OTHER['path']} (9.0.0, via ldconfig cache)"),
    ([OTHER, MINE], "warn", f"programs would load {OTHER['path']} (cuDNN 9.0.0, via ldconfig "
     f"cache), not ours in {LIB}; fix: {LINE}; other copies: {OTHER['path']}"),
    ([MINE], "pass", f"programs load ours ({OURS}, via LD_LIBRARY_PATH)"),
    ([MINE, dict(OTHER, version=None)], "pass", f"programs load ours ({OURS}, via "
     f"LD_LIBRARY_PATH); other copies on this machine: {OTHER['path']} (?, via ldconfig cache)"),
])
def test_the_loader_check_from_the_copies_seen(copies, status, detail):
    from cudnn_setup.checks.loader_check import judge_loader

    check = judge_loader(OURS, REAL, LIB, copies, LINE, " (or, as root, install with --ldconfig)")
    assert check.status == status and check.detail.startswith(detail), check.detail
    assert check.data == {"name": "libcudnn.so.9", "ours": str(OURS), "copies": copies}
