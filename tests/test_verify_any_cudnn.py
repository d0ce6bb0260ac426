"""verify on any cuDNN through the command line: the distribution packages' multiarch layout
and a pip wheel's directory (`--lib-dir`), every layer in its order, and a root without cuDNN
whose skipped checks say why."""
import pytest

from conftest import run_json
from cudnn_setup.installation.locate import NEED_CUDNN, UNMANAGED
from cudnn_setup.checks.suite import ORDER
from fixtures import layouts

EXPECTED_ORDER = ["files", "elf", "versions", "load", "coherence", "deps", "loader", "cuda",
                  "driver", "compile", "gpu", "frameworks", "clients", "theano"]


def by_name(out):
    return {c["name"]: c for c in out["checks"]}


def test_the_order_is_the_documented_one():
    assert list(ORDER) == EXPECTED_ORDER


@pytest.mark.parametrize("layout", ["multiarch", "wheel"])
def test_verify_lib_dir_checks_a_cudnn_the_tool_did_not_install(layout, tmp_path, compiler,
                                                                 cuda_root, home):
    root = cuda_root(version="12.4")
    lib = (layouts.multiarch(tmp_path / "prefix", compiler) if layout == "multiarch"
           else layouts.wheel(tmp_path / "site", compiler))
    done, out = run_json(["verify", "--lib-dir", lib, "--cuda-root", root, "--no-theano"], home)
    checks = by_name(out)
    assert [c["name"] for c in out["checks"]] == EXPECTED_ORDER
    assert done.returncode == 0 and out["ok"], done.stderr
    assert out["cudnn_version"] == "9.3.0" and out["cuda_root"] == str(root)
    cudnn = out["cudnn"]
    assert (cudnn["origin"], cudnn["managed"], cudnn["lib_dir"]) == (layout, False, str(lib))
    assert cudnn["version"] == "9.3.0"
    # what needs the manifest says so instead of failing; everything else runs as usual
    assert checks["files"]["status"] == "warn" and UNMANAGED in checks["files"]["detail"]
    for name in ("elf", "versions", "load", "coherence", "deps", "cuda"):
        assert checks[name]["status"] == "pass", checks[name]
    assert "cudnnGetVersion() = 90300" in checks["load"]["detail"]
    # cudnn.h includes the CUDA runtime's headers: the compile check adds the root's include dir
    command = checks["compile"]["data"]["command"]
    assert f"-I{cudnn['include_dir']}" in command and f"-I{root / 'include'}" in command
    if layout == "multiarch":  # the dev package's libcudnn.so link (an alternative) is there
        assert checks["compile"]["status"] == "pass" and "-lcudnn" in command
    else:  # a wheel has none: -lcudnn, as Theano links, would not find it
        assert checks["compile"]["status"] == "warn" and "-l:libcudnn.so.9" in command
        assert "no libcudnn.so development link" in checks["compile"]["detail"]
    assert checks["loader"]["status"] == "warn" and str(lib) in checks["loader"]["detail"]
    if layout == "multiarch":
        assert cudnn["header"]["alternatives"] is True
        assert cudnn["include_dir"] == str(tmp_path / "prefix" / "usr" / "include")
    else:
        assert cudnn["wheel"]["name"] == "nvidia-cudnn-cu12" and cudnn["wheel"]["cuda_major"] == 12


def test_verify_lib_dir_without_cudnn_is_a_usage_error(tmp_path, cuda_root, home):
    (tmp_path / "empty").mkdir()
    done, out = run_json(["verify", "--lib-dir", tmp_path / "empty", "--cuda-root", cuda_root()],
                         home)
    assert done.returncode == 2 and out["error"]["code"] == "no-cudnn"


def test_a_root_without_cudnn_gives_each_skipped_check_its_reason(cuda_root, home):
    root = cuda_root(version="12.4")
    done, out = run_json(["verify", "--cuda-root", root, "--no-theano", "--no-frameworks"], home)
    checks = by_name(out)
    assert done.returncode == 1 and [c["name"] for c in out["checks"]] == EXPECTED_ORDER
    assert checks["files"]["status"] == "fail"
    reason = f"no cuDNN in {root}: no libcudnn.so.N in {root / 'lib64'} and no cudnn.h in " \
             f"{root / 'include'}"
    for name in NEED_CUDNN:
        assert (checks[name]["status"], checks[name]["detail"]) == ("skip", reason), name
    assert checks["frameworks"] == {"name": "frameworks", "status": "skip",
                                    "detail": "--no-frameworks"}
    assert out["cudnn"]["version"] is None and out["cudnn_version"] is None


