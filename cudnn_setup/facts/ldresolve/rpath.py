"""DT_RPATH, DT_RUNPATH and LD_LIBRARY_PATH entries as the directories ld.so tries: split,
$ORIGIN, $LIB and $PLATFORM expanded (dl-load.c _dl_dst_substitute), each directory's hwcaps
subdirectories first."""
from __future__ import annotations

import os
import re
from typing import Iterable, Iterator

from cudnn_setup.facts.ldresolve.loader_facts import LoaderFacts

_DST = re.compile(r"\$(?:\{(ORIGIN|LIB|PLATFORM)\}|(ORIGIN|LIB|PLATFORM)(?=/|$))")


def split_path(value: str, seps: str = ":") -> tuple[str, ...]:
    """The entries of a search list; an empty one stays (it is the working directory)."""
    return tuple(re.split(f"[{re.escape(seps)}]", value))


def expand(entry: str, origin: str, facts: LoaderFacts, cwd: str) -> str:
    """One entry with its dynamic string tokens substituted; an empty one is `cwd`."""

    def sub(m: re.Match) -> str:
        key = m.group(1) or m.group(2)
        return {"ORIGIN": origin, "LIB": facts.lib, "PLATFORM": facts.platform}[key]

    expanded = _DST.sub(sub, entry)
    return expanded or cwd


def directories(entries: Iterable[str], origin: str, facts: LoaderFacts,
                cwd: str) -> Iterator[tuple[str, str]]:
    """(raw entry, directory to try) in search order."""
    for entry in entries:
        directory = expand(entry, origin, facts, cwd)
        if not os.path.isabs(directory):
            directory = os.path.join(cwd, directory)
        for sub in facts.subdirs:
            yield entry, (os.path.join(directory, sub) if sub else directory)
