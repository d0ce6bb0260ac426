"""What one process's loader works from: its variables, the cache, the loader's own facts,
and the files already read for the command that asks."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from cudnn_setup.facts.ldresolve.ldconfig import CacheEntry
from cudnn_setup.facts.ldresolve.loader_facts import LoaderFacts
from cudnn_setup.facts.ldresolve.read_once import Objects


# A dataclass, not a Struct: `objects`, a cache, is left out of comparison and repr.
@dataclass
class Environment:
    """What a process's loader works from: its variables, the cache, the loader's facts."""

    ld_library_path: str | None = None
    cache: Sequence[CacheEntry] = ()
    facts: LoaderFacts = field(default_factory=LoaderFacts)
    cwd: str = "/"
    executable: str | None = None  # its DT_RPATH counts last in the RPATH chain
    inhibit_cache: bool = False
    cache_error: str | None = None  # why `cache` is empty: ldconfig -p gave no answer
    # the files read for this environment's questions, once each (None: read every time)
    objects: Objects | None = field(default=None, compare=False, repr=False)
