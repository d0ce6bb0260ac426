"""A transaction that fails and can then be neither rolled back nor shown to be committed: the
state dir stops being readable mid-transaction (its owner, the second user the tool runs as,
takes its permissions away: chmod 000, which root's permission checks would ignore).

Before, the question "was it committed?" raised, the rollback was skipped, and the install
answered exit 5 `permission-denied` with `changed: false`: "rolled back", over a root holding
half the install. Now it answers one JSON object, exit 1 `transaction-unfinished`,
`changed: true`, keeps the journal, and the next run (once the dir is readable again) rolls
the transaction back and leaves the root as it was.

The chmod and every failure after it are real; the step it happens at is picked by wrapping
the tool's own `Filesystem` step (the seam its fault tests use), in the CLI's process."""
import json
import os
import shutil
import subprocess

import pytest

from conftest import REPO, clean_env, tree_state
from fixtures.generate import make_cuda_root
from test_state_trust import NOBODY, _cli, _home, _python, shared  # noqa: F401 (fixture)

SAMPLE = REPO / "fixtures" / "samples" / "cudnn-10.0-linux-x64-v7.4.2.24.tgz"

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="needs root and setpriv to be a second user")

# The CLI, its state dir made unreadable by its own user right at one step of the transaction:
# "commit" (as the manifest is about to be written) or "apply" (at the second rename into the
# root). argv: STATE_DIR STEP CLI-ARGS...
_DRIVER = """
import os, sys
from cudnn_setup.cli import main
from cudnn_setup.state import transaction

state_dir, step = sys.argv[1], sys.argv[2]
fs = transaction.Filesystem
write_manifest, replace = fs.write_manifest, fs.replace
renames = []

def commit(self, path, manifest):
    os.chmod(state_dir, 0)
    write_manifest(self, path, manifest)

def apply(self, src, dst):
    renames.append(dst)
    if len(renames) == 2:
        os.chmod(state_dir, 0)
    replace(self, src, dst)

if step == "commit":
    fs.write_manifest = commit
else:
    fs.replace = apply
sys.exit(main(sys.argv[3:]))
"""


def _chown(top, uid=65534):
    for dirpath, dirnames, filenames in os.walk(top):
        os.lchown(dirpath, uid, uid)
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), uid, uid)


@pytest.mark.parametrize("step", ["commit", "apply"])
def test_a_transaction_that_cannot_be_settled_says_so_and_the_next_run_settles_it(
        step, shared, compiler):
    root = make_cuda_root(shared / "cuda", "10.0", "lib64", cc=compiler)
    archive = shared / SAMPLE.name
    shutil.copy(SAMPLE, archive)
    archive.chmod(0o644)
    _chown(root)
    home = _home(shared, "home")
    before = tree_state(root)
    state = root / ".cudnn-setup"
    python, path = _python()
    done = subprocess.run(
        [*NOBODY, python, "-c", _DRIVER, str(state), step, "install", str(archive),
         "--cuda-root", str(root), "--no-verify", "--no-theanorc", "--no-frameworks", "--json"],
        env=clean_env(home, TMPDIR=str(home), PYTHONPATH=path), capture_output=True,
        text=True, timeout=300)
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, f"one JSON line expected: {done.stdout!r} {done.stderr[-3000:]}"
    out = json.loads(lines[0])
    assert done.returncode == 1, out
    assert out["ok"] is False and out["changed"] is True, out
    error = out["error"]
    assert error["code"] == "transaction-unfinished" and error["exit_code"] == 1, error
    assert "neither rolled back nor finished" in error["message"], error
    assert ("cannot be read back" if step == "commit" else "rolling it back failed") in \
        error["message"], error
    assert "run the command again" in error["hint"], error
    assert stat_mode(state) == 0  # left as it was: nothing tidied over it
    state.chmod(0o755)
    assert (state / "journal.json").is_file()  # kept for the next run
    assert tree_state(root, leave_out=".cudnn-setup") != before  # half placed, at least

    # read-only commands say a transaction is pending; the next install settles it first
    done, out = _cli(["uninstall", "--cuda-root", root], home, user=True)
    assert done.returncode == 0, out
    assert "rolled back transaction" in done.stderr, done.stderr
    assert tree_state(root) == before


def stat_mode(path):
    return os.lstat(path).st_mode & 0o7777
