"""The Theano config the tool writes: the real Theano 1.0.5 imports and runs under it as the
user runs it, with the [blas] ldflags this numpy needs, and a cuDNN this Theano cannot use is
not asked for unless the user insists."""
import configparser
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import clean_env, run_json
from cudnn_setup.fetch.known_releases import releases
from cudnn_setup.steps.context import Context
from cudnn_setup.theanorc_merge import merge
from fixtures.generate import GENERATION_SAMPLES

V7, V9 = GENERATION_SAMPLES["v4-v7"], GENERATION_SAMPLES["9.x"]
needs_theano = pytest.mark.skipif(importlib.util.find_spec("theano") is None,
                                  reason="the theano extra is not installed")

# What a user types after the tool wrote the config: import, T.exp, a BLAS-using dot.
USER_GRAPH = """\
import json, numpy as np, theano, theano.tensor as T
v = theano.shared(np.arange(4, dtype=theano.config.floatX))
f = theano.function([], T.exp(v))
assert np.allclose(f(), np.exp(np.arange(4)), rtol=1e-4)
x = T.matrix()
g = theano.function([x], T.dot(x, x))
m = np.eye(3, dtype=theano.config.floatX) * 2
assert np.allclose(g(m), m @ m)
print(json.dumps({"ldflags": theano.config.blas.ldflags,
                  "including": theano.config.optimizer_including}))
"""


def run_as_user(home: Path, **env) -> subprocess.CompletedProcess:
    """The user's own Python, HOME and THEANORC as given; no THEANO_FLAGS, nothing added."""
    return subprocess.run([sys.executable, "-c", USER_GRAPH], capture_output=True, text=True,
                          timeout=600, env=clean_env(home, **env))


def theano_reads(rc: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(rc.read_text())
    return parser


@needs_theano
def test_theano_imports_and_runs_under_the_config_install_writes(archives, cuda_root, home):
    rc = home / "conf" / "theanorc"
    rc.parent.mkdir()
    root = cuda_root(version="10.0")
    done, out = run_json(["install", archives[V7], "--cuda-root", root, "--theanorc", rc,
                          "--no-verify", "--no-frameworks"], home)
    assert done.returncode == 0, done.stderr
    ran = run_as_user(home, THEANORC=str(rc))
    assert ran.returncode == 0, ran.stderr[-3000:]
    from cudnn_setup.theano_blas import find_blas

    blas = out["theanorc"]["theano_cudnn"]["blas"]
    assert blas["needed"] is True and "numpy 1.23.5 has no blas_opt_info" in blas["why"]
    machine = find_blas(clean_env(home))  # what this machine links: -lopenblas, -lblas or none
    assert theano_reads(rc).get("blas", "ldflags") == machine.ldflags == blas["ldflags"]
    assert "# ldflags set by cudnn-setup: numpy 1.23.5 has no blas_opt_info" in rc.read_text()
    said = json.loads(ran.stdout.strip().splitlines()[-1])
    assert said == {"ldflags": machine.ldflags, "including": "cudnn"}


@needs_theano
def test_cudnn_9_leaves_no_active_cudnn_flag_unless_forced(archives, cuda_root, home):
    rc = home / ".theanorc"
    root = cuda_root(version="12.4")
    done, out = run_json(["install", archives[V9], "--cuda-root", root, "--theanorc", rc,
                          "--no-verify", "--no-frameworks"], home)
    assert done.returncode == 0, done.stderr
    assert not theano_reads(rc).has_option("global", "optimizer_including")
    assert theano_reads(rc).get("dnn", "library_path") == str(root / "lib64")  # [dnn] kept
    text = rc.read_text()
    assert "# optimizer_including = cudnn  (not set by cudnn-setup: Theano 1.0.5 cannot use " \
           "cuDNN 9.3.0;" in text and "--force-theano-cudnn writes it anyway)" in text
    about = out["theanorc"]["theano_cudnn"]
    assert (about["usable"], about["optimizer_including_cudnn"]) == (False, False)
    assert about["serving_release"] is None  # no cuDNN v7 is built for CUDA 12
    assert "the newest one is cuDNN 7.6.5 for CUDA 10.2" in about["serving"]
    step = {c["name"]: c for c in out["checks"]}["theanorc"]
    assert step["status"] == "warn" and "optimizer_including=cudnn not written" in step["detail"]
    ran = run_as_user(home)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert json.loads(ran.stdout.strip().splitlines()[-1])["including"] == ""
    # the same again changes nothing; the flag writes it, and the commented line goes
    done, out = run_json(["theanorc", "--cuda-root", root], home)
    assert out["changed"] is False and rc.read_text() == text
    done, out = run_json(["theanorc", "--cuda-root", root, "--force-theano-cudnn"], home)
    assert done.returncode == 0 and out["changed"] is True
    assert theano_reads(rc).get("global", "optimizer_including") == "cudnn"
    assert "not set by cudnn-setup" not in rc.read_text()
    assert out["theanorc"]["theano_cudnn"]["optimizer_including_cudnn"] is True
    assert "written anyway (--force-theano-cudnn)" in out["theanorc"]["warnings"][-1]


@pytest.mark.parametrize("sample,cuda,usable", [("v3", "7.0", False), ("v4-v7", "10.0", True)])
def test_cudnn_3_to_7_get_the_whole_config(archives, cuda_root, home, sample, cuda, usable):
    """v3 and v4 are too old for Theano 1.0.5, but the Theano releases of their day use them:
    their config is written as it always was, with the warning."""
    rc = home / ".theanorc"
    root = cuda_root(version=cuda)
    done, out = run_json(["install", archives[GENERATION_SAMPLES[sample]], "--cuda-root", root,
                          "--no-verify", "--no-frameworks"], home)
    assert done.returncode == 0, done.stderr
    assert theano_reads(rc).get("global", "optimizer_including") == "cudnn"
    assert "not set by cudnn-setup" not in rc.read_text()
    about = out["theanorc"]["theano_cudnn"]
    assert (about["usable"], about["optimizer_including_cudnn"]) == (usable, True)
    if not usable:
        assert "written, as for the Theano releases of its day" in out["theanorc"]["warnings"][-1]
        assert about["reason"].startswith("Theano 1.0.5 needs cuDNN v5 or newer")


@pytest.mark.parametrize("cuda,version,file_name", [
    ("10.2", "7.6.5.32", "cudnn-10.2-linux-x64-v7.6.5.32.tgz"),
    ("10.0", "7.6.5.32", "cudnn-10.0-linux-x64-v7.6.5.32.tgz"),
    ("9.0", "7.6.5.32", "cudnn-9.0-linux-x64-v7.6.5.32.tgz"),
    ("12.4", None, None), ("11.8", None, None)])
def test_the_release_that_serves_theano_comes_from_the_known_releases(cuda, version, file_name):
    from cudnn_setup.facts.theano import serving_release

    got = serving_release(releases(), cuda)
    assert (got.version, got.file_name) == (version, file_name)
    if version is None:
        assert got.text == (f"no cuDNN Theano 1.0.5 can use is built for CUDA {cuda}; the "
                            "newest one is cuDNN 7.6.5 for CUDA 10.2 "
                            "(cudnn-10.2-linux-x64-v7.6.5.32.tgz)")
    else:
        assert got.text.startswith(f"cuDNN 7.6.5 ({file_name}) is the newest")


def _library(tmp_path: Path, name: str, body: str) -> Path:
    lib = tmp_path / name
    lib.mkdir()
    src = lib / "blas.c"
    src.write_text(body)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib / f"lib{name}.so"), str(src)],
                   check=True)
    return lib


