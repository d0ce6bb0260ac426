"""Checks whose children can run at the same time do, and the report is the one a run of the
same checks one after another gives.

Slow stand-ins make the overlap visible: a C compiler (`CC`) that waits before running gcc, and
framework packages that wait at import, each a real child process. Run one after another they
would take the sum of their waits; together, about the longest.
"""
import os
import sys
import time
from pathlib import Path

from conftest import REPO, clean_env, main

from cudnn_setup.checks import frameworks_check as fw
from cudnn_setup.installation.model import find_installation
from cudnn_setup.checks.check_facts import CheckFacts
from cudnn_setup.checks.suite import run_checks
from cudnn_setup.child import Runner
from cudnn_setup.facts.cuda import find_cuda_root
from cudnn_setup.parallel import Done, Later, at_once
from cudnn_setup.steps.command_facts import Facts

SAMPLE = REPO / "fixtures" / "samples" / "cudnn-10.0-linux-x64-v7.4.2.24.tgz"
WAIT = 3.0


def slow_site(tmp_path: Path, names=("onnxruntime", "cupy", "tensorflow")) -> Path:
    site = tmp_path / "site"
    for name in names:
        (site / name).mkdir(parents=True)
        (site / name / "__init__.py").write_text(f"import time\ntime.sleep({WAIT})\n")
    return site


def slow_cc(tmp_path: Path) -> Path:
    cc = tmp_path / "slow-cc"
    cc.write_text(f"#!/bin/sh\nsleep {WAIT}\nexec gcc \"$@\"\n")
    cc.chmod(0o755)
    return cc


def checks_of(inst, env, **asked):
    """verify's checks of `inst` without Theano, asked of a new command's facts."""
    facts = Facts(env, Path("/nonexistent"), Runner())
    return run_checks(inst, CheckFacts(facts, sys.executable, theano=False, **asked))


def test_framework_probes_run_at_once(tmp_path):
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(slow_site(tmp_path))}
    start = time.monotonic()
    entries = fw.framework_report(sys.executable, env, timeout=60)
    took = time.monotonic() - start
    assert sorted(e.name for e in entries) == ["cupy", "onnxruntime", "tensorflow"]
    assert took < 2.2 * WAIT, took  # one after another: at least 3 * WAIT


def test_verify_runs_its_children_side_by_side_with_the_same_verdicts(tmp_path, home,
                                                                     cuda_root):
    root = cuda_root("10.0")
    env = clean_env(home)
    assert main(["install", str(SAMPLE), "--cuda-root", str(root), "--no-verify",
                 "--no-theanorc"], env=env) == 0
    inst = find_installation(find_cuda_root(env, root))
    fast = checks_of(inst, env)

    slow_env = dict(env, CC=str(slow_cc(tmp_path)), PYTHONPATH=str(slow_site(tmp_path, ("cupy",))))
    start = time.monotonic()
    slow = checks_of(inst, slow_env)
    took = time.monotonic() - start
    assert took < 1.7 * WAIT, took  # compile and the framework probe, each WAIT, overlapped
    assert [c.name for c in slow] == [c.name for c in fast]
    same = {c.name: c.status for c in fast if c.name != "frameworks"}
    assert {c.name: c.status for c in slow if c.name != "frameworks"} == same
    assert same["compile"] == "pass" and same["load"] == "pass"


def test_later_gives_back_the_value_or_the_error_where_asked():
    def boom():
        raise KeyError("x")

    assert Later(lambda: 41 + 1).result() == 42
    assert Done(7).result() == 7
    failed = Later(boom)
    try:
        failed.result()
    except KeyError:
        pass
    else:
        raise AssertionError("the error was lost")
    start = time.monotonic()
    assert at_once([lambda i=i: (time.sleep(0.5), i)[1] for i in range(4)]) == [0, 1, 2, 3]
    assert time.monotonic() - start < 1.5


def test_a_child_that_has_exited_is_not_waited_for_any_longer():
    """Once the child has exited and its pipes are at their end, its answer is taken at once
    (the drain time is for a daemon holding the pipes, not for every child)."""
    from cudnn_setup.child import DRAIN_S, run_command

    took = []
    for _ in range(3):
        start = time.monotonic()
        done = run_command(["sh", "-c", "echo answer"], 10)
        took.append(time.monotonic() - start)
        assert done.returncode == 0 and done.stdout == b"answer\n"
    assert min(took) < DRAIN_S / 2, took


def test_verify_reads_each_library_once(tmp_path, monkeypatch):
    """files, coherence and deps all ask about the same libraries (their DT_NEEDED entries,
    the names they open at run time): one run reads each file's facts once, whichever check,
    on whichever thread, asks first."""
    from cudnn_setup.installation import locate
    from cudnn_setup.facts.ldresolve.loadable import read_object
    from cudnn_setup.facts.ldresolve.runtime_names import runtime_names
    from fixtures import layouts

    inst = locate.locate(layouts.built_set(tmp_path / "cudnn", tmp_path / "w"))
    reads, scans = [], []
    read, names = read_object, runtime_names
    for module in [m for name, m in sys.modules.items() if name.startswith("cudnn_setup.")]:
        if getattr(module, "read_object", None) is read:  # every module that reads through it
            monkeypatch.setattr(module, "read_object",
                                lambda p: reads.append(os.path.realpath(p)) or read(p))
        if getattr(module, "runtime_names", None) is names:
            monkeypatch.setattr(module, "runtime_names",
                                lambda p, *a: scans.append(os.path.realpath(p)) or names(p, *a))
    env = {"PATH": os.environ["PATH"]}
    checks = {c.name: c for c in checks_of(inst, env, frameworks=False)}
    assert checks["coherence"].status == "pass" and checks["deps"].status == "pass"
    for seen in (reads, scans):
        cudnn = [p for p in seen if os.path.basename(p).startswith("libcudnn")]
        assert len(cudnn) >= 8 and len(cudnn) == len(set(cudnn)), sorted(cudnn)


def test_the_frameworks_children_start_before_the_loaders_facts_are_asked(tmp_path,
                                                                          monkeypatch):
    """The frameworks' children take the longest, and the loader's facts (ldconfig -p, ld.so,
    three children) are needed only to read their answers: asking for those facts slowly must
    not delay the frameworks' start."""
    from cudnn_setup.installation import locate
    from cudnn_setup.steps import command_facts
    from fixtures import layouts

    inst = locate.locate(layouts.built_set(tmp_path / "cudnn", tmp_path / "w"))
    real = command_facts.loader_environment

    def slow_loader(*args, **kwargs):
        time.sleep(WAIT)
        return real(*args, **kwargs)

    monkeypatch.setattr(command_facts, "loader_environment", slow_loader)
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(slow_site(tmp_path, ("cupy",)))}
    start = time.monotonic()
    checks = {c.name: c for c in checks_of(inst, env)}
    took = time.monotonic() - start
    assert "cupy" in checks["frameworks"].detail
    assert took < 1.7 * WAIT, took  # one after the other: at least 2 * WAIT


def test_every_check_says_what_it_does_when_it_starts():
    """The line a person sees as a check starts names its work, not its name twice."""
    from cudnn_setup.checks.suite import DOING, ORDER
    assert set(DOING) == set(ORDER)
    assert all(DOING[name] != name for name in ORDER)
