"""install's overlapped phase (the frameworks what-if's imports beside verify's checks)
interrupted, and Theano's hash seed: every child ends with the command, the JSON says what was
written, an empty seed is no seed."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import clean_env, run_json
from fixtures.generate import GENERATION_SAMPLES
from test_children import _zombie, alive, fake_framework, frameworks_env

V7 = GENERATION_SAMPLES["v4-v7"]


def fake_theano(site: Path, body: str) -> None:
    """A pure-Python `theano` ahead of the real one: has_theano() finds it and the theano
    check's child (probes/theano_graph.py) runs `body` when it imports it."""
    pkg = site / "theano"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(textwrap.dedent(body) + "\n__version__ = '1.0.5'\n")


def wait_for(path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert path.exists() and path.read_text().strip(), f"{path} was never written"


def pids_of(*files: Path) -> list[int]:
    return [int(p) for f in files if f.exists() for p in f.read_text().split()]


def running(pids: list[int]) -> list[tuple[int, bytes]]:
    out = []
    for p in pids:
        if alive(p) and not _zombie(p):
            try:
                cmd = Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ")[-100:]
            except OSError:
                continue
            out.append((p, cmd))
    return out


def kill(pids: list[int]) -> None:
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def install_interrupted(sig, tmp_path, archives, cuda_root, home, theano_body):
    """install off the loader path, a framework whose import takes a minute (the what-if is
    in flight) and verify's Theano check started beside it; `sig` once both children run.
    (the answer, the pids the framework and Theano children wrote, the home)."""
    site = tmp_path / "site"
    fw_pids, th_pids = tmp_path / "fw-pids", tmp_path / "th-pids"
    fake_framework(site, f"""
        import os, time
        open({str(fw_pids)!r}, "a").write(f"{{os.getpid()}}\\n")
        time.sleep(60)
    """)
    fake_theano(site, textwrap.dedent(f"""
        import os, time
        open({str(th_pids)!r}, "a").write(f"{{os.getpid()}}\\n")
    """) + theano_body)
    env = clean_env(home, **frameworks_env(site))
    proc = subprocess.Popen([sys.executable, "-m", "cudnn_setup", "install", str(archives[V7]),
                             "--cuda-root", str(cuda_root()), "--json"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(th_pids)
        wait_for(fw_pids)
        time.sleep(0.5)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    answer = json.loads(out.decode())
    assert answer["error"]["code"] == "interrupted", err.decode()[-2000:]
    return answer, pids_of(fw_pids, th_pids)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_install_verifies_beside_the_what_if_leaves_no_child(
        sig, tmp_path, archives, cuda_root, home):
    """verify starts beside the what-if's imports: SIGTERM or Ctrl-C then ends Theano's check
    child too (it runs through the command's runner), not only the frameworks' children; it
    was left running in a session of its own, its time limit gone with the tool."""
    answer, pids = install_interrupted(sig, tmp_path, archives, cuda_root, home,
                                       "time.sleep(120)\n")
    time.sleep(0.5)
    left = running(pids)
    kill(pids)
    assert not left, f"children left running after the signal: {left}"


def test_an_interrupted_install_reports_the_theanorc_it_wrote_among_its_checks(
        tmp_path, archives, cuda_root, home):
    """Theano's config is written before the loader step's what-if finishes: interrupted
    during the what-if, the JSON still has the `theanorc` check of the file it wrote."""
    answer, pids = install_interrupted(signal.SIGTERM, tmp_path, archives, cuda_root, home,
                                       "raise SystemExit(3)\n")
    kill(pids)
    assert (home / ".theanorc").exists() and answer.get("theanorc", {}).get("changed")
    names = [c["name"] for c in answer["checks"]]
    assert "theanorc" in names, f"the theanorc was written but its check is missing: {names}"


def test_verify_interrupted_while_theano_runs_leaves_no_child(tmp_path, archives, cuda_root,
                                                            home):
    """The same in plain verify: Theano's check child goes through the command's runner, so
    SIGTERM ends it."""
    site = tmp_path / "site"
    th_pids = tmp_path / "th-pids"
    fake_theano(site, f"""
        import os, time
        open({str(th_pids)!r}, "a").write(f"{{os.getpid()}}\\n")
        time.sleep(120)
    """)
    root = cuda_root()
    done, _ = run_json(["install", archives[V7], "--cuda-root", root, "--no-verify",
                        "--no-frameworks", "--no-theanorc"], home)
    assert done.returncode == 0, done.stderr
    proc = subprocess.Popen([sys.executable, "-m", "cudnn_setup", "verify", "--cuda-root",
                             str(root), "--no-frameworks", "--json"],
                            env=clean_env(home, **frameworks_env(site)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(th_pids)
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    time.sleep(0.5)
    pids = pids_of(th_pids)
    left = running(pids)
    kill(pids)
    assert not left, f"Theano's child left running after SIGTERM: {left}"


def test_an_empty_pythonhashseed_still_gets_theanos_fixed_seed(tmp_path, archives, cuda_root,
                                                               home):
    """Python takes an empty PYTHONHASHSEED for none (random hashing): exported empty, Theano's
    child still gets the fixed seed that lets its compile cache serve the next run."""
    site = tmp_path / "site"
    seen = tmp_path / "seen"
    fake_theano(site, f"""
        import sys
        open({str(seen)!r}, "a").write(f"{{sys.flags.hash_randomization}}\\n")
        raise SystemExit(3)
    """)
    run_json(["install", archives[V7], "--cuda-root", cuda_root(), "--no-frameworks"], home,
             frameworks_env(site, PYTHONHASHSEED=""))
    assert seen.read_text().split() == ["0"], "Theano's child ran with random hashing"
