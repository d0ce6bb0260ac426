"""Layers that run native code, each in a child process with a time limit: load, compile, gpu."""
from __future__ import annotations

import os
import re
import secrets
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Mapping, Sequence

from cudnn_setup.installation.model import Installation
from cudnn_setup.probing.load_answer import WHAT, LoadAnswer
from cudnn_setup.probing.probe import ProbeResult, child_env, loads_key, probe_module, run_probe
from cudnn_setup.child import Runner
from cudnn_setup.untrusted import kind
from cudnn_setup.facts import cudnn as gen
from cudnn_setup.facts.ldresolve.environment import Environment
from cudnn_setup.facts.ldresolve.loadable import NotLoadable
from cudnn_setup.facts.ldresolve.process import Process
from cudnn_setup.report import FAIL, PASS, SKIP, WARN, Check
from cudnn_setup.text import escape

LOAD_TIMEOUT = 60.0
COMPILE_TIMEOUT = 120.0
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


def check_load(inst: Installation, env: Mapping[str, str], runner: Runner | None = None,
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
    result = run_probe(probe_module("load") + [str(target)], LOAD_TIMEOUT,
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


# The program says READY once main() runs, and only then is given the run's key on stdin: code
# that ran before main (a constructor in the library it links) cannot have read it, so an exit
# or a line of its own is never taken for the program's answer, "KEY HEADER LIBRARY".
READY = b"cudnn-setup-compile-ready"
PROGRAM = r"""
#include <stdio.h>
#include <string.h>
#include <cudnn.h>
int main(void) {
    char key[80];
    puts("%s");
    fflush(stdout);
    if (!fgets(key, sizeof key, stdin)) return 4;
    key[strcspn(key, "\n")] = 0;
#ifdef CUDNN_VERSION
    printf("%%s %%d %%zu\n", key, (int)CUDNN_VERSION, (size_t)cudnnGetVersion());
    return (size_t)CUDNN_VERSION == cudnnGetVersion() ? 0 : 3;
#else
    printf("%%s 0 %%zu\n", key, (size_t)cudnnGetVersion());
    return 0;
#endif
}
""" % READY.decode()


def program_answer(out: bytes, key: str) -> str | None:
    """The header's and the library's version numbers from the line that starts with `key`."""
    for line in reversed(out.decode("ascii", "replace").splitlines()):
        parts = line.split()
        if len(parts) == 3 and parts[0] == key and parts[1].isdigit() and parts[2].isdigit():
            return f"{parts[1]} {parts[2]}"
    return None


def check_compile(inst: Installation, env: Mapping[str, str], cc: str | None = None,
                  includes: Sequence[Path] = (), runner: Runner | None = None) -> Check:
    """Build, link and run PROGRAM against `inst`; `includes`: more -I directories after
    cuDNN's own (the CUDA root's, for a cuDNN outside it)."""
    runner = runner or Runner()
    path = env.get("PATH", os.defpath)
    compiler = cc or env.get("CC") or shutil.which("cc", path=path) or shutil.which("gcc", path=path)
    if not compiler:
        return Check("compile", SKIP, "no C compiler (cc) on PATH")
    library = inst.library("libcudnn")
    if inst.header_file is None or library is None:
        return Check("compile", SKIP, "no cudnn.h or libcudnn to build against")
    link, note = "-lcudnn", ""
    target = inst.soname_path()
    loaded = target or library
    earlier = runner.known(loads_key(loaded))
    if earlier is not None:  # the linker would open it too (a FIFO blocks it)
        return Check("compile", FAIL, f"not built against {loaded.name}: {earlier}")
    dev_link = inst.lib_dir / "libcudnn.so"
    bad = not_a_library(dev_link) if os.path.lexists(dev_link) else None
    if bad is not None:
        return Check("compile", FAIL, f"{bad}: the linker cannot use it for -lcudnn")
    if inst.origin is not None and target is not None and \
            not os.path.lexists(inst.lib_dir / "libcudnn.so"):
        # A wheel (or a runtime-only package) has no development link; the tool makes one only
        # in a root it installs into.
        link = f"-l:{target.name}"
        note = (f"; {inst.lib_dir} has no libcudnn.so development link, so a build with "
                f"-lcudnn (as Theano's) would not find this cuDNN: linked with {link}")
    with tempfile.TemporaryDirectory(prefix="cudnn-setup-compile-") as tmp:
        src, exe = Path(tmp) / "check.c", Path(tmp) / "check"
        src.write_text(PROGRAM)
        cmd = [compiler, str(src), "-o", str(exe), f"-I{inst.include_dir}",
               *(f"-I{d}" for d in includes), f"-L{inst.lib_dir}", link,
               f"-Wl,-rpath,{inst.lib_dir}"]
        built = runner.run(cmd, COMPILE_TIMEOUT, env)
        if built.timed_out or built.error:
            return Check("compile", FAIL, f"the compiler {built.error or 'did not finish in time'}")
        stderr = built.err
        if built.returncode != 0:
            first = next((ln for ln in stderr.splitlines() if "error" in ln),
                         stderr.strip().splitlines()[0] if stderr.strip() else "")
            hint = ""
            missing = re.search(r"fatal error: ([\w./+-]+\.h): No such file", stderr)
            if missing:
                hint = (f" — {missing.group(1)}, which cudnn.h includes, is not in "
                        f"{inst.include_dir}; the CUDA root's own headers are missing")
            elif re.search(r"unknown type name .cuda\w*_t", stderr):
                hint = (f" — the CUDA headers in {inst.include_dir} lack types cudnn.h needs: "
                        "they are incomplete or from another CUDA")
            elif "cannot find -lcudnn" in stderr:
                hint = f" — no libcudnn.so development link in {inst.lib_dir}"
            return Check("compile", FAIL, f"{' '.join(cmd[:1])} failed: {first.strip()[:300]}{hint}",
                         {"command": cmd, "stderr": stderr[-2000:]})
        key = secrets.token_hex(16)
        ran = runner.run([str(exe)], LOAD_TIMEOUT, child_env(inst.lib_dir, env),
                         key=loads_key(loaded), what=f"loading {loaded.name}",
                         reply=(READY, (key + "\n").encode()))
    versions = program_answer(ran.stdout, key)
    if ran.known:
        return Check("compile", FAIL, f"the program built against cuDNN was not run: {ran.known}")
    if not ran.ok or versions is None:
        why = ("header and library versions differ: " + (versions or "?") if ran.returncode == 3
               else "it did not finish in time" if ran.timed_out
               else f"exit status {ran.returncode}: {ran.err.strip()[-200:]}" if ran.returncode
               else "it exited with status 0 without printing its answer (something it loaded "
                    f"ended it before main() could){': ' + ran.err.strip()[-200:] if ran.err.strip() else ''}")
        return Check("compile", FAIL, f"the program built against cuDNN failed: {why}")
    against = ", ".join(str(d) for d in (inst.include_dir, *includes, inst.lib_dir))
    return Check("compile", WARN if note else PASS, f"compiled and linked a program with {link} "
                 f"against {against}; it ran (versions {versions}){note}", {"command": cmd})


def find_cudart(inst: Installation) -> str | None:
    for directory in (inst.lib_dir, inst.root.lib_dir()):
        found = sorted(directory.glob("libcudart.so*")) if directory.is_dir() else []
        if found:
            return str(found[0])
    return None
