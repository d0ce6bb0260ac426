"""A child that answers with this run's key but leaves out fields, or sends them as another
type: each check that reads the answer fails saying what is missing, instead of the command
ending in an internal error (exit 70). The children are real processes answering through
probes/answer.py, as a broken interpreter or a tampered probe would."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import check_facts
from cudnn_setup.probing.answer_values import BadAnswer, Fields
from cudnn_setup.benchmarks import algorithm_verdict, theano_checks
from cudnn_setup.installation.model import Installation
from cudnn_setup.probing.load_answer import WHAT as LOAD_ANSWER, LoadAnswer
from cudnn_setup.probing.probe import run_probe
from cudnn_setup.checks.cuda_check import check_cuda_with
from cudnn_setup.checks.theano_check import check_theano
from cudnn_setup.facts.cuda import CudaRoot
from cudnn_setup.report import FAIL, PASS, SKIP

PROBES = Path(__file__).resolve().parent.parent / "cudnn_setup" / "probes"
ANSWERS = """
import json, os, sys
sys.path.insert(0, {probes!r})
from answer import emit
if "-c" in sys.argv:  # asked whether Theano is there: it is
    print("theano True")
    sys.exit(0)
emit(lambda: json.loads({answer!r}))
"""


def interpreter(tmp_path: Path, answer: dict) -> str:
    """An "interpreter" that finds Theano and answers every probe with `answer`."""
    script = tmp_path / "answers.py"
    script.write_text(ANSWERS.format(probes=str(PROBES), answer=json.dumps(answer)))
    exe = tmp_path / "python"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} {script} \"$@\"\n")
    exe.chmod(0o755)
    return str(exe)


def inst_of(tmp_path: Path) -> Installation:
    lib = tmp_path / "lib64"
    lib.mkdir(exist_ok=True)
    main = lib / "libcudnn.so.7.6.5"
    main.write_bytes(b"")
    return Installation(CudaRoot(tmp_path, "test", "10.2", "test"), lib, None,
                        header_version="7.6.5", header_file=tmp_path / "cudnn.h", libraries=[main])


GRAPHS = {"theano_version": "1.0.5", "device": "cuda", "exp_ok": True, "conv_op": "GpuDnnConv",
          "conv_shape": [2, 8, 10, 10], "uses_cudnn": True, "optimizer_including": "cudnn"}


@pytest.mark.parametrize("answer, says", [
    ({"theano_version": "1.0.5"}, "has no text 'device'"),
    (dict(GRAPHS, exp_ok="yes"), "has no true or false 'exp_ok'"),
    (dict(GRAPHS, conv_shape=None), "has no list 'conv_shape'"),
    ({}, "has no text 'theano_version'"),
])
def test_theano_check_fails_on_a_short_answer(tmp_path, answer, says):
    check = check_theano(inst_of(tmp_path), check_facts({}, interpreter(tmp_path, answer)))
    assert check.status == FAIL and says in check.detail, check.detail
    assert check.detail.startswith("Theano's test graphs ran but their answer cannot be judged")


def test_theano_check_passes_a_whole_answer_from_the_same_child(tmp_path):
    check = check_theano(inst_of(tmp_path), check_facts({}, interpreter(tmp_path, GRAPHS)))
    assert check.status == PASS and check.detail.endswith("conv net used GpuDnnConv (cuDNN)")


TIMINGS = {"device": "cuda", "uses_cudnn": True, "conv_ops": ["GpuDnnConv"],
           "conv_step_s": 0.002, "mlp_step_s": 0.001}


@pytest.mark.parametrize("answer, says", [
    ({"device": "cuda"}, "has no true or false 'uses_cudnn'"),
    (dict(TIMINGS, conv_step_s=0), "'conv_step_s' is 0, no time a step can take"),
    (dict(TIMINGS, mlp_step_s="fast"), "has no number"),
    (dict(TIMINGS, conv_ops="GpuDnnConv"), "has no list 'conv_ops'"),
])
def test_bench_fails_on_a_short_answer(tmp_path, answer, says):
    [check] = theano_checks(inst_of(tmp_path), interpreter(tmp_path, answer), None, {})
    assert check.name == "theano-conv" and check.status == FAIL
    assert says in check.detail, check.detail


def test_bench_reads_a_whole_answer_from_the_same_child(tmp_path):
    conv, mlp = theano_checks(inst_of(tmp_path), interpreter(tmp_path, TIMINGS), None, {})
    assert (conv.status, mlp.status) == (PASS, PASS)
    assert "cuDNN is 1.00x as fast" in conv.detail


def answered(tmp_path: Path, answer: dict):
    interpreter(tmp_path, answer)
    return run_probe([str(tmp_path / "answers.py")], 30)


@pytest.mark.parametrize("answer, status, says", [
    ({"status": "skip"}, SKIP, "no reason given"),
    ({"status": "pass"}, FAIL, "has no text 'gpu'"),
    ({"status": "pass", "gpu": "H200"}, FAIL, "has no object 'layers'"),
    ({"status": "pass", "gpu": "H200", "layers": {"conv1": {"input": [1], "filter": [2],
                                                            "fastest": {"algo": "x"}}}},
     FAIL, "has no number of at least 0 'layers.conv1.fastest.ms'"),
    ({"status": 7}, FAIL, "failed"),
])
def test_gpu_benchmark_fails_on_a_short_answer(tmp_path, answer, status, says):
    check = algorithm_verdict(answered(tmp_path, answer))
    assert check.status == status and says in check.detail, check.detail


def test_gpu_benchmark_reads_a_whole_answer(tmp_path):
    layer = {"input": [1, 3, 8, 8], "filter": [4, 3, 3, 3],
             "fastest": {"algo": "IMPLICIT_GEMM", "ms": 0.25}}
    check = algorithm_verdict(answered(tmp_path, {"status": "pass", "gpu": "NVIDIA H200",
                                                  "layers": {"conv1": layer, "bad": "x"}}))
    assert check.status == PASS
    assert check.detail == ("on NVIDIA H200: conv1 [1, 3, 8, 8]*[4, 3, 3, 3]: fastest "
                            "IMPLICIT_GEMM 0.250 ms")


def load_answer(tmp_path: Path, answer: dict) -> LoadAnswer:
    return LoadAnswer.read(answered(tmp_path, answer).answer(LOAD_ANSWER))


def test_cuda_check_ignores_a_cudart_version_that_is_not_a_number(tmp_path):
    check = check_cuda_with(inst_of(tmp_path),
                            load_answer(tmp_path, {"cudnnGetCudartVersion": "12.4"}))
    assert check.status == SKIP  # unknown, not an internal error
    got = load_answer(tmp_path, {"cudnnGetCudartVersion": 10020})
    assert check_cuda_with(inst_of(tmp_path), got).status == PASS


def test_fields_read_each_type_or_nothing():
    f = Fields({"s": "x" * 500, "n": 3, "b": True, "f": 1.5, "o": {"k": 1}, "l": [1, "a", {}],
                "nan": float("nan")}, "the answer")
    assert (f.text("s", 10), f.integer("n"), f.integer("b"), f.flag("b"), f.flag("n")) == \
        ("x" * 10, 3, None, True, None)
    assert (f.number("f"), f.number("n"), f.number("b"), f.number("nan")) == (1.5, 3.0, None, None)
    assert f.fields("o").integer("k") == 1 and not f.fields("s") and f.fields("missing").what
    assert f.strings("l") == ["a"] and [x.raw("k") for x in f.items("l")] == [None]
    with pytest.raises(BadAnswer, match="the answer has no text 'gone'$"):
        f.need_text("gone")
    with pytest.raises(BadAnswer, match="the answer has no text 'n' \\(it holds 3\\)"):
        f.need_text("n")
    with pytest.raises(AttributeError):
        f.nonexistent_getter  # noqa: B018  a misspelt reader is an error, not a None


def test_framework_names_that_are_no_module_names_are_dropped(tmp_path):
    from cudnn_setup.probing.framework_probe import importable_frameworks

    python = interpreter(tmp_path, {"probe": "frameworks", "frameworks": [
        {"name": "torch", "importable": True}, {"name": "--help"}, {"name": "x" * 500},
        {"name": "a b"}, {"name": 7}, "jax"]})
    assert [e.name for e in importable_frameworks(python, {})] == ["torch"]


def test_the_framework_list_is_read_into_typed_entries(tmp_path):
    """A field of another type than the child claims reads as unknown: a version that is not
    text is no version, an `importable` that is not true is not importable (no child is
    started for it)."""
    from cudnn_setup.probing.framework_probe import Listed, importable_frameworks

    python = interpreter(tmp_path, {"probe": "frameworks", "frameworks": [
        {"name": "torch", "importable": True, "version": 2.1},
        {"name": "jax", "importable": "yes", "version": "0.4"},
        {"name": "cupy", "importable": True, "version": "13.0", "extra": {"a": 1}}]})
    assert importable_frameworks(python, {}) == [Listed("torch", True, None),
                                                 Listed("jax", False, "0.4"),
                                                 Listed("cupy", True, "13.0")]


def test_bench_writes_its_json_from_what_it_read_not_the_childs_object(tmp_path):
    """Keys a child adds, and fields of another type, never reach bench's data."""
    conv, _ = theano_checks(inst_of(tmp_path), interpreter(tmp_path, dict(
        TIMINGS, planted="x" * 100000, steps="many")), None, {})
    run = conv.data["with_cudnn"]
    assert "planted" not in run and run["steps"] is None and run["conv_step_s"] == 0.002
    layer = {"input": [1, 3, 8, 8], "filter": [4, 3, 3, "3"], "planted": 1,
             "fastest": {"algo": "IMPLICIT_GEMM", "ms": 0.25, "planted": 2}}
    check = algorithm_verdict(answered(tmp_path, {"status": "pass", "gpu": "NVIDIA H200",
                                                  "planted": 3, "layers": {"conv1": layer}}))
    assert check.status == PASS and "planted" not in check.data
    assert check.data["layers"]["conv1"]["filter"] == [4, 3, 3]
    assert check.data["layers"]["conv1"]["fastest"] == {"algo": "IMPLICIT_GEMM", "ms": 0.25,
                                                        "workspace_bytes": None}


@pytest.mark.parametrize("said, read", [
    ('{"numpy": "1.23.5", "blas_opt_info": false}', ("1.23.5", False)),
    ('{"numpy": null}', None),  # no numpy.distutils there: an answer
    ('{"numpy": 1.23, "blas_opt_info": true}', "unusable"),  # a version that is no text
    ('{"numpy": "1.19.5", "blas_opt_info": "yes"}', "unusable"),
    ('{"numpy": "1.19.5"}', "unusable"),
    ('[1, 2]', "unusable")])
def test_numpys_answer_is_read_field_by_field(tmp_path, said, read):
    from cudnn_setup.child import Unanswered
    from cudnn_setup.theano_blas import NumpyBlas, numpy_blas

    exe = tmp_path / "python"
    exe.write_text(f"#!/bin/sh\necho '{said}'\n")
    exe.chmod(0o755)
    if read == "unusable":  # no answer to take for "no numpy"
        with pytest.raises(Unanswered, match="its answer cannot be used"):
            numpy_blas(str(exe), {})
        return
    assert numpy_blas(str(exe), {}) == (NumpyBlas(*read) if read else None)
