"""CUDA root discovery follows its documented order, says how it found the root, and explains failures."""
import json
import os
from pathlib import Path

import pytest

from conftest import run_json
from cudnn_setup.facts.cuda import cuda_version, find_cuda_root, library_dir, nvcc_toolkit
from cudnn_setup.errors import NoCudaRoot


@pytest.fixture
def prefix(tmp_path):
    """An empty stand-in for / so the fixed locations (/usr/local/cuda…) can be staged."""
    p = tmp_path / "prefix"
    (p / "usr" / "local").mkdir(parents=True)
    (p / "opt").mkdir()
    return p


def test_order_explicit_then_env_vars(cuda_root, prefix):
    a, b, c, d = (cuda_root() for _ in range(4))
    env = {"CUDA_ROOT": str(b), "CUDA_PATH": str(c), "CUDA_HOME": str(d), "PATH": ""}
    assert find_cuda_root(env, a, prefix).found_via == "--cuda-root"
    found = find_cuda_root(env, None, prefix)
    assert (found.path, found.found_via) == (b, "$CUDA_ROOT")
    del env["CUDA_ROOT"]
    assert find_cuda_root(env, None, prefix).found_via == "$CUDA_PATH"
    del env["CUDA_PATH"]
    assert find_cuda_root(env, None, prefix).path == d


def test_env_var_that_is_not_a_toolkit_is_skipped(cuda_root, prefix, tmp_path):
    """Skipped, and said: `CUDA_ROOT=/typo cudnn-setup install …` installed into the root a
    later step found, saying only "found via $CUDA_HOME" (or nvcc, or /usr/local/cuda)."""
    good = cuda_root()
    missing = tmp_path / "missing"
    env = {"CUDA_ROOT": str(missing), "CUDA_HOME": str(good), "PATH": ""}
    assert find_cuda_root(env, None, prefix).found_via == (
        f"$CUDA_HOME, not $CUDA_ROOT {missing} ({missing} does not exist)")


def test_install_says_when_it_passed_over_the_root_the_user_set(archives, cuda_root, home,
                                                                tmp_path):
    from fixtures.generate import GENERATION_SAMPLES

    good, typo = cuda_root(), tmp_path / "cuda-typo"
    done, out = run_json(["install", archives[GENERATION_SAMPLES["v4-v7"]], "--no-verify",
                          "--no-theanorc"], home,
                         env_extra={"CUDA_ROOT": str(typo), "CUDA_PATH": str(good)})
    assert done.returncode == 0 and out["cuda_root"] == str(good), out["error"]
    assert (f"into {good} (found via $CUDA_PATH, not $CUDA_ROOT {typo} ({typo} does not "
            "exist))") in done.stderr, done.stderr


def test_nvcc_wrapper_script_on_path(cuda_root, prefix, tmp_path):
    root = cuda_root()
    (root / "bin").mkdir()
    real = root / "bin" / "nvcc"
    real.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 10.2, V10.2.89'\n")
    real.chmod(0o755)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    wrapper = bindir / "nvcc"
    wrapper.write_text(f"#!/bin/sh\nexec {real} \"$@\"\n")
    wrapper.chmod(0o755)
    found = find_cuda_root({"PATH": str(bindir)}, None, prefix)
    assert found.path == root and found.found_via.startswith("nvcc on PATH")


def test_fixed_locations_in_order(prefix, compiler):
    from fixtures.generate import make_cuda_root

    local = prefix / "usr" / "local"
    make_cuda_root(local / "cuda-11.8", "11.8", cc=compiler)
    make_cuda_root(local / "cuda-12.4", "12.4", cc=compiler)
    make_cuda_root(local / "cuda-9.2", "9.2", cc=compiler)
    found = find_cuda_root({"PATH": ""}, None, prefix)
    assert found.path == local / "cuda-12.4"  # newest, numerically, not by string
    assert "newest" in found.found_via
    (local / "cuda").symlink_to("cuda-11.8")
    assert find_cuda_root({"PATH": ""}, None, prefix).path == local / "cuda"


def test_opt_cuda_last(prefix, compiler):
    from fixtures.generate import make_cuda_root

    make_cuda_root(prefix / "opt" / "cuda", "12.0", cc=compiler)
    assert find_cuda_root({"PATH": ""}, None, prefix).found_via.endswith("opt/cuda")


