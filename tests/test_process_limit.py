"""The tool under a real process limit (a cgroup's pids.max), from too few processes and threads
for anything to enough: each run answers, with its documented exit code. An install that cannot
go on says "process-limit" (exit 5), never an internal error (70), never that the archive is
corrupt, never a missing staging dir; a check that could not start its child says so, and none
says something false of the machine (Theano "not installed")."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, clean_env, tree_state
from cudnn_setup.archive import decoders

SAMPLE = REPO / "fixtures" / "samples" / "cudnn-10.0-linux-x64-v7.4.2.24.tgz"
PIDS = Path("/sys/fs/cgroup/pids")
NEEDS_PIDS = pytest.mark.skipif(os.geteuid() != 0 or not os.access(PIDS, os.W_OK),
                                reason="needs a writable cgroup v1 pids hierarchy")
# What a check that could not start its child may say, and what it may never say then
COULD_NOT = ("could not be started", "could not ask", "Resource temporarily unavailable",
             "no more processes or threads")
LIES = ("Theano is not installed",)
# The tool with rapidgzip chosen whatever the cores (this machine has two)
RAPIDGZIP_FORCED = """
import sys
from cudnn_setup.archive import decoders
decoders.gzip_decoder = lambda *a, **k: decoders.RAPIDGZIP
from cudnn_setup.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture
def limited(tmp_path):
    """Runs the tool (or `python -c CODE` with `code`) in a cgroup of its own at a pids limit:
    (exit status, its JSON answer)."""
    group = PIDS / f"cudnn-setup-test-{os.getpid()}-{tmp_path.name}"
    group.mkdir()

    def run(limit: int, argv: list, env: dict, code: str | None = None):
        (group / "pids.max").write_text(str(limit))
        program = ["-c", code] if code is not None else ["-m", "cudnn_setup"]
        done = subprocess.run(["sh", "-c", f'echo $$ > {group}/tasks; exec "$@"', "sh",
                               sys.executable, *program, *map(str, argv), "--json"],
                              env=env, capture_output=True, text=True, timeout=600)
        return done.returncode, json.loads(done.stdout.strip().splitlines()[-1])

    yield run
    group.rmdir()


def _installs_or_says_process_limit(limited, root_of, argv, env, code=None) -> None:
    """From a limit of 2 up: every run short of enough says process-limit with the root as it
    was, then one installs."""
    seen = {}
    for limit in range(2, 20):
        root = root_of()
        before = tree_state(root)
        status, out = limited(limit, ["install", *argv, "--cuda-root", root, "--no-theanorc",
                                      "--no-verify", "--no-frameworks"], env, code)
        seen[limit] = (status, (out.get("error") or {}).get("code"))
        if status == 0:
            break
        assert tree_state(root) == before, limit
    assert seen[max(seen)] == (0, None), seen
    assert all(v == (5, "process-limit") for k, v in seen.items() if k < max(seen)), seen


@NEEDS_PIDS
@pytest.mark.skipif(decoders.importlib.util.find_spec("rapidgzip") is None,
                    reason="rapidgzip is not installed")
def test_a_targz_install_under_a_process_limit_says_so(padded, cuda_root, home, limited):
    """rapidgzip's threads, the hash beside them, the staging writers: before, this was exit 70
    (can't start new thread, or a clean-up joining a thread that never started), or "No such
    file or directory: …/staging" (rapidgzip gave up before staging anything and emptying the
    never-made staging dir for the ISA-L reread failed)."""
    _installs_or_says_process_limit(limited, lambda: cuda_root("12.4"), [padded["gz"]],
                                    clean_env(home), RAPIDGZIP_FORCED)


@pytest.mark.slow
@NEEDS_PIDS
def test_a_wheel_installed_under_a_process_limit_is_never_called_corrupt(home, cuda_root,
                                                                        tmp_path, compiler,
                                                                        limited):
    """A wheel's members are inflated on threads: where none could be started, the wheel was
    called "truncated or corrupt" (exit 3, download it again). It is the machine's limit."""
    from fixtures.wheels import build_wheel

    wheel = build_wheel(tmp_path / "w", "9.3.0.75", "12", compiler)
    _installs_or_says_process_limit(limited, lambda: cuda_root("12.4"), [wheel],
                                    clean_env(home))


@pytest.mark.slow
@NEEDS_PIDS
def test_verify_and_doctor_under_a_process_limit_say_only_what_they_saw(home, cuda_root,
                                                                       limited):
    root = cuda_root("10.0")
    env = clean_env(home)
    done = subprocess.run([sys.executable, "-m", "cudnn_setup", "install", str(SAMPLE),
                           "--cuda-root", str(root), "--no-verify", "--no-frameworks"],
                          env=env, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr
    seen = {}
    for command in ("verify", "doctor"):
        for limit in (2, 6, 10, 11, 12, 13, 16, 64):
            status, out = limited(limit, [command, "--cuda-root", root], env)
            seen[command, limit] = (status, out.get("error"), out["checks"])
    for (command, limit), (code, error, checks) in seen.items():
        assert code in (0, 1), (command, limit, code, error)
        if error is not None:
            assert error["code"] == "process-limit", (command, limit, error)
        for check in checks:
            assert not any(lie in check["detail"] for lie in LIES), (command, limit, check)
            if check["name"] == "load" and check["status"] == "fail":
                assert any(w in check["detail"] for w in COULD_NOT), (command, limit, check)
    assert seen["verify", 64][0] == 0 and seen["doctor", 64][0] == 0
