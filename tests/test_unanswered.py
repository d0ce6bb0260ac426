"""A child that gave no answer is no "no": it could not be started (a bad interpreter line, a
process limit), it hung, or it failed before it could ask. The check or step that asked says
it could not tell, and writes nothing that a "no" would have written.

The children here are real programs that fail as users' do: an interpreter whose own
interpreter line names a program that is gone (a venv whose base Python was removed), and one
that exits 1 before printing anything (a broken sitecustomize)."""
import configparser
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, run_json
from cudnn_setup.child import Unanswered
from cudnn_setup.checks.theano_check import has_theano
from cudnn_setup.theano_blas import find_blas, numpy_blas

SAMPLE = REPO / "fixtures" / "samples" / "cudnn-10.0-linux-x64-v7.4.2.24.tgz"


def _program(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.fixture
def gone(tmp_path) -> Path:
    """An interpreter that cannot be started: its interpreter line names a removed program."""
    return _program(tmp_path / "gone-python", "#!/nonexistent/bin/python3\n")


@pytest.fixture
def broken(tmp_path) -> Path:
    """An interpreter that starts and fails before it runs anything it is given."""
    return _program(tmp_path / "broken-python", "#!/bin/sh\necho 'sitecustomize: boom' >&2\n"
                                                "exit 1\n")


@pytest.fixture
def crashing(tmp_path) -> Path:
    """An interpreter that dies of a signal before it runs anything (said "exited with status
    -11", an exit status no program can give)."""
    return _program(tmp_path / "crashing-python", "#!/bin/sh\necho 'numpy: core dumped' >&2\n"
                                                   "kill -SEGV $$\n")


@pytest.mark.parametrize("which, said", [("gone", "it could not be started"),
                                         ("broken", "it exited with status 1 (sitecustomize"),
                                         ("crashing", "it died of SIGSEGV (numpy: core dumped")])
def test_an_interpreter_that_does_not_answer_is_not_one_without_theano(which, said, request,
                                                                       home, cuda_root):
    python = request.getfixturevalue(which)
    with pytest.raises(Unanswered, match=said.replace("(", r"\(")):
        has_theano(str(python), {})
    with pytest.raises(Unanswered):
        numpy_blas(str(python), {})
    root = cuda_root("10.0")
    run_json(["install", SAMPLE, "--cuda-root", root, "--no-verify", "--no-theanorc",
              "--no-frameworks"], home)
    done, out = run_json(["verify", "--cuda-root", root, "--python", python,
                          "--no-frameworks"], home)
    theano = next(c for c in out["checks"] if c["name"] == "theano")
    assert theano["status"] == "fail", theano  # not "skip: Theano is not installed"
    assert f"could not ask {python} whether Theano is installed: {said}" in theano["detail"]
    assert done.returncode == 1


def test_a_compiler_that_cannot_be_started_leaves_the_blas_unknown_not_absent(tmp_path):
    """`cc` there, but its interpreter gone: the linker was never asked, so "the linker finds no
    BLAS" would be false. The flags are empty (Theano stays importable) and say why."""
    tools = tmp_path / "bin"
    tools.mkdir()
    _program(tools / "cc", "#!/nonexistent/bin/sh\n")
    found = find_blas({"PATH": str(tools)})
    assert found.unanswered and found.ldflags == ""
    assert "the linker could not be asked" in found.why and "could not be started" in found.why
    assert "finds no BLAS" not in found.why


def test_an_install_whose_python_does_not_answer_writes_no_blas_it_did_not_find(
        broken, home, cuda_root):
    """numpy of --python could not be asked: nothing is written for [blas] (a "numpy has
    blas_opt_info" or "no BLAS" would have been a guess), and the theanorc step warns."""
    root = cuda_root("10.0")
    done, out = run_json(["install", SAMPLE, "--cuda-root", root, "--python", broken,
                          "--no-verify", "--no-frameworks"], home)
    assert done.returncode == 0, out
    step = next(c for c in out["checks"] if c["name"] == "theanorc")
    assert step["status"] == "warn"
    assert f"could not ask {broken}'s numpy for its BLAS: it exited with status 1" in step["detail"]
    blas = out["theanorc"]["theano_cudnn"]["blas"]
    assert blas["unanswered"] and blas["needed"] is None
    written = configparser.ConfigParser()
    written.read(home / ".theanorc")
    assert not written.has_section("blas")


def test_the_numpy_probe_says_no_numpy_in_words(tmp_path):
    """No numpy at all is an answer ({"numpy": null}), told apart from one that never came:
    here a Python without site-packages."""
    bare = _program(tmp_path / "py", "#!/bin/sh\nexec python3 -I -S \"$@\"\n")
    assert subprocess.run([bare, "-c", "import numpy"], capture_output=True).returncode != 0
    assert numpy_blas(str(bare), {}) is None


@pytest.mark.parametrize("said, unanswered", [
    ("gcc: fatal error: cannot execute 'as': fork: Resource temporarily unavailable", True),
    ("/usr/bin/ld: /tmp/cc.o: undefined reference to dgemm_", False)])
def test_a_link_that_failed_for_want_of_a_process_is_no_missing_blas(said, unanswered, tmp_path):
    """The compiler driver ran but could not start its assembler or linker (a pids limit):
    no answer, as a cc that cannot start is none. An undefined dgemm_ is a real "no"."""
    tools = tmp_path / "bin"
    tools.mkdir()
    cc = _program(tools / "cc", "#!/bin/sh\ncase \"$1\" in -print-file-name=*) echo \"$0\" ;;\n"
                  f"*) echo \"{said}\" >&2; exit 1 ;;\nesac\n")
    found = find_blas({"PATH": str(tools)})
    assert found.unanswered is unanswered, found
    assert ("the linker could not be asked" in found.why) is unanswered
    if not unanswered:
        assert f"{cc} does not link dgemm_" in found.why
