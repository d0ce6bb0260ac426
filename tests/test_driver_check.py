"""The driver check and install's refusal, through the real driver probe in a child process
and a gcc-built stand-in for libcuda.so.1 (the one thing a machine without a GPU cannot have)."""
import json

import pytest

from cudnn_setup.installation import locate
from cudnn_setup.checks.driver_check import check_driver_with
from cudnn_setup.facts.cuda import FROM_LIBRARY
from cudnn_setup.facts.cuda import BuiltFor
from cudnn_setup.installation.built_for import built_for
from cudnn_setup.placement.fit import fit_before_install, install_refusal
from cudnn_setup.probing.driver import driver_facts
from cudnn_setup.probing.load_answer import LoadAnswer
from cudnn_setup.errors import ARCHIVE_REJECTED
from fixtures import layouts
from fixtures import libcuda

H200, K80, P100, C2075 = ("NVIDIA H200", "9.0"), ("Tesla K80", "3.7"), ("Tesla P100-PCIE-16GB", "6.0"), \
    ("Tesla C2075", "2.0")


def facts_with(tmp_path, **kw):
    d = libcuda.build(tmp_path / "drv", **kw)
    env = {"PATH": str(tmp_path / "no-smi"), "LD_LIBRARY_PATH": str(d)}
    return driver_facts(env)


@pytest.fixture
def cudnn9(tmp_path, compiler):
    """A cuDNN 9.3.0 wheel for CUDA 12 (what the driver check judges)."""
    return locate.locate(layouts.wheel(tmp_path / "site", compiler))


def test_facts_list_each_gpu_and_the_newest_cuda_the_driver_runs(tmp_path):
    facts = facts_with(tmp_path, gpus=[H200, K80], driver=13000)
    assert facts.status == "pass" and facts.found_via == "libcuda.so.1"
    assert (facts.cuda_driver_version, facts.cuda) == (13000, "13.0")
    assert facts.to_dict()["gpus"] == [{"index": 0, "name": "NVIDIA H200", "compute_capability": "9.0"},
                             {"index": 1, "name": "Tesla K80", "compute_capability": "3.7"}]


def test_fitting_gpu_and_driver_pass_listing_them(tmp_path, cudnn9):
    facts = facts_with(tmp_path, gpus=[H200], driver=13000)
    check = check_driver_with(cudnn9, facts, load_data=LoadAnswer(cudart_version=12040))
    assert check.status == "pass", check.detail
    assert check.detail == ("NVIDIA H200 (compute capability 9.0); driver ? (runs CUDA 13.0 at "
                            "most); cuDNN 9.3.0 for CUDA 12.4 (cudnnGetCudartVersion() of the library) supports them")
    assert check.data["misfits"] == [] and check.data["cuda_built_for"] == "12.4"


def test_driver_too_old_for_the_cuda_major_fails(tmp_path, cudnn9):
    facts = facts_with(tmp_path, gpus=[H200], driver=11080)
    check = check_driver_with(cudnn9, facts)  # CUDA 12 from the wheel's name
    assert check.status == "fail"
    assert "the driver supports CUDA 11.8 at most; this cuDNN is built for CUDA 12" in check.detail
    assert check.data["cuda_built_for_source"] == "wheel name"
    assert "install NVIDIA driver 525.60.13 or newer" in check.detail


def test_gpu_this_cudnn_no_longer_supports_fails_naming_a_release_that_does(tmp_path, cudnn9):
    facts = facts_with(tmp_path, gpus=[H200, K80], driver=13000)
    check = check_driver_with(cudnn9, facts)
    assert check.status == "fail"
    assert "Tesla K80 (compute capability 3.7): cuDNN 9.3.0 for CUDA 12 needs compute capability " \
        "5.0 or newer" in check.detail
    [misfit] = check.data["misfits"]
    assert misfit["kind"] == "gpu" and "supports compute capability 3.7" in misfit["hint"]


def test_no_driver_is_a_skip_with_the_reason(tmp_path, cudnn9):
    facts = driver_facts({"PATH": str(tmp_path)})
    if facts.status != "skip" or facts.gpus:
        pytest.skip("this machine has an NVIDIA driver")
    check = check_driver_with(cudnn9, facts)
    assert check.status == "skip" and "libcuda.so.1 cannot be loaded" in check.detail


def test_driver_without_gpu_skips_and_only_warns_about_an_old_driver(tmp_path, cudnn9):
    facts = facts_with(tmp_path, gpus=[], driver=13000, init=100)
    assert facts.status == "skip" and facts.reason == "the driver sees no CUDA-capable GPU"
    assert check_driver_with(cudnn9, facts).status == "skip"
    facts = facts_with(tmp_path / "old", gpus=[], driver=11040, init=100)
    check = check_driver_with(cudnn9, facts)
    assert check.status == "warn" and "CUDA 11.4 at most" in check.detail


