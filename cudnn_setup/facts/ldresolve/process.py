"""An emulated process: objects loaded as dlopen() loads them, each with its DT_NEEDED
entries breadth first (glibc's elf/dl-deps.c), each file loaded once whatever name it was
asked by, and a failed load taken out again."""
from __future__ import annotations

import os
from collections import deque
from typing import Callable

from cudnn_setup.facts.ldresolve.environment import Environment
from cudnn_setup.facts.ldresolve.loadable import ElfObject, NotLoadable
from cudnn_setup.facts.ldresolve.search import (SEARCH_BUDGET, STEP_LOADED, Loaded, Resolution,
                                                Search)


class Process(Search):
    """Loads objects into an emulated process the way ld.so does, without running them: each
    name searched for (facts/ldresolve/search.py), then its DT_NEEDED entries."""

    def __init__(self, env: Environment, host: tuple[str, int, bool] | None = None,
                 reader: Callable[[str], ElfObject] | None = None, budget: int = SEARCH_BUDGET):
        self.loaded: list[Loaded] = []
        self._by_name: dict[str, Loaded] = {}
        self._by_file: dict[tuple[int, int], Loaded] = {}
        super().__init__(env, host, reader, budget)

    def find(self, name: str, requester: Loaded | None) -> tuple[Resolution, Loaded | None]:
        """Resolve `name` as asked by `requester` (DT_NEEDED or its dlopen) and load it."""
        res = Resolution(name)
        if name in self._by_name:
            hit = self._by_name[name]
            res.path, res.via, res.step = hit.opened_as, "already loaded", STEP_LOADED
            return res, hit
        if self.host is None and requester is not None:
            self.host = requester.obj.host
        try:
            obj, via = self._locate(name, requester, res)
        except NotLoadable as exc:
            res.error = str(exc)
            return res, None
        if obj is None:
            res.step = res.entry = res.owner = None
            wrong_class = next((why for _, why in res.skipped if why.startswith("wrong ELF class")), None)
            res.error = f"{name}: {wrong_class}" if wrong_class else \
                f"{name}: cannot open shared object file: No such file or directory"
            if self.env.cache_error and not wrong_class:
                res.error += f" (searched without the loader cache, {self.env.cache_error})"
            return res, None
        res.path, res.via = obj.path, via
        return res, self._add(obj, name, requester)

    def _add(self, obj: ElfObject, name: str, requester: Loaded | None) -> Loaded:
        try:
            st = os.stat(obj.path)
            key = (st.st_dev, st.st_ino)
        except OSError:
            key = None
        if key and key in self._by_file:  # the same file under another name is not loaded twice
            hit = self._by_file[key]
            hit.names.add(name)
            self._by_name[name] = hit
            return hit
        item = Loaded(obj, obj.path, requester, {name, obj.path})
        if obj.soname:
            item.names.add(obj.soname)
        for n in item.names:
            self._by_name.setdefault(n, item)
        if key:
            self._by_file[key] = item
        self.loaded.append(item)
        return item

    def load_with_needed(self, name: str, requester: Loaded | None) \
            -> tuple[Resolution, Loaded | None, list[tuple[Loaded, Resolution]]]:
        """dlopen(): the object, then its DT_NEEDED entries breadth first (dl-deps.c).

        The first DT_NEEDED entry that cannot be found fails the whole load, as in ld.so: it is
        the last one in `needed`, the object comes back as None, and what this load brought in
        leaves the process again (ld.so unmaps it)."""
        before = len(self.loaded)
        res, item = self.find(name, requester)
        needed: list[tuple[Loaded, Resolution]] = []
        if item is None or res.via == "already loaded":
            return res, item, needed
        queue, seen = deque([item]), {id(item)}
        while queue:
            cur = queue.popleft()
            for dep in cur.obj.needed:
                dep_res, dep_item = self.find(dep, cur)
                needed.append((cur, dep_res))
                if dep_item is None:
                    self._unload(before)
                    return res, None, needed
                if id(dep_item) not in seen and dep_res.via != "already loaded":
                    seen.add(id(dep_item))
                    queue.append(dep_item)
        return res, item, needed

    def _unload(self, keep: int) -> None:
        """Take out every object loaded after the first `keep` (a load that failed)."""
        gone = self.loaded[keep:]
        if not gone:
            return
        del self.loaded[keep:]
        ids = {id(g) for g in gone}
        self._by_name = {n: v for n, v in self._by_name.items() if id(v) not in ids}
        self._by_file = {k: v for k, v in self._by_file.items() if id(v) not in ids}
