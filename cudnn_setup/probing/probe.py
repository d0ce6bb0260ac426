"""Running native code in a child process: a probe script under some interpreter, with a time
limit, its output read as bytes, bounded, and decoded with replacement; its answer is the one
line marked with a key made for this run and handed to it before it loads anything, and is read
field by field, each as the type it claims (ProbeResult.answer: probing/answer_values.Fields).
That is the one reader of what a child prints.

Whatever the child does (crashes, hangs, prints megabytes of binary noise) ends up as data in a
ProbeResult; nothing a child prints can make the parent raise.
"""
from __future__ import annotations

import json
import os
import secrets
import sys
from pathlib import Path
from typing import Mapping

from msgspec import Struct

from cudnn_setup.probing.answer_values import Fields
from cudnn_setup.child import Runner, signal_name
from cudnn_setup.text import decode_output

KEY_FIELD = "answer_key"  # probes/answer.py's: the probes cannot import the package


class ProbeResult(Struct):
    data: dict | None
    returncode: int | None
    stderr: str
    timed_out: bool = False
    error: str | None = None  # the child could not be started at all (or was not: `known`)
    known: str | None = None  # not started: what its key's child did earlier in this command
    unanswered: bool = False  # it printed no whole answer with this run's key

    @property
    def crashed(self) -> str | None:
        """The signal's name when the child died of one (SIGABRT from a broken cuDNN…)."""
        return signal_name(self.returncode)

    def answer(self, what: str) -> Fields:
        """The answer read field by field (probing/answer_values.Fields); `what` names it in
        messages ("the driver probe's answer"). Empty when there was none."""
        return Fields(self.data, what)

    def last_error_line(self, limit: int = 300) -> str:
        lines = [line for line in self.stderr.splitlines() if line.strip()]
        last = lines[-1].strip() if lines else (self.error or "")
        return last[:limit]

    def failure(self) -> str:
        """One line saying how the child failed, for a check's detail."""
        if self.known:
            return f"was not run: {self.known}"
        if self.error:
            return f"could not be started: {self.error}"
        if self.timed_out:
            return "did not finish in time"
        how = f"died of {self.crashed}" if self.crashed else f"exited with status {self.returncode}"
        if not self.crashed and self.unanswered:
            how += " without a complete answer"
        last = self.last_error_line()
        return how + (f" (stderr: {last})" if last else "")


def run_probe(args: list[str], timeout: float, env: Mapping[str, str] | None = None,
              python: str | None = None, *, runner: Runner | None = None,
              key: str | None = None, what: str | None = None,
              remember: bool = True) -> ProbeResult:
    """Run a probe script in a child interpreter; its answer is the line carrying this run's key
    (probes/answer.py), nothing else it prints. `runner`, `key`, `what`, `remember`: as
    Runner.run (the command's runner remembers what hung)."""
    nonce = secrets.token_hex(16)
    done = (runner or Runner()).run([python or sys.executable, *args], timeout, env, key=key,
                                    what=what, remember=remember, stdin=(nonce + "\n").encode())
    data = answer_of(done.stdout, nonce)
    return ProbeResult(data, done.returncode, decode_output(done.stderr), done.timed_out,
                       done.error, done.known,
                       unanswered=data is None and done.returncode is not None)


def answer_of(out: bytes, key: str) -> dict | None:
    """The answer on the last whole line of `out` that carries `key`; lines without it (what
    the loaded code printed, a forged answer) and a cut line are not answers."""
    for line in reversed(out.splitlines()):
        line = line.strip()
        if not line.startswith(b"{") or key.encode() not in line:
            continue
        try:
            data = json.loads(line.decode("utf-8", errors="replace"))
        except ValueError:
            continue
        if isinstance(data, dict) and data.get(KEY_FIELD) == key and \
                isinstance(data.get("answer"), dict):
            return data["answer"]
    return None


def loads_key(library: Path | str) -> str:
    """The Runner key of a child that loads `library` (the file, links resolved): once loading
    it hangs, the checks after that say so without waiting again."""
    return f"loads {os.path.realpath(library)}"


def probe_module(name: str) -> list[str]:
    """Arguments running a probe by file path, so any interpreter can run it."""
    return [str(Path(__file__).resolve().parent.parent / "probes" / f"{name}.py")]


def stdlib_probe(name: str) -> list[str]:
    """A probe that needs the standard library only (it loads libraries with ctypes), run
    isolated and without site: no user's PYTHONPATH, PYTHONSTARTUP or sitecustomize (which
    may import anything, a framework included) can change what it sees or make it slow, and
    it starts sooner, with no site to import. It puts its own directory on sys.path."""
    return ["-I", "-S", *probe_module(name)]


def numpy_path() -> list[str]:
    """The GPU probe's argument naming numpy's directory, found (not imported) where this
    interpreter finds it: the probe runs without site, as stdlib_probe's do, and needs numpy
    alone of what site would add. None where this interpreter has no numpy."""
    import importlib.util

    spec = importlib.util.find_spec("numpy")
    if spec is None or not spec.submodule_search_locations:
        return []
    return ["--numpy-path", str(Path(list(spec.submodule_search_locations)[0]).parent)]


def child_env(lib_dir: Path, base: Mapping[str, str]) -> dict[str, str]:
    env = dict(base)
    old = env.get("LD_LIBRARY_PATH")
    env["LD_LIBRARY_PATH"] = f"{lib_dir}:{old}" if old else str(lib_dir)
    return env