def test_nothing_found_lists_every_step(prefix, tmp_path):
    (prefix / "usr" / "local" / "cuda").mkdir()  # exists, but has no include/
    env = {"CUDA_ROOT": str(tmp_path / "gone"), "PATH": ""}
    with pytest.raises(NoCudaRoot) as info:
        find_cuda_root(env, None, prefix)
    msg = info.value.message
    for step in ("$CUDA_ROOT", "$CUDA_PATH: $CUDA_PATH is not set", "$CUDA_HOME", "nvcc on PATH",
                 "has no include/", "cuda-X.Y", "opt/cuda"):
        assert step in msg, step
    assert info.value.exit_code == 4


def test_explicit_root_that_is_not_a_toolkit(tmp_path, home):
    done, out = run_json(["verify", "--cuda-root", tmp_path, "--no-theano"], home)
    assert done.returncode == 4
    assert "is not a CUDA toolkit" in out["error"]["message"]


def test_the_fleets_variable_is_named_as_the_way_the_root_was_found(archives, cuda_root,
                                                                     tmp_path, home):
    """$CUDNN_SETUP_CUDA_ROOT is --cuda-root's default: a root from it was said to be "found
    via --cuda-root", and a wrong one told a user who never typed the option to change it."""
    from fixtures.generate import GENERATION_SAMPLES

    root = cuda_root()
    done, out = run_json(["install", archives[GENERATION_SAMPLES["v4-v7"]], "--no-verify",
                          "--no-theanorc"], home, env_extra={"CUDNN_SETUP_CUDA_ROOT": str(root)})
    assert out["cuda_root"] == str(root), out["error"]
    assert f"into {root} (found via $CUDNN_SETUP_CUDA_ROOT)" in done.stderr, done.stderr
    done, out = run_json(["verify", "--no-theano", "--no-frameworks"], home,
                         env_extra={"CUDNN_SETUP_CUDA_ROOT": str(root)})
    cuda = next(c for c in out["checks"] if c["name"] == "cuda")
    assert cuda["data"]["root_found_via"] == "$CUDNN_SETUP_CUDA_ROOT"
    # the option given, with the variable set to another root: the option's
    done, out = run_json(["verify", "--cuda-root", root, "--no-theano", "--no-frameworks"], home,
                         env_extra={"CUDNN_SETUP_CUDA_ROOT": str(tmp_path)})
    cuda = next(c for c in out["checks"] if c["name"] == "cuda")
    assert cuda["data"]["root_found_via"] == "--cuda-root"
    # a wrong one: the variable is named, in the message and the hint
    done, out = run_json(["verify", "--no-theano"], home,
                         env_extra={"CUDNN_SETUP_CUDA_ROOT": str(tmp_path)})
    assert done.returncode == 4
    assert out["error"]["message"].startswith(f"$CUDNN_SETUP_CUDA_ROOT {tmp_path} is not a "
                                              "CUDA toolkit"), out["error"]
    assert "--cuda-root" not in out["error"]["hint"]


def test_cli_reports_discovery_failure_exit_4(home, tmp_path):
    env = {"CUDA_ROOT": str(tmp_path / "none"), "PATH": "/usr/bin:/bin"}
    done, out = run_json(["verify", "--no-theano"], home, env_extra=env)
    # /usr/local/cuda exists on this machine, so discovery ends there instead
    if Path("/usr/local/cuda/include/cuda.h").exists():
        assert out["cuda_root"] == "/usr/local/cuda"
    else:
        assert done.returncode == 4


@pytest.mark.parametrize("layout,expected", [("lib64", "lib64"), ("lib", "lib"),
                                             ("lib64-link", "lib"), ("targets", "targets/x86_64-linux/lib")])
def test_library_dir_rules(cuda_root, layout, expected):
    root = cuda_root(layout=layout)
    assert library_dir(root) == (root / expected).resolve() or library_dir(root) == root / expected


@pytest.mark.parametrize("version_file,source", [("txt", "version.txt"), ("json", "version.json"),
                                                 ("none", "CUDA_VERSION")])
def test_cuda_version_sources(cuda_root, version_file, source):
    root = cuda_root(version="11.8", version_file=version_file)
    version, where = cuda_version(root, {})
    assert version == "11.8" and source in where


