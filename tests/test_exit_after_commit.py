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


@pytest.mark.parametrize("name", ["verify", "doctor", "list", "inspect"])
def test_a_command_that_only_looks_never_exits_5(name):
    for error in (Interrupted(), InstallFailed("cannot read it", code="permission-denied"),
                  OSError(errno.EIO, "Input/output error", "/x")):
        result = command(name, read_only=True)(_body(error, changed=False))()
        assert result.exit_code == 1, (name, error, result.error.to_dict())
