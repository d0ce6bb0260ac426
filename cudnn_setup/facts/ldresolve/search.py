"""How ld.so looks for one name: the steps of ld.so(8)'s search in their order (see
facts/ldresolve/__init__.py), each candidate verified, and where the search stopped."""
from __future__ import annotations

import os
from typing import Callable, Iterable, Iterator

from msgspec import Struct, field

from cudnn_setup.facts.ldresolve.environment import Environment
from cudnn_setup.facts.ldresolve.ldconfig import CACHE_ABI
from cudnn_setup.facts.ldresolve.loadable import ElfObject, NotLoadable, read_object
from cudnn_setup.facts.ldresolve.rpath import directories, split_path

# Paths one emulated process may look at (a directory's existence or a candidate file) before
# it gives up: a real library needs a few hundred; an object with 300 DT_NEEDED names and
# 20,000 RUNPATH entries, each tried with 11 hwcaps subdirectories, would need 66 million.
SEARCH_BUDGET = 500_000


class SearchBudgetSpent(NotLoadable):
    """The emulation looked at SEARCH_BUDGET paths and stopped; its answers so far stand."""

    def __init__(self, budget: int):
        super().__init__(f"gave up after looking at {budget} paths (the objects' DT_NEEDED, "
                         "RPATH and RUNPATH lists are far longer than any real library's)",
                         fatal=True)


class Loaded(Struct):
    """An object in the emulated process: how it was opened and who loaded it."""

    obj: ElfObject
    opened_as: str
    loader: "Loaded | None"
    names: set[str] = field(default_factory=set)

    @property
    def origin(self) -> str:
        return os.path.dirname(self.opened_as) or "."


# The step of the search that found an object (Resolution.step).
STEP_PATH, STEP_LOADED = "full_path", "already_loaded"
STEP_RPATH, STEP_LD_LIBRARY_PATH, STEP_RUNPATH = "rpath", "ld_library_path", "runpath"
STEP_CACHE, STEP_DEFAULT = "ld_cache", "default_dir"


class Resolution(Struct):
    name: str
    path: str | None = None  # as the loader opens it (search dir + name), symlinks kept
    via: str | None = None
    error: str | None = None  # the loader's message when it gives up
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (candidate, why passed over)
    step: str | None = None  # STEP_*: which step of the search found it
    entry: str | None = None  # the raw entry that matched: "$ORIGIN/../lib", a directory, a path
    owner: str | None = None  # the object whose DT_RPATH/DT_RUNPATH it is, as it was opened

    @property
    def found(self) -> bool:
        return self.path is not None

    def to_dict(self) -> dict:
        return {"name": self.name, "path": self.path, "via": self.via, "error": self.error,
                "skipped": [list(s) for s in self.skipped]}


