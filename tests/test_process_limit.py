"""verify and doctor under a real process limit (a cgroup's pids.max), from too few processes
for anything to enough: each run answers, with exit 0 or 1, and every check that could not run
its child says so. None says something false of the machine (Theano "not installed", a library
that "does not load" for want of a process) and none ends in an internal error."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, clean_env

SAMPLE = REPO / "fixtures" / "samples" / "cudnn-10.0-linux-x64-v7.4.2.24.tgz"
PIDS = Path("/sys/fs/cgroup/pids")
# What a check that could not start its child may say, and what it may never say then
COULD_NOT = ("could not be started", "could not ask", "Resource temporarily unavailable",
             "no more processes or threads")
LIES = ("Theano is not installed",)


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0 or not os.access(PIDS, os.W_OK),
                    reason="needs a writable cgroup v1 pids hierarchy")
def test_verify_and_doctor_under_a_process_limit_say_only_what_they_saw(home, cuda_root):
    root = cuda_root("10.0")
    env = clean_env(home)
    done = subprocess.run([sys.executable, "-m", "cudnn_setup", "install", str(SAMPLE),
                           "--cuda-root", str(root), "--no-verify", "--no-frameworks"],
                          env=env, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr
    group = PIDS / f"cudnn-setup-test-{os.getpid()}"
    group.mkdir()
    seen = {}
    try:
        for command in ("verify", "doctor"):
            for limit in (2, 6, 10, 11, 12, 13, 16, 64):
                (group / "pids.max").write_text(str(limit))
                done = subprocess.run(
                    ["sh", "-c", f'echo $$ > {group}/tasks; exec "$@"', "sh", sys.executable,
                     "-m", "cudnn_setup", command, "--cuda-root", str(root), "--json"],
                    env=env, capture_output=True, text=True, timeout=600)
                out = json.loads(done.stdout.strip().splitlines()[-1])
                seen[command, limit] = (done.returncode, out.get("error"), out["checks"])
    finally:
        group.rmdir()
    for (command, limit), (code, error, checks) in seen.items():
        assert code in (0, 1), (command, limit, code, error)
        if error is not None:
            assert error["code"] == "process-limit", (command, limit, error)
        for check in checks:
            assert not any(lie in check["detail"] for lie in LIES), (command, limit, check)
            if check["name"] == "load" and check["status"] == "fail":
                assert any(w in check["detail"] for w in COULD_NOT), (command, limit, check)
    assert seen["verify", 64][0] == 0 and seen["doctor", 64][0] == 0


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0 or not os.access(PIDS, os.W_OK),
                    reason="needs a writable cgroup v1 pids hierarchy")
def test_a_wheel_installed_under_a_process_limit_is_never_called_corrupt(home, cuda_root,
                                                                        tmp_path, compiler):
    """A wheel's members are inflated on threads: where none could be started, the wheel was
    called "truncated or corrupt" (exit 3, download it again). It is the machine's limit."""
    from fixtures.wheels import build_wheel

    wheel = build_wheel(tmp_path / "w", "9.3.0.75", "12", compiler)
    env = clean_env(home)
    group = PIDS / f"cudnn-setup-test-{os.getpid()}"
    group.mkdir()
    seen = {}
    try:
        for limit in range(2, 20):
            root = cuda_root("12.4")
            (group / "pids.max").write_text(str(limit))
            done = subprocess.run(
                ["sh", "-c", f'echo $$ > {group}/tasks; exec "$@"', "sh", sys.executable, "-m",
                 "cudnn_setup", "install", str(wheel), "--cuda-root", str(root), "--no-verify",
                 "--no-theanorc", "--no-frameworks", "--json"],
                env=env, capture_output=True, text=True, timeout=300)
            error = json.loads(done.stdout.strip().splitlines()[-1]).get("error") or {}
            seen[limit] = (done.returncode, error.get("code"))
            if done.returncode == 0:
                break
    finally:
        group.rmdir()
    assert seen[max(seen)] == (0, None), seen
    assert all(v == (5, "process-limit") for k, v in seen.items() if k < max(seen)), seen