def test_a_driver_that_crashes_or_prints_garbage_is_data_not_a_traceback(tmp_path, cudnn9):
    facts = facts_with(tmp_path / "a", gpus=[H200], abort=True)
    assert facts.status == "error" and "SIGABRT" in facts.reason
    check = check_driver_with(cudnn9, facts)
    assert check.status == "fail" and "SIGABRT" in check.detail
    json.dumps(check.to_dict())
    facts = facts_with(tmp_path / "n", gpus=[H200], noise=True)
    assert facts.status == "pass" and facts.gpus[0].name == "NVIDIA H200"


def test_cuda_built_for_comes_from_the_library_first(tmp_path, cudnn9):
    assert built_for(cudnn9, LoadAnswer(cudart_version=12040)) == BuiltFor("12.4", FROM_LIBRARY)
    assert built_for(cudnn9, None) == BuiltFor("12", "wheel name")


def test_install_is_refused_for_a_gpu_it_cannot_run_on_with_a_release_that_fits(tmp_path):
    facts = facts_with(tmp_path, gpus=[K80], driver=12040)
    misfits = fit_before_install("9.3.0", "12", facts)
    err = install_refusal(misfits, "9.3.0", "12")
    assert err.exit_code == ARCHIVE_REJECTED == 3 and err.code == "gpu-unsupported"
    assert "Tesla K80 (compute capability 3.7)" in err.message
    # no verified CUDA 12 build supports Kepler; the newest release that does is named
    assert err.hint.startswith("cuDNN 8.5.0 for CUDA 11 supports compute capability 3.7")
    assert err.hint.endswith("--force installs it anyway")
    assert err.to_dict()["problems"][0]["code"] == "gpu-unsupported"


def test_install_is_refused_for_a_driver_too_old(tmp_path):
    facts = facts_with(tmp_path, gpus=[H200], driver=12040)
    err = install_refusal(fit_before_install("9.17.0", "13", facts), "9.17.0", "13")
    assert err.code == "driver-too-old" and err.exit_code == 3
    assert "install NVIDIA driver 580.65.06 or newer" in err.hint
    assert "the current cuDNN 9 for CUDA 12" in err.hint  # a build this driver runs


def test_no_gpu_no_refusal_and_inferred_rows_only_warn(tmp_path):
    facts = facts_with(tmp_path, gpus=[], driver=11040, init=100)
    assert fit_before_install("9.3.0", "12", facts) == []
    facts = facts_with(tmp_path / "p", gpus=[P100], driver=13000)
    misfits = fit_before_install("9.12.0", "12", facts)  # the 9.11-9.16 row is inferred
    assert [m.severity for m in misfits] == ["warn"]
    assert install_refusal(misfits, "9.12.0", "12") is None


def test_a_gpu_no_cudnn_can_run_is_refused_saying_so(tmp_path):
    facts = facts_with(tmp_path, gpus=[C2075], driver=9010)
    err = install_refusal(fit_before_install("7.6.5", "10.0", facts), "7.6.5", "10.0")
    assert err.code == "gpu-unsupported"
    assert "no cuDNN release supports compute capability 2.0" in err.hint
    assert "install NVIDIA driver 410.48 or newer" in err.hint  # the driver misfit too
    assert [p["code"] for p in err.to_dict()["problems"]] == ["gpu-unsupported", "driver-too-old"]


def test_facts_from_a_child_are_bounded(tmp_path):
    long_name = "X" * 300
    facts = facts_with(tmp_path, gpus=[(long_name, "8.6")])
    assert len(facts.gpus[0].name) == 200


def test_without_any_trace_of_a_driver_no_child_is_started(tmp_path):
    from cudnn_setup.probing.driver import no_driver

    bare = {"PATH": str(tmp_path / "bin")}
    if no_driver(bare) is None:
        pytest.skip("this machine has an NVIDIA driver")
    nowhere = str(tmp_path / "no-python")  # a child would fail: none is started
    facts = driver_facts(bare, python=nowhere)
    assert facts.status == "skip" and facts.gpus == ()
    assert facts.reason.startswith("no NVIDIA driver: libcuda.so.1 cannot be loaded (")
    assert facts.reason.endswith("; nvidia-smi is not on PATH")
    # a libcuda.so.1 the loader finds (here through LD_LIBRARY_PATH) is asked, in a child
    found = dict(bare, LD_LIBRARY_PATH=str(libcuda.build(tmp_path / "drv")))
    assert no_driver(found) is None
    assert driver_facts(found, python=nowhere).status == "error"