class Search:
    """How ld.so looks for one name in a process, without running it: the order of the steps,
    each candidate verified as open_verify does, a missing directory tried once, and a budget
    of paths looked at (facts/ldresolve/process.py keeps what is loaded).

    `reader` reads one file's facts (default: the environment's Objects where it has them,
    else read_object; a caller asking many questions about the same files passes one that
    remembers them)."""

    def __init__(self, env: Environment, host: tuple[str, int, bool] | None = None,
                 reader: Callable[[str], ElfObject] | None = None, budget: int = SEARCH_BUDGET):
        self.env = env
        self.read = reader or (env.objects.read if env.objects is not None else read_object)
        self.budget = budget
        self.looked = 0  # paths looked at, against `budget`
        self.spent = False
        self._dir_exists: dict[str, bool] = {}
        self.main: Loaded | None = None
        self.host = host
        if env.executable:
            exe = self.read(env.executable)
            self.main = Loaded(exe, os.path.realpath(env.executable), None)
            self.host = self.host or exe.host

    def _dirs(self, entries: Iterable[str], origin: str) -> Iterator[tuple[str, str]]:
        return directories(entries, origin, self.env.facts, self.env.cwd)

    def _look(self) -> None:
        self.looked += 1
        if self.looked > self.budget:
            self.spent = True
            raise SearchBudgetSpent(self.budget)

    def _exists_dir(self, directory: str) -> bool:
        """Whether a search directory exists, asked once per process: ld.so marks a directory
        it found missing and skips it from then on (dl-load.c open_path, `nonexisting`)."""
        known = self._dir_exists.get(directory)
        if known is None:
            self._look()
            known = self._dir_exists[directory] = os.path.isdir(directory)
        return known

    def _candidate(self, path: str, res: Resolution) -> ElfObject | None:
        """open_verify: the object, None to go on searching, NotLoadable to stop."""
        self._look()
        if not os.path.lexists(path) or (os.path.islink(path) and not os.path.exists(path)):
            return None
        try:
            obj = self.read(path)
        except NotLoadable as exc:
            if exc.fatal:
                raise
            res.skipped.append((path, str(exc).split(": ", 1)[-1]))
            return None
        if self.host and obj.bits != self.host[1]:
            res.skipped.append((path, f"wrong ELF class: ELFCLASS{obj.bits}"))
            return None
        if self.host and (obj.machine != self.host[0] or obj.little_endian != self.host[2]):
            res.skipped.append((path, f"built for {obj.machine}, not {self.host[0]}"))
            return None
        return obj

    def _search(self, name: str, dirs: Iterable[tuple[str, str]],
                res: Resolution) -> ElfObject | None:
        for entry, directory in dirs:
            if not self._exists_dir(directory):
                continue
            obj = self._candidate(os.path.join(directory, name), res)
            if obj is not None:
                res.entry = entry
                return obj
        return None

    def _cache_lookup(self, name: str, res: Resolution) -> ElfObject | None:
        if self.env.inhibit_cache:
            return None
        abi = CACHE_ABI.get((self.host[0], self.host[1])) if self.host else None
        matches = [e for e in self.env.cache if e.name == name and (abi is None or e.abi == abi)]
        order = {sub: i for i, sub in enumerate(self.env.facts.subdirs)}
        # glibc-hwcaps entries the CPU supports come before the plain one (dl-cache.c)
        matches.sort(key=lambda e: order.get(f"glibc-hwcaps/{e.hwcap}", -1) if e.hwcap else len(order))
        for entry in matches:
            if entry.hwcap and f"glibc-hwcaps/{entry.hwcap}" not in order:
                continue
            obj = self._candidate(entry.path, res)
            if obj is not None:
                res.entry = entry.path
                return obj
        return None

    def _locate(self, name: str, req: Loaded | None, res: Resolution) -> tuple[ElfObject | None, str]:
        """The object the search finds and its `via`; res.step, entry and owner say the same
        for programs."""
        if "/" in name:
            path = name if os.path.isabs(name) else os.path.join(self.env.cwd, name)
            res.step, res.entry = STEP_PATH, name
            return self._candidate(path, res), "path"
        if req is None or req.obj.runpath is None:
            chain, seen_main = [], False
            node = req
            while node is not None:
                chain.append(node)
                seen_main |= node is self.main
                node = node.loader
            if self.main is not None and not seen_main:
                chain.append(self.main)
            for owner in chain:
                if owner.obj.rpath is not None:
                    hit = self._search(name, self._dirs(owner.obj.rpath, owner.origin), res)
                    if hit:
                        res.step, res.owner = STEP_RPATH, owner.opened_as
                        return hit, f"DT_RPATH of {owner.opened_as}"
        if self.env.ld_library_path is not None:
            origin = self.main.origin if self.main else self.env.cwd
            hit = self._search(name, self._dirs(split_path(self.env.ld_library_path, ":;"), origin), res)
            if hit:
                res.step = STEP_LD_LIBRARY_PATH
                return hit, "LD_LIBRARY_PATH"
        if req is not None and req.obj.runpath is not None:
            hit = self._search(name, self._dirs(req.obj.runpath, req.origin), res)
            if hit:
                res.step, res.owner = STEP_RUNPATH, req.opened_as
                return hit, f"DT_RUNPATH of {req.opened_as}"
        hit = self._cache_lookup(name, res)
        if hit:
            res.step = STEP_CACHE
            return hit, "ld.so.cache"
        asker = req or self.main
        if not (asker and asker.obj.nodeflib):
            hit = self._search(name, ((d, os.path.join(d, s) if s else d)
                                      for d in self.env.facts.default_dirs
                                      for s in self.env.facts.subdirs), res)
            if hit:
                res.step = STEP_DEFAULT
                return hit, "default directories"
        res.entry = None
        return None, ""
