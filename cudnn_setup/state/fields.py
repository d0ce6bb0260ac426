"""Reading one JSON object of the state field by field, each checked for its type.

Every failure is a Damaged naming the field (`files[3].sha256`), so the user's error says what
exactly is wrong instead of a KeyError or a TypeError deep inside an uninstall.
"""
from __future__ import annotations

import re
from typing import Any

from cudnn_setup.state.paths import Damaged, not_a_name

HEX_ID = re.compile(r"^[0-9a-f]{1,64}\Z")
SHA256 = re.compile(r"^[0-9a-f]{64}\Z")
MAX_TEXT = 4096

_MISSING = object()


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def text(value: Any, where: str, pattern: re.Pattern | None = None) -> str:
    """`value` if it is a string the tool could have written, else Damaged."""
    if not isinstance(value, str):
        raise Damaged(f"{where} is {_kind(value)}, not a string")
    if len(value) > MAX_TEXT or "\x00" in value:
        raise Damaged(f"{where} is too long or contains a NUL byte")
    not_a_name(value, where)  # a link's target, a name: each may reach a system call
    if pattern is not None and not pattern.fullmatch(value):  # `$` would allow a final "\n"
        raise Damaged(f"{where} is not what the tool writes ({value[:80]!r})")
    return value


class Fields:
    """A JSON object whose fields are taken out one by one, each with its type checked."""

    def __init__(self, data: Any, where: str):
        if not isinstance(data, dict):
            raise Damaged(f"{where} is {_kind(data)}, not an object")
        self.data = data
        self.where = where

    @staticmethod
    def record(data: Any, what: str, known_format: int, older: tuple[int, ...] = ()) -> "Fields":
        """A whole record (the manifest, the journal), refused unless it is of the format this
        version writes or one of the `older` ones it still reads."""
        f = Fields(data, "")
        fmt = f.integer("format")
        if fmt != known_format and fmt not in older:
            raise Damaged(f"{what} format {fmt} is not the one this version reads ({known_format})")
        return f

    def at(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def _get(self, key: str, optional: bool) -> Any:
        value = self.data.get(key, _MISSING)
        if value is _MISSING or (value is None and optional):
            if optional:
                return None
            raise Damaged(f"{self.at(key)} is missing")
        return value

    def text(self, key: str, optional: bool = False,
             pattern: re.Pattern | None = None) -> str | None:
        value = self._get(key, optional)
        return None if value is None else text(value, self.at(key), pattern)

    def integer(self, key: str, optional: bool = False, low: int = 0,
                high: int = 1 << 63) -> int | None:
        value = self._get(key, optional)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise Damaged(f"{self.at(key)} is {_kind(value)}, not an integer")
        if not low <= value <= high:
            raise Damaged(f"{self.at(key)} is out of range ({value})")
        return value

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            raise Damaged(f"{self.at(key)} is {_kind(value)}, not true or false")
        return value

    def choice(self, key: str, choices: tuple[str, ...], optional: bool = False) -> str | None:
        value = self.text(key, optional)
        if value is not None and value not in choices:
            raise Damaged(f"{self.at(key)} is {value[:80]!r}, not one of {', '.join(choices)}")
        return value

    def items(self, key: str, optional: bool = False) -> list[tuple[str, Any]]:
        """A list field as (where, value) pairs."""
        value = self._get(key, optional)
        if value is None:
            return []
        if not isinstance(value, list):
            raise Damaged(f"{self.at(key)} is {_kind(value)}, not a list")
        return [(f"{self.at(key)}[{i}]", v) for i, v in enumerate(value)]

    def mapping(self, key: str, optional: bool = False) -> list[tuple[str, str, Any]]:
        """An object field as (where, key, value) triples."""
        value = self._get(key, optional)
        if value is None:
            return []
        if not isinstance(value, dict):
            raise Damaged(f"{self.at(key)} is {_kind(value)}, not an object")
        return [(f"{self.at(key)}[{k!r}]", k, v) for k, v in value.items()]

    def sub(self, key: str, optional: bool = False) -> "Fields | None":
        value = self._get(key, optional)
        return None if value is None else Fields(value, self.at(key))
