"""What the frameworks layer knows of each framework of an interpreter, as the frameworks
check, its what-if and the clients check read it (checks/frameworks_check.py makes them)."""
from __future__ import annotations

from msgspec import Struct

from cudnn_setup.checks.framework_loader import ChildLoader
from cudnn_setup.report import WARN

JSON_FIELDS = ("name", "version", "importable", "cudnn_built_for", "cudnn_built_for_source",
               "cudnn_loaded", "compatible", "rule", "status", "reason")
LOADED_FIELDS = ("path", "dir", "version", "why", "detail")


class LoadedCopy(Struct, frozen=True):
    """The libcudnn a framework's process mapped: its real path and directory, the version it
    reports, why the loader took it (framework_loader.WHY_*), in words, and through which
    object (`via`, not in the JSON)."""

    path: str
    dir: str
    version: str | None
    why: str
    detail: str
    via: str | None = None

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in LOADED_FIELDS}


class LoaderView(Struct, frozen=True):
    """What the what-if needs of a framework's child to work out another loader set-up: its
    loader (environment, executable, the machine's cache), the objects it mapped, those of them
    that need libcudnn, and the libcudnn SONAME they ask for."""

    loader: ChildLoader
    mapped: tuple[str, ...]
    consumers: tuple[str, ...]
    soname: str | None


class FrameworkEntry(Struct):
    """One framework of an interpreter: what it was built for, the cuDNN it loads and why, and
    whether the pair is right by its own rule. `loader` is None when its child gave no usable
    answer (the what-if then knows nothing of its cuDNN use); it is never in the JSON."""

    name: str
    version: str | None
    rule: str
    importable: bool = True
    cudnn_built_for: str | None = None
    cudnn_built_for_source: str | None = None
    cudnn_loaded: LoadedCopy | None = None
    compatible: bool | None = None
    status: str = WARN
    reason: str = ""
    loader: LoaderView | None = None

    def to_dict(self) -> dict:
        """The entry in the JSON (`frameworks`): JSON_FIELDS, cudnn_loaded as LOADED_FIELDS."""
        out = {k: getattr(self, k) for k in JSON_FIELDS}
        out["cudnn_loaded"] = self.cudnn_loaded.to_dict() if self.cudnn_loaded else None
        return out
