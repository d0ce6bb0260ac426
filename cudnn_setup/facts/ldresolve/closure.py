"""Everything a set of libraries brings into a process: each root as dlopen(path) loads it
with its DT_NEEDED entries, then each name they keep for dlopen, in the order the library
opens them, and what could not be found."""
from __future__ import annotations

import os
from collections import deque
from typing import Callable, Iterable, Sequence

from msgspec import Struct

from cudnn_setup.facts.ldresolve.environment import Environment
from cudnn_setup.facts.ldresolve.loadable import ElfObject
from cudnn_setup.facts.ldresolve.process import Process
from cudnn_setup.facts.ldresolve.runtime_names import Versions, runtime_names, runtime_requests
from cudnn_setup.facts.ldresolve.search import Loaded, Resolution


class Dependency(Struct):
    requester: str  # path of the library that needs it
    name: str  # the name asked for (first candidate for run-time names)
    kind: str  # "root" (opened by path), "needed" (DT_NEEDED), "runtime" (dlopen by an embedded name)
    resolution: Resolution
    candidates: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        res = self.resolution.to_dict()
        return {"requester": self.requester, "name": self.name, "kind": self.kind,
                "candidates": list(self.candidates or (self.name,)), "tried_last": res.pop("name"),
                **res}


def closure(roots: Sequence[str | os.PathLike], env: Environment, versions: Versions = Versions(),
            runtime: bool = True,
            scanned_if: Callable[[ElfObject], bool] | None = None,
            after: Sequence[str | os.PathLike] = ()) -> list[Dependency]:
    """Load each root as dlopen(path) would, with every DT_NEEDED entry recursively; then each
    name the roots (and what those names bring in) open at run time, from the library that
    embeds it; then each of `after` (libraries that nothing named, opened by path once the
    rest is loaded). One Dependency per request, in load order. `scanned_if`: only the objects
    it accepts are read for run-time names (a caller that asks only about cuDNN's own libraries
    need not search for every name the driver opens).

    Run-time names are opened in dependency order: one whose file is found but whose DT_NEEDED
    entry is not is tried again once the other names are loaded, as a library that opens its
    parts loads the one the others need first (cuDNN 9 opens libcudnn_graph before
    libcudnn_ops, which lists libcudnn_graph.so.9: with that link gone, ld.so matches the entry
    to the graph library already loaded by its full file name, by its SONAME)."""
    deps: list[Dependency] = []
    proc = Process(env)
    names_of = env.objects.runtime_names if env.objects is not None else runtime_names
    scan: deque[Loaded] = deque()

    def opened(item: Loaded | None) -> None:
        if runtime and item is not None and item not in scan and (
                scanned_if is None or scanned_if(item.obj)):
            scan.append(item)

    for root in roots:
        if proc.spent:
            break
        root_path = os.fspath(root)
        res, item, needed = proc.load_with_needed(root_path, proc.main)
        deps.append(Dependency(env.executable or "", root_path, "root", res))
        deps += [Dependency(who.opened_as, r.name, "needed", r) for who, r in needed]
        opened(item)
    scanned: set[int] = set()
    waiting: list[tuple[Loaded, str, tuple[str, ...]]] = []  # found, with a DT_NEEDED not yet there

    def request(item: Loaded, label: str, candidates: tuple[str, ...], last: bool) -> bool:
        """Open one run-time name; False when it waits for another to be loaded first."""
        res, got, needed = _first_of(proc, candidates, item, defer=not last)
        if got is None and res is None:
            waiting.append((item, label, candidates))
            return False
        deps.append(Dependency(item.opened_as, label, "runtime", res, candidates))
        deps.extend(Dependency(who.opened_as, r.name, "needed", r) for who, r in needed)
        if got is not None and res.via != "already loaded":
            opened(got)
            return True
        return False

    def settle() -> None:
        """Retry the waiting names each time one loads, before the names after it: cuDNN opens
        ops once graph is there, before cnn and adv, which would bring ops in by its link."""
        nonlocal waiting
        while waiting:
            retry, waiting = waiting, []
            if not any([request(*w, last=False) for w in retry]):
                break

    def drain() -> None:
        nonlocal waiting
        while (scan or waiting) and not proc.spent:
            if not scan:
                retry, waiting = waiting, []
                if not any([request(*w, last=False) for w in retry]):
                    for w in waiting:  # nothing more can come first: each as the loader ends it
                        request(*w, last=True)
                    waiting = []
                continue
            item = scan.popleft()
            if id(item) in scanned:
                continue
            scanned.add(id(item))
            for label, candidates in runtime_requests(names_of(item.opened_as), item.obj.soname,
                                                      versions):
                if request(item, label, candidates, last=False):
                    settle()
        for w in waiting:  # the loader's budget ran out first
            request(*w, last=True)
        waiting = []

    drain()
    for late in after:
        if proc.spent:
            break
        late_path = os.fspath(late)
        res, item, needed = proc.load_with_needed(late_path, proc.main)
        if item is not None and id(item) in scanned:
            continue
        deps.append(Dependency(env.executable or "", late_path, "root", res))
        deps += [Dependency(who.opened_as, r.name, "needed", r) for who, r in needed]
        opened(item)
        drain()
    return deps


def _first_of(proc: Process, candidates: tuple[str, ...], requester: Loaded,
              defer: bool = False):
    """The first candidate that loads; else the most telling failure: a file found whose
    DT_NEEDED is missing (with that entry), a wrong ELF class, else the first name's.
    `defer`: (None, None, []) instead, as soon as a candidate is found whose DT_NEEDED entry is
    missing (it may load once another library is there)."""
    first, first_needed = None, []
    for name in candidates:
        res, item, needed = proc.load_with_needed(name, requester)
        if item is not None:
            return res, item, needed
        if defer and res.found and needed and not needed[-1][1].found:
            return None, None, []
        if first is None or (not first.found and res.found) or (
                not first.found and first.error and "wrong ELF class" not in first.error
                and res.error and "wrong ELF class" in res.error):
            first, first_needed = res, needed
        if proc.spent:
            break
    return first, None, first_needed


def missing(deps: Iterable[Dependency]) -> list[Dependency]:
    return [d for d in deps if not d.resolution.found]
