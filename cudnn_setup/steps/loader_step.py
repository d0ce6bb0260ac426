"""The loader step of install: ldconfig where allowed, else how programs find the new
libraries, and what each framework would load after that change (checked before it is made).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from cudnn_setup.checks.deps import loader_environment
from cudnn_setup.checks.framework_whatif import (Change, prepend_to_ld_library_path,
                                                 register_with_ldconfig, what_if,
                                                 what_if_warnings)
from cudnn_setup.checks.frameworks import FrameworkEntry, framework_report, frameworks_check
from cudnn_setup.checks.suite import Frameworks
from cudnn_setup.errors import InstallFailed, SetupError, os_error
from cudnn_setup.facts import loader
from cudnn_setup.report import FAIL, PASS, SKIP, WARN, Check
from cudnn_setup.steps.context import Context
from cudnn_setup.text import plural, show_path


class FrameworkLookahead:
    """What the frameworks of `python` load now, made once, and what a change to the loader's
    path would make them load (checks/framework_whatif.py)."""

    def __init__(self, ctx: Context, python: str):
        self.ctx, self.python = ctx, python
        self.now: list[FrameworkEntry] | None = None  # None: not made, or the interpreter could not say
        self.search = None

    def what_if(self, change: Change) -> list[dict]:
        if self.now is None:
            self.ctx.status(f"importing the deep-learning frameworks of {self.python}, to see "
                            "what they load now and would load after the change")
            self.search = loader_environment(self.ctx.env)
            try:
                self.now = framework_report(self.python, self.ctx.env, search=self.search,
                                            runner=self.ctx.runner)
            except SetupError:  # verify's frameworks check says why
                return []
        return what_if(self.python, self.ctx.env, change, search=self.search, current=self.now,
                       runner=self.ctx.runner)

    def report(self) -> Frameworks | None:
        """The frameworks check from the report made before the change, if one was made."""
        if self.now is None:
            return None
        return Frameworks(frameworks_check(self.now, self.python), self.now)


@dataclass
class LoaderStep:
    """The `ldconfig` check, what the frameworks would do with the change it made or advises,
    and whether it changed what programs load."""

    check: Check
    what_if: list[dict] = field(default_factory=list)
    refused: SetupError | None = None  # --ldconfig not done: it would break a framework
    changed_loader: bool = False
    loader_fix: str | None = None  # the loader check's advice instead of LD_LIBRARY_PATH

    @property
    def breaking(self) -> list[str]:
        return what_if_warnings(self.what_if)


def loader_step(ctx: Context, lib_dir: Path, register: bool, verify_follows: bool = False, *,
                what_if: Callable[[Change], list[dict]] | None = None,
                force: bool = False) -> LoaderStep:
    """Make programs find the new libraries: ldconfig where allowed, else say how.

    Before registering `lib_dir` (--ldconfig) or advising LD_LIBRARY_PATH, `what_if` says what
    each framework would then load: registering a directory that would give a framework an
    older cuDNN than it was built for is refused unless `force`, and the LD_LIBRARY_PATH line
    becomes a per-program one with the reason. When verification follows, its `loader` check
    gives the LD_LIBRARY_PATH line (with every copy of cuDNN it found), so it is not printed
    twice.
    """
    if register:
        results = what_if(register_with_ldconfig(lib_dir)) if what_if else []
        step = LoaderStep(Check("ldconfig", PASS, ""), results)
        if step.breaking and not force:
            step.loader_fix = per_program(lib_dir, step.breaking)
            more = len(step.breaking) - 1
            step.refused = InstallFailed(
                f"{lib_dir} was not registered with the loader: {step.breaking[0]}"
                + (f" (and {plural(more, 'more framework')})" if more else "")
                + "; the cuDNN installed there stands", f"{step.loader_fix}; --force registers "
                "it anyway", code="would-break-frameworks")
            step.check = Check("ldconfig", FAIL, f"did not register {lib_dir} with the loader: "
                               + "; ".join(step.breaking) + " (--force registers it anyway)",
                               {"code": step.refused.code, "hint": step.loader_fix})
            return step
        try:
            conf = loader.write_conf(ctx.ld_conf_dir, lib_dir)
        except OSError as exc:
            error = os_error(exc, f"cannot register {show_path(lib_dir)} with the loader")
            step.check = Check("ldconfig", FAIL, f"{error.message} — {error.hint}",
                               {"code": error.code, "hint": error.hint})
            return step
        ok, out = loader.run_ldconfig(binary=ctx.ldconfig)
        step.changed_loader = True
        forced = "".join(f"; registered although {w}" for w in step.breaking)
        step.check = Check("ldconfig", PASS if ok else FAIL,
                           (f"wrote {conf} and ran ldconfig" if ok else f"ldconfig failed: {out}")
                           + forced)
        return step
    if loader.on_loader_path(lib_dir, ctx.ld_so_conf):
        if ctx.euid == 0:
            ok, out = loader.run_ldconfig(binary=ctx.ldconfig)
            return LoaderStep(Check("ldconfig", PASS if ok else WARN,
                                    "ran ldconfig: programs find the new libraries" if ok
                                    else f"ldconfig failed: {out}"), changed_loader=True)
        return LoaderStep(Check("ldconfig", WARN, f"{lib_dir} is on the loader path but only "
                                "root can refresh its cache: run `sudo ldconfig`"))
    step = LoaderStep(Check("ldconfig", SKIP, ""),
                      what_if(prepend_to_ld_library_path(lib_dir)) if what_if else [])
    if step.breaking:
        step.loader_fix = per_program(lib_dir, step.breaking)
        step.check = Check("ldconfig", WARN, f"{lib_dir} is not on the system loader path, and "
                           "putting it on LD_LIBRARY_PATH for every program would break a "
                           "framework: " + "; ".join(step.breaking),
                           {"hint": step.loader_fix})
    elif verify_follows:
        step.check = Check("ldconfig", SKIP, f"{lib_dir} is not on the system loader path; the "
                           "loader check below says how programs can find it (or install with "
                           "--ldconfig, as root, to register it)")
    else:
        step.check = Check("ldconfig", SKIP, f"{lib_dir} is not on the system loader path; to "
                           f"load cuDNN from it, run: {loader.ld_library_path_line(lib_dir)}  (or "
                           "install with --ldconfig, as root, to register it)")
    return step


def per_program(lib_dir: Path, breaking: list[str]) -> str:
    """The advice that replaces a bare LD_LIBRARY_PATH line when it would break a framework."""
    frameworks = ", ".join(dict.fromkeys(w.split(" ", 1)[0] for w in breaking))
    return (f"give the programs that need this cuDNN their own environment "
            f"(`env LD_LIBRARY_PATH={lib_dir} program`), not every program: with it, "
            f"{frameworks} would load this cuDNN, which its rule refuses (see the ldconfig check)")
