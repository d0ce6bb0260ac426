"""Each library file read once per command while it stays as it was: its loader facts and
the names it keeps for dlopen, shared by every check that asks."""
from __future__ import annotations

import os
import threading

from cudnn_setup.facts.ldresolve.loadable import ElfObject, NotLoadable, read_object
from cudnn_setup.facts.ldresolve.runtime_names import runtime_names
from cudnn_setup.records import replace


class Objects:
    """read_object and runtime_names, each file read once while it stays as it was: a command
    that asks many questions about the same libraries (verify's files, coherence and deps
    checks each read cuDNN's ELF files or emulate the loader over them) shares one. A file is
    known by what stat says of it, links followed (device, inode, size, mtime, ctime), so a
    link and its target are read once, and a file replaced or rewritten since is read again.
    Checks run side by side on threads: one that asks for a file another is reading waits for
    that reading instead of doing it again."""

    def __init__(self) -> None:
        self._objects: dict[tuple, tuple[str, ElfObject | NotLoadable]] = {}
        self._names: dict[tuple, list[str]] = {}
        self._reading: dict[tuple, threading.Lock] = {}

    def _lock(self, key: tuple) -> threading.Lock:
        return self._reading.setdefault(key, threading.Lock())  # setdefault: one per key

    @staticmethod
    def _identity(path: str) -> tuple | None:
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            return None
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def read(self, path: str | os.PathLike) -> ElfObject:
        path = os.fspath(path)
        key = self._identity(path)
        if key is None:
            known = None
        else:
            with self._lock(("elf", *key)):
                known = self._objects.get(key)
                if known is None:
                    known = self._objects[key] = _read_as(path)
        read_as, got = known or _read_as(path)
        if isinstance(got, NotLoadable):  # raised anew (a raised one keeps its frames), for `path`
            message = str(got)
            if read_as != path and message.startswith(read_as + ":"):
                message = path + message[len(read_as):]
            raise NotLoadable(message, got.fatal)
        return got if read_as == path else replace(got, path=path)

    def runtime_names(self, path: str | os.PathLike) -> list[str]:
        path = os.fspath(path)
        key = self._identity(path)
        if key is None:
            return runtime_names(path)
        with self._lock(("names", *key)):
            if key not in self._names:
                self._names[key] = runtime_names(path)
        return list(self._names[key])


def _read_as(path: str) -> tuple[str, ElfObject | NotLoadable]:
    try:
        return path, read_object(path)
    except NotLoadable as exc:
        return path, exc
