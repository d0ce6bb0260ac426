"""A SIGTERM at or after a transaction's commit point: the change stands and is said to stand
(exit 1, `changed: true`, "interrupted after the change was committed"), never "rolled back";
and one before the program's commands are even loaded still ends with its one JSON answer.

The signals are real: the process sends SIGTERM to itself from inside the step named, and the
tool's own handler turns it into an interruption where the program is."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO, clean_env, run_json, tree_state
from cudnn_setup.state import transaction

SAMPLE = REPO / "fixtures" / "samples" / "cudnn-10.0-linux-x64-v7.4.2.24.tgz"


def _sigterm_after(monkeypatch, cls_or_module, name: str) -> list:
    """`name` of `cls_or_module` runs, then SIGTERM reaches this process (once)."""
    original, sent = getattr(cls_or_module, name), []

    def then_sigterm(*args, **kwargs):
        out = original(*args, **kwargs)
        if not sent:
            sent.append(name)
            os.kill(os.getpid(), signal.SIGTERM)
        return out

    monkeypatch.setattr(cls_or_module, name, then_sigterm)
    return sent


@pytest.mark.parametrize("step", ["write_manifest", "finish"])
def test_a_sigterm_once_the_install_is_committed_says_it_stands(step, monkeypatch, home,
                                                                cuda_root):
    """write_manifest is the commit point; finish, the tidying after it. Before, the first
    rolled the files back under a manifest naming them, and both said "nothing was changed"."""
    root = cuda_root("10.0")
    sent = _sigterm_after(monkeypatch, transaction.Filesystem if step == "write_manifest"
                          else transaction, step)
    done, out = run_json(["install", SAMPLE, "--cuda-root", root, "--no-verify",
                          "--no-theanorc", "--no-frameworks"], home)
    assert sent == [step]
    assert done.returncode == 1, out
    assert out["changed"] is True and out["error"]["code"] == "interrupted", out["error"]
    assert "after the change was committed" in out["error"]["message"]
    monkeypatch.undo()
    installed = root / "lib64" / "libcudnn.so.7.4.2"
    assert installed.is_file()
    done, out = run_json(["verify", "--cuda-root", root, "--no-theano", "--no-frameworks"], home)
    files = next(c for c in out["checks"] if c["name"] == "files")
    assert files["status"] == "pass", files  # what the manifest names is what is there


def test_a_sigterm_once_the_uninstall_is_committed_says_it_stands(monkeypatch, home, cuda_root):
    root = cuda_root("10.0")
    before = tree_state(root)
    done, _ = run_json(["install", SAMPLE, "--cuda-root", root, "--no-verify", "--no-theanorc",
                        "--no-frameworks"], home)
    assert done.returncode == 0
    sent = _sigterm_after(monkeypatch, transaction, "finish")
    done, out = run_json(["uninstall", "--cuda-root", root], home)
    assert sent == ["finish"] and done.returncode == 1, out
    assert out["changed"] is True and out["error"]["code"] == "interrupted"
    monkeypatch.undo()
    done, out = run_json(["uninstall", "--cuda-root", root], home)  # finishes the tidying
    assert done.returncode == 0, out
    assert tree_state(root) == before


# A module of the install command's import chain (pyelftools) shadowed by one that says it is
# being imported and then goes on loading for good: the program is loading its command, for
# sure. (It runs Python between its waits, as an import does, so the signal is seen even when
# the kernel hands it to another thread.)
_LOADING = """
import os, time
open(os.environ["LOADING_MARK"], "w").close()
while True:
    time.sleep(0.01)
