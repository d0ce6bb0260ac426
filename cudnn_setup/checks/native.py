"""Layers that run native code, each in a child process with a time limit: load, compile, gpu."""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Mapping, Sequence

from cudnn_setup.checks.installation import Installation
from cudnn_setup.child import run_command
from cudnn_setup.checks.probe import ProbeResult, child_env, probe_module, run_probe
from cudnn_setup.facts import cudnn as gen
from cudnn_setup.report import FAIL, PASS, SKIP, WARN, Check

LOAD_TIMEOUT = 60.0
COMPILE_TIMEOUT = 120.0
# cuDNN 8 says "Could not load library libcudnn_ops_infer.so.8. Error: …": the name ends
# before the sentence's full stop.
_MISSING_LIB = re.compile(r"(?:Could not load library|cannot open shared object file)\D*?"
                          r"(?P<lib>lib[\w+-]+(?:\.[\w+-]+)*?\.so(?:\.\d+)*)(?![\w.]*\w)")


def _crash_detail(result: ProbeResult, inst: Installation) -> str:
    err = result.stderr
    m = _MISSING_LIB.search(err)
    missing = m["lib"] if m else None
    if missing is None:
        absent = list(inst.composition().missing) if inst.generation else []
        missing = absent[0] if absent else None
    detail = f"loading libcudnn {result.failure()}"
    if missing:
        detail += f"; {missing} is missing or cannot be loaded"
    return detail


def check_load(inst: Installation, env: Mapping[str, str]) -> tuple[Check, dict | None]:
    target = inst.soname_path()
    if target is None:
        return Check("load", SKIP, "no libcudnn to load"), None
    result = run_probe(probe_module("load") + [str(target)], LOAD_TIMEOUT,
                       child_env(inst.lib_dir, env))
    if result.timed_out:
        return Check("load", FAIL, f"loading {target.name} did not finish in {LOAD_TIMEOUT:.0f} s"), None
    if result.data is None:
        return Check("load", FAIL, _crash_detail(result, inst)), None
    data = result.data
    got = data.get("cudnnGetVersion")
    if got is None:
        return Check("load", WARN, f"{target.name} loads but has no cudnnGetVersion (R1)", data), data
    if inst.header_version and inst.header_version != "1.0.0":
        expected = gen.version_number(inst.header_version)
        if got != expected:
            return Check("load", FAIL, f"cudnnGetVersion() = {got} but the header says "
                         f"{expected}: Theano would stop with 'Mixed dnn version'", data), data
    return Check("load", PASS, f"{target.name} loads; cudnnGetVersion() = {got}, "
                 f"cudnnGetCudartVersion() = {data.get('cudnnGetCudartVersion')}", data), data


PROGRAM = r"""
#include <stdio.h>
#include <cudnn.h>
int main(void) {
#ifdef CUDNN_VERSION
    printf("%d %zu\n", (int)CUDNN_VERSION, (size_t)cudnnGetVersion());
    return (size_t)CUDNN_VERSION == cudnnGetVersion() ? 0 : 3;
#else
    printf("0 %zu\n", (size_t)cudnnGetVersion());
    return 0;
#endif
}
"""


def check_compile(inst: Installation, env: Mapping[str, str], cc: str | None = None,
                  includes: Sequence[Path] = ()) -> Check:
    """Build, link and run PROGRAM against `inst`; `includes`: more -I directories after
    cuDNN's own (the CUDA root's, for a cuDNN outside it)."""
    path = env.get("PATH", os.defpath)
    compiler = cc or env.get("CC") or shutil.which("cc", path=path) or shutil.which("gcc", path=path)
    if not compiler:
        return Check("compile", SKIP, "no C compiler (cc) on PATH")
    if inst.header_file is None or inst.library("libcudnn") is None:
        return Check("compile", SKIP, "no cudnn.h or libcudnn to build against")
    link, note = "-lcudnn", ""
    target = inst.soname_path()
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
        built = run_command(cmd, COMPILE_TIMEOUT, env)
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
        ran = run_command([str(exe)], LOAD_TIMEOUT, child_env(inst.lib_dir, env))
    versions = ran.out.strip()[:100]
    if not ran.ok:
        why = ("header and library versions differ: " + versions if ran.returncode == 3
               else "it did not finish in time" if ran.timed_out
               else f"exit status {ran.returncode}: {ran.err.strip()[-200:]}")
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
