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
import zipfile
from pathlib import Path

import pytest

from conftest import run_json, tree_state
from fixtures.repack import repack
from fixtures.wheel_root import build as build_root

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


@pytest.fixture(scope="module")
def cudnn(tmp_path_factory):
    return unpacked(CUDNN, "cudnn", tmp_path_factory)


def wheel(prefix: str) -> Path:
    found = sorted(Path(CACHE).glob(prefix + "*.whl")) if CACHE else []
    if not found:
        pytest.skip(f"{prefix}*.whl is not in {CACHE}")
    return found[-1]


def cuda12_root(dest: Path) -> Path:
    """A CUDA 12 root from NVIDIA's wheels (fixtures/wheel_root.py): the runtime's headers and
    libcudart, nvcc's crt/ headers, cuBLAS; no NVRTC, no driver."""
    return build_root(dest, wheel(RUNTIME), wheel(CUBLAS), wheel(NVCC))


@pytest.fixture(scope="module")
def untouched_root(tmp_path_factory):
    """One root for the refusals: each must leave it as it was."""
    return cuda12_root(tmp_path_factory.mktemp("refusals") / "cuda-12")


def test_the_whole_release_installs_and_verifies_without_a_driver(cudnn, tmp_path, home):
    if Path("/proc/driver/nvidia/version").exists():
        pytest.skip("this machine has an NVIDIA driver: the case is a machine without one")
    cuda12 = cuda12_root(tmp_path / "cuda-12")
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
def test_each_library_left_out_is_refused_before_writing_naming_it(cudnn, untouched_root, tmp_path,
                                                                   home, stem):
    archive = repack(cudnn, tmp_path / "a", "12", fmt="tar", leave_out=stem)
    before = tree_state(untouched_root)
    done, out = run_json(["install", archive, "--cuda-root", untouched_root, *ARGS], home)
    assert done.returncode == 3 and out["error"]["code"] == "archive-rejected"
    assert f"{stem} is missing" in out["error"]["message"]
    assert out["error"]["message"].count(" is missing") == 1  # that one, nothing else
    assert tree_state(untouched_root) == before