def test_the_blas_is_found_as_the_linker_finds_it_and_proven_by_a_link(tmp_path):
    import os

    from cudnn_setup.theano_blas import BlasFlags, find_blas

    env = {"PATH": os.environ["PATH"]}
    plain = find_blas(env)
    assert plain.ldflags in ("", "-lopenblas", "-lblas")
    if plain.ldflags == "":  # this machine has none: said in the comment Theano's config gets
        assert plain.why.startswith("empty: the linker finds no BLAS (libopenblas.so not found")
    not_a_blas = _library(tmp_path, "blas", "int something_else(void) { return 0; }\n")
    openblas = _library(tmp_path, "openblas", "void dgemm_(void) {}\n")
    got = find_blas({**env, "LIBRARY_PATH": str(openblas)})
    assert got == BlasFlags(f"-L{openblas} -lopenblas",
                            f"{openblas / 'libopenblas.so'} links (dgemm_); found through "
                            "LIBRARY_PATH, so its directory is named")
    if plain.ldflags == "":
        got = find_blas({**env, "LIBRARY_PATH": str(not_a_blas)})
        assert got.ldflags == "" and f"{not_a_blas / 'libblas.so'} does not link dgemm_" \
            in got.why
    got = find_blas({"PATH": str(tmp_path / "no-compiler-here")})
    assert got.ldflags == "" and "no C compiler" in got.why


