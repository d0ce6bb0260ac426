"""NVIDIA's real cuDNN wheels (nvidia-cudnn-cu12 9.1.0.70, nvidia-cudnn-cu11 8.9.6.50) through
ldresolve's closure and the sub-library probe, on a machine without cuBLAS, NVRTC or a driver.

Opt-in: set CUDNN_SETUP_WHEEL_CACHE to the directory holding the two .whl files."""
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from cudnn_setup.facts import dependencies as D
from cudnn_setup.facts.ldresolve.closure import closure
from cudnn_setup.facts.ldresolve.environment import Environment
from cudnn_setup.facts.ldresolve.ldconfig import read_cache
from cudnn_setup.facts.ldresolve.loader_facts import probe_loader
from cudnn_setup.facts.ldresolve.runtime_names import Versions

pytestmark = pytest.mark.real_cudnn
CACHE = os.environ.get("CUDNN_SETUP_WHEEL_CACHE")
# (wheel, cudnnGetVersion as M.m.p, cudnnGetCudartVersion as M.m: 12040 and 11080)
WHEELS = {"9": ("nvidia_cudnn_cu12-9.1.0.70-", "9.1.0", "12.4"),
          "8": ("nvidia_cudnn_cu11-8.9.6.50-", "8.9.6", "11.8")}
PROBES = Path(__file__).resolve().parent.parent / "cudnn_setup" / "probes"


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    if not CACHE:
        pytest.skip("set CUDNN_SETUP_WHEEL_CACHE to the directory with NVIDIA's cuDNN wheels")
    out = {}
    for major, (prefix, _, _) in WHEELS.items():
        wheel = next(Path(CACHE).glob(prefix + "*.whl"), None)
        if wheel is None:
            pytest.skip(f"{prefix}*.whl is not in {CACHE}")
        dest = tmp_path_factory.mktemp(f"cudnn{major}")
        with zipfile.ZipFile(wheel) as z:
            members = [m for m in z.namelist() if m.startswith("nvidia/cudnn/lib/")]
            z.extractall(dest, members)
        out[major] = dest / "nvidia" / "cudnn" / "lib"
    return out


def closure_of(lib_dir, major):
    _, cudnn, cuda = WHEELS[major]
    env = Environment(cache=read_cache(), facts=probe_loader(), executable=sys.executable)
    return closure(sorted(lib_dir.glob("libcudnn*.so.*")), env, Versions(cudnn=cudnn, cuda=cuda))


def by_name(deps):
    return {(Path(d.requester).name, d.name): d for d in deps}


def system_has(name):
    return any(e.name == name for e in read_cache())


def test_cudnn9_wheel_needs_only_zlib_to_load_and_cublaslt_nvrtc_driver_at_run_time(libs):
    deps = closure_of(libs["9"], "9")
    assert not [d for d in deps if d.kind in ("root", "needed") and not d.resolution.found]
    got = by_name(deps)
    z = got[("libcudnn_graph.so.9", "libz.so.1")]
    assert z.kind == "needed" and z.resolution.via == "ld.so.cache"
    ops = got[("libcudnn_adv.so.9", "libcudnn_ops.so.9")]
    assert ops.resolution.via == f"DT_RUNPATH of {libs['9'] / 'libcudnn_adv.so.9'}"
    runtime_missing = {(Path(d.requester).name, d.name) for d in deps
                       if d.kind == "runtime" and not d.resolution.found}
    expected = {("libcudnn_adv.so.9", "libcublasLt.so.12"),
                ("libcudnn_engines_precompiled.so.9", "libcublasLt.so.12"),
                ("libcudnn_graph.so.9", "libnvrtc.so.12"),
                ("libcudnn_engines_precompiled.so.9", "libcask_profile_interface.so")}
    expected |= {(n, "libcuda.so.1") for n in ("libcudnn_adv.so.9", "libcudnn_cnn.so.9",
                                                "libcudnn_engines_precompiled.so.9",
                                                "libcudnn_engines_runtime_compiled.so.9",
                                                "libcudnn_graph.so.9", "libcudnn_ops.so.9")}
    expected = {e for e in expected if not system_has(e[1])}
    assert runtime_missing == expected
    # sub-libraries named without their version resolve to this copy, as cuDNN would load them
    heur = got[("libcudnn_graph.so.9", "libcudnn_heuristic.so.9.1.0")]
    assert heur.candidates[-2:] == ("libcudnn_heuristic.so.9", "libcudnn_heuristic.so")
    assert heur.resolution.path == str(libs["9"] / "libcudnn_heuristic.so.9")
    ratings = {d.name: D.severity(d.name, driver_present=False) for d in deps if not d.resolution.found}
    assert ratings.get("libcublasLt.so.12", "fail") == "fail"
    assert ratings.get("libnvrtc.so.12", "warn") == "warn"
    assert ratings.get("libcuda.so.1", "skip") == "skip"


