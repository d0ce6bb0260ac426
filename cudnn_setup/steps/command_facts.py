"""The facts one command looks at, each started at most once and answered as a record.

Several steps of a command need the same slow facts: the driver and its GPUs (a child), the
loader's cache and search order (three children), what libcudnn says when a child loads it,
the deep-learning frameworks of an interpreter (a child per framework, seconds each), and the
HTTP client with the command's one waiting budget. Each is started on a thread the first time
it is asked for, or earlier where the command knows it will be (`prefetch`), and every later
question waits for the same answer; what the loader step changes (ldconfig) is forgotten
with `loader_changed`, so what is asked after it is asked again.
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Sequence, TypeVar

from msgspec import Struct

from cudnn_setup.child import Runner
from cudnn_setup.errors import SetupError
from cudnn_setup.facts.ldresolve.environment import Environment
from cudnn_setup.facts.loader import loader_environment
from cudnn_setup.parallel import Later

if TYPE_CHECKING:
    from cudnn_setup.probing.driver import DriverFacts
    from cudnn_setup.checks.framework_whatif import Change, WhatIf
    from cudnn_setup.checks.framework_entry import FrameworkEntry
    from cudnn_setup.installation.model import Installation
    from cudnn_setup.checks.check_facts import Frameworks, Loaded
    from cudnn_setup.fetch.http import Budget, Client

T = TypeVar("T")

# The checks that answer are imported where they are asked: a command that never asks for the
# frameworks or a load (install --no-frameworks --no-verify, list) does not load them.

DRIVER, LOADER = "driver", "loader"


class LookedAhead(Struct, frozen=True):
    """What the frameworks of an interpreter load now, and would after `change` (None: the
    interpreter could not say; the frameworks check says why)."""

    now: list[FrameworkEntry] | None
    what_if: list[WhatIf]


class Facts:
    """The machine as one command sees it, from the environment and the runner it is given."""

    def __init__(self, env: Mapping[str, str], home: Path, runner: Runner,
                 status: Callable[[str], None] = lambda line: None):
        self.env, self.home, self.runner, self.status = env, home, runner, status
        self._lock = threading.Lock()
        self._started: dict[object, Later] = {}
        self._budget: Budget | None = None
        self._clients: dict[object, Client] = {}

    def _once(self, key: object, fn: Callable[..., T], *args) -> Later[T]:
        with self._lock:
            if key not in self._started:
                self._started[key] = Later(fn, *args)
            return self._started[key]

    def _if_started(self, key: object) -> Later | None:
        with self._lock:
            return self._started.get(key)

    def prefetch(self, *names: str, python: str | None = None) -> None:
        """Start what the command will ask for (DRIVER, LOADER; `python`: its frameworks)
        without waiting for it."""
        for name in names:
            {DRIVER: self._driver_later, LOADER: self._loader_later}[name]()
        if python is not None:
            self._frameworks_later(python)

    # The driver and its GPUs (probing/driver.py), asked with the loader's facts.
    def _driver_later(self) -> Later[DriverFacts]:
        from cudnn_setup.probing.driver import driver_facts

        return self._once(DRIVER, lambda: driver_facts(self.env, loader=self.loader(),
                                                       runner=self.runner))

    def driver(self) -> DriverFacts:
        return self._driver_later().result()

    # The loader's cache and search order, with one memo of the libraries' ELF facts.
    def _loader_later(self) -> Later[Environment]:
        return self._once(LOADER, lambda: loader_environment(self.env, runner=self.runner))

    def loader(self) -> Environment:
        return self._loader_later().result()

    def load(self, inst: Installation) -> Loaded:
        """libcudnn of `inst` loaded in a child (checks/load_check.load_libcudnn), once per
        installation: a library that hangs costs one time limit."""
        from cudnn_setup.checks.check_facts import Loaded
        from cudnn_setup.checks.load_check import load_libcudnn

        def load() -> Loaded:
            check, answer = load_libcudnn(inst, self.env, self.runner, self.loader())
            return Loaded(check, answer)

        return self._once(("load", id(inst)), load).result()

    def _frameworks_later(self, python: str) -> Later[Frameworks]:
        return self._once(("frameworks", python), self._frameworks, python)

    def frameworks(self, python: str) -> Frameworks:
        """The frameworks check of `python`: from the look ahead when one was started for
        it (the same children answer both), else made here."""
        return self._frameworks_later(python).result()

    def _frameworks(self, python: str) -> Frameworks:
        from cudnn_setup.checks.check_facts import Frameworks
        from cudnn_setup.checks.frameworks_check import frameworks_check, frameworks_of

        ahead = self._if_started(("ahead", python))
        if ahead is not None and (now := ahead.result().now) is not None:
            return Frameworks(frameworks_check(now, python), now)
        check, entries = frameworks_of(python, self.env, search=self.loader,
                                       runner=self.runner)
        return Frameworks(check, entries)

    def start_look_ahead(self, python: str, change: Change) -> None:
        """look_ahead() started now, so that the frameworks check of `python` waits for it
        rather than importing the frameworks a second time."""
        self._once(("ahead", python), self._ahead, python, change)

    def look_ahead(self, python: str, change: Change) -> LookedAhead:
        """What the frameworks of `python` load now and would load after `change`
        (checks/framework_whatif.py), in one set of children; asked once per interpreter."""
        return self._once(("ahead", python), self._ahead, python, change).result()

    def _ahead(self, python: str, change: Change) -> LookedAhead:
        from cudnn_setup.checks.framework_whatif import looked_ahead

        self.status(f"importing the deep-learning frameworks of {python}, to see what they "
                    "load now and would load after the change")
        try:
            now, results = looked_ahead(python, self.env, change, search=self.loader,
                                        runner=self.runner)
        except SetupError:  # the frameworks check says why
            return LookedAhead(None, [])
        return LookedAhead(now, results)

    def loader_changed(self) -> None:
        """ldconfig ran: what programs load may differ now, so the loader's facts, the loads
        and the frameworks are asked again (the driver and the HTTP client stand)."""
        with self._lock:
            self._started = {k: v for k, v in self._started.items() if k == DRIVER}

    def http_client(self, headers: Mapping[str, str], env: Mapping[str, str],
                    keep_on_redirect: Sequence[str]) -> Client:
        """The command's HTTP client for these --header lines and network settings: one per
        command, and one waiting budget for every client it has (a source with settings of
        its own gets a client of its own that shares the budget)."""
        from cudnn_setup.fetch.http import Budget, Client

        key = (tuple(sorted(headers.items())), tuple(sorted(env.items())))
        with self._lock:
            if key not in self._clients:
                if self._budget is None:
                    self._budget = Budget()
                self._clients[key] = Client(dict(headers), env=env, home=self.home,
                                            keep_on_redirect=list(keep_on_redirect),
                                            budget=self._budget)
            return self._clients[key]
