"""What every check is handed beside the installation: `check_x(inst, facts) -> Check`.

`facts` (a CheckFacts) holds what verify was asked and the command's facts of the machine
(steps/command_facts.Facts, seen here as MachineFacts), which makes each slow answer several
checks need once per command: the driver and its GPUs (a child process), the loader's cache and
search order (ldconfig -p, ld.so), libcudnn's load, and the frameworks of the interpreter under
test (a child per framework).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Mapping, Protocol

from msgspec import Struct, field

from cudnn_setup.checks.framework_entry import FrameworkEntry
from cudnn_setup.child import Runner
from cudnn_setup.facts.ldresolve.environment import Environment
from cudnn_setup.installation.model import Installation
from cudnn_setup.parallel import Later
from cudnn_setup.probing.driver import DriverFacts
from cudnn_setup.probing.load_answer import LoadAnswer
from cudnn_setup.report import Check


class Frameworks(Struct, frozen=True):
    """The frameworks check and the report it came from (checks/frameworks_check.py)."""

    check: Check
    entries: list[FrameworkEntry]


class Loaded(Struct, frozen=True):
    """The load check of one installation and the child's answer (None: it did not load)."""

    check: Check
    answer: LoadAnswer | None


class MachineFacts(Protocol):
    """What the checks ask of the machine, each answer made at most once per command
    (steps/command_facts.Facts)."""

    env: Mapping[str, str]
    runner: Runner

    def prefetch(self, *names: str, python: str | None = None) -> None: ...

    def driver(self) -> DriverFacts: ...

    def loader(self) -> Environment: ...

    def load(self, inst: Installation) -> Loaded: ...

    def frameworks(self, python: str) -> Frameworks: ...


def _no_fix() -> str | None:
    return None


class CheckFacts(Struct):
    """The command's facts of the machine, what verify was asked (`python`: the interpreter
    whose Theano and frameworks are checked; `loader_fix` waits for what the loader check
    advises instead of a bare LD_LIBRARY_PATH line; `cache_dir`: the user's cache, where the
    gpu check keeps the plan of the runtime-compiled engine), and the checks of this run
    already started (checks/suite.py starts those that wait on children)."""

    machine: MachineFacts
    python: str
    theanorc: Path | None = None
    theano: bool = True
    frameworks: bool = True
    conf: Path = Path("/etc/ld.so.conf")
    deep: bool = False
    cache_dir: Path | None = None
    loader_fix: Callable[[], str | None] = _no_fix
    started: dict[str, Later[Check]] = field(default_factory=dict)

    @property
    def env(self) -> Mapping[str, str]:
        return self.machine.env

    @property
    def runner(self) -> Runner:
        return self.machine.runner

    def result_of(self, name: str) -> Check | None:
        """The check `name` of this run, waited for; None when this run did not start it."""
        started = self.started.get(name)
        return started.result() if started is not None else None
