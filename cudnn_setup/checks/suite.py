"""Every verification layer in order, each that still makes sense after a failure.

Each layer is a module of checks/ with its `check_x(inst, facts) -> Check` (facts: a
CheckFacts, checks/check_facts.py); CHECKS names them in ORDER. The checks whose children can
run at the same time do (cudnn_setup/parallel.py); the report keeps ORDER.
"""
from __future__ import annotations

from typing import Callable

from cudnn_setup.checks.check_facts import CheckFacts
from cudnn_setup.checks.clients_check import check_clients
from cudnn_setup.checks.coherence import check_coherence
from cudnn_setup.checks.compile_check import check_compile
from cudnn_setup.checks.cuda_check import check_cuda
from cudnn_setup.checks.deps import check_deps
from cudnn_setup.checks.driver_check import check_driver
from cudnn_setup.checks.elf_check import check_elf
from cudnn_setup.checks.files_check import check_files
from cudnn_setup.checks.frameworks_check import check_frameworks
from cudnn_setup.checks.gpu import check_gpu
from cudnn_setup.checks.load_check import check_load
from cudnn_setup.checks.loader_check import check_loader
from cudnn_setup.checks.theano_check import check_theano
from cudnn_setup.checks.versions_check import check_versions
from cudnn_setup.installation.locate import skipped_without_cudnn
from cudnn_setup.installation.model import Installation
from cudnn_setup.parallel import Later
from cudnn_setup.report import Check

CHECKS: dict[str, Callable[[Installation, CheckFacts], Check]] = {
    "files": check_files, "elf": check_elf, "versions": check_versions, "load": check_load,
    "coherence": check_coherence, "deps": check_deps, "loader": check_loader,
    "cuda": check_cuda, "driver": check_driver, "compile": check_compile, "gpu": check_gpu,
    "frameworks": check_frameworks, "clients": check_clients, "theano": check_theano}
ORDER = tuple(CHECKS)

# What each check does, for the line a person sees when it starts.
DOING = {"files": "comparing the files with the record", "elf": "reading the libraries' ELF",
         "versions": "comparing header and library versions",
         "load": "loading libcudnn in a child process",
         "coherence": "loading each sub-library in a child process",
         "deps": "resolving every library cuDNN needs", "loader": "asking the loader",
         "cuda": "comparing CUDA versions", "driver": "asking the driver",
         "compile": "compiling and running a program against cuDNN",
         "gpu": "running a convolution on the GPU",
         "frameworks": "what the deep-learning frameworks load (each imported in a child)",
         "clients": "judging which clients this cuDNN serves",
         "theano": "running Theano's graphs (the first run compiles them)"}


class Steps:
    """"check 4 of 13: load — loading libcudnn in a child process", as each check starts."""

    def __init__(self, status: Callable[[str], None] | None, names: tuple[str, ...] = ORDER):
        self.status, self.names = status, names

    def __call__(self, name: str) -> None:
        if self.status is not None and name in self.names:
            k = self.names.index(name) + 1
            self.status(f"check {k} of {len(self.names)}: {name} — {DOING[name]}")


# The checks that wait on children: started together at the start of a run, each waiting
# inside for what it needs (coherence, deps, compile and gpu for load, so that a library that
# hangs is loaded once); the others run meanwhile in this thread, in ORDER.
BACKGROUND = ("load", "coherence", "deps", "compile", "gpu", "frameworks", "theano")


def run_checks(inst: Installation, facts: CheckFacts,
               status: Callable[[str], None] | None = None) -> list[Check]:
    """verify's checks of `inst`, in ORDER; `status` hears one line as each check's result
    is waited for. Every verdict is the one the same check gives on its own."""
    machine = facts.machine
    # The frameworks' children take the longest (each imports its framework): they start
    # first; the loader's facts (children of their own) are needed only to read their answers.
    if facts.frameworks:
        machine.prefetch(python=facts.python)
    machine.prefetch("loader", "driver")
    objects = machine.loader().objects
    if objects is not None:  # one memo of the libraries' ELF facts for every check
        inst.objects = objects
    skipped = skipped_without_cudnn(inst) or {}
    # only what runs is announced: a check the options or a missing cuDNN skip says so in
    # the report, never "running a convolution…" in the log
    off = {"theano": not facts.theano, "frameworks": not facts.frameworks}
    step = Steps(status, tuple(n for n in ORDER if n not in skipped and not off.get(n)))
    facts.started = {name: Later(CHECKS[name], inst, facts) for name in BACKGROUND
                     if name not in skipped}
    if skipped:
        facts.started["gpu"] = Later(lambda: skipped["gpu"])
    out = []
    for name in ORDER:
        step(name)
        if name in skipped:
            out.append(skipped[name])
        elif name in facts.started:
            out.append(facts.started[name].result())
        else:
            out.append(CHECKS[name](inst, facts))
    return out
