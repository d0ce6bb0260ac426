"""A SIGTERM at or after a transaction's commit point: the change stands and is said to stand
(exit 1, `changed: true`, "interrupted after the change was committed"), never "rolled back".

The signals are real: the process sends SIGTERM to itself from inside the step named, and the
tool's own handler turns it into an interruption where the program is."""
import os
import signal

import pytest

from conftest import REPO, run_json, tree_state
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
