"""Every verification layer in order, each that still makes sense after a failure.

The machine's facts that several layers need are looked at once per run: the driver and its
GPUs (a child process), the loader's cache and search order (ldconfig -p, ld.so), and the
frameworks of the interpreter under test (a child per framework). Checks whose children can run
at the same time do (cudnn_setup/parallel.py); the report keeps ORDER.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Mapping

from cudnn_setup.checks.coherence import check_coherence
from cudnn_setup.checks.deps import check_deps, loader_environment
from cudnn_setup.checks.driver_check import check_driver
from cudnn_setup.probing.driver import DriverFacts, driver_facts, driver_present
from cudnn_setup.checks.clients_check import check_clients
from cudnn_setup.checks.file_checks import check_elf, check_files, check_versions
from cudnn_setup.checks.frameworks_check import FrameworkEntry, check_frameworks
from cudnn_setup.installation.model import Installation
from cudnn_setup.installation.locate import skipped_without_cudnn
from cudnn_setup.checks.gpu import check_gpu
from cudnn_setup.checks.native import check_compile, check_load
from cudnn_setup.checks.system import check_cuda, check_loader
from cudnn_setup.checks.theano_check import check_theano, has_theano
from cudnn_setup.child import Runner
from cudnn_setup.facts.ldresolve.environment import Environment
from cudnn_setup.facts.host import host_machine
from cudnn_setup.parallel import Done, Later
from cudnn_setup.report import SKIP, Check

ORDER = ("files", "elf", "versions", "load", "coherence", "deps", "loader", "cuda", "driver",
         "compile", "gpu", "frameworks", "clients", "theano")


@dataclass
class Frameworks:
    """The frameworks check and the report it came from (checks/frameworks_check.py)."""

    check: Check
    entries: list[FrameworkEntry]


def frameworks_of(python: str, env: Mapping[str, str], enabled: bool = True,
                  loader: Environment | Callable[[], Environment] | None = None,
                  runner: Runner | None = None) -> Frameworks:
    """The frameworks of `python` (the interpreter under test), or a skip for --no-frameworks.
    `loader`: the loader's facts, or a function that gives them once the frameworks' children
    have answered (they take seconds; the loader's facts are not needed to start them)."""
    if not enabled:
        return Frameworks(Check("frameworks", SKIP, "--no-frameworks"), [])
    check, entries = check_frameworks(python, env,
                                      search=loader or (lambda: loader_environment(env)),
                                      runner=runner)
    return Frameworks(check, entries)


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


def run_checks(inst: Installation, *, python: str, env: Mapping[str, str],
               theanorc: Path | None = None, theano: bool = True,
               conf: Path = Path("/etc/ld.so.conf"), deep: bool = False,
               driver: DriverFacts | None = None,
               frameworks: Frameworks | Callable[[], Frameworks | None] | None = None,
               with_frameworks: bool = True,
               loader_fix: str | Callable[[], str | None] | None = None,
               loader: Environment | None = None,
               status: Callable[[str], None] | None = None,
               runner: Runner | None = None, cache_dir: Path | None = None) -> list[Check]:
    """verify's checks of `inst`, in ORDER. `python`: the interpreter whose Theano and frameworks
    are checked; `driver`: driver_facts(env) when the caller has them; `frameworks`: the
    frameworks check when the caller made it, or a function that waits for the one the caller
    is making (None from it, or no `frameworks`: it is made here unless `with_frameworks` is
    False); `loader_fix`: what the loader check advises instead of a bare LD_LIBRARY_PATH line,
    or a function that waits for it;
    `loader`: deps.loader_environment(env) when the caller has it; `status` hears one line as
    each check's result is waited for, in ORDER; `runner`: the command's (child.Runner), which
    every child goes through; `cache_dir`: the user's cache (the gpu check keeps the plan of
    the runtime-compiled engine there).

    The checks that run children start at once, each as soon as what it needs is known (the
    driver probe, load, frameworks and Theano at the start; coherence, deps, compile and gpu
    once load has answered, so that a library that hangs is loaded once), and the checks made in this
    process run meanwhile; every verdict is the one the same check gives on its own, and the
    list keeps ORDER."""
    env = dict(env)
    runner = runner or Runner()
    step = Steps(status, ORDER if theano else ORDER[:-1])
    step("files")
    # The frameworks' children take the longest (each imports its framework): they start
    # first, before the loader's facts (three children of their own) are asked; those are
    # needed only to read the frameworks' answers.
    # One memo of the libraries' ELF facts serves every check (files, coherence, deps, load).
    if loader is None:
        loader_later: Later[Environment] | Done[Environment] = Later(
            loader_environment, env, objects=inst.objects)
    else:
        if loader.objects is None:
            loader = replace(loader, objects=inst.objects)
        else:
            inst.objects = loader.objects
        loader_later = Done(loader)
    if frameworks is None or callable(frameworks):
        pending = frameworks or (lambda: None)
        frameworks_later: Later[Frameworks] | Done[Frameworks] = Later(
            lambda: pending() or frameworks_of(python, env, with_frameworks,
                                               loader_later.result, runner))
    else:
        frameworks_later = Done(frameworks)
    loader = loader_later.result()
    skipped = skipped_without_cudnn(inst)
    driver_later = Done(driver) if driver is not None else Later(driver_facts, env,
                                                                 loader=loader, runner=runner)
    if skipped is not None:
        load_later = coherence_later = deps_later = compile_later = gpu_later = None
    else:
        load_later = Later(check_load, inst, env, runner, loader)

        def coherence():
            _, data = load_later.result()
            return check_coherence(inst, env, loader=loader, load_data=data, runner=runner,
                                   driver_present=driver_present(driver_later.result()))

        def gpu():
            _, data = load_later.result()
            return check_gpu(inst, env, runner, loader=loader, cache_dir=cache_dir) \
                if data is not None else Check(
                "gpu", SKIP, "libcudnn does not load (see load)")

        def compiled():
            # after load: a library that hangs or crashes is then known to the runner and not
            # loaded again by the program built against it
            load_later.result()
            return check_compile(inst, env, includes=compile_includes(inst), runner=runner)

        def deps():
            # the package manager it may ask for fixes is a child: it runs beside coherence's
            _, data = load_later.result()
            return check_deps(inst, env, load_data=data, loader=loader,
                              driver_present=driver_present(driver_later.result()),
                              runner=runner)

        coherence_later, deps_later = Later(coherence), Later(deps)
        gpu_later, compile_later = Later(gpu), Later(compiled)
    gpu_check = gpu_later.result if gpu_later is not None else (
        lambda: skipped["gpu"])  # type: ignore[index]  # no gpu_later: skipped is set
    # Theano runs its graphs at once: the gpu check only words why cuDNN was not used, so
    # check_theano waits for it after the graphs ran.
    theano_later = Later(check_theano, inst, python, theanorc, env, gpu_check, runner) if theano \
        else Done(Check("theano", SKIP, "--no-theano"))
    checks = [check_files(inst, deep)]
    load_data = None
    if skipped is not None:
        checks += [skipped[name] for name in ("elf", "versions", "load", "coherence", "deps",
                                              "loader", "cuda")]
    else:
        assert load_later and coherence_later and deps_later  # started above: cuDNN is here
        step("elf")
        checks.append(check_elf(inst, host_machine()))
        step("versions")
        checks.append(check_versions(inst))
        step("load")
        load, load_data = load_later.result()
        checks.append(load)
        step("coherence")
        checks.append(coherence_later.result())
        step("deps")
        checks.append(deps_later.result())
        step("loader")
        checks.append(check_loader(inst, env, conf,
                                   fix=loader_fix() if callable(loader_fix) else loader_fix))
        step("cuda")
        checks.append(check_cuda(inst, load_data))
    step("driver")
    checks.append(check_driver(inst, driver_later.result(), load_data=load_data))
    if skipped is not None:
        checks += [skipped["compile"], skipped["gpu"]]
    else:
        assert compile_later and gpu_later  # started above: cuDNN is here
        step("compile")
        compile_check = compile_later.result()
        step("gpu")
        checks += [compile_check, gpu_later.result()]
    step("frameworks")
    found = frameworks_later.result()
    checks.append(found.check)
    step("clients")
    checks.append(check_clients(inst, found.entries, theano and (
        lambda: has_theano(python, env, runner))))
    if theano:
        step("theano")
    checks.append(theano_later.result())
    return checks
