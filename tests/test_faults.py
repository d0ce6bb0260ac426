"""Every command, with an OSError injected at each filesystem call it makes, one call per run:
every run ends with one JSON object, a documented exit code and no traceback, says nothing
untrue about a commit, and changes nothing outside the CUDA root and the files it may write.

A command is first run without faults to count its calls (`n`); then once for each call
N = 1..n, the Nth raising OSError(EIO). Commands whose runs are slow (Theano, the verification
after an install) are sampled: N at an even stride and the last, recorded. That sweep is
`slow` (`pytest -m slow`, bench/reliability.py); the default run faults a few calls of each
command spread from its first to its last (test_fault_at_sampled_filesystem_calls).
"""
from __future__ import annotations

import errno
import io
import json
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import tree_state
from cudnn_setup.cli import main
from faults import Faults
from fixtures.generate import make_cuda_root
from httpserver import ArchiveServer

V7 = "cudnn-10.0-linux-x64-v7.4.2.24.tgz"
DOCUMENTED = {0, 1, 2, 3, 4, 5, 6}  # 70 is documented too, but means a bug: none is expected
CODE = re.compile(r"[a-z]+(-[a-z]+)*")
THEANORC = b"[global]\ndevice = cpu\nfloatX = float32\n"


@dataclass
class Sandbox:
    """One run's world: a CUDA root, a home with a .theanorc, a temp dir, a sentinel tree."""

    base: Path
    root: Path
    home: Path
    env: dict = field(default_factory=dict)

    # what a command may change; everything else under `base` must stay as it was. Theano,
    # when the theano check runs it, keeps its compile cache in ~/.theano as it always does.
    MAY_CHANGE = ("cuda/", "tmp/", "home/.theanorc", "home/.cache/", "dl/", "home/.theano/")

    def outside(self) -> dict:
        return {k: v for k, v in tree_state(self.base).items()
                if not any(k == p.rstrip("/") or k.startswith(p) for p in self.MAY_CHANGE)}


@pytest.fixture(scope="module")
def templates(tmp_path_factory, compiler, archives):
    """A bare CUDA root and one with cuDNN 7 installed, copied for every run."""
    base = tmp_path_factory.mktemp("templates")
    bare = make_cuda_root(base / "bare", "10.0", cc=compiler)
    installed = base / "installed"
    shutil.copytree(bare, installed, symlinks=True)
    home = base / "home"
    home.mkdir()
    code = main(["install", str(archives[V7]), "--cuda-root", str(installed), "--no-verify",
                 "--no-theanorc"], env={"HOME": str(home)}, home=home, stdout=io.StringIO(),
                stderr=io.StringIO())
    assert code == 0
    damaged = base / "damaged"  # for repair: a library gone, a link re-pointed, a header changed
    shutil.copytree(installed, damaged, symlinks=True)
    (damaged / "lib64" / "libcudnn.so.7.4.2").unlink()
    (damaged / "lib64" / "libcudnn.so.7").unlink()
    (damaged / "lib64" / "libcudnn.so.7").symlink_to("elsewhere.so")
    with open(damaged / "include" / "cudnn.h", "a") as header:
        header.write("/* patched */\n")
    return {"bare": bare, "installed": installed, "damaged": damaged}


@pytest.fixture(scope="module")
def server(archives):
    with ArchiveServer() as s:
        s.files[f"/mirror/{V7}"] = archives[V7].read_bytes()
        yield s


def _sandbox(base: Path, template: Path, theano_cache: Path | None = None) -> Sandbox:
    base.mkdir()
    root = base / "cuda"
    shutil.copytree(template, root, symlinks=True)
    home = base / "home"
    home.mkdir()
    (home / ".theanorc").write_bytes(THEANORC)
    (base / "tmp").mkdir()
    (base / "dl").mkdir()
    (base / "sentinel").mkdir()
    (base / "sentinel" / "keep.txt").write_text("keep")
    import os

    env = {"HOME": str(home), "PATH": os.environ.get("PATH", ""),
           "XDG_CACHE_HOME": str(home / ".cache")}
    if theano_cache is not None:  # Theano's compile cache shared between runs: minutes saved
        env["THEANO_FLAGS"] = f"base_compiledir={theano_cache}"
    return Sandbox(base, root, home, env)


