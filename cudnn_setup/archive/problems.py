"""A problem found in an archive: one line of what, one line of what to do."""
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
