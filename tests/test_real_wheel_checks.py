"""verify's new checks on NVIDIA's real cuDNN wheels (nvidia-cudnn-cu12 9.1.0.70,
nvidia-cudnn-cu11 8.9.6.50), located as a cuDNN the tool did not install, on a machine whose
state is read, not assumed: what `deps` says missing is exactly what the real dlopen() cannot
open here (no cuBLAS, no NVRTC, no driver on the machine this was written on).

Opt-in: set CUDNN_SETUP_WHEEL_CACHE to the directory holding the .whl files (an `unpacked/`
directory there with the wheels extracted is used as it is)."""
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from cudnn_setup.installation import locate
from cudnn_setup.checks.coherence import check_coherence_with
from cudnn_setup.checks.deps import check_deps_with
from cudnn_setup.checks.driver_check import check_driver_with
from cudnn_setup.probing.driver import driver_facts
from cudnn_setup.checks.load_check import load_libcudnn
from cudnn_setup.facts.ldresolve.ldconfig import read_cache

pytestmark = pytest.mark.real_cudnn
CACHE = os.environ.get("CUDNN_SETUP_WHEEL_CACHE")
WHEELS = {"9": "nvidia_cudnn_cu12-9.1.0.70", "8": "nvidia_cudnn_cu11-8.9.6.50"}


@pytest.fixture(scope="module")
def sites(tmp_path_factory):
    if not CACHE:
        pytest.skip("set CUDNN_SETUP_WHEEL_CACHE to the directory with NVIDIA's cuDNN wheels")
    out = {}
    for major, name in WHEELS.items():
        unpacked = Path(CACHE) / "unpacked" / name
        if (unpacked / "nvidia" / "cudnn" / "lib").is_dir():
            out[major] = unpacked
            continue
        wheel = next(Path(CACHE).glob(name + "-*.whl"), None)
        if wheel is None:
            pytest.skip(f"{name}-*.whl is not in {CACHE}")
        dest = tmp_path_factory.mktemp(name)
        with zipfile.ZipFile(wheel) as z:
            z.extractall(dest, [m for m in z.namelist() if m.startswith(("nvidia/", name))])
        out[major] = dest
    return out


def env():
    return {k: v for k, v in os.environ.items() if not k.startswith(("LD_", "CUDA"))}


def dlopen_error(name):
    """What the real loader says opening `name` in a fresh process (None: it opens)."""
    done = subprocess.run([sys.executable, "-c", f"import ctypes; ctypes.CDLL({name!r})"],
                          capture_output=True, text=True, env=env(), timeout=60)
    return None if done.returncode == 0 else done.stderr.strip().splitlines()[-1]


def run(site):
    inst = locate.find_wheel(site)
    load, data = load_libcudnn(inst, env())
    assert load.status == "pass", load.detail
    deps = check_deps_with(inst, env(), load_data=data, driver_present=False)
    return inst, data, deps, {d["name"]: d for d in deps.data["dependencies"]}


def test_cudnn9_wheel(sites):
    inst, data, deps, got = run(sites["9"])
    assert (inst.version, inst.origin_facts.wheel["cuda_major"]) == ("9.1.0", 12)
    assert (data.version, data.cudart_version) == (90100, 12040)
    assert got["libz.so.1"]["found"] and got["libz.so.1"]["kind"] == "needed"
    assert not [d for d in got.values() if d["kind"] == "needed" and not d["found"]]
    expected = {"libcublasLt.so.12": "fail", "libnvrtc.so.12": "warn", "libcuda.so.1": "skip",
                "libcask_profile_interface.so": "skip"}
    missing = {n: d["severity"] for n, d in got.items() if not d["found"]}
    for name, rating in expected.items():
        error = dlopen_error(name)
        if error is None:  # this machine has it: then deps must have found it
            assert got[name]["found"], name
            continue
        assert missing.get(name) == rating, (name, missing)
        assert name in error and "cannot open shared object file" in error
    assert set(missing) <= set(expected)
    assert sorted(os.path.basename(p) for p in got["libcublasLt.so.12"]["needed_by"]) == [
        "libcudnn_adv.so.9", "libcudnn_engines_precompiled.so.9"]
    assert deps.status == ("fail" if "libcublasLt.so.12" in missing else
                           "warn" if "libnvrtc.so.12" in missing else "pass")
    coherence = check_coherence_with(inst, env(), load_data=data)
    assert coherence.status == "pass", coherence.detail
    assert "cuDNN's own version checks pass (4)" in coherence.detail
    subs = {s["soname"]: s for s in coherence.data["sublibraries"]}
    assert (subs["libcudnn_ops.so.9"]["version"], subs["libcudnn_ops.so.9"]["version_from"]) == \
        ("9.1.0", "cudnn_ops_infer_version")  # the constant 0x90100


def test_cudnn8_wheel(sites):
    inst, data, deps, got = run(sites["8"])
    assert (inst.version, data.cudart_version) == ("8.9.6", 11080)
    assert got["libnvrtc.so.11.8"]["candidates"] == ["libnvrtc.so.11.8", "libnvrtc.so"]
    for name, rating in (("libcublas.so.11", "fail"), ("libcublasLt.so.11", "fail"),
                         ("libnvrtc.so.11.8", "warn")):
        if dlopen_error(name) is not None:
            assert (got[name]["found"], got[name]["severity"]) == (False, rating)
    coherence = check_coherence_with(inst, env(), load_data=data)
    assert coherence.status == "pass" and "version checks pass (6)" in coherence.detail


def test_driver_facts_here(sites):
    facts = driver_facts(env())
    inst = locate.find_wheel(sites["9"])
    check = check_driver_with(inst, facts)
    if any(e.name == "libcuda.so.1" for e in read_cache()):  # a GPU machine (the H200)
        assert facts.status == "pass" and facts.gpus and facts.cuda_driver_version
        assert check.status == "pass", check.detail
    else:
        assert check.status == "skip" and "libcuda.so.1 cannot be loaded" in check.detail
