"""scripts/setup-venv.sh: says what it does while pip works, and does not reinstall.

pip itself is replaced by a stub interpreter in .venv (a real install takes a minute and is
what the quickstart runs); the script, the stamp and the decisions are the real ones.
"""
import shutil
import subprocess
from pathlib import Path

from conftest import REPO

STUB = """#!/bin/sh
echo "$*" >> "$(dirname "$0")/../../calls.log"
case "$*" in
  *"import cudnn_setup"*) exit 0 ;;
  *"pip install -e"*) echo "Collecting numpy<1.24"
    # the first install lasts past the script's first progress tick (1 s here); later ones not
    [ -e "$(dirname "$0")/../../slept" ] || { touch "$(dirname "$0")/../../slept"; sleep 2; }
    echo "Successfully installed x" ;;
esac
exit 0
"""


def _checkout(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "setup-venv.sh", repo / "scripts")
    shutil.copy(REPO / "pyproject.toml", repo)
    python = repo / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(STUB)
    python.chmod(0o755)
    return repo


def _setup(repo: Path, extras: str) -> tuple[str, list[str]]:
    log = repo / "calls.log"
    log.unlink(missing_ok=True)
    done = subprocess.run(["bash", "scripts/setup-venv.sh", extras], cwd=repo, capture_output=True,
                          text=True, timeout=60, env={"PATH": "/usr/bin:/bin",
                                                      "SETUP_VENV_TICK": "1"})
    assert done.returncode == 0, done.stderr
    calls = log.read_text().splitlines() if log.exists() else []
    return done.stderr, [c for c in calls if "pip install" in c]


def test_setup_says_what_it_does_and_installs_once(tmp_path):
    repo = _checkout(tmp_path)
    said, pip = _setup(repo, "theano")
    assert pip == ["-m pip install --upgrade pip", "-m pip install -e .[theano]"]
    assert "installing cudnn-setup[theano]" in said and "about a minute" in said
    assert "... 1 s: Collecting numpy<1.24" in said  # progress while pip works
    said, pip = _setup(repo, "theano")
    assert pip == [] and "up to date" in said
    said, pip = _setup(repo, "test")  # another extra: installed, the earlier one kept
    assert pip[-1] == "-m pip install -e .[test,theano]"
    assert _setup(repo, "")[1] == [] and _setup(repo, "theano,test")[1] == []
    with open(repo / "pyproject.toml", "a") as f:
        f.write("\n# a changed dependency list\n")
    said, pip = _setup(repo, "theano")
    assert pip[-1] == "-m pip install -e .[theano]"
