"""What a command found, in one object: rendered as JSON for programs or as lines for people.

The JSON contract (docs/json.md) is versioned by SCHEMA: every object carries the base keys
below, and each command adds only the keys it declares there.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cudnn_setup.errors import VERIFY_FAILED, SetupError

SCHEMA = 2
PASS, WARN, FAIL, SKIP = "pass", "warn", "fail", "skip"
BASE_KEYS = ("schema", "ok", "command", "cuda_root", "cudnn_version", "changed", "checks", "error")


# Check and Result stay dataclasses, unlike the other records (msgspec Structs): a refusal
# builds a Result before anything else loads, and importing msgspec would add to it.
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
    data: dict[str, Any] = field(default_factory=dict)  # the command's own keys
    lines: list[str] = field(default_factory=list)  # the human summary

    @property
    def ok(self) -> bool:
        return self.error is None and not any(c.status == FAIL for c in self.checks)

    @property
    def exit_code(self) -> int:
        if self.error is not None:
            return self.error.exit_code
        return VERIFY_FAILED if any(c.status == FAIL for c in self.checks) else 0

    def add(self, key: str, value: Any) -> None:
        """Set one of the command's own keys; a key set twice is a bug, not a silent overwrite."""
        if key in BASE_KEYS or key in self.data:
            raise KeyError(f"JSON key {key!r} of {self.command} is already set")
        self.data[key] = value

    def to_dict(self) -> dict:
        out = {
            "schema": SCHEMA,
            "ok": self.ok,
            "command": self.command,
            "cuda_root": self.cuda_root,
            "cudnn_version": self.cudnn_version,
            "changed": self.changed,
            "checks": [c.to_dict() for c in self.checks],
            "error": self.error.to_dict() if self.error else None,
        }
        out.update(self.data)
        return out


def check_lines(checks: list[Check]) -> list[str]:
    """A line a check; a failed one's hint (what to run) on a line of its own below it."""
    width = max((len(c.name) for c in checks), default=0)
    lines = []
    for c in checks:
        lines.append(f"  {c.name:<{width}}  {c.status:<4}  {c.detail}")
        hint = c.data.get("hint") if c.status == FAIL and isinstance(c.data, dict) else None
        if isinstance(hint, str) and hint:
            lines.append(f"  {'':<{width}}  {'':<4}  hint: {hint}")
    return lines
