"""The load probe's answer, read once into a LoadAnswer that the checks after load share: each
asks it for cuDNN's version and the CUDA it was built for, by one rule."""
import os

from cudnn_setup.checks.deps import versions_for
from cudnn_setup.facts.cuda import FROM_LIBRARY
from cudnn_setup.facts.cuda import BuiltFor
from cudnn_setup.installation.built_for import built_for
from cudnn_setup.checks.load_check import load_libcudnn
from cudnn_setup.checks.cuda_check import check_cuda_with
from cudnn_setup.facts.cuda import CudaRoot
from cudnn_setup.installation import locate
from cudnn_setup.probing.load_answer import LoadAnswer
from fixtures import layouts


def env():
    return {k: v for k, v in os.environ.items() if not k.startswith(("LD_", "CUDA"))}


def test_a_cudart_version_that_names_no_cuda_is_unknown_to_every_check(tmp_path):
    """A library whose cudnnGetCudartVersion() answers 5 was built for no CUDA there is: the
    cuda check does not call it CUDA 0.0 and fail the root over it, as deps and driver agree."""
    lib = layouts.built_set(tmp_path / "cudnn", tmp_path / "w", version=(9, 3, 0),
                            options={"main": {"symbol": "cudnnGetCudartVersion", "value": 5}})
    inst = locate.locate(lib, cuda_root=CudaRoot(tmp_path, "test", "12.4", "test"))
    load, answer = load_libcudnn(inst, env())
    assert load.status == "pass", load.detail
    assert isinstance(answer, LoadAnswer) and answer.cudart_version == 5 and answer.cuda is None
    assert load.data["cudnnGetCudartVersion"] == 5  # the JSON says what the library said
    assert answer.cudnn == "9.3.0"
    cuda = check_cuda_with(inst, answer)
    assert cuda.status == "skip" and "unknown" in cuda.detail, cuda.detail
    assert versions_for(inst, answer).cuda is None
    assert built_for(inst, answer) == BuiltFor(None, None)


def test_the_cuda_a_library_was_built_for_is_read_once_for_all(tmp_path):
    lib = layouts.built_set(tmp_path / "cudnn", tmp_path / "w", version=(9, 3, 0),
                            options={"main": {"symbol": "cudnnGetCudartVersion", "value": 12040}})
    inst = locate.locate(lib, cuda_root=CudaRoot(tmp_path, "test", "12.8", "test"))
    _, answer = load_libcudnn(inst, env())
    assert answer is not None and answer.cuda == "12.4"
    assert check_cuda_with(inst, answer).status == "pass"
    assert versions_for(inst, answer).cuda == "12.4"
    assert built_for(inst, answer) == BuiltFor("12.4", FROM_LIBRARY)


def test_a_library_replaced_since_the_install_is_judged_by_what_it_is(tmp_path):
    """The manifest recorded CUDA 12.4; the library in place now answers 11.8 (replaced since).
    Every check that needs the CUDA it was built for takes the library's answer, by one rule:
    the cuda check fails it against a 12.8 root where the record alone would have passed."""
    from dataclasses import replace

    from cudnn_setup.state.manifest import Manifest, Source
    lib = layouts.built_set(tmp_path / "cudnn", tmp_path / "w", version=(9, 3, 0),
                            options={"main": {"symbol": "cudnnGetCudartVersion", "value": 11080}})
    inst = locate.locate(lib, cuda_root=CudaRoot(tmp_path, "test", "12.8", "test"))
    recorded = Manifest("0" * 32, "9.3.0", "v9", "12.4", Source("cudnn.tar.xz", "0" * 64, 1),
                        "lib64", [])
    inst = replace(inst, manifest=recorded)
    assert built_for(inst, None) == BuiltFor("12.4", recorded.cuda_learnt_from)
    _, answer = load_libcudnn(inst, env())
    assert answer is not None and answer.cuda == "11.8"
    assert built_for(inst, answer) == BuiltFor("11.8", FROM_LIBRARY)
    assert versions_for(inst, answer).cuda == "11.8"
    cuda = check_cuda_with(inst, answer)
    assert cuda.status == "fail" and "cudnnGetCudartVersion()" in cuda.detail, cuda.detail
    assert check_cuda_with(inst, None).status == "pass"  # the record alone: 12.4 on 12.8
