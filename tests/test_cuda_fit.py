"""A cuDNN built for another CUDA major than the root's is refused before anything is written:
in inspect, --dry-run and install alike, with both versions and the archive to fetch instead."""
import json
import shutil
import sys

from conftest import clean_env, run_json, tree_state
from cudnn_setup.steps.context import Context
from cudnn_setup.commands.inspect import inspect
from fixtures.generate import GENERATION_SAMPLES

V8 = GENERATION_SAMPLES["8.0-8.3.0"]  # built for CUDA 11.3
V8L = GENERATION_SAMPLES["8.3.1+"]  # CUDA 12
V9 = GENERATION_SAMPLES["9.x"]  # CUDA 12


def _install(archive, root, home, *extra):
    return run_json(["install", archive, "--cuda-root", root, "--no-theanorc", "--no-verify",
                     *extra], home)


def _inspect(archive, root, home):
    """inspect given a CUDA root, called as the CLI calls it."""
    ctx = Context(env=clean_env(home), home=home, python=sys.executable)
    return inspect(ctx, archive, cuda_root=root)


def test_other_major_is_refused_everywhere_with_the_variant_to_fetch(archives, cuda_root, home):
    root = cuda_root("13.0")
    before = tree_state(root)
    for extra in ((), ("--dry-run",)):
        done, out = _install(archives[V9], root, home, *extra)
        assert done.returncode == 3, done.stderr
        error = out["error"]
        assert error["code"] == "cuda-mismatch"
        assert "built for CUDA 12 (archive name)" in error["message"]
        assert "CUDA 13.0" in error["message"]
        # NVIDIA published 9.3.0 for CUDA 11 and 12 only: no made-up name for a CUDA 13 build
        assert "_cuda13-archive" not in error["hint"] and "list --cuda 13" in error["hint"]
        assert "--force" in error["hint"]
        assert tree_state(root) == before
    result = _inspect(archives[V9], root, home)
    assert result.exit_code == 3 and result.error.code == "cuda-mismatch"
    assert result.to_dict()["built_for_cuda"] == {"version": "12", "source": "archive name"}
    assert any(line.startswith("verdict      NOT installable into") for line in result.lines)
    assert tree_state(root) == before


def test_inspect_without_a_root_says_what_it_was_built_for(archives, home):
    done, out = run_json(["inspect", archives[V9]], home)
    assert done.returncode == 0 and out["built_for_cuda"]["version"] == "12"


def test_same_major_fits_and_force_overrides(archives, cuda_root, home):
    root = cuda_root("12.8")
    result = _inspect(archives[V9], root, home)
    assert result.exit_code == 0 and "verdict      installable into" in "\n".join(result.lines)
    other = cuda_root("13.0")
    done, out = _install(archives[V9], other, home, "--force")
    assert done.returncode == 0 and out["changed"] is True
    done, out = run_json(["verify", "--cuda-root", other, "--no-theano"], home)
    assert {c["name"]: c["status"] for c in out["checks"]}["cuda"] == "fail"


def test_upgrade_to_a_cudnn_that_does_not_fit_keeps_the_working_one(archives, cuda_root, home):
    root = cuda_root("11.3")
    done, _ = _install(archives[V8], root, home)
    assert done.returncode == 0
    before = tree_state(root)
    done, out = _install(archives[V9], root, home)
    assert done.returncode == 3 and out["error"]["code"] == "cuda-mismatch"
    assert "it would replace cuDNN 8.2.1, which is built for this CUDA" in out["error"]["message"]
    assert tree_state(root) == before


def test_name_without_cuda_asks_the_staged_library(archives, cuda_root, home, tmp_path):
    """A renamed archive: the CUDA version comes from cudnnGetCudartVersion() of the staged
    library, run in a child; a cuDNN 8 main library loads its sub-libraries from the staging."""
    for i, name in enumerate((V9, V8L)):
        renamed = tmp_path / f"cudnn-{i}.tar.xz"
        shutil.copy(archives[name], renamed)
        wrong = cuda_root("13.0")
        done, out = _install(renamed, wrong, home)
        assert done.returncode == 3 and out["error"]["code"] == "cuda-mismatch"
        assert "built for CUDA 12.0 (cudnnGetCudartVersion() of the library)" \
            in out["error"]["message"]
        assert not (wrong / ".cudnn-setup").exists()
        right = cuda_root("12.4")
        done, out = _install(renamed, right, home)
        assert done.returncode == 0, done.stderr
        assert out["install"]["built_for_cuda"]["version"] == "12.0"
        manifest = json.loads((right / ".cudnn-setup" / "manifest.json").read_text())
        assert manifest["cuda_version"] == "12.0"
        assert manifest["cuda_source"].startswith("cudnnGetCudartVersion()")
        # verify says where the version came from as the install did, not "archive name"
        cuda = next(c for c in run_json(["verify", "--cuda-root", right, "--no-theano"],
                                        home)[1]["checks"] if c["name"] == "cuda")
        assert cuda["data"]["source"] == "cudnnGetCudartVersion() of the library", cuda


def test_library_that_cannot_tell_is_not_refused(archives, cuda_root, home, tmp_path, compiler):
    """A renamed archive whose library has no cudnnGetCudartVersion (like R1): nothing to
    compare, so installed, and the manifest says the CUDA version is unknown."""
    from fixtures.generate import SPECS, SUB_C, compress, spec_entries, tar_bytes

    entries = spec_entries(SPECS[GENERATION_SAMPLES["v4-v7"]], compiler)
    lib = next(e for e in entries if e.name.endswith("libcudnn.so.7.4.2"))
    lib.data = compiler.build(SUB_C, {"FIX_SYMBOL": "cudnnGetVersion"}, "libcudnn.so.7")
    archive = tmp_path / "cudnn7.tgz"
    archive.write_bytes(compress(tar_bytes(entries), archive.name))
    root = cuda_root("13.0")
    done, out = _install(archive, root, home)
    assert done.returncode == 0, done.stderr
    assert out["install"]["built_for_cuda"]["version"] is None
    assert "no cudnnGetCudartVersion" in out["install"]["built_for_cuda"]["source"]


def test_the_variant_named_is_one_nvidia_published():
    """Looked up in the table of NVIDIA's archives, never made from the input's name: a
    repacked .tar.gz of 8.9.6 for CUDA 12 is pointed at NVIDIA's .tar.xz for CUDA 11 (not a
    .tar.gz NVIDIA never shipped), and a build the table does not list at nothing."""
    from cudnn_setup.placement.fit import variant_name

    assert variant_name("cudnn-linux-x86_64-8.9.6.50_cuda12-archive.tar.gz", "8.9.6", 11) == \
        "cudnn-linux-x86_64-8.9.6.50_cuda11-archive.tar.xz"
    assert variant_name("cudnn-linux-x86_64-9.3.0.75_cuda12-archive.tar.xz", "9.3.0", 13) is None
    assert variant_name("cudnn-linux-x86_64-9.3.0.99_cuda12-archive.tar.xz", "9.3.0", 11) is None
