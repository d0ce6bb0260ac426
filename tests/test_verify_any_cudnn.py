"""verify on any cuDNN through the command line: the distribution packages' multiarch layout
and a pip wheel's directory (`--lib-dir`), every layer in its order, and a root without cuDNN
whose skipped checks say why."""
import pytest

from conftest import run_json
from cudnn_setup.checks.locate import NEED_CUDNN, UNMANAGED
from cudnn_setup.checks.suite import ORDER
from fixtures import layouts

EXPECTED_ORDER = ["files", "elf", "versions", "load", "coherence", "deps", "loader", "cuda",
                  "driver", "compile", "gpu", "frameworks", "theano"]


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
