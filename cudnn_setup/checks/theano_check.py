"""The theano layer: build the classic graphs in the user's interpreter and see what Theano chose."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

from cudnn_setup.checks.installation import Installation
from cudnn_setup.child import run_command
from cudnn_setup.checks.probe import child_env, probe_module, run_probe
from cudnn_setup.facts import gpus
from cudnn_setup.report import FAIL, PASS, SKIP, WARN, Check
from cudnn_setup.theanorc import unreadable_for_theano

THEANO_TIMEOUT = 600.0
INSTALL_HINT = "pip install 'cudnn-setup[theano]' (Theano 1.0.5 with numpy<1.24, scipy<1.11)"


def theano_env(base: Mapping[str, str], theanorc: Path | None, lib_dir: Path) -> dict[str, str]:
    env = child_env(lib_dir, base)
    if theanorc is not None:
        env["THEANORC"] = str(theanorc)
    flags = env.get("THEANO_FLAGS", "")
    # Theano 1.0.5 crashes at import reading numpy.distutils' BLAS info unless ldflags is set.
    if "blas.ldflags" not in flags:
        env["THEANO_FLAGS"] = ",".join(f for f in (flags, "blas.ldflags=") if f)
    return env


def has_theano(python: str) -> bool:
    done = run_command([python, "-c", "import importlib.util as u, sys; "
                        "sys.exit(0 if u.find_spec('theano') else 1)"], 60)
    return done.returncode == 0


def why_not_cudnn(data: dict, inst: Installation, gpu: Check | None) -> str:
    """The one reason Theano does not use cuDNN here, most fundamental first."""
    if gpu is not None and gpu.status == SKIP:
        return f"no GPU here ({gpu.detail}); Theano runs on the CPU"
    cc = (gpu.data or {}).get("compute_capability") if gpu else None
    if cc and gpus.cc_tuple(cc) < gpus.cc_tuple(gpus.THEANO_MIN_CC):
        return f"the GPU has compute capability {cc}; Theano's cuDNN path needs {gpus.THEANO_MIN_CC}"
    if inst.major and not 5 <= inst.major <= 7:
        return (f"Theano 1.0.5 supports cuDNN v5 to v7; this is cuDNN {inst.version}"
                + (" (v8 removed cudnnGetConvolutionForwardAlgorithm, which Theano calls)"
                   if inst.major >= 8 else ""))
    if data.get("device", "cpu").startswith("cpu"):
        return "device=cpu: set [global] device=cuda in the theanorc to use the GPU"
    return data.get("dnn_reason") or "Theano did not pick a cuDNN op"


def check_theano(inst: Installation, python: str, theanorc: Path | None,
                 env: Mapping[str, str], gpu: Check | None) -> Check:
    if not has_theano(python):
        return Check("theano", SKIP, f"Theano is not installed for {python}; {INSTALL_HINT}")
    if (why := unreadable_for_theano(theanorc)) is not None:
        return Check("theano", FAIL, f"Theano cannot start with its config: {why}")
    result = run_probe(probe_module("theano_graph"), THEANO_TIMEOUT,
                       theano_env(env, theanorc, inst.lib_dir), python=python)
    if result.data is None:
        what = "timed out" if result.timed_out else f"failed ({result.crashed or result.returncode})"
        return Check("theano", FAIL, f"Theano's test graphs {what}: {result.last_error_line()[:300]}")
    data = result.data
    summary = (f"Theano {data['theano_version']} on {data['device']}: T.exp "
               f"{'ok' if data['exp_ok'] else 'WRONG'}, conv net used {data['conv_op']}")
    if not data["exp_ok"] or data["conv_shape"] != [2, 8, 10, 10]:
        return Check("theano", FAIL, summary + ": wrong results", data)
    if data["uses_cudnn"]:
        return Check("theano", PASS, summary + " (cuDNN)", data)
    reason = why_not_cudnn(data, inst, gpu)
    data["reason"] = reason
    if theanorc is not None and "cudnn" not in data.get("optimizer_including", ""):
        return Check("theano", FAIL, summary + f"; the theanorc {theanorc} was not picked up "
                     "(optimizer_including lacks cudnn)", data)
    return Check("theano", WARN, f"{summary}, not cuDNN: {reason}", data)
