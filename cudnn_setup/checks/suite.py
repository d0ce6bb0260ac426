"""Every verification layer in order, each that still makes sense after a failure."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

from cudnn_setup.checks.files import check_elf, check_files, check_versions
from cudnn_setup.checks.installation import find_installation
from cudnn_setup.checks.native import check_compile, check_gpu, check_load
from cudnn_setup.checks.system import check_cuda, check_loader
from cudnn_setup.checks.theano_check import check_theano
from cudnn_setup.facts.cuda import CudaRoot
from cudnn_setup.facts.host import host_machine
from cudnn_setup.report import SKIP, Check


def run_checks(root: CudaRoot, *, python: str, env: Mapping[str, str],
               theanorc: Path | None = None, theano: bool = True,
               conf: Path = Path("/etc/ld.so.conf"), deep: bool = False) -> list[Check]:
    env = dict(env)
    inst = find_installation(root)
    checks = [check_files(inst, deep), check_elf(inst, host_machine()), check_versions(inst)]
    load, load_data = check_load(inst, env)
    checks += [load, check_loader(inst, env, conf), check_cuda(inst, load_data)]
    checks.append(check_compile(inst, env))
    gpu = check_gpu(inst, env) if load_data is not None else Check(
        "gpu", SKIP, "libcudnn does not load (see load)")
    checks.append(gpu)
    if theano:
        checks.append(check_theano(inst, python, theanorc, env, gpu))
    else:
        checks.append(Check("theano", SKIP, "--no-theano"))
    return checks
