"""The `compile` layer: a C program built and linked against the cuDNN, then run in a child
with a time limit, as a build against it (Theano's) would be."""
from __future__ import annotations

import os
import re
import secrets
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from cudnn_setup.checks import load_check
from cudnn_setup.checks.load_check import not_a_library
from cudnn_setup.facts import mounts
from cudnn_setup.installation.model import Installation
from cudnn_setup.private_dirs import private_dir
from cudnn_setup.probing.probe import child_env, loads_key
from cudnn_setup.report import FAIL, PASS, SKIP, WARN, Check

if TYPE_CHECKING:
    from cudnn_setup.checks.check_facts import CheckFacts

COMPILE_TIMEOUT = 120.0


def compile_includes(inst: Installation) -> list[Path]:
    """Extra -I for a cuDNN that is not in a CUDA root (a wheel, the distribution's packages):
    its cudnn.h includes the CUDA runtime's headers, which are in the CUDA root."""
    cuda_include = inst.root.include_dir
    if inst.origin is None or cuda_include == inst.include_dir or not cuda_include.is_dir():
        return []
    return [cuda_include]


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


def build_dir(facts: CheckFacts) -> Path | None | str:
    """Where the program is built and run: the command's temporary directory (None), unless
    programs may not run from it (a noexec mount, as hardened machines have /tmp): then a
    directory of the user's cache. A string says why neither will do."""
    tmp = facts.runner.temp_dir()
    if mounts.allows_exec(tmp):
        return None
    why = f"programs may not run from {tmp} (mounted noexec)"
    if facts.cache_dir is not None:
        spare = facts.cache_dir / "tmp"
        try:
            if mounts.allows_exec(private_dir(spare, os.geteuid())):
                return spare
            why += f", nor from {spare}"
        except OSError as exc:
            why += f", and {spare} cannot be used: {exc.strerror or exc}"
    return (f"not built: {why}, so no program built against cuDNN can run here; to check, "
            "set TMPDIR to a directory on a filesystem that allows running programs")


def check_compile(inst: Installation, facts: CheckFacts) -> Check:
    """Build, link and run PROGRAM against `inst` with the compiler the command's environment
    names ($CC, else cc or gcc on its PATH), after the load check: a library that hangs or
    crashes is then known to the runner and not loaded again by the program built against it."""
    facts.machine.load(inst)
    env, runner, includes = facts.env, facts.runner, compile_includes(inst)
    path = env.get("PATH", os.defpath)
    compiler = env.get("CC") or shutil.which("cc", path=path) or shutil.which("gcc", path=path)
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
    parent = build_dir(facts)
    if isinstance(parent, str):
        return Check("compile", SKIP, parent)
    with runner.scratch("cudnn-setup-compile-", parent) as tmp:  # waited for by the end
        src, exe = tmp / "check.c", tmp / "check"
        src.write_text(PROGRAM)
        cmd = [compiler, str(src), "-o", str(exe), f"-I{inst.include_dir}",
               *(f"-I{d}" for d in includes), f"-L{inst.lib_dir}", link,
               f"-Wl,-rpath,{inst.lib_dir}"]
        # gcc's own temporary files (cc*.s, cc*.o) go in the scratch dir too: a compiler
        # killed with the command would leave them in the user's /tmp
        built = runner.run(cmd, COMPILE_TIMEOUT, {**env, "TMPDIR": str(tmp)})
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
        ran = runner.run([str(exe)], load_check.LOAD_TIMEOUT, child_env(inst.lib_dir, env),
                         key=loads_key(loaded), what=f"loading {loaded.name}",
                         reply=(READY, (key + "\n").encode()))
    versions = program_answer(ran.stdout, key)
    if ran.known:
        return Check("compile", FAIL, f"the program built against cuDNN was not run: {ran.known}")
    if not ran.ok or versions is None:
        why = ("header and library versions differ: " + (versions or "?") if ran.returncode == 3
               else "it did not finish in time" if ran.timed_out
               else f"it could not be started: {ran.error}" if ran.returncode is None
               else f"exit status {ran.returncode}: {ran.err.strip()[-200:]}" if ran.returncode
               else "it exited with status 0 without printing its answer (something it loaded "
                    f"ended it before main() could){': ' + ran.err.strip()[-200:] if ran.err.strip() else ''}")
        return Check("compile", FAIL, f"the program built against cuDNN failed: {why}")
    against = ", ".join(str(d) for d in (inst.include_dir, *includes, inst.lib_dir))
    return Check("compile", WARN if note else PASS, f"compiled and linked a program with {link} "
                 f"against {against}; it ran (versions {versions}){note}", {"command": cmd})
