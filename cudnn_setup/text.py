"""Showing untrusted text safely: names from archives, paths, and what child processes print."""
from __future__ import annotations

import os
import re

OUTPUT_LIMIT = 64 << 10  # bytes of a child's output kept for a report

_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\x1b": "\\e"}


def _code(ch: str) -> str:
    """The visible form of one character that must not reach a terminal or a JSON parser raw."""
    code = ord(ch)
    if ch in _NAMED:
        return _NAMED[ch]
    if 0xDC80 <= code <= 0xDCFF:  # an undecodable byte, as os.fsdecode carries it
        return f"\\x{code - 0xDC00:02x}"
    if 0xD800 <= code <= 0xDFFF:
        return f"\\u{code:04x}"
    return f"\\x{code:02x}"


def escape(text: str) -> str:
    """A name fit to print: control characters, escapes and undecodable bytes as visible codes.

    Names read from archives or the filesystem may hold terminal escape sequences, newlines or
    bytes that are not valid in the locale's encoding (which Python carries as lone surrogates);
    printing them raw would let a file name rewrite the user's terminal or break the JSON.
    Backslashes are doubled, so an escaped name reads back unambiguously.
    """
    return _UNSAFE_OR_BACKSLASH.sub(lambda m: "\\\\" if m.group() == "\\" else _code(m.group()),
                                    text)


def show_path(path: "os.PathLike[str] | str") -> str:
    return escape(hide_userinfo(os.fspath(path)))


_PATH_USERINFO = re.compile(r"(^|/)[^/]*:[^/]*@(?=[^/@]+(?:/|\Z))")


def hide_userinfo(path: str) -> str:
    """A local path as given, with any `user:password@` segment prefix taken out; nothing else
    changes (paths are shown whole; escaping is the caller's)."""
    return _PATH_USERINFO.sub(r"\1", path) if "@" in path and len(path) <= 65536 else path


# Control characters (C0, DEL, C1) and lone surrogates: never printed raw.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_UNSAFE_OR_BACKSLASH = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff\\\\]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def printable(text: str) -> str:
    """One line fit for a terminal, whatever it holds: the last line of defence before output.

    Unlike escape(), backslashes are left alone, so text whose names were already escaped where
    it was made passes unchanged; anything raw that slipped through (a newline or an
    undecodable byte in a path) still comes out as a visible code.
    """
    return _UNSAFE.sub(lambda m: _code(m.group()), text)


def valid_unicode(text: str) -> str:
    """Text that every JSON parser accepts: undecodable bytes (lone surrogates) as visible codes.

    JSON's own escaping already keeps control characters off the wire; a lone surrogate,
    though, is invalid Unicode that strict parsers reject.
    """
    return _SURROGATE.sub(lambda m: _code(m.group()), text)


def decode_output(data: bytes | str | None, limit: int = OUTPUT_LIMIT) -> str:
    """A child's output as text: decoded with replacement, only the last `limit` bytes kept.

    The end is what explains a failure (the last error line), so that is the part kept.
    """
    if data is None:
        return ""
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    if len(data) > limit:
        data = b"..." + data[-limit:]
    return data.decode("utf-8", errors="replace")


def plural(count: int, noun: str, many: str | None = None) -> str:
    """"1 library", "0 libraries", "3 files": a count with its noun in the right number.

    `many` names an irregular plural; otherwise English's regular rules (library → libraries,
    match → matches, file → files)."""
    if count == 1:
        return f"{count} {noun}"
    if many is None:
        if noun.endswith("y") and noun[-2:-1] not in ("a", "e", "i", "o", "u"):
            many = noun[:-1] + "ies"
        elif noun.endswith(("s", "x", "z", "ch", "sh")):
            many = noun + "es"
        else:
            many = noun + "s"
    return f"{count} {many}"
