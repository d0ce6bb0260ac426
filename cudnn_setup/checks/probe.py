"""Running native code in a child process: a probe script under some interpreter, with a time
limit, its output read as bytes, bounded, and decoded with replacement.

Whatever the child does (crashes, hangs, prints megabytes of binary noise) ends up as data in a
ProbeResult; nothing a child prints can make the parent raise.
"""
from __future__ import annotations

import json
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from cudnn_setup.child import run_command
from cudnn_setup.text import decode_output


@dataclass
class ProbeResult:
    data: dict | None
    returncode: int | None
    stderr: str
    timed_out: bool = False
    error: str | None = None  # the child could not be started at all

    @property
    def crashed(self) -> str | None:
        """The signal's name when the child died of one (SIGABRT from a broken cuDNN…)."""
        if self.returncode is not None and self.returncode < 0:
            try:
                return signal.Signals(-self.returncode).name
            except ValueError:
                return f"signal {-self.returncode}"
        return None

    def last_error_line(self, limit: int = 300) -> str:
        lines = [line for line in self.stderr.splitlines() if line.strip()]
        last = lines[-1].strip() if lines else (self.error or "")
        return last[:limit]

    def failure(self) -> str:
        """One line saying how the child failed, for a check's detail."""
        if self.error:
            return f"could not be started: {self.error}"
        if self.timed_out:
            return "did not finish in time"
        how = f"died of {self.crashed}" if self.crashed else f"exited with status {self.returncode}"
        last = self.last_error_line()
        return how + (f" (stderr: {last})" if last else "")


def run_probe(args: list[str], timeout: float, env: Mapping[str, str] | None = None,
              python: str | None = None) -> ProbeResult:
    """Run a probe script in a child interpreter; its last JSON-object line is its answer."""
    done = run_command([python or sys.executable, *args], timeout, env)
    return ProbeResult(last_json(done.stdout), done.returncode, decode_output(done.stderr),
                       done.timed_out, done.error)


def last_json(out: bytes) -> dict | None:
    for line in reversed(out.splitlines()):
        line = line.strip()
        if line.startswith(b"{"):
            try:
                data = json.loads(line.decode("utf-8", errors="replace"))
            except ValueError:
                continue
            if isinstance(data, dict):
                return data
    return None


def probe_module(name: str) -> list[str]:
    """Arguments running a probe by file path, so any interpreter can run it."""
    return [str(Path(__file__).resolve().parent.parent / "probes" / f"{name}.py")]


def child_env(lib_dir: Path, base: Mapping[str, str]) -> dict[str, str]:
    env = dict(base)
    old = env.get("LD_LIBRARY_PATH")
    env["LD_LIBRARY_PATH"] = f"{lib_dir}:{old}" if old else str(lib_dir)
    return env
