"""A problem found in an archive or on a machine: one line of what, one line of what to do."""
from __future__ import annotations

from dataclasses import dataclass

ERROR = "error"
WARNING = "warning"


@dataclass(frozen=True)
class Problem:
    code: str
    message: str
    hint: str = ""
    severity: str = ERROR

    def to_dict(self) -> dict:
        return {"code": self.code, "severity": self.severity, "message": self.message,
                "hint": self.hint}


def escape(text: str) -> str:
    """Show a name from an archive safely: control characters and escapes as visible codes."""
    out = []
    for ch in text:
        code = ord(ch)
        if code < 32 or code == 127 or 0x80 <= code < 0xA0:
            out.append({"\n": "\\n", "\t": "\\t", "\r": "\\r", "\x1b": "\\e"}.get(ch, f"\\x{code:02x}"))
        elif ch == "\\":
            out.append("\\\\")
        else:
            out.append(ch)
    return "".join(out)