def test_cudnn8_wheel_opens_cublas_and_cublaslt_11_and_nvrtc_at_run_time(libs):
    deps = closure_of(libs["8"], "8")
    assert not [d for d in deps if d.kind in ("root", "needed") and not d.resolution.found]
    got = by_name(deps)
    assert got[("libcudnn_cnn_infer.so.8", "libz.so.1")].kind == "needed"
    missing = {d.name for d in deps if not d.resolution.found}
    for name in ("libcublas.so.11", "libcublasLt.so.11", "libnvrtc.so.11.8", "libcuda.so.1"):
        assert name in missing or system_has(name)
    nvrtc = got[("libcudnn_ops_infer.so.8", "libnvrtc.so.11.8")]
    assert nvrtc.candidates == ("libnvrtc.so.11.8", "libnvrtc.so")


def test_real_loader_agrees_and_cudnn_loads_its_own_sub_libraries(libs):
    lib9 = libs["9"]
    done = subprocess.run([sys.executable, str(PROBES / "sublibs.py"), str(lib9 / "libcudnn.so.9"),
                           "libcudnn_adv.so.9", "libcudnn_graph.so.9"],
                          capture_output=True, timeout=300, input=b"k\n",
                          env={k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"})
    out = json.loads(done.stdout.decode("utf-8", "replace").splitlines()[-1])["answer"]
    assert out["version"] == 90100
    adv, graph = out["sublibraries"]
    assert adv["loaded"] is False  # by soname, without the wheel dir on the path: not found …
    assert adv["version_check"]["status"] == 0  # … but cuDNN finds it through RUNPATH $ORIGIN
    assert str(lib9 / "libcudnn_adv.so.9") in adv["version_check"]["mapped"]
    traced = subprocess.run(["/lib64/ld-linux-x86-64.so.2", "--list", str(lib9 / "libcudnn_graph.so.9")],
                            capture_output=True, text=True, timeout=120).stdout
    deps = closure_of(lib9, "9")
    z = by_name(deps)[("libcudnn_graph.so.9", "libz.so.1")].resolution.path
    assert f"libz.so.1 => {z}" in traced


def test_nvrtc_wheel_is_not_where_the_cudnn_wheels_runpath_looks(libs, tmp_path):
    wheel = next(Path(CACHE).glob("nvidia_cuda_nvrtc_cu12-*.whl"), None)
    if wheel is None:
        pytest.skip("no nvidia-cuda-nvrtc-cu12 wheel in the cache")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    (site / "nvidia" / "cudnn").mkdir(parents=True)
    (site / "nvidia" / "cudnn" / "lib").symlink_to(libs["9"])  # $ORIGIN keeps the link's dir
    graph = site / "nvidia" / "cudnn" / "lib" / "libcudnn_graph.so.9"
    nvrtc_dir = site / "nvidia" / "cuda_nvrtc" / "lib"
    for llp, found in ((None, False), (str(nvrtc_dir), True)):
        env = Environment(ld_library_path=llp, cache=read_cache(), facts=probe_loader())
        deps = by_name(closure([graph], env, Versions("9.1.0", "12.4")))
        assert deps[("libcudnn_graph.so.9", "libnvrtc.so.12")].resolution.found is found
    builtins = deps[("libnvrtc.so.12", "libnvrtc-builtins.so.12.4")]
    assert builtins.resolution.path == str(nvrtc_dir / "libnvrtc-builtins.so.12.4")
