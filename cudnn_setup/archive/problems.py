"""A problem found in an archive: one line of what, one line of what to do."""
from __future__ import annotations

from msgspec import Struct


ERROR = "error"
WARNING = "warning"


class Problem(Struct, frozen=True):
    code: str
    message: str
    hint: str = ""
    severity: str = ERROR

    def to_dict(self) -> dict:
        return {"code": self.code, "severity": self.severity, "message": self.message,
                "hint": self.hint}
