"""`inspect --cuda-root R` gives install's verdict into R before it writes anything: for every
kind of refusal the same error code, message and exit code, and installable where install
installs. (An archive install refused after 104 s for its checksum was once called
"installable" by inspect.)"""
import re
import shutil

import pytest

from conftest import run_json, tree_state
from fixtures import libcuda
from fixtures.generate import GENERATION_SAMPLES
from fixtures.hostile import CASES, build_case

V7, V9 = GENERATION_SAMPLES["v4-v7"], GENERATION_SAMPLES["9.x"]
K80, H200 = ("Tesla K80", "3.7"), ("NVIDIA H200", "9.0")


def _published_name_other_bytes(archives, tmp_path):
    fake = tmp_path / "cudnn-10.2-linux-x64-v7.6.5.32.tgz"  # in the known releases table
    shutil.copyfile(archives[V7], fake)
    return fake, "10.2", {}


def _other_cuda_major(archives, tmp_path):
    return archives[V7], "12.4", {}  # built for CUDA 10.0


def _unsafe_member(archives, tmp_path, compiler=None):
    case = next(c for c in CASES if c.name == "traversal")
    return build_case(case, tmp_path, compiler), "10.2", {}


def _other_platform(archives, tmp_path):
    return archives["cudnn-11.3-linux-ppc64le-v8.2.1.32.tgz"], "11.3", {}


def _gpu_too_old(archives, tmp_path):
    drv = libcuda.build(tmp_path / "drv", gpus=[K80], driver=12040)
    return archives[V9], "12.4", {"LD_LIBRARY_PATH": str(drv)}


def _driver_too_old(archives, tmp_path):
    drv = libcuda.build(tmp_path / "drv", gpus=[H200], driver=11080)
    return archives[V9], "12.4", {"LD_LIBRARY_PATH": str(drv)}


def _fits(archives, tmp_path):
    drv = libcuda.build(tmp_path / "drv", gpus=[H200], driver=13000)
    return archives[V9], "12.4", {"LD_LIBRARY_PATH": str(drv)}


CASES_BY_KIND = [
    ("checksum-mismatch", _published_name_other_bytes),
    ("cuda-mismatch", _other_cuda_major),
    ("unsafe-path", _unsafe_member),
    ("platform", _other_platform),
    ("gpu-unsupported", _gpu_too_old),
    ("driver-too-old", _driver_too_old),
    (None, _fits),
]


@pytest.mark.parametrize("code,make", CASES_BY_KIND, ids=[c or "installable" for c, _ in CASES_BY_KIND])
def test_inspect_gives_installs_verdict(code, make, archives, cuda_root, compiler, tmp_path, home):
    try:
        archive, cuda, env = make(archives, tmp_path, compiler)
    except TypeError:
        archive, cuda, env = make(archives, tmp_path)
    root = cuda_root(version=cuda, layout="lib")
    env = dict(env, PATH=f"{tmp_path / 'no-smi'}:/usr/bin:/bin")
    before = tree_state(root)
    looked, seen = run_json(["inspect", archive, "--cuda-root", root], home, env)
    assert tree_state(root) == before  # inspect writes nothing
    done, out = run_json(["install", archive, "--cuda-root", root, "--no-verify",
                          "--no-theanorc", "--no-frameworks"], home, env)
    assert looked.returncode == done.returncode, (seen["error"], out["error"])
    if code is None:
        assert done.returncode == 0 and seen["verdict"] == "installable", seen["error"]
        assert seen["error"] is None and out["changed"] is True
        return
    assert done.returncode == 3 and seen["verdict"] == "refused"
    assert out["error"]["code"] == seen["error"]["code"], (out["error"], seen["error"])
    assert code in (out["error"]["code"], *[p.get("code") for p in out["error"].get("problems", [])])
    assert out["error"]["message"] == seen["error"]["message"]
    assert tree_state(root) == before  # install refused before writing, too


INSPECT_OPTIONS = {"--cuda-root", "--json", "--help"}


@pytest.mark.parametrize("make", [_other_cuda_major, _gpu_too_old, _driver_too_old],
                         ids=["cuda-mismatch", "gpu-unsupported", "driver-too-old"])
def test_inspect_hint_names_only_options_it_takes(make, archives, cuda_root, tmp_path, home):
    """install's override (--force) is named with install: `inspect --force` is a usage error."""
    archive, cuda, env = make(archives, tmp_path)
    root = cuda_root(version=cuda, layout="lib")
    env = dict(env, PATH=f"{tmp_path / 'no-smi'}:/usr/bin:/bin")
    done, out = run_json(["inspect", archive, "--cuda-root", root], home, env)
    assert done.returncode == 3
    hint = out["error"]["hint"]
    assert "--force" in hint
    for clause in re.split(r"[;(]", hint):
        if "cudnn-setup " in clause:  # a command named: its options are its own
            continue
        assert not set(re.findall(r"--[a-z][\w-]*", clause)) - INSPECT_OPTIONS, hint