@pytest.mark.parametrize("written", ["11.8.20220929", "12.6.20241114", "13.0.2"])
def test_a_toolkits_own_version_json_is_read(written, cuda_root):
    """The CUDA SDK's version in a real toolkit's version.json: 11.x and 12.x installers write
    the release date as its third part (11.8.20220929). The bounds put on that part refused
    it, and the version was taken from cuda.h (or, without it, not known at all)."""
    root = cuda_root(version="11.8", version_file="json")
    (root / "version.json").write_text(json.dumps({"cuda": {"name": "CUDA SDK",
                                                            "version": written}}))
    (root / "include" / "cuda.h").unlink()
    assert cuda_version(root, {}) == (".".join(written.split(".")[:2]),
                                      str(root / "version.json"))


@pytest.mark.parametrize("written", [
    '{"cuda": {"version": "1\\n2.4"}}',  # a newline: int() of the major raised, exit 70
    '{"cuda": {"version": "' + "9" * 5000 + '.4"}}',  # past int()'s 4,300 digits: exit 70
    '{"cuda": {"version": "\\u0661\\u0662.\\u0664"}}',  # Arabic-Indic digits, read by int()
    '{"cuda": {"version": "12.4\\u001b[31m"}}',
    '{"cuda": {"version": {"major": 13}}}',
], ids=["newline", "5000-digits", "arabic-indic", "escape", "object"])
def test_a_version_file_that_holds_no_version_is_passed_over(written, archives, cuda_root, home):
    """version.json is the root's, not the tool's: a version that is not ASCII digits and
    dots, in bounds, is no version, and the next source (cuda.h's CUDA_VERSION) answers.
    install, which compares the root's major with the archive's, ended in exit 70 on the
    first two."""
    from fixtures.generate import GENERATION_SAMPLES

    root = cuda_root(version="12.4", version_file="json")
    (root / "version.json").write_text(written)
    version, where = cuda_version(root, {})
    assert (version, where) == ("12.4", f"CUDA_VERSION in {root}/include/cuda.h")
    done, out = run_json(["install", archives[GENERATION_SAMPLES["9.x"]], "--cuda-root", root,
                          "--dry-run", "--no-theanorc"], home)
    assert done.returncode == 0 and out["error"] is None, done.stderr
    (root / "include" / "cuda.h").write_text("#define CUDA_VERSION " + "9" * 5000 + "\n")
    assert cuda_version(root, {}) == (None, None)


REAL = Path("/usr/local/cuda")


@pytest.mark.skipif(not (REAL / "include" / "cuda.h").exists(), reason="no CUDA toolkit here")
def test_real_toolkit_read_only():
    before = os.stat(REAL)
    found = find_cuda_root({"PATH": "/usr/local/bin:/usr/bin:/bin"}, None)
    # nvcc on PATH is a wrapper script in /usr/local/bin that execs the real toolkit's nvcc
    assert found.found_via.startswith("nvcc on PATH")
    assert found.path.resolve() == REAL.resolve()
    assert found.version == "13.0"
    assert library_dir(REAL) == (REAL / "lib").resolve()  # lib64 is a symlink to lib
    assert nvcc_toolkit(Path("/usr/local/bin/nvcc")).resolve() == REAL.resolve()
    assert os.stat(REAL).st_mtime == before.st_mtime
    assert not (REAL / ".cudnn-setup").exists()


@pytest.mark.parametrize("variable", ["CUDA_ROOT", "CUDA_PATH", "CUDA_HOME"])
def test_a_relative_root_in_the_environment_is_the_one_under_the_working_dir(
        archives, cuda_root, home, bare_python, variable):
    """`CUDA_HOME=cuda1 cudnn-setup doctor`: the root is the one under the directory the
    command was given in, for every check. doctor's survey kept the relative name, and its
    children, started in scratch dirs of their own, found no library there: load, deps and
    compile failed a cuDNN that loads."""
    from fixtures.generate import GENERATION_SAMPLES

    root = cuda_root()
    run_json(["install", archives[GENERATION_SAMPLES["v4-v7"]], "--cuda-root", root,
              "--no-verify", "--no-theanorc"], home)
    done, out = run_json(["doctor", "--python", bare_python], home,
                         env_extra={variable: root.name}, cwd=root.parent)
    found = next(r for r in out["cuda_roots"] if r["found_via"] == f"${variable}")
    assert found["path"] == str(root), found
    fails = [p["message"] for p in out["problems"] if p["severity"] == "fail"]
    assert done.returncode == 0 and not fails, fails
