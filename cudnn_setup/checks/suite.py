"""Every verification layer in order, each that still makes sense after a failure.

Each check is a function of the installation and the facts (`check(inst, facts) -> Check`).
The machine's facts that several layers need are asked of the command's facts object, which
makes each once per command: the driver and its GPUs (a child process), the loader's cache and
search order (ldconfig -p, ld.so), libcudnn's load, and the frameworks of the interpreter under
test (a child per framework). Checks whose children can run at the same time do
(cudnn_setup/parallel.py); the report keeps ORDER.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Protocol

from cudnn_setup.checks.coherence import check_coherence
from cudnn_setup.checks.deps import check_deps
from cudnn_setup.checks.driver_check import check_driver
from cudnn_setup.probing.driver import DriverFacts, driver_present
from cudnn_setup.checks.clients_check import check_clients
from cudnn_setup.checks.file_checks import check_elf, check_files, check_versions
from cudnn_setup.checks.frameworks_check import FrameworkEntry
from cudnn_setup.installation.model import Installation
from cudnn_setup.installation.locate import skipped_without_cudnn
from cudnn_setup.checks.gpu import check_gpu
from cudnn_setup.checks.native import check_compile
from cudnn_setup.checks.system import check_cuda, check_loader
from cudnn_setup.checks.theano_check import check_theano, has_theano
from cudnn_setup.child import Runner
from cudnn_setup.facts.ldresolve.environment import Environment
from cudnn_setup.facts.host import host_machine
from cudnn_setup.parallel import Later
from cudnn_setup.probing.load_answer import LoadAnswer
from cudnn_setup.report import SKIP, Check

ORDER = ("files", "elf", "versions", "load", "coherence", "deps", "loader", "cuda", "driver",
         "compile", "gpu", "frameworks", "clients", "theano")


@dataclass(frozen=True)
class Frameworks:
    """The frameworks check and the report it came from (checks/frameworks_check.py)."""

    check: Check
    entries: list[FrameworkEntry]


@dataclass(frozen=True)
class Loaded:
    """The load check of one installation and the child's answer (None: it did not load)."""

    check: Check
    answer: LoadAnswer | None


class MachineFacts(Protocol):
    """What the checks ask of the machine, each answer made at most once per command
    (steps/command_facts.Facts)."""

    env: Mapping[str, str]
    runner: Runner

    def prefetch(self, *names: str, python: str | None = None) -> None: ...

    def driver(self) -> DriverFacts: ...

    def loader(self) -> Environment: ...

    def load(self, inst: Installation) -> Loaded: ...

    def frameworks(self, python: str) -> Frameworks: ...


def _no_fix() -> str | None:
    return None


@dataclass
class CheckFacts:
    """What each check is handed beside the installation: the command's facts of the machine,
    what verify was asked (`python`: the interpreter whose Theano and frameworks are checked;
    `loader_fix` waits for what the loader check advises instead of a bare LD_LIBRARY_PATH
    line; `cache_dir`: the user's cache, where the gpu check keeps the plan of the
    runtime-compiled engine), and the checks of this run already started."""

    machine: MachineFacts
    python: str
    theanorc: Path | None = None
    theano: bool = True
    frameworks: bool = True
    conf: Path = Path("/etc/ld.so.conf")
    deep: bool = False
    cache_dir: Path | None = None
    loader_fix: Callable[[], str | None] = _no_fix
    started: dict[str, Later[Check]] = field(default_factory=dict)

    @property
    def env(self) -> Mapping[str, str]:
        return self.machine.env

    @property
    def runner(self) -> Runner:
        return self.machine.runner

    def result_of(self, name: str) -> Check:
        """The check `name` of this run, waited for (it was started with the others)."""
        return self.started[name].result()


def compile_includes(inst: Installation) -> list[Path]:
    """Extra -I for a cuDNN that is not in a CUDA root (a wheel, the distribution's packages):
    its cudnn.h includes the CUDA runtime's headers, which are in the CUDA root."""
    cuda_include = inst.root.include_dir
    if inst.origin is None or cuda_include == inst.include_dir or not cuda_include.is_dir():
        return []
    return [cuda_include]


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
         "theano": "running Theano's graphs (the first run compiles them)"}


class Steps:
    """"check 4 of 13: load — loading libcudnn in a child process", as each check starts."""

    def __init__(self, status: Callable[[str], None] | None, names: tuple[str, ...] = ORDER):
        self.status, self.names = status, names

    def __call__(self, name: str) -> None:
        if self.status is not None and name in self.names:
            k = self.names.index(name) + 1
            self.status(f"check {k} of {len(self.names)}: {name} — {DOING.get(name, name)}")


