"""Injecting OSError into the filesystem calls of the running process, at the Nth call.

Every function below is wrapped while a `Faults` is active; each call counts, on any thread,
and the Nth raises OSError(errno) naming the path it was given, the way the real call fails.
What cannot exist here on demand (a disk returning EIO on the 37th call) is produced this way;
full and read-only filesystems are tested for real elsewhere (tests/sandboxfs.py).
"""
from __future__ import annotations

import builtins
import errno
import os
import shutil
import threading
from contextlib import contextmanager
from typing import Iterator

# (module, name): every call that can fail with an OSError the tool must turn into an answer
TARGETS = [(builtins, "open"), (os, "open"), (os, "replace"), (os, "rename"), (os, "mkdir"),
           (os, "unlink"), (os, "remove"), (os, "rmdir"), (os, "fsync"), (os, "scandir"),
           (os, "listdir"), (os, "symlink"), (os, "chmod"), (os, "readlink"), (os, "write"),
           (os, "read"), (shutil, "copy2"), (shutil, "copyfile"), (shutil, "rmtree"),
           (shutil, "move")]


class Faults:
    def __init__(self, fail_at: int | None, code: int = errno.EIO):
        self.fail_at = fail_at  # None: only count
        self.code = code
        self.calls = 0
        self.hit: str | None = None  # "name(path)" of the call that failed
        self.lock = threading.Lock()

    def _wrap(self, name: str, real):
        def wrapper(*args, **kwargs):
            with self.lock:
                self.calls += 1
                fail = self.calls == self.fail_at
            if fail:
                path = args[0] if args and isinstance(args[0], (str, bytes, os.PathLike)) else None
                self.hit = f"{name}({path!r})"
                raise OSError(self.code, f"{os.strerror(self.code)} (injected)",
                              os.fspath(path) if path is not None else None)
            return real(*args, **kwargs)

        return wrapper

    @contextmanager
    def active(self) -> Iterator["Faults"]:
        saved = [(module, name, getattr(module, name)) for module, name in TARGETS]
        for module, name, real in saved:
            setattr(module, name, self._wrap(f"{module.__name__}.{name}", real))
        try:
            yield self
        finally:
            for module, name, real in saved:
                setattr(module, name, real)
