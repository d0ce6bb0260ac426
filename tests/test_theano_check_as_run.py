"""The theano check runs Theano as the user runs it: the user's interpreter, environment and
config, nothing added; its detail names the config files and the flags it ran with."""
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import check_facts, clean_env, run_json
from cudnn_setup.checks.theano_check import check_theano
from cudnn_setup.report import Check
from fixtures.generate import GENERATION_SAMPLES
from test_theano_truth import inst_of

NO_GPU = Check("gpu", "skip", "no NVIDIA driver: libcuda.so.1 cannot be loaded")
needs_theano = pytest.mark.skipif(importlib.util.find_spec("theano") is None,
                                  reason="the theano extra is not installed")


def run_as_user(home: Path, **env) -> subprocess.CompletedProcess:
    """`import theano` in the user's own Python, HOME and THEANORC as given; nothing added."""
    return subprocess.run([sys.executable, "-c", "import theano"], capture_output=True,
                          text=True, timeout=600, env=clean_env(home, **env))


@needs_theano
def test_a_user_config_without_ldflags_fails_the_check_with_the_reason(tmp_path, home):
    rc = home / ".theanorc"
    rc.write_text("[global]\noptimizer_including = cudnn\n\n[dnn]\nlibrary_path = /x\n")
    assert "blas_opt_info" in run_as_user(home).stderr  # the user's own import fails
    check = check_theano(inst_of(tmp_path, "7.6.5"),
                         check_facts(clean_env(home), sys.executable, theanorc=rc, gpu=NO_GPU))
    assert check.status == "fail", check
    assert check.detail.startswith(f"`import theano` fails with config {rc}, THEANO_FLAGS "
                                   "unset: AttributeError")
    assert "numpy 1.23.5 has no blas_opt_info" in check.detail
    # the fix names the interpreter whose numpy decides: the tool's own may have none
    assert f"`cudnn-setup theanorc --python {sys.executable}` writes it" in check.detail
    assert str(rc) in check.detail
    rc.write_text(rc.read_text() + "\n[blas]\nldflags =\n")  # the fix the detail names
    assert run_as_user(home).returncode == 0
    check = check_theano(inst_of(tmp_path, "7.6.5"),
                         check_facts(clean_env(home), sys.executable, theanorc=rc, gpu=NO_GPU))
    assert check.status == "warn" and "T.exp ok" in check.detail, check
    # THEANO_FLAGS of the user's environment are what the child runs with, and shown
    flags = "blas.ldflags=,optimizer_including=fusion"
    check = check_theano(inst_of(tmp_path, "7.6.5"),
                         check_facts(clean_env(home, THEANO_FLAGS=flags), sys.executable,
                                     theanorc=rc, gpu=NO_GPU))
    assert f"THEANO_FLAGS {flags!r}" in check.detail
    assert check.data["optimizer_including"] == "fusion" and check.status == "fail"


@needs_theano
def test_no_theano_config_at_all_is_said_plainly(tmp_path, home):
    rc = home / ".theanorc"
    check = check_theano(inst_of(tmp_path, "7.6.5"),
                         check_facts(clean_env(home), sys.executable, theanorc=rc, gpu=NO_GPU))
    assert check.status == "fail"
    assert f"no Theano config ({rc} does not exist)" in check.detail
    assert "not picked up" not in check.detail
    # a user whose flags let Theano import: it runs, without any config to say cuDNN's paths
    env = clean_env(home, THEANO_FLAGS="blas.ldflags=")
    check = check_theano(inst_of(tmp_path, "7.6.5"),
                         check_facts(env, sys.executable, theanorc=rc, gpu=NO_GPU))
    assert check.status == "fail" and "T.exp ok" in check.detail
    assert f"with no Theano config ({rc} does not exist), THEANO_FLAGS 'blas.ldflags='" \
        in check.detail and "`cudnn-setup theanorc` writes them" in check.detail
    check = check_theano(inst_of(tmp_path, "9.3.0"),
                         check_facts(env, sys.executable, theanorc=rc, gpu=NO_GPU))
    assert check.status == "warn" and "Theano 1.0.5 supports cuDNN v5 to v7" in check.detail


@needs_theano
def test_verify_runs_theano_under_the_config_install_wrote_and_says_which(archives, cuda_root,
                                                                         home):
    rc = home / "conf" / "theanorc"
    rc.parent.mkdir()
    root = cuda_root(version="10.0")
    done, _ = run_json(["install", archives[GENERATION_SAMPLES["v4-v7"]], "--cuda-root", root,
                        "--theanorc", rc, "--no-verify", "--no-frameworks"], home)
    assert done.returncode == 0, done.stderr
    done, out = run_json(["verify", "--cuda-root", root, "--no-frameworks"], home,
                         {"THEANORC": str(rc)}, timeout=900)
    theano = {c["name"]: c for c in out["checks"]}["theano"]
    assert theano["status"] == "warn", theano
    assert f"with config {rc}, THEANO_FLAGS unset: T.exp ok" in theano["detail"]
    assert theano["data"]["config_files"] == [str(rc)]
    # --theanorc naming a file Theano does not read here: THEANORC is set to it, and said
    other = home / "elsewhere.rc"
    other.write_text(rc.read_text())
    done, out = run_json(["verify", "--cuda-root", root, "--no-frameworks", "--theanorc",
                          other], home, timeout=900)
    theano = {c["name"]: c for c in out["checks"]}["theano"]
    assert f"with config {other} (THEANORC set to the file --theanorc names" \
        in theano["detail"], theano


