"""Theano 1.0.5 and cuDNN versions: the range is the first reason on any machine, and what
install/theanorc say when they write optimizer_including=cudnn."""
import sys

import pytest

from conftest import check_facts
from cudnn_setup.installation.model import Installation
from cudnn_setup.checks.theano_check import (check_theano, theano_range_note, theano_supports,
                                             why_not_cudnn)
from cudnn_setup.checks.gpu import GpuCheck
from cudnn_setup.facts.cuda import CudaRoot
from cudnn_setup.probing.gpu_answer import GpuAnswer
from cudnn_setup.probing.theano_answer import TheanoAnswer
from cudnn_setup.report import Check


def inst_of(tmp_path, version):
    lib = tmp_path / "lib64"
    lib.mkdir(exist_ok=True)
    main = lib / f"libcudnn.so.{version}"
    main.write_bytes(b"")
    return Installation(CudaRoot(tmp_path, "test", "12.4", "test"), lib, None,
                        header_version=version, header_file=tmp_path / "cudnn.h", libraries=[main])


NO_GPU = Check("gpu", "skip", "no NVIDIA driver: libcuda.so.1 cannot be loaded")
# the gpu check as it is handed over: the probe's answer typed, not its JSON
OLD_GPU = GpuCheck("gpu", "fail", "too old", {}, GpuAnswer(compute_capability="2.0"))


@pytest.mark.parametrize("version,supported", [("4.0.7", False), ("5.1.10", True), ("7.1.4", True),
                                               ("7.6.5", True), ("8.9.7", False), ("9.19.0", False)])
def test_range(version, supported):
    assert theano_supports(version) is supported
    note = theano_range_note(version)
    if version.startswith(("8", "9")):
        assert "cudnnGetConvolutionForwardAlgorithm" in note and "v5 to v7" in note
    elif version == "4.0.7":
        assert "cuDNN version is too old" in note
    elif version == "7.6.5":
        assert "warns" in note  # 7.2 and later v7: Theano warns, and uses it
    else:
        assert note is None


def test_outside_the_range_is_the_first_reason_even_without_a_gpu(tmp_path):
    reason = why_not_cudnn(TheanoAnswer(device="cpu"), inst_of(tmp_path, "9.3.0"), NO_GPU)
    assert reason.startswith("Theano 1.0.5 supports cuDNN v5 to v7; this is cuDNN 9.3.0")
    reason = why_not_cudnn(TheanoAnswer(device="cpu"), inst_of(tmp_path, "7.4.2"), NO_GPU)
    assert reason.startswith("no GPU here")


def test_a_gpu_no_cudnn_runs_on_comes_before_the_range_and_no_cudnn_before_all(tmp_path):
    assert "compute capability 2.0" in why_not_cudnn(TheanoAnswer(), inst_of(tmp_path, "9.3.0"), OLD_GPU)
    empty = Installation(CudaRoot(tmp_path, "test", "12.4", "test"), tmp_path / "lib64", None)
    assert why_not_cudnn(TheanoAnswer(), empty, OLD_GPU).startswith(f"there is no cuDNN in {tmp_path}")


def test_without_theano_the_skip_still_names_the_range(tmp_path):
    bare = tmp_path / "python-without-theano"
    bare.write_text(f"#!/bin/sh\nexec {sys.executable} -I -S \"$@\"\n")
    bare.chmod(0o755)
    check = check_theano(inst_of(tmp_path, "8.9.7"), check_facts({}, str(bare), gpu=NO_GPU))
    assert check.status == "skip"
    assert check.detail.startswith("Theano 1.0.5 supports cuDNN v5 to v7; this is cuDNN 8.9.7")
    assert "Theano is not installed for" in check.detail


