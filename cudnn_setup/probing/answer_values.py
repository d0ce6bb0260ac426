"""Values taken out of what a child process answered, each of the type it claims or nothing:
the one reader of answers (`Fields` reads an object field by field).

A probe's JSON line is untrusted: any key may be missing, of another type, huge, or a bool
where a number belongs (JSON's true is Python's 1). Every check that reads an answer takes
its fields through these, so one rule holds for all of them.
"""
from __future__ import annotations

SHOWN_LIMIT = 300  # characters of a child's message kept where a person reads it
MAX_PATHS = 4000  # paths taken from one list in an answer


def text(value: object, limit: int = SHOWN_LIMIT) -> str | None:
    """A string cut to `limit` characters (the empty string stays empty); None for anything
    else."""
    return value[:limit] if isinstance(value, str) else None


def nonempty(value: object, limit: int | None = None) -> str | None:
    """A string that says something, cut to `limit` characters when one is given; None for
    the empty string and for anything that is not a string."""
    if not isinstance(value, str) or not value:
        return None
    return value if limit is None else value[:limit]


def shown(value: object, limit: int = SHOWN_LIMIT) -> str:
    """Whatever the child sent, as text for a message: a string as is, anything else as its
    repr; past `limit` characters cut, with an ellipsis saying so."""
    out = value if isinstance(value, str) else repr(value)
    return out if len(out) <= limit else out[:limit] + "…"


def mapping(value: object) -> dict:
    """A JSON object, or an empty one for anything else."""
    return value if isinstance(value, dict) else {}


def integer(value: object, low: int | None = None, high: int | None = None) -> int | None:
    """An int (never a bool) in [low, high) where those are given; None otherwise."""
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    if (low is not None and value < low) or (high is not None and value >= high):
        return None
    return value


def paths(value: object, limit: int = MAX_PATHS) -> list[str]:
    """The absolute paths of a list, at most `limit` of them looked at; anything else dropped."""
    if not isinstance(value, list):
        return []
    return [v for v in value[:limit] if isinstance(v, str) and v.startswith("/") and
            len(v) < 4096 and "\0" not in v]


def number(value: object, low: float | None = None, high: float | None = None) -> float | None:
    """An int or a finite float (never a bool) in [low, high) where those are given, as a
    float; None otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    out = float(value)
    if out != out or out in (float("inf"), float("-inf")):
        return None
    if (low is not None and out < low) or (high is not None and out >= high):
        return None
    return out


def flag(value: object) -> bool | None:
    """A JSON true or false; None for anything else (1 and "yes" are no answer)."""
    return value if isinstance(value, bool) else None


def strings(value: object, limit: int = SHOWN_LIMIT, count: int = 64) -> list[str]:
    """The strings of a list, each cut to `limit` characters, at most `count` of them looked at;
    anything else dropped."""
    if not isinstance(value, list):
        return []
    return [v[:limit] for v in value[:count] if isinstance(v, str)]


class BadAnswer(ValueError):
    """An answer that lacks a field its reader needs, or holds it as another type: the check
    that asked fails saying which, instead of the command ending in an internal error."""


class Fields:
    """One object of a child's answer, read field by field: each getter returns the field as
    the type it claims, or nothing (the functions above), and the `need_` getters raise
    BadAnswer for a field that must be there. Anything else in the object is ignored, so a
    probe that answers more keys later is still read."""

    def __init__(self, data: object, what: str = "the answer", path: str = ""):
        self._data: dict = data if isinstance(data, dict) else {}
        self.what = what  # whose answer, for messages
        self.path = path  # where in it this object is ("layers.conv1."), for messages

    def __bool__(self) -> bool:
        return bool(self._data)

    def raw(self, key: str) -> object:
        """The field as the child sent it (for the few places that show it, bounded there)."""
        return self._data.get(key)

    def has(self, key: str) -> bool:
        return key in self._data

    def text(self, key: str, limit: int = SHOWN_LIMIT) -> str | None:
        return text(self._data.get(key), limit)

    def nonempty(self, key: str, limit: int | None = None) -> str | None:
        return nonempty(self._data.get(key), limit)

    def shown(self, key: str, limit: int = SHOWN_LIMIT) -> str:
        return shown(self._data.get(key), limit)

    def integer(self, key: str, low: int | None = None, high: int | None = None) -> int | None:
        return integer(self._data.get(key), low, high)

    def number(self, key: str, low: float | None = None, high: float | None = None) -> float | None:
        return number(self._data.get(key), low, high)

    def flag(self, key: str) -> bool | None:
        return flag(self._data.get(key))

    def strings(self, key: str, limit: int = SHOWN_LIMIT, count: int = 64) -> list[str]:
        return strings(self._data.get(key), limit, count)

    def paths(self, key: str, limit: int = MAX_PATHS) -> list[str]:
        return paths(self._data.get(key), limit)

    def fields(self, key: str) -> Fields:
        """The object under `key` (an empty one for anything else)."""
        return Fields(self._data.get(key), self.what, f"{self.path}{key}.")

    def items(self, key: str, count: int = MAX_PATHS) -> list[Fields]:
        """The objects of the list under `key`, at most `count` looked at; anything else
        dropped."""
        value = self._data.get(key)
        if not isinstance(value, list):
            return []
        return [Fields(v, self.what, f"{self.path}{key}[{i}].")
                for i, v in enumerate(value[:count]) if isinstance(v, dict)]

    def entries(self, count: int = MAX_PATHS) -> list[tuple[str, Fields]]:
        """(key, object) for the fields of this object that are objects themselves, at most
        `count` looked at."""
        out = []
        for key, value in list(self._data.items())[:count]:
            if isinstance(key, str) and isinstance(value, dict):
                out.append((key, Fields(value, self.what, f"{self.path}{key[:60]}.")))
        return out

    def _missing(self, key: str, kind: str) -> BadAnswer:
        held = f" (it holds {shown(self._data.get(key), 60)})" if key in self._data else ""
        return BadAnswer(f"{self.what} has no {kind} {self.path + key!r}{held}")

    def need_text(self, key: str, limit: int = SHOWN_LIMIT) -> str:
        got = self.text(key, limit)
        if got is None:
            raise self._missing(key, "text")
        return got

    def need_flag(self, key: str) -> bool:
        got = self.flag(key)
        if got is None:
            raise self._missing(key, "true or false")
        return got

    def need_number(self, key: str, low: float | None = None, high: float | None = None) -> float:
        got = self.number(key, low, high)
        if got is None:
            raise self._missing(key, "number" + (f" of at least {low:g}" if low is not None else "")
                                + (f" below {high:g}" if high is not None else ""))
        return got

    def need_fields(self, key: str) -> Fields:
        value = self._data.get(key)
        if not isinstance(value, dict):
            raise self._missing(key, "object")
        return Fields(value, self.what, f"{self.path}{key}.")

    def need_list(self, key: str) -> list:
        value = self._data.get(key)
        if not isinstance(value, list):
            raise self._missing(key, "list")
        return value
