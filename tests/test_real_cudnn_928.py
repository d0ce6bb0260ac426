"""NVIDIA's cuDNN 9.28.0 (the nvidia-cudnn-cu12==9.28.0.42 wheel, repacked in NVIDIA's archive
layout) installed into a CUDA 12 root made of NVIDIA's own nvidia-cuda-runtime-cu12,
nvidia-cublas-cu12 and nvidia-cuda-nvcc-cu12 (for the crt/ headers cuda_runtime_api.h includes)
wheels, on a machine without an NVIDIA driver (a container build, a CI
runner): the whole release installs and verifies with exit 0, and each of its libraries left
out is refused before anything is written, naming it. 9.28's libcudnn_engines_runtime_compiled
lists libcuda.so.1 as DT_NEEDED; libcudnn_ext (9.24) and libcudnn_engines_tensor_ir (9.21) are
known only from the names its own libraries embed.

Opt-in: set CUDNN_SETUP_WHEEL_CACHE to the directory holding the .whl files (an `unpacked/`
directory there with the wheels extracted is used as it is)."""
import os
import shutil
import zipfile
from pathlib import Path

import pytest

from conftest import run_json, tree_state
from fixtures.repack import repack

pytestmark = pytest.mark.real_cudnn
CACHE = os.environ.get("CUDNN_SETUP_WHEEL_CACHE")
CUDNN = "nvidia_cudnn_cu12-9.28.0.42"
RUNTIME = "nvidia_cuda_runtime_cu12-12"
CUBLAS = "nvidia_cublas_cu12-12"
NVCC = "nvidia_cuda_nvcc_cu12-12"
LIBRARIES = ("libcudnn", "libcudnn_adv", "libcudnn_cnn", "libcudnn_ops", "libcudnn_graph",
             "libcudnn_heuristic", "libcudnn_engines_precompiled",
             "libcudnn_engines_runtime_compiled", "libcudnn_engines_tensor_ir", "libcudnn_ext")
ARGS = ["--no-theanorc", "--no-verify", "--no-frameworks"]


def unpacked(prefix: str, package: str, tmp_path_factory) -> Path:
    """nvidia/<package> of the first wheel whose name starts with `prefix`."""
    if not CACHE:
        pytest.skip("set CUDNN_SETUP_WHEEL_CACHE to the directory with NVIDIA's wheels")
    for d in sorted((Path(CACHE) / "unpacked").glob(prefix + "*")):
        if (d / "nvidia" / package).is_dir():
            return d / "nvidia" / package
    wheel = next(iter(sorted(Path(CACHE).glob(prefix + "*.whl"))), None)
    if wheel is None:
        pytest.skip(f"{prefix}*.whl is not in {CACHE}")
    dest = tmp_path_factory.mktemp(package)
    with zipfile.ZipFile(wheel) as z:
        z.extractall(dest, [m for m in z.namelist() if m.startswith(f"nvidia/{package}/")])
    return dest / "nvidia" / package


def link_or_copy(src: Path, dest: Path) -> None:
    try:
        os.link(src, dest)
    except OSError:
        shutil.copy2(src, dest)


@pytest.fixture(scope="module")
def cudnn(tmp_path_factory):
    return unpacked(CUDNN, "cudnn", tmp_path_factory)


@pytest.fixture
def cuda12(tmp_path, tmp_path_factory):
    """A CUDA 12 root from NVIDIA's wheels: the runtime's headers and libcudart, nvcc's crt/
    headers, cuBLAS."""
    runtime = unpacked(RUNTIME, "cuda_runtime", tmp_path_factory)
    cublas = unpacked(CUBLAS, "cublas", tmp_path_factory)
    nvcc = unpacked(NVCC, "cuda_nvcc", tmp_path_factory)
    root = tmp_path / "cuda-12"
    shutil.copytree(runtime / "include", root / "include")
    shutil.copytree(nvcc / "include" / "crt", root / "include" / "crt")
    (root / "lib64").mkdir()
    for lib in [*(runtime / "lib").glob("libcudart.so*"), *(cublas / "lib").glob("libcublas*.so*")]:
        link_or_copy(lib, root / "lib64" / lib.name)
    return root


def test_the_whole_release_installs_and_verifies_without_a_driver(cudnn, cuda12, tmp_path, home):
    if Path("/proc/driver/nvidia/version").exists():
        pytest.skip("this machine has an NVIDIA driver: the case is a machine without one")
    archive = repack(cudnn, tmp_path / "a", "12", fmt="tar")
    done, out = run_json(["inspect", archive], home)
    assert done.returncode == 0, out["error"]
    comp = out["package"]["composition"]
    assert comp["required"][0] == "libcudnn" and sorted(comp["required"]) == sorted(LIBRARIES)
    assert comp["why"]["libcudnn_ext"] == "libcudnn.so.9.28.0 opens it at run time"
    assert comp["why"]["libcudnn_engines_tensor_ir"] == "libcudnn_graph.so.9.28.0 opens it at run time"
    done, out = run_json(["install", archive, "--cuda-root", cuda12, *ARGS], home)
    assert done.returncode == 0, out["error"]
    done, out = run_json(["verify", "--cuda-root", cuda12, "--no-theano", "--no-frameworks"], home)
    checks = {c["name"]: c for c in out["checks"]}
    assert done.returncode == 0, [(c["name"], c["detail"]) for c in out["checks"] if c["status"] == "fail"]
    coherence = checks["coherence"]
    assert coherence["status"] == "pass"
    assert "9 sub-libraries" in coherence["detail"]
    assert ("libcudnn_engines_runtime_compiled.so.9 lists libcuda.so.1 as DT_NEEDED (skip)"
            in coherence["detail"])
    subs = {s["soname"]: s for s in coherence["data"]["sublibraries"]}
    rc = subs["libcudnn_engines_runtime_compiled.so.9"]
    assert rc["status"] == "skip" and rc["version"] == "9.28.0" and not rc["problems"]
    assert all(s["loaded"] for n, s in subs.items() if n != "libcudnn_engines_runtime_compiled.so.9")
    assert checks["deps"]["status"] in ("pass", "warn")  # NVRTC is not in this root: a warn
    assert "libcuda.so.1" in checks["deps"]["detail"] or checks["deps"]["status"] == "warn"
    assert checks["gpu"]["status"] == "skip" and checks["driver"]["status"] == "skip"
    assert checks["files"]["status"] == "pass" and checks["elf"]["status"] == "pass"


@pytest.mark.parametrize("stem", LIBRARIES)
def test_each_library_left_out_is_refused_before_writing_naming_it(cudnn, cuda12, tmp_path, home, stem):
    archive = repack(cudnn, tmp_path / "a", "12", fmt="tar", leave_out=stem)
    before = tree_state(cuda12)
    done, out = run_json(["install", archive, "--cuda-root", cuda12, *ARGS], home)
    assert done.returncode == 3 and out["error"]["code"] == "archive-rejected"
    assert f"{stem} is missing" in out["error"]["message"]
    assert out["error"]["message"].count(" is missing") == 1  # that one, nothing else
    assert tree_state(cuda12) == before