# command name -> (template, argv maker, sampled stride or None for every call)
COMMANDS = {
    "inspect": ("bare", lambda s, a, url: ["inspect", a], None),
    "install": ("bare", lambda s, a, url: ["install", a, "--cuda-root", s.root, "--no-verify"],
                None),
    "install-dry-run": ("installed", lambda s, a, url: ["install", a, "--cuda-root", s.root,
                                                        "--dry-run", "--force"], None),
    "install+verify": ("bare", lambda s, a, url: ["install", a, "--cuda-root", s.root,
                                                  "--no-theanorc"], 30),
    "uninstall": ("installed", lambda s, a, url: ["uninstall", "--cuda-root", s.root], None),
    "repair": ("damaged", lambda s, a, url: ["repair", "--cuda-root", s.root], None),
    "verify": ("installed", lambda s, a, url: ["verify", "--cuda-root", s.root, "--no-theano"],
               None),
    "verify+theano": ("installed", lambda s, a, url: ["verify", "--cuda-root", s.root], 12),
    "doctor": ("installed", lambda s, a, url: ["doctor", "--cuda-root", s.root], None),
    "theanorc": ("installed", lambda s, a, url: ["theanorc", "--cuda-root", s.root], None),
    "download": ("bare", lambda s, a, url: ["download", url, "-o", s.base / "dl"], None),
    "bench": ("installed", lambda s, a, url: ["bench", "--cuda-root", s.root, "--no-theano"],
              None),
}


