"""What a command found, in one object: rendered as JSON (DESIGN §2) or as lines for a person."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cudnn_setup.errors import SetupError

PASS, WARN, FAIL, SKIP = "pass", "warn", "fail", "skip"


@dataclass
class Check:
    name: str
    status: str
    detail: str
    data: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        out = {"name": self.name, "status": self.status, "detail": self.detail}
        if self.data:
            out["data"] = self.data
        return out


@dataclass
class Result:
    command: str
    cuda_root: str | None = None
    cudnn_version: str | None = None
    changed: bool = False
    checks: list[Check] = field(default_factory=list)
    error: SetupError | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)  # the human summary

    @property
    def ok(self) -> bool:
        return self.error is None and not any(c.status == FAIL for c in self.checks)

    def to_dict(self) -> dict:
        out = {
            "ok": self.ok,
            "command": self.command,
            "cuda_root": self.cuda_root,
            "cudnn_version": self.cudnn_version,
            "changed": self.changed,
            "checks": [c.to_dict() for c in self.checks],
            "error": self.error.to_dict() if self.error else None,
        }
        if self.error and self.error.problems:
            out["error"]["problems"] = [p.to_dict() for p in self.error.problems]
        for key, value in self.extra.items():
            out.setdefault(key, value)
        return out


def check_lines(checks: list[Check]) -> list[str]:
    width = max((len(c.name) for c in checks), default=0)
    return [f"  {c.name:<{width}}  {c.status:<4}  {c.detail}" for c in checks]