def test_a_relative_home_is_the_one_the_user_meant(tmp_path, theano_compiledir):
    """HOME=sandbox/home, relative to where the command was given: the Theano check's child
    (run in a scratch directory of its own) reads the config the user's own Theano reads."""
    import json
    import subprocess
    import sys

    from conftest import clean_env

    work = tmp_path / "work"
    (work / "sandbox" / "home").mkdir(parents=True)
    (work / "sandbox" / "home" / ".theanorc").write_text("[blas]\nldflags =\n")
    # the session's compile cache, as the `home` fixture gives it: Theano compiles once
    (work / "sandbox" / "home" / ".theano").symlink_to(theano_compiledir, target_is_directory=True)
    root = tmp_path / "cuda"
    from fixtures.generate import Compiler, make_cuda_root
    (tmp_path / "cc").mkdir()
    make_cuda_root(root, "10.0", cc=Compiler(tmp_path / "cc"))
    env = clean_env(work / "sandbox" / "home")
    env["HOME"] = "sandbox/home"
    done = subprocess.run([sys.executable, "-m", "cudnn_setup", "verify", "--cuda-root", str(root),
                           "--no-frameworks", "--json"], cwd=work, env=env, capture_output=True,
                          text=True, timeout=600)
    theano = next(c for c in json.loads(done.stdout)["checks"] if c["name"] == "theano")
    assert "import theano` fails" not in theano["detail"], theano
    assert str(work / "sandbox" / "home" / ".theanorc") in theano["detail"], theano


@needs_theano
@pytest.mark.skipif(__import__("os").geteuid() != 0, reason="root with another user's HOME")
def test_root_with_a_users_home_leaves_nothing_of_its_own_in_it(archives, cuda_root, home):
    """`sudo cudnn-setup install …` keeps the user's HOME on many systems. Theano run by the
    check as root made ~/.theano and its compiledir root's (0750): the user's own Theano then
    stopped ("Unable to create the compiledir directory"). It compiles in a scratch dir."""
    import os

    nobody = 65534
    (home / ".theano").unlink()  # the session's compile cache: here the user has none yet
    os.chown(home, nobody, nobody)
    root = cuda_root(version="10.0")
    done, out = run_json(["install", archives[GENERATION_SAMPLES["v4-v7"]], "--cuda-root", root,
                          "--no-frameworks"], home, timeout=900)
    theano = {c["name"]: c for c in out["checks"]}["theano"]
    assert theano["status"] == "warn" and "T.exp ok" in theano["detail"], theano
    left = {p.name: p.stat().st_uid for p in home.iterdir()}
    assert ".theano" not in left and left == {".theanorc": nobody}, left
    assert "scratch base_compiledir" in theano["detail"], theano


@needs_theano
def test_without_home_the_config_named_is_the_one_theano_reads(tmp_path):
    """HOME unset (a systemd unit, `env -i`, some fleet runners): Theano reads ~/.theanorc of
    this user's home in the password database, as os.path.expanduser does. The check said
    "no Theano config (~/.theanorc (HOME unset) does not exist)" even where that file exists
    and Theano read it, or, given the file install writes there, "THEANORC set to the file
    --theanorc names", an option nobody gave, and pointed Theano at it by THEANORC."""
    import os
    import pwd

    own = Path(pwd.getpwuid(os.getuid()).pw_dir) / ".theanorc"
    env = {k: v for k, v in clean_env(tmp_path / "home").items() if k != "HOME"}
    # compiled in a directory of the test's: Theano without HOME compiles in the real home
    env["THEANO_FLAGS"] = f"base_compiledir={tmp_path / 'compiled'},blas.ldflags="
    check = check_theano(inst_of(tmp_path, "7.6.5"),
                         check_facts(env, sys.executable, theanorc=own, gpu=NO_GPU))
    assert "THEANORC set" not in check.detail and "HOME unset" not in check.detail, check
    assert (f"with config {own}, THEANO_FLAGS" in check.detail
            or f"with no Theano config ({own} does not exist)" in check.detail), check


@needs_theano
def test_theanorc_set_empty_is_no_config_for_the_check_or_the_merge(tmp_path, home, archives,
                                                                     cuda_root):
    """THEANORC set but empty (`THEANORC= python …`): Theano reads no config file at all; its
    ~/.theanorc default is only for THEANORC unset. The tool took ~/.theanorc: `theanorc`
    passed with "created ~/.theanorc", and the check pointed Theano at it through THEANORC,
    ran graphs the user's Theano cannot, and named an option nobody gave."""
    rc = home / ".theanorc"
    rc.write_text("[blas]\nldflags =\n")  # Theano would import, had it read it
    assert "blas_opt_info" in run_as_user(home, THEANORC="").stderr  # the user's own Theano
    env = clean_env(home, THEANORC="")
    check = check_theano(inst_of(tmp_path, "7.6.5"),
                         check_facts(env, sys.executable, theanorc=rc, gpu=NO_GPU))
    assert check.status == "fail" and "--theanorc" not in check.detail, check
    assert "no Theano config ($THEANORC is set but names no file" in check.detail, check
    assert "Fix: unset THEANORC" in check.detail
    root = cuda_root()
    run_json(["install", archives[GENERATION_SAMPLES["v4-v7"]], "--cuda-root", root,
              "--no-theanorc", "--no-verify"], home)
    done, out = run_json(["theanorc", "--cuda-root", root], home, {"THEANORC": ""})
    step = out["checks"][0]
    assert step["status"] == "warn" and "Theano reads no config file here: $THEANORC is set " \
        "but names none" in step["detail"], step