# Each check of ORDER as a function of the installation and the facts.

def files(inst: Installation, facts: CheckFacts) -> Check:
    return check_files(inst, facts.deep)


def elf(inst: Installation, facts: CheckFacts) -> Check:
    return check_elf(inst, host_machine())


def versions(inst: Installation, facts: CheckFacts) -> Check:
    return check_versions(inst)


def load(inst: Installation, facts: CheckFacts) -> Check:
    return facts.machine.load(inst).check


def coherence(inst: Installation, facts: CheckFacts) -> Check:
    answer = facts.machine.load(inst).answer
    return check_coherence(inst, facts.env, loader=facts.machine.loader(), load_data=answer,
                           runner=facts.runner,
                           driver_present=driver_present(facts.machine.driver()))


def deps(inst: Installation, facts: CheckFacts) -> Check:
    # the package manager it may ask for fixes is a child: it runs beside coherence's
    answer = facts.machine.load(inst).answer
    return check_deps(inst, facts.env, load_data=answer, loader=facts.machine.loader(),
                      driver_present=driver_present(facts.machine.driver()),
                      runner=facts.runner)


def loader(inst: Installation, facts: CheckFacts) -> Check:
    cache = [(e.name, e.path) for e in facts.machine.loader().cache
             if e.name.startswith("libcudnn")]
    return check_loader(inst, facts.env, facts.conf, fix=facts.loader_fix(), cache=cache)


def cuda(inst: Installation, facts: CheckFacts) -> Check:
    return check_cuda(inst, facts.machine.load(inst).answer)


def driver(inst: Installation, facts: CheckFacts) -> Check:
    answer = None if skipped_without_cudnn(inst) else facts.machine.load(inst).answer
    return check_driver(inst, facts.machine.driver(), load_data=answer)


def compiled(inst: Installation, facts: CheckFacts) -> Check:
    # after load: a library that hangs or crashes is then known to the runner and not loaded
    # again by the program built against it
    facts.machine.load(inst)
    return check_compile(inst, facts.env, includes=compile_includes(inst), runner=facts.runner)


def gpu(inst: Installation, facts: CheckFacts) -> Check:
    if facts.machine.load(inst).answer is None:
        return Check("gpu", SKIP, "libcudnn does not load (see load)")
    return check_gpu(inst, facts.env, facts.runner, loader=facts.machine.loader(),
                     cache_dir=facts.cache_dir)


def frameworks(inst: Installation, facts: CheckFacts) -> Check:
    if not facts.frameworks:
        return Check("frameworks", SKIP, "--no-frameworks")
    return facts.machine.frameworks(facts.python).check


def clients(inst: Installation, facts: CheckFacts) -> Check:
    entries = facts.machine.frameworks(facts.python).entries if facts.frameworks else []
    return check_clients(inst, entries, (lambda: has_theano(facts.python, facts.env,
                                                            facts.runner))
                         if facts.theano else None)


def theano(inst: Installation, facts: CheckFacts) -> Check:
    if not facts.theano:
        return Check("theano", SKIP, "--no-theano")
    # the gpu check only words why cuDNN was not used: waited for after the graphs ran
    return check_theano(inst, facts.python, facts.theanorc, facts.env,
                        lambda: facts.result_of("gpu"), facts.runner)


CHECKS: dict[str, Callable[[Installation, CheckFacts], Check]] = {
    "files": files, "elf": elf, "versions": versions, "load": load, "coherence": coherence,
    "deps": deps, "loader": loader, "cuda": cuda, "driver": driver, "compile": compiled,
    "gpu": gpu, "frameworks": frameworks, "clients": clients, "theano": theano}
# The checks that wait on children: started together at the start of a run, each waiting
# inside for what it needs (coherence, deps, compile and gpu for load, so that a library that
# hangs is loaded once); the others run meanwhile in this thread, in ORDER.
BACKGROUND = ("load", "coherence", "deps", "compile", "gpu", "frameworks", "theano")


def run_checks(inst: Installation, facts: CheckFacts,
               status: Callable[[str], None] | None = None) -> list[Check]:
    """verify's checks of `inst`, in ORDER; `status` hears one line as each check's result
    is waited for. Every verdict is the one the same check gives on its own."""
    step = Steps(status, ORDER if facts.theano else ORDER[:-1])
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
