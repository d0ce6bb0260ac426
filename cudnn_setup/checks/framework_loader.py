"""Why a framework's process got the cuDNN copy it mapped, and which copy a library of it would
get with another loader set-up.

The child (probes/framework_loads.py) reports its loader environment (LD_LIBRARY_PATH, LD_PRELOAD),
its executable and every mapped object; the search itself is facts/ldresolve/'s emulation of
ld.so, run here for the objects the child named. LD_PRELOAD is a list, not a search, and is
checked first, as the loader maps its objects before anything else (ld.so(8)).
"""
from __future__ import annotations

import os
import re
from typing import Mapping, Sequence

from msgspec import Struct

from cudnn_setup.records import replace
from cudnn_setup.facts.ldresolve.environment import Environment
from cudnn_setup.facts.ldresolve.ldconfig import CacheEntry
from cudnn_setup.facts.ldresolve.loadable import ElfObject, NotLoadable, read_object
from cudnn_setup.facts.ldresolve.loader_facts import LoaderFacts
from cudnn_setup.facts.ldresolve.process import Process
from cudnn_setup.facts.ldresolve.search import (STEP_CACHE, STEP_DEFAULT, STEP_LD_LIBRARY_PATH,
                                                STEP_PATH, STEP_RPATH, STEP_RUNPATH)

WHY_PRELOAD = "ld_preload"
WHY_RPATH, WHY_LD_PATH, WHY_RUNPATH = STEP_RPATH, STEP_LD_LIBRARY_PATH, STEP_RUNPATH
WHY_CACHE, WHY_DEFAULT, WHY_FULL_PATH = STEP_CACHE, STEP_DEFAULT, STEP_PATH
# Steps that come before the ldconfig cache: a copy found through them stays what a program
# loads whatever ldconfig registers.
BEFORE_CACHE = (WHY_PRELOAD, WHY_RPATH, WHY_LD_PATH, WHY_RUNPATH, WHY_FULL_PATH)

# No cache and no default directories: a copy found only through them is reported as opened by
# full path. Callers that know the machine pass its cache and loader facts instead.
NO_SEARCH = Environment(cache=(), facts=LoaderFacts(default_dirs=(), found_via="none"))


class ElfFacts:
    """ldresolve.read_object, once per file: the object, or None for one the loader cannot use;
    as a reader for ldresolve.Process it raises the same NotLoadable again."""

    def __init__(self) -> None:
        self._seen: dict[str, ElfObject | NotLoadable] = {}

    def read(self, path: str) -> ElfObject:
        key = os.fspath(path)
        if key not in self._seen:
            try:
                self._seen[key] = read_object(key)
            except NotLoadable as exc:
                self._seen[key] = exc
        got = self._seen[key]
        if isinstance(got, NotLoadable):  # a fresh one: a raised exception keeps its frames
            raise NotLoadable(str(got), got.fatal)
        return got

    def __call__(self, path: str) -> ElfObject | None:
        try:
            return self.read(path)
        except NotLoadable:
            return None


class Hit(Struct, frozen=True):
    """The copy a search finds: its real path, the step (WHY_*) and what in it matched."""

    path: str
    why: str
    entry: str | None = None  # the RPATH/RUNPATH/LD_LIBRARY_PATH entry, cache path, directory
    owner: str | None = None  # the object whose RPATH/RUNPATH it is

    def detail(self) -> str:
        owner = os.path.basename(self.owner) if self.owner else None
        return {
            WHY_PRELOAD: "listed in LD_PRELOAD",
            WHY_RPATH: f"DT_RPATH {self.entry} of {owner}",
            WHY_LD_PATH: f"LD_LIBRARY_PATH entry {self.entry}",
            WHY_RUNPATH: f"RUNPATH {self.entry} of {owner}",
            WHY_CACHE: "the ldconfig cache (/etc/ld.so.cache)",
            WHY_DEFAULT: f"the loader's default directory {os.path.dirname(self.path)}",
            WHY_FULL_PATH: "opened by full path",
        }.get(self.why, self.why)


class ChildLoader:
    """The loader of one framework child: its LD_LIBRARY_PATH, LD_PRELOAD and executable, with
    the machine's cache and loader facts from `search`."""

    def __init__(self, child_env: Mapping[str, str | None], exe: str | None,
                 search: Environment, elf: ElfFacts):
        self.elf = elf
        self.preload = {os.path.realpath(p) for p in re.split(r"[:\s]", child_env.get("LD_PRELOAD") or "")
                        if p.startswith("/")}
        self.env = replace(search, ld_library_path=child_env.get("LD_LIBRARY_PATH") or None,
                           executable=exe if exe and elf(exe) else None)

    def with_cache_first(self, entries: Sequence[CacheEntry]) -> "ChildLoader":
        """The same process after `entries` were registered ahead of the cache it has."""
        other = object.__new__(ChildLoader)
        other.elf, other.preload = self.elf, self.preload
        other.env = replace(self.env, cache=(*entries, *self.env.cache))
        return other

    def needs(self, obj: str, soname: str) -> bool:
        facts = self.elf(obj)
        return facts is not None and soname in facts.needed

    def searches_itself(self, obj: str) -> bool:
        """Whether `obj` has a search path of its own (RPATH or RUNPATH) to open names with."""
        facts = self.elf(obj)
        return facts is not None and bool(facts.rpath or facts.runpath)

    def first_hit(self, soname: str, requester: str | None) -> Hit | None:
        """The copy of `soname` the loader gives `requester` (a mapped object that needs or
        opens it; None: a dlopen with no search path of its own)."""
        proc = Process(self.env, reader=self.elf.read)
        asker = None
        if requester is not None:
            asker = proc.find(requester, None)[1]
            if asker is None:
                return None
        res, _ = proc.find(soname, asker)
        if not res.found or res.step is None or res.path is None:
            return None
        return Hit(os.path.realpath(res.path), res.step, res.entry, res.owner)

    def explain(self, path: str, mapped: Sequence[str], extra: Sequence[str] = ()) -> dict:
        """Why the mapped file `path` is the copy this process got: {why, detail, via}. Tried in
        turn: the objects that list it as DT_NEEDED, a dlopen by name, then every mapped object
        with a search path of its own; none finding this copy means it was opened by its path."""
        real = os.path.realpath(path)
        if real in self.preload:
            return {"why": WHY_PRELOAD, "detail": "listed in LD_PRELOAD", "via": None}
        facts = self.elf(real)
        soname = facts.soname if facts and facts.soname else os.path.basename(real)
        needing = [o for o in dict.fromkeys((*mapped, *extra)) if self.needs(o, soname)]
        openers: list[str | None] = [*needing, None]
        openers += [o for o in mapped if o not in needing and self.searches_itself(o)]
        first_guess = None
        for requester in openers:
            hit = self.first_hit(soname, requester)
            if hit and hit.path == real:
                detail = hit.detail()
                if requester and requester not in needing:
                    detail += f" (it opens {soname} by name)"
                return {"why": hit.why, "detail": detail, "via": hit.owner}
            if first_guess is None and hit and (requester is None or requester in needing):
                first_guess = hit
        detail = "opened by full path, as a framework preloading its wheel's copy does"
        if first_guess:
            detail += (f"; the loader's own search would have found {first_guess.path} "
                       f"through {first_guess.detail()}")
        return {"why": WHY_FULL_PATH, "detail": detail, "via": None}
