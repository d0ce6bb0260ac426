"""Running probes/framework_loads.py in an interpreter: one framework per child, with a time limit,
its own output kept in a log, and everything it answers checked before anything uses it.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Mapping

from msgspec import Struct

from cudnn_setup.probing.answer_values import Fields
from cudnn_setup.probing.probe import probe_module, run_probe
from cudnn_setup.child import Runner
from cudnn_setup.errors import SetupError, UsageError

_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,99}\Z")
DEFAULT_TIMEOUT = 180.0  # one framework: import, GPU start-up, one convolution
LIST_TIMEOUT = 60.0
LOG_TAIL = 256 * 1024  # bytes of a framework's own output kept for messages
# Frameworks grab most of the GPU's memory at start unless told otherwise; the probe only needs
# a few kilobytes, and it must not starve the programs already running there.
QUIET_GPU = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "TF_FORCE_GPU_ALLOW_GROWTH": "true"}


class Listed(Struct, frozen=True):
    """A framework `python` lists (probes/framework_loads.py --list), nothing imported: its
    module name (a module name, nothing else: it goes on a child's command line and into
    messages), whether it could be imported, and its distribution's version."""

    name: str
    importable: bool
    version: str | None

    @classmethod
    def read(cls, entry: Fields) -> Listed | None:
        name = entry.nonempty("name")  # whole: a name cut short could pass
        if name is None or not _MODULE_NAME.match(name):
            return None
        return cls(name, entry.flag("importable") is True, entry.text("version", 100))


class Run(Struct):
    data: dict | None
    failure: str | None  # how the child failed, one line, when it gave no answer
    output: str  # the tail of what the framework printed, decoded


def child_env(env: Mapping[str, str]) -> dict[str, str]:
    out = dict(env)
    for key, value in QUIET_GPU.items():
        out.setdefault(key, value)
    return out


def import_key(python: str, name: str) -> str:
    """The Runner key of importing framework `name` under `python`: one that hangs costs one
    time limit per command (install probes before and after its what-if)."""
    return f"imports {name} under {python}"


def run(python: str, args: list[str], env: Mapping[str, str], timeout: float | None,
        log: Path | None = None, runner: Runner | None = None) -> Run:
    """probes/framework_loads.py ARGS under `python` with `env`; its answer or how it failed.
    The framework's own output goes to the probe's stderr, of which the runner keeps the tail
    (a `log` file, which the child would write without bound, only when a caller asks)."""
    timeout = DEFAULT_TIMEOUT if timeout is None else timeout
    argv = probe_module("framework_loads") + args + (["--log", str(log)] if log else [])
    imports = args[0] if args and not args[0].startswith("--") else None
    try:
        result = run_probe(argv, timeout, child_env(env), python=python, runner=runner,
                           key=import_key(python, imports) if imports else None,
                           what=f"importing {imports}")
    except (UnicodeDecodeError, ValueError) as exc:  # output that could not be read back
        return Run(None, f"its output could not be read ({exc})", tail(log))
    output = tail(log) + (result.stderr or "")[-LOG_TAIL:]
    data = result.data if isinstance(result.data, dict) else None
    if data is not None and Fields(data).text("probe") == "frameworks":
        return Run(data, None, output)
    error = getattr(result, "error", None)
    if error is None and result.returncode is None and not result.timed_out:
        error = last_line(result.stderr or "") or "unknown reason"  # it never ran
    if result.known:
        how = f"was not run: {result.known}"
    elif result.timed_out:
        how = f"did not finish in {timeout:.0f} s"
    elif error:
        how = f"could not be started: {error}"
    elif result.crashed:
        how = f"died of {result.crashed}"
    else:
        how = f"exited with status {result.returncode} without a complete answer"
    last = last_line(output)
    return Run(None, how + (f" (last output: {last})" if last else ""), output)


def tail(log: Path | None) -> str:
    if log is None:
        return ""
    try:
        with open(log, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - LOG_TAIL))
            return f.read(LOG_TAIL).decode("utf-8", errors="replace")
    except OSError:
        return ""


def last_line(output: str, limit: int = 300) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[-1][:limit] if lines else ""


def importable_frameworks(python: str, env: Mapping[str, str],
                          timeout: float | None = LIST_TIMEOUT,
                          runner: Runner | None = None) -> list[Listed]:
    """The frameworks `python` lists, at most 64; nothing is imported. Raises UsageError when `python` cannot be run, SetupError when it gives no list."""
    got = run(python, ["--list"], env, min(timeout or LIST_TIMEOUT, LIST_TIMEOUT), runner=runner)
    if got.data is None:
        if got.failure and got.failure.startswith("could not be started"):
            raise UsageError(f"{python} {got.failure}", "give --python an interpreter that runs")
        raise SetupError(f"{python} could not list its frameworks: {got.failure}")
    answer = Fields(got.data, f"the frameworks {python} lists")
    if not isinstance(answer.raw("frameworks"), list):
        raise SetupError(f"{python} gave no list of frameworks: {answer.text('error')}")
    return [listed for entry in answer.items("frameworks", 64)
            if (listed := Listed.read(entry)) is not None]


def library_version(python: str, path: str, env: Mapping[str, str],
                    timeout: float | None = LIST_TIMEOUT, runner: Runner | None = None) -> int | None:
    """cudnnGetVersion() of one library file, asked in a child of `python`."""
    got = run(python, ["--library", path], env, min(timeout or LIST_TIMEOUT, LIST_TIMEOUT),
              runner=runner)
    return Fields(got.data, "the library probe's answer").fields("library").integer("get_version")
