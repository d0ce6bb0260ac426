"""Theano's `[blas] ldflags`: whether an interpreter's numpy lets Theano 1.0.5 do without it, and
which BLAS this machine really links.

Theano 1.0.5 computes the default of `blas.ldflags` at import from
`numpy.distutils.__config__.blas_opt_info`; numpy builds that lack it (the ILP64 wheels from
1.22 on) make `import theano` stop with an AttributeError unless a config sets `ldflags`.
"""
from __future__ import annotations

import json
import os
import shutil
from typing import Mapping

from msgspec import Struct

from cudnn_setup.child import Runner, Unanswered, run_command
from cudnn_setup.probing.answer_values import Fields
from cudnn_setup.text import escape, printable

NUMPY_TIMEOUT = 60.0  # importing numpy.distutils: a second or two, more on a cold disk
LINK_TIMEOUT = 30.0
CANDIDATES = ("openblas", "blas")  # in order of preference: OpenBLAS is the fast one
# numpy.distutils' own __config__.py, run alone: importing numpy.distutils imports setuptools
# (a second here), while the file is a table of assignments that imports only os and sys. It
# is the module whose blas_opt_info Theano 1.0.5 reads.
_NUMPY_PROBE = """\
import importlib.metadata as m, importlib.util as u, json, os
found = u.find_spec("numpy")
path = found and found.origin and os.path.join(os.path.dirname(found.origin), "distutils",
                                               "__config__.py")
if not path or not os.path.isfile(path):
    print(json.dumps({"numpy": None}))  # no numpy, or one without numpy.distutils
else:
    spec = u.spec_from_file_location("numpy_distutils_config", path)
    config = u.module_from_spec(spec)
    spec.loader.exec_module(config)
    print(json.dumps({"numpy": m.version("numpy"),
                      "blas_opt_info": hasattr(config, "blas_opt_info")}))
"""
# What the linker says when the library is there but is no BLAS (or cannot be linked): any
# other failure of the compiler driver (it could not start cc1, as or ld) is no answer.
LINK_MISSES = ("undefined reference", "cannot find -l", "file format not recognized",
               "skipping incompatible")
# dgemm_ is the Fortran symbol Theano's C gemm calls; linking it proves the library is a BLAS.
_LINK_PROGRAM = b"extern void dgemm_(void);\nint main(void) { dgemm_(); return 0; }\n"


class NumpyBlas(Struct, frozen=True):
    numpy: str
    has_blas_opt_info: bool


class BlasFlags(Struct, frozen=True):
    """The value to write for `[blas] ldflags` and why, for a comment beside it."""

    ldflags: str
    why: str
    unanswered: bool = False  # the linker could not be asked: `why` says so


def numpy_blas(python: str, env: Mapping[str, str], runner: Runner | None = None
               ) -> NumpyBlas | None:
    """What `python`'s numpy says of its BLAS build info; None when numpy.distutils cannot be
    imported there (no numpy, or one without distutils: Theano 1.0.5 does not run there).
    Unanswered when `python` does not say (it could not be started, hung, or failed)."""
    done = run_command([python, "-c", _NUMPY_PROBE], NUMPY_TIMEOUT, env, runner=runner)
    if not done.ok:
        raise Unanswered(done.unanswered())
    try:
        said = json.loads(done.out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise Unanswered(f"it printed no answer ({escape(done.out.strip()[-200:])})") from None
    if isinstance(said, dict) and "numpy" in said and said["numpy"] is None:
        return None
    found = Fields(said, "numpy's answer")
    numpy, blas_opt_info = found.text("numpy", 50), found.flag("blas_opt_info")
    if numpy is None or blas_opt_info is None:
        raise Unanswered(f"its answer cannot be used ({escape(done.out.strip()[-200:])})")
    return NumpyBlas(numpy, blas_opt_info)


def find_blas(env: Mapping[str, str], runner: Runner | None = None) -> BlasFlags:
    """The BLAS `-l` flag this machine links, found as the linker finds it: `cc
    -print-file-name=libNAME.so` searches the compiler's own directories and $LIBRARY_PATH (the
    ldconfig cache lists run-time names such as libopenblas.so.0, which `-l` cannot use), then
    proven by linking a program that calls dgemm_. A library found only through $LIBRARY_PATH
    gets `-L` with its directory: Theano also makes that the rpath of the modules it builds, so
    they load without the variable. Empty, with the reason, when there is none."""
    cc = shutil.which("cc", path=env.get("PATH")) or shutil.which("gcc", path=env.get("PATH"))
    names = ", ".join(f"lib{n}.so" for n in CANDIDATES)
    if cc is None:
        return BlasFlags("", f"empty: no C compiler (cc) on PATH to find {names} with, and "
                             "Theano without one runs its Python code, which needs no BLAS")
    try:
        return _find_blas(cc, env, runner)
    except Unanswered as why:  # empty keeps Theano importable; the reason says it is a guess
        return BlasFlags("", f"empty, for now: the linker could not be asked ({cc} {why}), so "
                             "Theano uses its own slower gemm; run `cudnn-setup theanorc` again "
                             "to look for a BLAS", unanswered=True)


def _find_blas(cc: str, env: Mapping[str, str], runner: Runner | None) -> BlasFlags:
    tried = []
    for name in CANDIDATES:
        path = _linker_finds(cc, name, env, runner)
        if path is None:
            tried.append(f"lib{name}.so not found")
            continue
        # the program on stdin, the executable to /dev/null: the link alone is the proof; the
        # compiler's own temporary files go in a scratch dir, which a kill cannot leave behind
        runs = runner or Runner()
        with runs.scratch("cudnn-setup-compile-") as tmp:
            linked = runs.run([cc, "-x", "c", "-", "-o", os.devnull, f"-l{name}"], LINK_TIMEOUT,
                             {**env, "TMPDIR": str(tmp)}, cwd=tmp, stdin=_LINK_PROGRAM)
        if not linked.answered:
            raise Unanswered(linked.unanswered())
        if not linked.ok:
            if not any(miss in linked.err for miss in LINK_MISSES):  # the driver ran; its
                raise Unanswered(linked.unanswered())  # linker or assembler may not have
            tried.append(f"{path} does not link dgemm_")
            continue
        own = {k: v for k, v in env.items() if k != "LIBRARY_PATH"}
        if not env.get("LIBRARY_PATH") or _linker_finds(cc, name, own, runner) == path:
            return BlasFlags(f"-l{name}", f"{os.path.realpath(path)} links (dgemm_)")
        where = os.path.dirname(path)
        if where.split() != [where] or printable(where) != where:  # Theano splits ldflags on
            # white space, and its config file carries text, not any byte a name may hold
            tried.append(f"{path} is in a directory whose name ldflags cannot carry")
            continue
        return BlasFlags(f"-L{where} -l{name}", f"{os.path.realpath(path)} links (dgemm_); "
                                                 "found through LIBRARY_PATH, so its directory "
                                                 "is named")
    return BlasFlags("", f"empty: the linker finds no BLAS ({'; '.join(tried)}), so Theano uses "
                         "its own slower gemm; install OpenBLAS (libopenblas-dev) and set "
                         "-lopenblas here for speed")


def _linker_finds(cc: str, name: str, env: Mapping[str, str],
                  runner: Runner | None) -> str | None:
    done = run_command([cc, f"-print-file-name=lib{name}.so"], LINK_TIMEOUT, env, runner=runner)
    if not done.answered:
        raise Unanswered(done.unanswered())
    path = done.out.strip() if done.ok else ""
    return path if os.path.isabs(path) and os.path.exists(path) else None
