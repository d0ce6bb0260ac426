"""The `load` layer: libcudnn loaded in a child process with a time limit, the answer read once
into a LoadAnswer that the coherence, deps, cuda and driver checks and the install's fit read."""
from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from cudnn_setup.installation.model import Installation
from cudnn_setup.probing.load_answer import WHAT, LoadAnswer
from cudnn_setup.probing.probe import ProbeResult, child_env, loads_key, run_probe, stdlib_probe
from cudnn_setup.child import Runner
from cudnn_setup.untrusted import kind
from cudnn_setup.facts import cudnn as gen
from cudnn_setup.facts.ldresolve.environment import Environment
from cudnn_setup.facts.ldresolve.loadable import NotLoadable
from cudnn_setup.facts.ldresolve.process import Process
from cudnn_setup.report import FAIL, PASS, SKIP, WARN, Check
from cudnn_setup.text import escape

if TYPE_CHECKING:
    from cudnn_setup.checks.check_facts import CheckFacts

LOAD_TIMEOUT = 60.0
# cuDNN 8 says "Could not load library libcudnn_ops_infer.so.8. Error: …": the name ends
# before the sentence's full stop. The child's stderr is untrusted: the name is looked for only
# in a short window after each of the first phrases, so the search is linear in the output.
_MISSING_PHRASE = re.compile(r"Could not load library|cannot open shared object file")
_MISSING_LIB = re.compile(r"\D{0,200}?(?P<lib>lib[\w+-]{1,200}?(?:\.[\w+-]{1,100}?){0,8}?"
                          r"\.so(?:\.\d{1,9}){0,6})(?!\.*\w)")
_MISSING_WINDOW, _MISSING_TRIES = 500, 50


def missing_library(stderr: str) -> str | None:
    """The library a loader's or cuDNN's message says it could not load, if it names one."""
    for i, phrase in enumerate(_MISSING_PHRASE.finditer(stderr)):
        if i >= _MISSING_TRIES:
            break
        m = _MISSING_LIB.match(stderr, phrase.end(), phrase.end() + _MISSING_WINDOW)
        if m:
            return m["lib"]
    return None


def _crash_detail(result: ProbeResult, inst: Installation) -> str:
    err = result.stderr
    missing = missing_library(err)
    if missing is None:
        absent = list(inst.composition().missing) if inst.generation else []
        missing = absent[0] if absent else None
    detail = f"loading libcudnn {result.failure()}"
    if missing:
        detail += f"; {missing} is missing or cannot be loaded"
    return detail


def not_a_library(path: Path) -> str | None:
    """Why `path` (links followed) is no file a loader could map, before a child is asked to:
    a FIFO would make the child's loader wait on it for the whole time limit."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        return f"{path.name} cannot be read ({exc.strerror})"
    if not stat.S_ISREG(mode):
        return f"{path.name} is {kind(mode)}, not a library file"
    return None


def not_loadable_on_the_way(target: Path, loader: Environment) -> str | None:
    """A FIFO, device or directory the loader would open on its way to loading `target` (a
    DT_NEEDED entry found through RUNPATH, LD_LIBRARY_PATH…), from the emulation: the child's
    ld.so would wait on a FIFO for the whole time limit, so it is not started."""
    proc = Process(loader)
    try:
        res, _, needed = proc.load_with_needed(str(target), None)
    except NotLoadable:
        return None
    for r in (res, *(r for _, r in needed)):
        if r.error and "not a regular file" in r.error:
            return r.error
    return None


def check_load(inst: Installation, facts: CheckFacts) -> Check:
    """The `load` check, made once per installation by the command's facts (a library that
    hangs costs one time limit), whose answer the checks after it read."""
    return facts.machine.load(inst).check


def load_libcudnn(inst: Installation, env: Mapping[str, str], runner: Runner | None = None,
                  loader: Environment | None = None) -> tuple[Check, LoadAnswer | None]:
    """The `load` check, and the probe's answer for the checks that read it; `loader`: the
    loader's environment, to see what it would open first."""
    target = inst.soname_path()
    if target is None:
        return Check("load", SKIP, "no libcudnn to load"), None
    runner = runner or Runner()
    key = loads_key(target)
    bad = not_a_library(target) or (not_loadable_on_the_way(target, loader) if loader else None)
    if bad is not None:
        runner.remember(key, bad)  # no later check hands it to a loader either
        return Check("load", FAIL, f"{bad}: nothing can load it"), None
    result = run_probe(stdlib_probe("load") + [str(target)], LOAD_TIMEOUT,
                       child_env(inst.lib_dir, env), runner=runner, key=key,
                       what=f"loading {target.name}")
    if result.known:
        return Check("load", FAIL, f"loading {target.name} was not tried: {result.known}"), None
    if result.timed_out:
        return Check("load", FAIL, f"loading {target.name} did not finish in {LOAD_TIMEOUT:.0f} s"), None
    if result.data is None or "cudnnGetVersion" not in result.data:
        return Check("load", FAIL, _crash_detail(result, inst)), None
    answer = result.answer(WHAT)
    got = answer.raw("cudnnGetVersion")
    if got is not None and answer.integer("cudnnGetVersion") is None:
        return Check("load", FAIL, f"the load probe's answer is not a version: {str(got)[:50]}"), None
    # what later checks read (the CUDA version it was built for), each field checked here once
    load = LoadAnswer.read(answer)
    data = load.to_dict()
    if load.version is None:
        return Check("load", WARN, f"{target.name} loads but has no cudnnGetVersion (R1)", data), load
    if inst.header_version and inst.header_version != "1.0.0":
        expected = gen.version_number(inst.header_version)
        if load.version != expected:
            return Check("load", FAIL, f"cudnnGetVersion() = {load.version} but the header says "
                         f"{expected}: Theano would stop with 'Mixed dnn version'", data), load
    front = [m for m in load.mapped if gen.library_stem(os.path.basename(m)) == "libcudnn"]
    opened = f" (the file {escape(front[0])})" if len(front) == 1 else ""
    return Check("load", PASS, f"{target.name} loads{opened}; cudnnGetVersion() = {load.version}, "
                 f"cudnnGetCudartVersion() = {load.cudart_version}", data), load
