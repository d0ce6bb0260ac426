"""The loader step of install: ldconfig where allowed, else how programs find the new
libraries, and what each framework would load after that change (checked before it is made).
"""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import Callable

from msgspec import Struct, field

from cudnn_setup.errors import InstallFailed, SetupError, os_error
from cudnn_setup.facts import loader
from cudnn_setup.report import FAIL, PASS, SKIP, WARN, Check
from cudnn_setup.steps.context import Context
from cudnn_setup.text import plural, show_path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from cudnn_setup.checks.framework_whatif import Change, WhatIf

# What the frameworks would load is imported where it is asked (checks/framework_whatif.py and
# the modules it uses): an install with --no-frameworks does not load the frameworks' checks.


class LoaderStep(Struct):
    """The `ldconfig` check, what the frameworks would do with the change it made or advises,
    and whether it changed what programs load."""

    check: Check
    what_if: list[WhatIf] = field(default_factory=list)
    refused: SetupError | None = None  # --ldconfig not done: it would break a framework
    changed_loader: bool = False
    loader_fix: str | None = None  # the loader check's advice instead of LD_LIBRARY_PATH

    @property
    def breaking(self) -> list[str]:
        return _warnings(self.what_if)


def _warnings(results: list[WhatIf]) -> list[str]:
    """what_if_warnings() of `results`; none asked, none to read (nor its module to import)."""
    if not results:
        return []
    from cudnn_setup.checks.framework_whatif import what_if_warnings

    return what_if_warnings(results)


# What the loader step does, decided from facts alone (decide_loader), then done (apply_plan).
REGISTER = "register"  # --ldconfig: write the tool's ld.so.conf.d file and run ldconfig
REFUSE = "refuse"  # --ldconfig would break a framework: nothing is changed, the install stands
REFRESH = "refresh"  # the dir is on the loader path and this is root: run ldconfig
ASK_ROOT = "ask-root"  # on the loader path, not root: say `sudo ldconfig`
ADVISE = "advise"  # off the loader path: say how programs find it (LD_LIBRARY_PATH or per program)


class LoaderFacts(Struct, frozen=True):
    """What the loader step is decided from. `on_loader_path` is None when it was not looked
    at (with --ldconfig it does not matter); `breaking`: what_if_warnings() of the change
    change_to_try() names, one line per framework it would break."""

    lib_dir: Path
    register: bool
    on_loader_path: bool | None
    root: bool
    breaking: tuple[str, ...] = ()
    force: bool = False
    verify_follows: bool = False


class LoaderPlan(Struct, frozen=True):
    """What to do and say: `action` (REGISTER… ADVISE); `check` is the ldconfig check as it
    stands when nothing is applied (REGISTER and REFRESH make theirs from what ldconfig did);
    `loader_fix` replaces the loader check's LD_LIBRARY_PATH line; `refused`: the error of a
    refused --ldconfig."""

    action: str
    lib_dir: Path
    check: Check
    breaking: tuple[str, ...] = ()
    loader_fix: str | None = None
    refused: InstallFailed | None = None


def change_to_try(lib_dir: Path, register: bool, on_loader_path: bool | None) -> Change | None:
    """The change whose effect on the frameworks the plan needs: registering `lib_dir`, or
    putting it first on LD_LIBRARY_PATH when it is off the loader path; None on the path."""
    from cudnn_setup.checks.framework_whatif import (prepend_to_ld_library_path,
                                                     register_with_ldconfig)

    if register:
        return register_with_ldconfig(lib_dir)
    return None if on_loader_path else prepend_to_ld_library_path(lib_dir)


