"""Which libraries a cuDNN release is made of, read from the release's own libraries.

cuDNN 8 and 9 are a front library (libcudnn.so.N) and sub-libraries that it and they load:
through DT_NEEDED, and at run time by names kept as strings in their code (libcudnn.so.9 of
9.28 names libcudnn_ops.so, libcudnn_cnn.so, libcudnn_adv.so, libcudnn_graph.so and, new in
9.24, libcudnn_ext.so; libcudnn_graph.so.9 names libcudnn_heuristic.so and the engine
libraries, libcudnn_engines_tensor_ir.so new in 9.21). A release needs every cuDNN library
reachable that way from libcudnn, so next year's sub-library is judged like today's. The
per-generation lists of facts/cudnn.py are only the floor: what releases (or hand-made
libraries) that embed no names must still have.

The JIT flavour (`cudnn_jit-…` archives, 9.12 on) is libcudnn, libcudnn_graph and
libcudnn_engines_runtime_compiled only. Its libcudnn keeps the names of the legacy API's
sub-libraries, which it opens only when that API is called, so in this flavour only DT_NEEDED
entries add to its list; the names opened at run time are reported as not part of it.

`compose` is the one answer: inspect, install, and the files, coherence and deps checks all
ask it.
"""
from __future__ import annotations

import os
from collections import deque
from typing import Callable, Mapping

from msgspec import Struct, field

from cudnn_setup.facts import cudnn as gen
from cudnn_setup.facts.ldresolve.loadable import NotLoadable, read_object
from cudnn_setup.facts.ldresolve.read_once import Objects
from cudnn_setup.facts.ldresolve.runtime_names import runtime_names

FULL, JIT = gen.FULL, gen.JIT
MAX_LIBRARIES = 64  # cuDNN libraries one release may name, all told (9.28 has 10)


class Composition(Struct, frozen=True):
    """What a release is made of. `required`: library stems, libcudnn first; `why`: stem → how
    it was found to be needed; `optional`: names the release opens at run time that its
    flavour does without (JIT); `read_from`: the libraries whose names were read."""

    flavour: str | None  # full | jit | None (one library, before 8.0)
    required: tuple[str, ...]
    present: tuple[str, ...]
    why: Mapping[str, str] = field(default_factory=dict)
    optional: Mapping[str, str] = field(default_factory=dict)
    read_from: tuple[str, ...] = ()

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(s for s in self.required if s not in self.present)

    @property
    def sub_libraries(self) -> tuple[str, ...]:
        return tuple(s for s in self.required if s != "libcudnn")

    def reason(self, stem: str) -> str:
        return self.why.get(stem, "")

    def to_dict(self) -> dict:
        return {"flavour": self.flavour, "required": list(self.required),
                "missing": list(self.missing), "why": dict(self.why),
                "not_in_flavour": dict(self.optional), "read_from": list(self.read_from)}


def cudnn_stem(name: str) -> str | None:
    """libcudnn_ops for "libcudnn_ops.so", "libcudnn_ops.so.9", "libcudnn_ops.so.9.1.0" and a
    path ending in one: facts/cudnn.library_stem, for any name a library names."""
    return gen.library_stem(name, unversioned=True, path=True)


def named_by(path: str | os.PathLike,
             objects: Objects | None = None) -> tuple[list[str], list[str]]:
    """(DT_NEEDED stems, stems opened at run time) of cuDNN libraries that `path` names; an
    unreadable file names nothing (the elf and files checks say what is wrong with it).
    `objects`: the files read once for the whole command."""
    read = objects.read if objects is not None else read_object
    try:
        needed = [s for s in map(cudnn_stem, read(path).needed) if s]
    except NotLoadable:
        return [], []
    names = objects.runtime_names(path) if objects is not None else runtime_names(path)
    runtime = [s for s in map(cudnn_stem, names) if s]
    return list(dict.fromkeys(needed)), list(dict.fromkeys(runtime))


def flavour_of(archive_name: str | None, stems, generation: str | None) -> str | None:
    """full or jit: from NVIDIA's archive name when it has one, else from the files (a JIT
    has libcudnn_graph and none of the full flavour's other sub-libraries)."""
    if generation not in (gen.V8_EARLY, gen.V8_LATE, gen.V9):
        return None
    named = gen.flavour_of_name(archive_name) if archive_name else None
    if named:
        return named
    stems = set(stems)
    if generation == gen.V9 and "libcudnn_graph" in stems and \
            not stems & (set(gen.shared_libs_of(gen.V9)) - set(gen.JIT_LIBS)):
        return JIT
    return FULL


def compose(files: Mapping[str, str | os.PathLike], generation: str | None,
            flavour: str | None = None, objects: Objects | None = None,
            named: Callable[[str | os.PathLike], tuple[list[str], list[str]]] | None = None,
            ) -> Composition:
    """The composition of a release whose library files are `files` (stem → path of the file
    present): every cuDNN library reachable from libcudnn through DT_NEEDED and run-time names
    (run-time names only in the full flavour), at least the generation's floor. `objects`: the
    files read once for the whole command; `named`: what answers for named_by (the judge's
    facts, read while the archive decoded)."""
    present = tuple(sorted(files))
    if flavour is None:
        flavour = flavour_of(None, present, generation)
    floor = gen.shared_libs_of(generation, flavour) if generation else ("libcudnn",)
    embedded: dict[str, str] = {}  # stem → which library names it, and how
    optional: dict[str, str] = {}
    read: list[str] = []
    if flavour is not None:
        queue, seen = deque(["libcudnn"]), {"libcudnn"}
        while queue and len(embedded) <= MAX_LIBRARIES:
            stem = queue.popleft()
            path = files.get(stem)
            if path is None:
                continue
            name = os.path.basename(os.fspath(path))
            read.append(name)
            needed, runtime = named(path) if named is not None else named_by(path, objects)
            for dep in needed:
                embedded.setdefault(dep, f"{name} lists it as DT_NEEDED")
            for dep in runtime:
                if dep == stem or dep in embedded:
                    continue
                if flavour == JIT and dep not in floor:
                    optional.setdefault(dep, f"{name} opens it at run time, for APIs the JIT "
                                             "flavour does without")
                else:
                    embedded[dep] = f"{name} opens it at run time"
            for dep in needed + runtime:
                if dep not in seen and dep in embedded:
                    seen.add(dep)
                    queue.append(dep)
    embedded.pop("libcudnn", None)
    why = {s: f"every cuDNN {_label(generation, flavour)} has it" for s in floor}
    why.update(embedded)
    required = tuple(dict.fromkeys(list(floor) + sorted(s for s in why if s not in floor)))
    required = required[:MAX_LIBRARIES]
    for stem in required:
        optional.pop(stem, None)
    return Composition(flavour, required, present, {s: why[s] for s in required}, optional,
                       tuple(read))


def _label(generation: str | None, flavour: str | None) -> str:
    if flavour == JIT:
        return f"{generation} JIT release"
    return f"{generation} release" if generation else "release"