def test_a_users_own_ldflags_is_never_changed(tmp_path):
    from cudnn_setup.steps.theano_step import blas_needed
    from cudnn_setup.theano_blas import BlasFlags

    merged, _ = merge("[blas]\nldflags = -lmkl_rt\n", Path("/r"), Path("/r/lib64"),
                      blas=BlasFlags("-lopenblas", "found"))
    assert theano_reads_text(merged).get("blas", "ldflags") == "-lmkl_rt"
    assert "set by cudnn-setup" not in merged
    # ldflags in a file read earlier: writing one in the last would override it
    first, last = tmp_path / "site.rc", tmp_path / "user.rc"
    first.write_text("[blas]\nldflags = -lmkl_rt\n")
    ctx = Context(env={"THEANORC": f"{first}:{last}", "PATH": "/usr/bin:/bin"}, home=tmp_path,
                  python=sys.executable)
    flags, about = blas_needed(ctx, sys.executable, last)
    if importlib.util.find_spec("theano") is not None:  # numpy 1.23.5 of the theano extra
        assert flags is None and about == {"needed": False,
                                           "why": f"{first} sets [blas] ldflags already"}
        first.write_text("[global]\n")
        flags, about = blas_needed(ctx, sys.executable, last)
        assert flags is not None and about["needed"] is True