"""


def test_a_sigterm_while_the_program_loads_its_command_still_gets_its_answer(home, cuda_root,
                                                                            tmp_path):
    """SIGTERM while the install command's modules load: one JSON object, exit 5
    "interrupted", nothing changed. Before, SIGTERM was taken in hand only once the command's
    module had loaded, and the process died with status 143 and no answer."""
    shadow = tmp_path / "shadow" / "elftools"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(_LOADING)
    mark = tmp_path / "loading"
    root = cuda_root("10.0")
    before = tree_state(root)
    env = clean_env(home, PYTHONPATH=os.pathsep.join([str(tmp_path / "shadow"), str(REPO)]),
                    LOADING_MARK=str(mark))
    proc = subprocess.Popen([sys.executable, "-m", "cudnn_setup", "install", str(SAMPLE),
                             "--cuda-root", str(root), "--json"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not mark.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    _rolled_back_answer(proc)
    assert tree_state(root) == before


def test_a_sigterm_while_the_answer_is_written_leaves_the_answer_true(monkeypatch, home,
                                                                     cuda_root):
    """The install is done and its answer is being written when SIGTERM comes: the answer is
    the install's (exit 0, changed), not "interrupted; nothing was changed" of a root that
    was changed."""
    from cudnn_setup import cli

    original = cli._render

    def render_after_sigterm(session, result, as_json):
        os.kill(os.getpid(), signal.SIGTERM)
        return original(session, result, as_json)

    monkeypatch.setattr(cli, "_render", render_after_sigterm)
    root = cuda_root("10.0")
    done, out = run_json(["install", SAMPLE, "--cuda-root", root, "--no-verify",
                          "--no-theanorc", "--no-frameworks"], home)
    assert (done.returncode, out["changed"], out["error"]) == (0, True, None), out


def test_an_os_error_after_the_commit_says_the_change_stands(monkeypatch, home, cuda_root):
    """The install is committed; tidying the state dir after it fails (EIO): exit 1, changed,
    and the message says the change stands, not only "install failed"."""
    import errno

    from cudnn_setup.state.layout import StateDir

    def tidy_fails(self):
        raise OSError(errno.EIO, os.strerror(errno.EIO), str(self.path))

    monkeypatch.setattr(StateDir, "tidy", tidy_fails)
    root = cuda_root("10.0")
    done, out = run_json(["install", SAMPLE, "--cuda-root", root, "--no-verify",
                          "--no-theanorc", "--no-frameworks"], home)
    assert (done.returncode, out["changed"]) == (1, True), out
    assert "after the change was committed, which stands" in out["error"]["message"], out["error"]


def test_a_hangup_is_answered_as_a_sigterm(home, cuda_root):
    """The terminal closed (an ssh session dropped) while install waits for the root's lock:
    SIGHUP, whose default ends the process at once, with no answer (status 129), and, had it
    come while staging or placing, with the transaction left half done in the root and
    hundreds of MB staged there until the next run. It ends as SIGTERM does: one JSON
    object, exit 5 "interrupted", nothing changed. A nohup'd run's SIGHUP stays ignored."""
    import fcntl

    root = cuda_root("10.0")
    state = root / ".cudnn-setup"
    state.mkdir()
    before = tree_state(root)
    lock = os.open(state, os.O_RDONLY)
    fcntl.flock(lock, fcntl.LOCK_EX)  # another run's, as far as install can tell
    try:
        for nohup in (False, True):
            proc = subprocess.Popen(
                [sys.executable, "-m", "cudnn_setup", "install", str(SAMPLE), "--cuda-root",
                 str(root), "--json", "--no-verify"], env=clean_env(home),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                preexec_fn=(lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN)) if nohup
                else None)
            deadline = time.monotonic() + 60
            seen = b""
            while b"waiting for the lock" not in seen:
                assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
                seen += os.read(proc.stderr.fileno(), 4096)
            proc.send_signal(signal.SIGHUP)
            if nohup:
                time.sleep(1)
                assert proc.poll() is None  # ignored: still waiting
                proc.send_signal(signal.SIGTERM)
            _rolled_back_answer(proc)
    finally:
        os.close(lock)
    assert tree_state(root) == before


def _rolled_back_answer(proc: subprocess.Popen) -> None:
    """`proc`, signalled, answers with one JSON object: interrupted, exit 5, nothing changed."""
    out, err = proc.communicate(timeout=120)
    lines = out.strip().splitlines()
    assert len(lines) == 1, (proc.returncode, out, err)
    answer = json.loads(lines[0])
    assert (proc.returncode, answer["error"]["code"]) == (5, "interrupted"), answer
    assert answer["changed"] is False
