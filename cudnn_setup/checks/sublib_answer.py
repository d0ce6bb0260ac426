"""The sub-library probe's answer (probes/sublibs.py), read into types.

The probe's JSON line is untrusted: every field is taken through checks/answer_values.py, so
a missing key, a value of another type or a huge one becomes "not said" (None, an empty list)
and the coherence check judges what is left; a misspelt field is an AttributeError that the
tests catch, not a silent None from `.get`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from cudnn_setup.checks.answer_values import integer, mapping, nonempty, paths

PATH_LIMIT = 4096  # characters of a path kept (PATH_MAX)
MESSAGE_LIMIT = 4000  # characters of a child's message kept (a check's detail shows fewer)


def _said(value: object) -> str | None:
    """A message the child sent (error, dlerror): a string as is, anything else that is not
    empty as its repr, so an odd one still counts as said; None for nothing."""
    if not value:
        return None
    return (value if isinstance(value, str) else repr(value))[:MESSAGE_LIMIT]


def _path(value: object) -> str | None:
    return nonempty(value, PATH_LIMIT)


def _flag(value: object) -> bool | None:
    return value if isinstance(value, bool) else None


def _version(value: object) -> int | str | None:
    """cudnnGetVersion's integer or the digits of a version constant or file name, as sent."""
    if integer(value) is not None:
        return value  # type: ignore[return-value]
    return value[:40] if isinstance(value, str) else None


@dataclass(frozen=True)
class VersionCheck:
    """cuDNN's own cudnn<Sub>VersionCheck(), called in a child of its own."""

    function: str | None
    status: int | None  # 0 CUDNN_STATUS_SUCCESS; 2001/2002 loading failed / version mismatch
    mapped: list[str] = field(default_factory=list)  # libcudnn* files the call mapped
    error: str | None = None  # how the child died, when it did
    signal: str | None = None

    @classmethod
    def read(cls, value: object) -> "VersionCheck | None":
        if not isinstance(value, Mapping):
            return None
        mapped = value.get("mapped")
        return cls(function=nonempty(value.get("function"), 200),
                   status=integer(value.get("status")),
                   mapped=[m[:PATH_LIMIT] for m in mapped[:4000] if isinstance(m, str)]
                   if isinstance(mapped, list) else [],
                   error=_said(value.get("error")), signal=nonempty(value.get("signal"), 40))

    @property
    def passed(self) -> bool:
        return self.status == 0 and not self.error and self.function is not None

    def to_dict(self) -> dict:
        out: dict = {"function": self.function, "status": self.status, "mapped": self.mapped}
        if self.error is not None:
            out["error"] = self.error
        if self.signal is not None:
            out["signal"] = self.signal
        return out


@dataclass(frozen=True)
class SubLibraryAnswer:
    """What the probe's child that dlopened one sub-library said (or that it said nothing)."""

    reported: bool = False  # the probe sent an entry for it at all
    loaded: bool | None = None
    path: str | None = None  # the link-map name
    mapped: str | None = None  # the file /proc/self/maps shows at its base
    version: int | str | None = None
    version_from: str | None = None
    dlerror: str | None = None
    error: str | None = None  # how its child died (a signal, the time limit)
    version_check: VersionCheck | None = None

    @classmethod
    def read(cls, value: object) -> "SubLibraryAnswer":
        if isinstance(value, SubLibraryAnswer):
            return value
        if not isinstance(value, Mapping) or not value:
            return cls()
        return cls(reported=True, loaded=_flag(value.get("loaded")), path=_path(value.get("path")),
                   mapped=_path(value.get("mapped")), version=_version(value.get("version")),
                   version_from=nonempty(value.get("version_from"), 100),
                   dlerror=_said(value.get("dlerror")), error=_said(value.get("error")),
                   version_check=VersionCheck.read(value.get("version_check")))


@dataclass(frozen=True)
class SublibsAnswer:
    """The whole answer: libcudnn itself, then one entry per sub-library in the order asked."""

    loaded: bool
    path: str | None = None
    mapped: str | None = None
    version: int | str | None = None
    dlerror: str | None = None
    error: str | None = None
    cudnn_mapped: list[str] = field(default_factory=list)  # mapped to answer cudnnGetVersion
    sublibraries: list[SubLibraryAnswer] = field(default_factory=list)

    @classmethod
    def read(cls, value: object, limit: int = 1000) -> "SublibsAnswer":
        data = mapping(value)
        entries = data.get("sublibraries")
        return cls(loaded=data.get("loaded") is True, path=_path(data.get("path")),
                   mapped=_path(data.get("mapped")), version=_version(data.get("version")),
                   dlerror=_said(data.get("dlerror")), error=_said(data.get("error")),
                   cudnn_mapped=paths(data.get("cudnn_mapped")),
                   sublibraries=[SubLibraryAnswer.read(e) for e in entries[:limit]]
                   if isinstance(entries, list) else [])