def decide_loader(facts: LoaderFacts) -> LoaderPlan:
    """The loader step's plan, with no I/O: registering a directory that would give a framework
    an older cuDNN than it was built for is refused unless forced; off the loader path, a
    change that would break a framework turns the LD_LIBRARY_PATH advice into a per-program
    one; when verification follows, its loader check gives the LD_LIBRARY_PATH line (with every
    copy of cuDNN it found), so it is not said twice."""
    lib_dir, breaking = facts.lib_dir, facts.breaking
    if facts.register:
        if breaking and not facts.force:
            fix = per_program(lib_dir, list(breaking))
            more = len(breaking) - 1
            refused = InstallFailed(
                f"{lib_dir} was not registered with the loader: {breaking[0]}"
                + (f" (and {plural(more, 'more framework')})" if more else "")
                + "; the cuDNN installed there stands", f"{fix}; --force registers it anyway",
                code="would-break-frameworks")
            return LoaderPlan(REFUSE, lib_dir, Check(
                "ldconfig", FAIL, f"did not register {lib_dir} with the loader: "
                + "; ".join(breaking) + " (--force registers it anyway)",
                {"code": refused.code, "hint": fix}), breaking, fix, refused)
        return LoaderPlan(REGISTER, lib_dir, Check("ldconfig", PASS, ""), breaking)
    if facts.on_loader_path:
        if facts.root:
            return LoaderPlan(REFRESH, lib_dir, Check("ldconfig", PASS, ""))
        return LoaderPlan(ASK_ROOT, lib_dir, Check(
            "ldconfig", WARN, f"{lib_dir} is on the loader path but only root can refresh its "
            "cache: run `sudo ldconfig`"))
    if breaking:
        fix = per_program(lib_dir, list(breaking))
        return LoaderPlan(ADVISE, lib_dir, Check(
            "ldconfig", WARN, f"{lib_dir} is not on the system loader path, and putting it on "
            "LD_LIBRARY_PATH for every program would break a framework: " + "; ".join(breaking),
            {"hint": fix}), breaking, fix)
    if facts.verify_follows:
        return LoaderPlan(ADVISE, lib_dir, Check(
            "ldconfig", SKIP, f"{lib_dir} is not on the system loader path; the loader check "
            "below says how programs can find it (or install with --ldconfig, as root, to "
            "register it)"))
    return LoaderPlan(ADVISE, lib_dir, Check(
        "ldconfig", SKIP, f"{lib_dir} is not on the system loader path; to load cuDNN from it, "
        f"run: {loader.ld_library_path_line(lib_dir)}  (or install with --ldconfig, as root, to "
        "register it)"))


def apply_plan(plan: LoaderPlan, ctx: Context) -> tuple[Check, bool]:
    """Do what `plan` says; (the ldconfig check, whether what programs load changed)."""
    if plan.action == REGISTER:
        try:
            conf = loader.write_conf(ctx.ld_conf_dir, plan.lib_dir)
        except OSError as exc:
            error = os_error(exc, f"cannot register {show_path(plan.lib_dir)} with the loader")
            return Check("ldconfig", FAIL, f"{error.message} — {error.hint}",
                         {"code": error.code, "hint": error.hint}), False
        ok, out = loader.run_ldconfig(binary=ctx.ldconfig)
        forced = "".join(f"; registered although {w}" for w in plan.breaking)
        return Check("ldconfig", PASS if ok else FAIL,
                     (f"wrote {conf} and ran ldconfig" if ok else f"ldconfig failed: {out}")
                     + forced), True
    if plan.action == REFRESH:
        ok, out = loader.run_ldconfig(binary=ctx.ldconfig)
        return Check("ldconfig", PASS if ok else WARN,
                     "ran ldconfig: programs find the new libraries" if ok
                     else f"ldconfig failed: {out}"), True
    return plan.check, False


def on_path_for(ctx: Context, lib_dir: Path, register: bool) -> bool | None:
    """Whether `lib_dir` is on the system loader path; None with --ldconfig (not looked at)."""
    return None if register else loader.on_loader_path(lib_dir, ctx.ld_so_conf)


def changes_nothing_loaded(register: bool, on_path: bool | None) -> bool:
    """Whether the loader step can only advise: nothing it does changes what programs load
    (no ldconfig is run), so what is checked meanwhile holds after it."""
    return not register and on_path is False


def loader_step(ctx: Context, lib_dir: Path, register: bool, verify_follows: bool = False, *,
                what_if: Callable[[Change], list[WhatIf]] | None = None,
                force: bool = False, on_path: bool | None = None) -> LoaderStep:
    """Make programs find the new libraries: ldconfig where allowed, else say how. The facts
    are gathered (the loader path, unless `on_path` gives it; what `what_if` says each
    framework would load after the change), the plan decided from them (decide_loader), then
    applied."""
    if on_path is None:
        on_path = on_path_for(ctx, lib_dir, register)
    change = change_to_try(lib_dir, register, on_path) if what_if else None
    results = what_if(change) if what_if and change is not None else []
    plan = decide_loader(LoaderFacts(lib_dir, register, on_path, ctx.euid == 0,
                                     tuple(_warnings(results)), force, verify_follows))
    check, changed = apply_plan(plan, ctx)
    return LoaderStep(check, results, plan.refused, changed, plan.loader_fix)


def per_program(lib_dir: Path, breaking: list[str]) -> str:
    """The advice that replaces a bare LD_LIBRARY_PATH line when it would break a framework."""
    frameworks = ", ".join(dict.fromkeys(w.split(" ", 1)[0] for w in breaking))
    return (f"give the programs that need this cuDNN their own environment (`env "
            f"LD_LIBRARY_PATH={shlex.quote(str(lib_dir))} program`), not every program: with it, "
            f"{frameworks} would load this cuDNN, which its rule refuses (see the ldconfig check)")
