"""The sub-library probe's answer (probes/sublibs.py), read into types.

The probe's JSON line is untrusted: every field is taken through the one reader of an answer
(probing/answer_values.Fields), so a missing key, a value of another type or a huge one becomes
"not said" (None, an empty list) and the coherence check judges what is left; a misspelt field
is an AttributeError that the tests (and mypy) catch, not a silent None from `.get`.
"""
from __future__ import annotations

from msgspec import Struct, field

from cudnn_setup.probing.answer_values import Fields, integer

WHAT = "the sub-library probe's answer"

PATH_LIMIT = 4096  # characters of a path kept (PATH_MAX)
MESSAGE_LIMIT = 4000  # characters of a child's message kept (a check's detail shows fewer)


def _said(value: object) -> str | None:
    """A message the child sent (error, dlerror): a string as is, anything else that is not
    empty as its repr, so an odd one still counts as said; None for nothing."""
    if not value:
        return None
    return (value if isinstance(value, str) else repr(value))[:MESSAGE_LIMIT]


def _version(value: object) -> int | str | None:
    """cudnnGetVersion's integer or the digits of a version constant or file name, as sent."""
    if integer(value) is not None:
        return value  # type: ignore[return-value]
    return value[:40] if isinstance(value, str) else None


class VersionCheck(Struct, frozen=True):
    """cuDNN's own cudnn<Sub>VersionCheck(), called in a child of its own."""

    function: str | None
    status: int | None  # 0 CUDNN_STATUS_SUCCESS; 2001/2002 loading failed / version mismatch
    mapped: list[str] = field(default_factory=list)  # libcudnn* files the call mapped
    error: str | None = None  # how the child died, when it did
    signal: str | None = None
    opened: list[str] = field(default_factory=list)  # their link-map names: the names opened

    @classmethod
    def read(cls, value: object) -> "VersionCheck | None":
        """None where the entry has no object for it (its check function was not called)."""
        if not isinstance(value, dict):
            return None
        f = Fields(value, WHAT, "version_check.")
        return cls(function=f.nonempty("function", 200), status=f.integer("status"),
                   mapped=f.strings("mapped", PATH_LIMIT, 4000), error=_said(f.raw("error")),
                   signal=f.nonempty("signal", 40),
                   opened=f.strings("opened", PATH_LIMIT, 4000))

    @property
    def passed(self) -> bool:
        return self.status == 0 and not self.error and self.function is not None

    def to_dict(self) -> dict:
        out: dict = {"function": self.function, "status": self.status, "mapped": self.mapped}
        if self.error is not None:
            out["error"] = self.error
        if self.signal is not None:
            out["signal"] = self.signal
        if self.opened:
            out["opened"] = self.opened
        return out


class SubLibraryAnswer(Struct, frozen=True):
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
        f = Fields(value, WHAT)
        if not f:
            return cls()
        return cls(reported=True, loaded=f.flag("loaded"), path=f.nonempty("path", PATH_LIMIT),
                   mapped=f.nonempty("mapped", PATH_LIMIT), version=_version(f.raw("version")),
                   version_from=f.nonempty("version_from", 100), dlerror=_said(f.raw("dlerror")),
                   error=_said(f.raw("error")), version_check=VersionCheck.read(f.raw("version_check")))


class SublibsAnswer(Struct, frozen=True):
    """The whole answer: libcudnn itself, then one entry per sub-library in the order asked."""

    loaded: bool
    path: str | None = None
    mapped: str | None = None
    version: int | str | None = None
    dlerror: str | None = None
    error: str | None = None
    cudnn_mapped: list[str] = field(default_factory=list)  # mapped to answer cudnnGetVersion
    opened_first: list[VersionCheck] = field(default_factory=list)  # --first, in order
    sublibraries: list[SubLibraryAnswer] = field(default_factory=list)

    @classmethod
    def read(cls, value: object, limit: int = 1000) -> "SublibsAnswer":
        """`limit`: entries read at most; each keeps its place (the n-th sub-library asked)."""
        f = Fields(value, WHAT)
        entries = f.raw("sublibraries")
        first = f.raw("opened_first")
        return cls(loaded=f.flag("loaded") is True, path=f.nonempty("path", PATH_LIMIT),
                   mapped=f.nonempty("mapped", PATH_LIMIT), version=_version(f.raw("version")),
                   dlerror=_said(f.raw("dlerror")), error=_said(f.raw("error")),
                   cudnn_mapped=f.paths("cudnn_mapped"),
                   opened_first=[c for c in map(VersionCheck.read, first[:16]) if c]
                   if isinstance(first, list) else [],
                   sublibraries=[SubLibraryAnswer.read(e) for e in entries[:limit]]
                   if isinstance(entries, list) else [])
