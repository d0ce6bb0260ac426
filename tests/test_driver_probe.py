"""The driver probe asks NVML first and the CUDA driver API only where NVML cannot answer: through
the real probe in a child process, with gcc-built stand-ins for libnvidia-ml.so.1 and
libcuda.so.1 on the library path (the driver is the one thing a machine without a GPU cannot
have). The stand-in libcuda's cuInit aborts where NVML should have answered, so an answer at
all proves that cuInit (a quarter of a second on a GPU machine) was not called."""
import time

import pytest

from cudnn_setup.probing import driver as driver_probe
from cudnn_setup.probing.driver import driver_facts
from cudnn_setup.child import Runner
from fixtures import libcuda, libnvml

H200, K80, A100 = ("NVIDIA H200", "9.0"), ("Tesla K80", "3.7"), ("NVIDIA A100-SXM4-80GB", "8.0")


def facts(tmp_path, cuda=None, nvml=None, **env):
    """The probe's facts (as doctor's JSON shows them) with a driver whose libcuda.so.1 is built from `cuda` (libcuda.build's
    arguments) and its NVML from `nvml` (None: no NVML)."""
    d = tmp_path / "drv"
    libcuda.build(d, **(cuda or {}))
    if nvml is not None:
        libnvml.build(d, **nvml)
    return driver_facts({"PATH": str(tmp_path / "no-smi"), "LD_LIBRARY_PATH": str(d),
                         **env}).to_dict()  # the JSON form: doctor's `driver`


def test_nvml_answers_without_cuinit(tmp_path):
    got = facts(tmp_path, cuda={"gpus": [K80], "abort": True},
                nvml={"gpus": [H200, A100], "driver": 12080, "release": "570.86.15"})
    assert got["status"] == "pass", got
    assert got["found_via"] == "libnvidia-ml.so.1"
    assert (got["cuda_driver_version"], got["cuda"]) == (12080, "12.8")
    assert (got["driver_version"], got["driver_version_from"]) == ("570.86.15", "NVML")
    assert got["gpus"] == [{"index": 0, "name": "NVIDIA H200", "compute_capability": "9.0"},
                           {"index": 1, "name": "NVIDIA A100-SXM4-80GB",
                            "compute_capability": "8.0"}]


def test_nvml_without_gpus_is_a_skip(tmp_path):
    got = facts(tmp_path, cuda={"abort": True}, nvml={"gpus": []})
    assert got["status"] == "skip" and got["gpus"] == []
    assert got["reason"] == "the driver sees no GPU" and got["cuda"] == "13.0"


@pytest.mark.parametrize("nvml", [{"init": 9}, {"cuda_version": False}, {"broken_gpu": 1}],
                         ids=["init-fails", "old-nvml", "a-gpu-nvml-cannot-name"])
def test_where_nvml_cannot_answer_the_cuda_driver_api_does(tmp_path, nvml):
    got = facts(tmp_path, cuda={"gpus": [K80], "driver": 11040},
                nvml={"gpus": [H200, A100], **nvml})
    assert got["status"] == "pass" and got["found_via"] == "libcuda.so.1", got
    assert got["gpus"] == [{"index": 0, "name": "Tesla K80", "compute_capability": "3.7"}]
    assert got["cuda_driver_version"] == 11040
    # none of NVML's partial answers is mixed in; its release number still is, when it has one
    assert got["driver_version_from"] in ("NVML", None)


def test_without_nvml_the_cuda_driver_api_answers(tmp_path):
    got = facts(tmp_path, cuda={"gpus": [H200]})
    assert got["status"] == "pass" and got["found_via"] == "libcuda.so.1"
    assert got["gpus"][0]["name"] == "NVIDIA H200"


@pytest.mark.parametrize("name", ["CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"])
def test_gpus_hidden_from_cuda_are_asked_of_cuda(tmp_path, name):
    """NVML lists every GPU; CUDA (and so cuDNN) sees those CUDA_VISIBLE_DEVICES leaves it."""
    got = facts(tmp_path, cuda={"gpus": [K80]}, nvml={"gpus": [H200, A100]}, **{name: "0"})
    assert got["found_via"] == "libcuda.so.1" and len(got["gpus"]) == 1


def test_nvml_answers_are_bounded_like_any_other(tmp_path):
    got = facts(tmp_path, cuda={"abort": True},
                nvml={"gpus": [("Y" * 90, "8.6")], "release": "not-a-release"})
    assert got["status"] == "pass" and len(got["gpus"][0]["name"]) <= 200
    assert got["driver_version"] is None  # not a release number: not passed on


def hung_nvml_env(tmp_path, **cuda):
    d = tmp_path / "drv"
    libcuda.build(d, **cuda)
    libnvml.build(d, hang=True)  # nvmlInit_v2 never returns, as on a GPU fallen off the bus
    return {"PATH": str(tmp_path / "no-smi"), "LD_LIBRARY_PATH": str(d)}


def test_a_hung_nvml_costs_one_short_limit_per_command_then_cuda_answers(tmp_path, monkeypatch):
    monkeypatch.setattr(driver_probe, "NVML_TIMEOUT", 2.0)
    env = hung_nvml_env(tmp_path, gpus=[H200])
    runner = Runner()  # one command's
    start = time.monotonic()
    first = driver_facts(env, runner=runner)
    assert time.monotonic() - start < 2.0 + 5
    assert first.status == "pass" and first.found_via == "libcuda.so.1", first
    assert [g.name for g in first.gpus] == ["NVIDIA H200"]
    assert first.reason == "NVML did not answer in 2 s; the CUDA driver API answered"
    start = time.monotonic()
    again = driver_facts(env, runner=runner)  # NVML is not asked again in this command
    assert time.monotonic() - start < 1.5
    assert again.status == "pass" and "earlier in this run; not tried again" in again.reason


def test_a_hung_nvml_and_a_failing_cuda_say_the_driver_is_not_judged(tmp_path, monkeypatch):
    monkeypatch.setattr(driver_probe, "NVML_TIMEOUT", 2.0)
    env = hung_nvml_env(tmp_path, gpus=[H200], abort=True)  # cuInit aborts
    start = time.monotonic()
    got = driver_facts(env)
    assert time.monotonic() - start < 2.0 + 5
    assert got.status == "error" and got.reason.startswith("NVML did not answer in 2 s; ")
    assert "SIGABRT" in got.reason and got.reason.endswith("the driver is not judged"), got