def theano_reads_text(text: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(text)
    return parser


def test_numpy_is_asked_for_the_build_info_theano_reads(tmp_path):
    """The child reads numpy.distutils' own __config__.py, the module Theano 1.0.5 reads: the
    theano extra's numpy 1.23.5 has no blas_opt_info; a numpy whose build recorded one has."""
    import os

    from cudnn_setup.child import Unanswered
    from cudnn_setup.theano_blas import NumpyBlas, numpy_blas

    env = {"PATH": os.environ["PATH"]}
    if importlib.util.find_spec("theano") is not None:
        assert numpy_blas(sys.executable, env) == NumpyBlas("1.23.5", False)
    site = tmp_path / "site"  # a numpy as older wheels were built: blas_opt_info recorded
    (site / "numpy" / "distutils").mkdir(parents=True)
    (site / "numpy" / "__init__.py").write_text("")
    (site / "numpy" / "distutils" / "__init__.py").write_text("")
    (site / "numpy" / "distutils" / "__config__.py").write_text(
        "import os\nblas_opt_info = {'libraries': ['openblas']}\n")
    (site / "numpy-1.19.5.dist-info").mkdir()
    (site / "numpy-1.19.5.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: numpy\nVersion: 1.19.5\n")
    older = numpy_blas(sys.executable, {**env, "PYTHONPATH": str(site)})
    assert older == NumpyBlas("1.19.5", True)
    (site / "numpy" / "distutils" / "__config__.py").write_text("raise SystemExit(3)\n")
    with pytest.raises(Unanswered, match="exited with status 3"):  # no answer, no "no numpy"
        numpy_blas(sys.executable, {**env, "PYTHONPATH": str(site)})


@needs_theano
def test_a_real_blas_found_through_library_path_is_what_theano_links(archives, cuda_root, home,
                                                                     tmp_path):
    """scipy's own OpenBLAS (a real one, exporting dgemm_) offered as libopenblas.so through
    LIBRARY_PATH at install time: the config names it with -L, and the user's Theano, started
    without LIBRARY_PATH, builds and loads its BLAS ops against it (Theano makes -L an rpath).
    libopenblas.so is a linker script, as distributions ship libc.so: the library and the
    gfortran and quadmath it needs, which ld would not find beside it on its own."""
    import scipy

    libs = Path(scipy.__file__).parent.parent / "scipy.libs"
    openblas = sorted(libs.glob("libopenblas*.so"))
    if not openblas:
        pytest.skip("this scipy carries no OpenBLAS of its own")
    blas = tmp_path / "blas"
    blas.mkdir()
    for lib in libs.iterdir():  # its soname and its own needs, beside it
        (blas / lib.name).symlink_to(lib)
    (blas / "libopenblas.so").write_text(
        "INPUT(" + " ".join(str(blas / lib.name) for lib in sorted(libs.iterdir())) + ")\n")
    rc = home / ".theanorc"
    root = cuda_root(version="10.0")
    done, out = run_json(["install", archives[V7], "--cuda-root", root, "--no-verify",
                          "--no-frameworks"], home, {"LIBRARY_PATH": str(blas)})
    assert done.returncode == 0, done.stderr
    assert theano_reads(rc).get("blas", "ldflags") == f"-L{blas} -lopenblas"
    ran = subprocess.run([sys.executable, "-c", USER_GRAPH], capture_output=True, text=True,
                         timeout=600, env=clean_env(home))
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert json.loads(ran.stdout.strip().splitlines()[-1])["ldflags"] == f"-L{blas} -lopenblas"
    assert "NumPy C-API based implementation for BLAS" not in ran.stderr  # Theano's own gemm


def test_the_commented_out_flag_is_replaced_but_a_users_own_is_kept():
    mine = "[global]\n# optimizer_including = cudnn\nfloatX = float32\n"
    off, _ = merge(mine, Path("/r"), Path("/r/lib64"), cudnn=False, cudnn_off_reason="old")
    again, _ = merge(off, Path("/r"), Path("/r/lib64"), cudnn=False, cudnn_off_reason="new")
    assert "(not set by cudnn-setup: new)" in again and "cudnn-setup: old" not in again
    on, warnings = merge(again, Path("/r"), Path("/r/lib64"))
    assert "not set by cudnn-setup" not in on and not warnings
    assert on.startswith("[global]\n# optimizer_including = cudnn\nfloatX = float32\n"
                         "optimizer_including = cudnn\n")
    # the flag already active (written for an earlier cuDNN) is the user's to drop: said
    _, warnings = merge(on, Path("/r"), Path("/r/lib64"), cudnn=False, cudnn_off_reason="v9")
    assert warnings == ["[global] optimizer_including already lists cudnn (kept as it is), "
                        "which makes Theano stop on a GPU here: v9"]


def test_a_flag_forced_earlier_is_said_active_not_contradicted(tmp_path):
    """After `theanorc --force-theano-cudnn`, a plain `theanorc` keeps the user's active flag:
    it says so (`optimizer_including_cudnn` true, the line kept) instead of writing a
    commented-out line beneath it and reporting the flag as not written."""
    import json
    import subprocess
    import sys

    from conftest import clean_env
    from fixtures.generate import Compiler, build, make_cuda_root

    (tmp_path / "cc").mkdir()
    cc = Compiler(tmp_path / "cc")
    root = make_cuda_root(tmp_path / "cuda", "12.4", "lib", cc=cc)
    home = tmp_path / "home"
    home.mkdir()
    rc = tmp_path / "t.rc"
    env = clean_env(home)
    from fixtures.generate import GENERATION_SAMPLES

    [v9] = build(tmp_path / "a", [GENERATION_SAMPLES["9.x"]], cc=cc)
    subprocess.run([sys.executable, "-m", "cudnn_setup", "install", str(v9), "--cuda-root",
                    str(root), "--no-verify", "--no-theanorc"], env=env, check=True,
                   capture_output=True, timeout=300)

    def theanorc(*extra):
        done = subprocess.run([sys.executable, "-m", "cudnn_setup", "theanorc", "--cuda-root",
                               str(root), "--theanorc", str(rc), "--json", *extra], env=env,
                              capture_output=True, text=True, timeout=300)
        return json.loads(done.stdout)["theanorc"]["theano_cudnn"]

    assert theanorc("--force-theano-cudnn")["optimizer_including_cudnn"] is True
    assert theanorc()["optimizer_including_cudnn"] is True
    text = rc.read_text()
    assert "optimizer_including = cudnn" in text and "not set by cudnn-setup" not in text


def test_theanorc_asks_the_numpy_of_the_python_it_is_given(archives, cuda_root, home,
                                                          bare_python):
    """`theanorc` judged [blas] by the numpy of the interpreter running the tool, and took no
    --python: installed on its own (pipx, a fleet's venv) it could not write what the users'
    Theano needs, and its warning sent them to rerun `install`."""
    root = cuda_root(version="10.0")
    done, out = run_json(["install", archives["cudnn-10.0-linux-x64-v7.4.2.24.tgz"],
                          "--cuda-root", root, "--no-theanorc", "--no-verify"], home)
    assert done.returncode == 0, out
    done, out = run_json(["theanorc", "--cuda-root", root, "--python", bare_python], home)
    step = {c["name"]: c for c in out["checks"]}.get("theanorc")
    assert done.returncode == 0 and step and step["status"] == "warn", out
    assert f"numpy.distutils cannot be imported by {bare_python}" in step["detail"], step
    assert "`cudnn-setup theanorc --python THAT` writes it" in step["detail"], step
    done, out = run_json(["theanorc", "--cuda-root", root, "--python", sys.executable], home)
    assert done.returncode == 0, out
    assert "ldflags = " in (home / ".theanorc").read_text()


def test_a_python_without_numpy_leaves_the_blas_unjudged_and_says_so(archives, cuda_root, home,
                                                                    bare_python):
    """cudnn-setup installed on its own (pipx, a venv of its own): its default --python has no
    numpy and no Theano. The merge wrote no [blas] ldflags and passed, while the user's Theano,
    under another interpreter with numpy 1.23, could not import with that config. It warns."""
    root = cuda_root(version="10.0")
    done, out = run_json(["install", archives["cudnn-10.0-linux-x64-v7.4.2.24.tgz"],
                          "--cuda-root", root, "--python", bare_python, "--no-verify"], home)
    step = {c["name"]: c for c in out["checks"]}["theanorc"]
    assert done.returncode == 0 and step["status"] == "warn", step
    assert f"[blas] not judged: numpy.distutils cannot be imported by {bare_python}" \
        in step["detail"], step
