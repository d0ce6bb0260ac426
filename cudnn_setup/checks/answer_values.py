"""Values taken out of what a child process answered, each of the type it claims or nothing.

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