def _run(sandbox: Sandbox, argv: list, faults: Faults, monkeypatch) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(tempfile, "tempdir", str(sandbox.base / "tmp"))
    with faults.active():
        code = main([str(a) for a in argv] + ["--json"], env=sandbox.env, home=sandbox.home,
                    stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def _judge(code: int, stdout: str, stderr: str, faults: Faults) -> list[str]:
    """Everything wrong with one run's answer (empty when it is right)."""
    where = f"fault at call {faults.fail_at} ({faults.hit})"
    lines = stdout.splitlines()
    if len(lines) != 1:
        return [f"{where}: {len(lines)} lines on stdout: {stdout[:300]!r} {stderr[-500:]!r}"]
    answer = json.loads(lines[0])
    problems = []
    if code not in DOCUMENTED:
        problems.append(f"{where}: exit {code}: {answer.get('error')}")
    if "Traceback" in stderr:
        problems.append(f"{where}: a traceback on stderr: {stderr[-800:]}")
    error = answer["error"]
    if error is not None:
        if error["exit_code"] != code or not CODE.fullmatch(error["code"]):
            problems.append(f"{where}: error {error} with exit {code}")
        if answer["changed"] and "rolled back" in error["message"]:
            problems.append(f"{where}: says 'rolled back' after a commit: {error['message']}")
    elif code not in (0, 1):
        problems.append(f"{where}: exit {code} without an error object")
    return problems


# command name -> how many calls the default run faults, spread evenly up to the last call
SAMPLED = {"inspect": 8, "install": 12, "install-dry-run": 8, "install+verify": 2,
           "uninstall": 8, "repair": 8, "verify": 6, "verify+theano": 2, "doctor": 8, "theanorc": 6,
           "download": 5, "bench": 5}


def _every(total: int, stride: int | None) -> list[int]:
    points = list(range(1, total + 1, stride or 1))
    if stride and points[-1] != total:
        points.append(total)
    return points


def _spread(total: int, runs: int) -> list[int]:
    """`runs` calls evenly up to the last one, and the first call when there are several."""
    points = {max(1, round(i * total / runs)) for i in range(1, runs + 1)}
    return sorted(points | ({1} if runs >= 4 else set()))


def _sweep(name, choose, templates, archives, server, tmp_path, theano_compiledir,
           monkeypatch) -> tuple[int, list[int]]:
    """Count the command's calls, then fault each call `choose(total)` names, one per run;
    returns the total and the calls faulted."""
    template, make_argv, _ = COMMANDS[name]
    url = f"{server.base}/mirror/{V7}"

    def one_run(n: int | None, label: str) -> tuple[Faults, list[str]]:
        sandbox = _sandbox(tmp_path / label, templates[template], theano_compiledir)
        before = sandbox.outside()
        faults = Faults(n)
        code, stdout, stderr = _run(sandbox, make_argv(sandbox, archives[V7], url), faults,
                                    monkeypatch)
        problems = _judge(code, stdout, stderr, faults)
        if sandbox.outside() != before:
            changed = set(sandbox.outside().items()) ^ set(before.items())
            problems.append(f"fault at call {n} ({faults.hit}): changed outside the root: "
                            f"{sorted(k for k, _ in changed)[:5]}")
        shutil.rmtree(sandbox.base, ignore_errors=True)
        return faults, problems

    if name in ("verify+theano", "install+verify"):  # they run Theano: a cold compile cache
        one_run(None, "warm")  # makes the counting run's calls far more than the faulted runs'
    counted, problems = one_run(None, "count")
    assert not problems, problems
    total = counted.calls
    assert total > 0
    points = choose(total)
    assert points and all(1 <= n <= total for n in points), (total, points)
    failures, hit = [], 0
    for n in points:
        faults, problems = one_run(n, f"n{n}")
        hit += faults.hit is not None
        failures += problems
    assert hit > 0  # the faults did land
    assert not failures, "\n".join(failures[:20])
    return total, points


@pytest.mark.slow
@pytest.mark.parametrize("name", list(COMMANDS))
def test_fault_at_every_filesystem_call(name, templates, archives, server, tmp_path,
                                        theano_compiledir, monkeypatch, record_property):
    stride = COMMANDS[name][2]
    total, points = _sweep(name, lambda total: _every(total, stride), templates, archives,
                           server, tmp_path, theano_compiledir, monkeypatch)
    record_property(f"fault_runs_{name}", len(points))
    record_property(f"fault_calls_{name}", total)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_fault_at_sampled_filesystem_calls(name, templates, archives, server, tmp_path,
                                           theano_compiledir, monkeypatch):
    _sweep(name, lambda total: _spread(total, SAMPLED[name]), templates, archives, server,
           tmp_path, theano_compiledir, monkeypatch)


def test_the_sample_reaches_the_last_call_and_the_sweep_every_call():
    assert _spread(178, 12)[-1] == 178 and _spread(178, 12)[0] == 1 and len(_spread(178, 12)) == 13
    assert _spread(124, 2) == [62, 124] and _spread(3, 8) == [1, 2, 3]
    assert _every(10, None) == list(range(1, 11)) and _every(211, 30) == [1, 31, 61, 91, 121,
                                                                          151, 181, 211]
    assert _every(124, 12)[-2:] == [121, 124]


@pytest.mark.parametrize("command", ["inspect", "download"])
@pytest.mark.parametrize("code,expect", [
    (errno.ENOSPC, "disk-full"), (errno.EDQUOT, "disk-full"), (errno.EACCES, "permission-denied"),
    (errno.EPERM, "permission-denied"), (errno.EROFS, "read-only-filesystem"),
    (errno.ENAMETOOLONG, "name-too-long"), (errno.EIO, "io-error"), (errno.ELOOP, "os-error"),
])
def test_each_errno_gets_its_code_and_hint(command, code, expect, templates, archives, server,
                                           tmp_path, monkeypatch):
    """The first directory a command creates (inspect's scratch dir, download's target dir)
    cannot be made, for each errno the mapping knows: code and hint follow from the errno,
    the exit code from the command."""
    sandbox = _sandbox(tmp_path / "s", templates["bare"])
    target = sandbox.base / "dl" / "new"
    argv = (["inspect", archives[V7]] if command == "inspect" else
            ["download", f"{server.base}/mirror/{V7}", "-o", target])

    class FirstMkdir(Faults):
        def _wrap(self, name, real):
            return super()._wrap(name, real) if name == "os.mkdir" else real

    faults = FirstMkdir(1, code)
    exit_code, stdout, stderr = _run(sandbox, argv, faults, monkeypatch)
    error = json.loads(stdout)["error"]
    # inspect only looks: never exit 5 ("rolled back")
    assert exit_code == (1 if command == "inspect" else 6), (faults.hit, error)
    assert error["code"] == expect, (faults.hit, error)
    assert ("free some space" in error["hint"]) == (expect == "disk-full")
    assert ("read-only" in error["message"]) == (expect == "read-only-filesystem")
    assert ("too long" in error["message"]) == (expect == "name-too-long")