def test_doctor_lib_dir_examines_that_cudnn(tmp_path, compiler, cuda_root, home):
    root = cuda_root(version="12.4")
    lib = layouts.wheel(tmp_path / "site", compiler)
    done, out = run_json(["doctor", "--lib-dir", lib, "--cuda-root", root], home)
    assert out["error"] is None and out["cudnn"]["origin"] == "wheel", done.stderr
    assert out["cudnn_version"] == "9.3.0"
    assert done.returncode == 0  # the wheel's missing development link is a warning
    assert any(p["check"] == "compile" and p["severity"] == "warn" for p in out["problems"])
    assert f"cuDNN examined: 9.3.0 in {lib} (not installed by cudnn-setup)" in done.stderr


def test_verify_lib_dir_without_cuda_root_says_the_root_was_discovered(tmp_path, compiler,
                                                                       cuda_root, home):
    """The cuda and compile checks judge a --lib-dir cuDNN against a CUDA root; one found by
    discovery is said to be that, with how, and a mismatch points at --cuda-root."""
    lib = layouts.wheel(tmp_path / "site", compiler)  # built for CUDA 12
    root12, root13 = cuda_root(version="12.4"), cuda_root(version="13.0")
    done, out = run_json(["verify", "--lib-dir", lib, "--no-theano", "--no-frameworks"], home,
                         {"CUDA_HOME": str(root12)})
    cuda = by_name(out)["cuda"]
    assert cuda["status"] == "pass" and out["cuda_root"] == str(root12)
    assert f"the CUDA root {root12} (discovered via $CUDA_HOME, not given; --cuda-root names " \
           "another) is CUDA 12.4" in cuda["detail"]
    assert cuda["data"]["root_found_via"] == "$CUDA_HOME"
    assert f"CUDA root for the cuda and compile checks: {root12}, discovered via $CUDA_HOME " \
           "(not given; --cuda-root names another)" in done.stderr
    done, out = run_json(["verify", "--lib-dir", lib, "--no-theano", "--no-frameworks"], home,
                         {"CUDA_HOME": str(root13)})
    cuda = by_name(out)["cuda"]
    assert cuda["status"] == "fail" and "discovered via $CUDA_HOME, not given" in cuda["detail"]
    assert cuda["data"]["hint"].startswith("pass --cuda-root naming the CUDA 12 toolkit")
    done, out = run_json(["verify", "--lib-dir", lib, "--cuda-root", root12, "--no-theano",
                          "--no-frameworks"], home)
    assert "(given by --cuda-root)" in by_name(out)["cuda"]["detail"]
    assert "discovered" not in done.stderr


@pytest.mark.parametrize("layout", ["lib-dir", "wheel"])
def test_the_loader_fix_for_a_cudnn_outside_a_root_never_suggests_install_ldconfig(
        layout, tmp_path, compiler, cuda_root, home):
    lib = layouts.wheel(tmp_path / "site", compiler)
    if layout == "lib-dir":  # the same libraries copied by hand into a directory of their own
        import shutil
        shutil.copytree(lib, tmp_path / "copy" / "lib", symlinks=True)
        lib = tmp_path / "copy" / "lib"
    done, out = run_json(["verify", "--lib-dir", lib, "--cuda-root", cuda_root(version="12.4"),
                          "--no-theano", "--no-frameworks"], home)
    loader = by_name(out)["loader"]
    assert loader["status"] == "warn" and f"LD_LIBRARY_PATH={lib}" in loader["detail"]
    assert "--ldconfig" not in loader["detail"]
    if layout == "wheel":
        assert "pip moves it with every upgrade" in loader["detail"]
    else:
        assert f"list {lib} in a file under /etc/ld.so.conf.d/" in loader["detail"]


@pytest.mark.parametrize("command", ["verify", "doctor"])
def test_include_dir_without_lib_dir_is_a_usage_error(command, tmp_path, cuda_root, home):
    (tmp_path / "inc").mkdir()
    done, out = run_json([command, "--include-dir", tmp_path / "inc", "--cuda-root",
                          cuda_root()], home)
    assert done.returncode == 2 and out["error"]["code"] == "usage", out["error"]
    assert "--include-dir is only used with --lib-dir" in out["error"]["message"]
    assert "add --lib-dir DIR" in out["error"]["hint"] and out["checks"] == []