def test_dnn_paths_pointing_where_there_is_no_cudnn(tmp_path):
    from cudnn_setup.checks.theano_check import stale_dnn_paths

    root = tmp_path / "cuda"
    (root / "include").mkdir(parents=True)
    (root / "lib64").mkdir()
    eff = {"dnn.base_path": {"value": str(root), "from": "theanorc"},
           "dnn.library_path": {"value": str(root / "lib64"), "from": "theanorc"},
           "global.optimizer_including": {"value": "cudnn", "from": "theanorc"}}
    problems = stale_dnn_paths(eff)
    assert [p["severity"] for p in problems] == ["fail", "fail"]
    assert problems[0]["message"].startswith(f"Theano's dnn.base_path ({root}, from theanorc) points "
                                             f"where there is no cuDNN: {root / 'include'} has no cudnn.h")
    assert f"{root / 'lib64'} has no libcudnn.so" in problems[1]["message"]
    (root / "include" / "cudnn.h").write_text("")
    (root / "lib64" / "libcudnn.so").write_text("")
    assert stale_dnn_paths(eff) == []
    eff["dnn.library_path"]["value"] = str(tmp_path / "gone")
    del eff["global.optimizer_including"]
    [p] = stale_dnn_paths(eff)
    assert p["severity"] == "warn" and "does not exist" in p["message"]
    eff["dnn.enabled"] = {"value": "False", "from": "THEANO_FLAGS"}
    assert stale_dnn_paths(eff) == []


def test_install_and_theanorc_say_when_theano_cannot_use_the_cudnn_they_configure(archives,
                                                                                 cuda_root, home):
    from conftest import run_json
    from fixtures.generate import GENERATION_SAMPLES

    rc = home / ".theanorc"
    root = cuda_root(version="12.4")
    done, out = run_json(["install", archives[GENERATION_SAMPLES["9.x"]], "--cuda-root", root,
                          "--theanorc", rc, "--no-verify", "--no-frameworks"], home)
    assert done.returncode == 0, done.stderr
    step = {c["name"]: c for c in out["checks"]}["theanorc"]
    assert step["status"] == "warn" and "\noptimizer_including" not in rc.read_text()
    assert "Theano 1.0.5 supports cuDNN v5 to v7; this is cuDNN 9.3.0" in step["detail"]
    assert out["theanorc"]["warnings"][-1].startswith("Theano 1.0.5 supports cuDNN v5 to v7")
    done, out = run_json(["theanorc", "--cuda-root", root, "--theanorc", rc], home)
    step = {c["name"]: c for c in out["checks"]}["theanorc"]
    assert (step["status"], out["cudnn_version"]) == ("warn", "9.3.0")
    assert "already up to date" in step["detail"] and "cuDNN 9.3.0" in step["detail"]
    v7 = cuda_root(version="10.2")  # inside v5-v7: nothing to say (of a file Theano reads)
    done, out = run_json(["install", archives[GENERATION_SAMPLES["v4-v7"]], "--cuda-root", v7,
                          "--theanorc", home / "v7.rc", "--no-verify", "--no-frameworks"], home,
                         {"THEANORC": str(home / "v7.rc")})
    step = {c["name"]: c for c in out["checks"]}["theanorc"]
    assert step["status"] == "pass" and out["theanorc"]["warnings"] == []


def test_the_theano_checks_json_is_the_typed_answer_not_the_childs_object(tmp_path):
    """What the probe of Theano's graphs answers is read field by field: a key it adds, or a
    field of another type, does not reach the check's data."""
    from cudnn_setup.probing.probe import run_probe
    from cudnn_setup.probing.theano_answer import WHAT
    from test_gpu_probe import answer_of, answering

    answer = {"python": "3.11.7", "theano_version": "1.0.5", "device": "cpu", "exp_ok": True,
              "conv_shape": [2, 8, "10", 10], "uses_cudnn": 1, "planted": "x" * 100000,
              "dnn": {"enabled": "True", "library_path": 7, "more": 1}}
    said = TheanoAnswer.read(run_probe(answering(tmp_path, answer_of(answer)), 60).answer(WHAT))
    data = said.to_dict()
    assert "planted" not in data and set(data["dnn"]) == {"enabled", "include_path", "library_path"}
    assert (data["conv_shape"], data["uses_cudnn"], data["dnn"]["library_path"]) == ([2, 8, 10], None, None)
    assert (said.theano_version, said.exp_ok) == ("1.0.5", True)
