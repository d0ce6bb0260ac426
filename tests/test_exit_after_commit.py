"""Exit 5 says "rolled back": a failure after a committed change (which stands) or of a
command that only looks exits 1, its code kept, and a hint to verify keeps --cuda-root."""
import errno

import pytest

from cudnn_setup.errors import InstallFailed, Interrupted
from cudnn_setup.steps.command_wrapper import command

ROOT = "/opt/my cuda"


def _body(raise_what, changed: bool):
    def body(result):
        result.cuda_root = ROOT
        result.changed = changed
        raise raise_what
    return body


@pytest.mark.parametrize("error", [
    InstallFailed("the loader was not changed", "--force", code="would-break-frameworks"),
    OSError(errno.EACCES, "Permission denied", "/etc/ld.so.conf.d/x.conf"),
])
def test_a_failure_after_the_commit_exits_1_with_its_code(error):
    result = command("install")(_body(error, changed=True))()
    assert result.exit_code == 1 and result.changed
    assert result.error.code in ("would-break-frameworks", "permission-denied")
    if isinstance(error, OSError):
        assert "after the change was committed, which stands" in result.error.message
    before = command("install")(_body(error, changed=False))()
    assert before.exit_code == 5  # nothing was committed: rolled back


def test_interrupted_after_the_commit_names_verify_with_the_users_root():
    result = command("install")(_body(Interrupted(), changed=True))()
    assert result.exit_code == 1 and result.error.code == "interrupted"
    assert result.error.hint == "run `cudnn-setup verify --cuda-root '/opt/my cuda'` to check it"


@pytest.mark.parametrize("name", ["verify", "doctor", "list", "inspect", "bench"])
def test_a_command_that_only_looks_never_exits_5(name):
    for error in (Interrupted(), InstallFailed("cannot read it", code="permission-denied"),
                  OSError(errno.EIO, "Input/output error", "/x")):
        result = command(name)(_body(error, changed=False))()
        assert result.exit_code == 1, (name, error, result.error.to_dict())


def test_verify_stopped_by_sigterm_at_any_moment_never_exits_5(archives, cuda_root, home):
    """A SIGTERM while verify's arguments are read or its modules load (before the command's
    own wrapper runs) exited 5, "rolled back", from a command that only looks; and once the
    checks ran, 1. Real signals at moments from the start to the end: every answer is 1
    (or 0 where verify had finished), never 5."""
    import json
    import signal
    import subprocess
    import sys
    import time

    from conftest import clean_env, run_json
    from fixtures.generate import GENERATION_SAMPLES

    root = cuda_root()
    v7 = archives[GENERATION_SAMPLES["v4-v7"]]
    run_json(["install", v7, "--cuda-root", root, "--no-verify", "--no-theanorc"], home)
    answers = []
    for delay in [0.06 + 0.03 * i for i in range(12)]:
        proc = subprocess.Popen([sys.executable, "-m", "cudnn_setup", "verify", "--cuda-root",
                                 str(root), "--no-theano", "--no-frameworks", "--json"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=clean_env(home))
        time.sleep(delay)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
        if proc.returncode < 0:  # before the program's first line: Python's own start-up
            continue
        answer = json.loads(out)
        answers.append((delay, proc.returncode, (answer.get("error") or {}).get("code")))
    assert answers and all(rc in (0, 1) for _, rc, _ in answers), answers
    assert any(code == "interrupted" for _, _, code in answers), answers
