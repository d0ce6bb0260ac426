"""The facts one command looks at (steps/command_facts.py): each started at most once, however
many steps and threads ask, and asked again only after the loader step changed what programs
load. What is counted is real: the `ldconfig -p` child that reads the loader's cache, and the
driver probe's facts, asked by a real install and verify in this process (conftest.run_cli).
"""
import ast
import os
import threading
import time
from pathlib import Path

from conftest import REPO, run_json

from cudnn_setup.child import Runner
import sys

from cudnn_setup.facts.ldresolve import ldconfig
from cudnn_setup.facts.ldresolve.environment import Environment
from cudnn_setup.facts.ldresolve.read_once import Objects

SAMPLE = REPO / "fixtures" / "samples" / "cudnn-10.0-linux-x64-v7.4.2.24.tgz"


def test_install_and_its_verify_read_the_loaders_cache_once(cuda_root, home, monkeypatch):
    """install (the frameworks' look ahead, the driver) and the verify after it (deps, gpu,
    coherence, the frameworks' report) all need the loader's cache: one `ldconfig -p`."""
    reads = []
    real = ldconfig.read_cache

    def counted(*args, **kwargs):
        reads.append(1)
        return real(*args, **kwargs)

    # every module that took the name, and those that take it later from ldconfig
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("cudnn_setup") \
                and getattr(module, "read_cache", None) is real:
            monkeypatch.setattr(module, "read_cache", counted)
    root = cuda_root("10.0")
    done, out = run_json(["install", SAMPLE, "--cuda-root", root, "--no-theanorc"], home)
    assert done.returncode in (0, 1), done.stderr
    assert {c["name"] for c in out["checks"]} >= {"load", "deps", "frameworks"}
    assert len(reads) == 1, f"the loader's cache was read {len(reads)} times"


def test_each_fact_is_started_once_however_many_ask(monkeypatch):
    """Eight threads asking at once for the driver and the loader start one of each."""
    from cudnn_setup.probing import driver as driver_probe
    from cudnn_setup.steps import command_facts
    from cudnn_setup.steps.command_facts import DRIVER, LOADER, Facts

    started = {"driver": 0, "loader": 0}

    def slow(name, value):
        def fact(*args, **kwargs):
            started[name] += 1
            time.sleep(0.3)
            return value
        return fact

    env = {"PATH": os.environ["PATH"]}
    loader = Environment(objects=Objects())
    monkeypatch.setattr(command_facts, "loader_environment", slow("loader", loader))
    monkeypatch.setattr(driver_probe, "driver_facts", slow("driver", driver_probe.DriverFacts()))
    facts = Facts(env, Path("/nonexistent"), Runner())
    facts.prefetch(DRIVER, LOADER)
    got = []
    threads = [threading.Thread(target=lambda: got.append((facts.driver(), facts.loader())))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert started == {"driver": 1, "loader": 1}
    assert len({id(d) for d, _ in got}) == 1 and all(l is loader for _, l in got)
    facts.loader_changed()  # ldconfig ran: the loader is asked again, the driver is not
    facts.loader()
    facts.driver()
    assert started == {"driver": 1, "loader": 2}


def test_no_parameter_is_a_value_or_a_function_returning_it():
    """Laziness lives in the facts object: no function of the package unwraps an argument with
    `x() if callable(x) else x`."""
    found = []
    for path in sorted((REPO / "cudnn_setup").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id == "callable":
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not found, found


def test_the_loaders_children_are_the_commands(tmp_path):
    """ldconfig -p and ld.so, asked for the loader's facts on a thread of their own, ran on a
    runner of their own: the command's end neither ended them nor waited for them, and their
    scratch dirs were removed after the command had returned (the fault sweep met one
    vanishing as it walked the tree). They are the command's children now."""
    from cudnn_setup.steps.command_facts import Facts

    ran = []

    class Recording(Runner):
        def run(self, cmd, *args, **kwargs):
            ran.append(os.path.basename(cmd[0]))
            return super().run(cmd, *args, **kwargs)

    Facts({}, tmp_path, Recording()).loader()
    assert "ldconfig" in ran or ldconfig.ldconfig_binary() is None, ran
    assert "true" in ran, ran  # the loader's run of /bin/true under LD_DEBUG
