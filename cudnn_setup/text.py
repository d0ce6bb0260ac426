"""Showing untrusted text safely: names from archives, paths, and what child processes print."""
from __future__ import annotations

import os

OUTPUT_LIMIT = 64 << 10  # bytes of a child's output kept for a report


def escape(text: str) -> str:
    """A name fit to print: control characters, escapes and undecodable bytes as visible codes.

    Names read from archives or the filesystem may hold terminal escape sequences, newlines or
    bytes that are not valid in the locale's encoding (which Python carries as lone surrogates);
    printing them raw would let a file name rewrite the user's terminal or break the JSON.
    """
    out = []
    for ch in text:
        code = ord(ch)
        if code < 32 or code == 127 or 0x80 <= code < 0xA0:
            out.append({"\n": "\\n", "\t": "\\t", "\r": "\\r", "\x1b": "\\e"}.get(ch, f"\\x{code:02x}"))
        elif 0xDC80 <= code <= 0xDCFF:  # an undecodable byte, as os.fsdecode carries it
            out.append(f"\\x{code - 0xDC00:02x}")
        elif 0xD800 <= code <= 0xDFFF:
            out.append(f"\\u{code:04x}")
        elif ch == "\\":
            out.append("\\\\")
        else:
            out.append(ch)
    return "".join(out)


def show_path(path: "os.PathLike[str] | str") -> str:
    return escape(os.fspath(path))


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
