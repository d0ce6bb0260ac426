"""verify: each layer's pass and fail paths, with real fixture libraries and real processes."""
import importlib.util
import os
import shutil
import sys

import pytest

from conftest import copy_of_theano_cache, run_json
from cudnn_setup.facts import gpus
from fixtures.generate import EM_AARCH64, GENERATION_SAMPLES, patch_machine

V7 = GENERATION_SAMPLES["v4-v7"]
V8 = GENERATION_SAMPLES["8.0-8.3.0"]
V9 = GENERATION_SAMPLES["9.x"]


def installed(archives, cuda_root, home, name=V7, version="10.2", *extra, **kw):
    root = cuda_root(version=version, **kw)
    done, _ = run_json(["install", archives[name], "--cuda-root", root, "--no-theanorc",
                        "--no-verify", *extra], home)
    assert done.returncode == 0, done.stderr
    return root


def verify(root, home, *extra, env=None):
    done, out = run_json(["verify", "--cuda-root", root, "--no-theano", *extra], home, env)
    return done, out, {c["name"]: c for c in out["checks"]}


def test_healthy_install(archives, cuda_root, home):
    root = installed(archives, cuda_root, home)
    done, out, checks = verify(root, home)
    assert done.returncode == 0 and out["ok"] and out["cudnn_version"] == "7.4.2"
    assert [c["name"] for c in out["checks"]] == ["files", "elf", "versions", "load", "coherence",
                                                   "deps", "loader", "cuda", "driver", "compile",
                                                   "gpu", "frameworks", "clients", "theano"]
    for name in ("files", "elf", "versions", "load", "deps", "cuda", "compile"):
        assert checks[name]["status"] == "pass", checks[name]
    assert checks["coherence"]["status"] == "skip" and "one library" in checks["coherence"]["detail"]
    assert checks["frameworks"]["status"] == "skip"  # no framework in this interpreter
    assert "no deep-learning framework importable" in checks["frameworks"]["detail"]
    assert out["cudnn"]["managed"] is True and out["cudnn"]["version"] == "7.4.2"
    assert "cudnnGetVersion() = 7402" in checks["load"]["detail"]
    assert checks["gpu"]["status"] == "skip" and "libcuda.so.1" in checks["gpu"]["detail"]
    assert checks["loader"]["status"] == "warn" and "LD_LIBRARY_PATH" in checks["loader"]["detail"]


def test_missing_sub_library_aborts_in_the_child_and_is_named(archives, cuda_root, home):
    root = installed(archives, cuda_root, home, name=V8, version="11.3")
    (root / "lib64" / "libcudnn_cnn_infer.so.8.2.1").unlink()
    done, out, checks = verify(root, home)
    assert done.returncode == 1 and out["ok"] is False
    assert checks["files"]["status"] == "fail"
    assert "libcudnn_cnn_infer" in checks["files"]["detail"]
    load = checks["load"]
    assert load["status"] == "fail"
    assert "SIGABRT" in load["detail"] and "libcudnn_cnn_infer.so.8" in load["detail"]
    assert checks["gpu"]["status"] == "skip"  # nothing to run once loading fails


def test_library_of_another_version_swapped_in(archives, cuda_root, home, tmp_path):
    import tarfile

    root = installed(archives, cuda_root, home)
    with tarfile.open(archives["cudnn-8.0-linux-x64-v5.1.tgz"]) as tar:
        other = tar.extractfile("cuda/lib64/libcudnn.so.5.1.10").read()
    target = root / "lib64" / "libcudnn.so.7.4.2"
    target.write_bytes(other)
    done, out, checks = verify(root, home)
    assert checks["files"]["status"] == "fail" and "changed since" in checks["files"]["detail"]
    assert checks["elf"]["status"] == "fail" and "SONAME libcudnn.so.5" in checks["elf"]["detail"]
    assert checks["load"]["status"] == "fail" and "Mixed dnn version" in checks["load"]["detail"]
    # linked through libcudnn.so, the program now needs the SONAME of the swapped-in file
    assert checks["compile"]["status"] == "fail" and "libcudnn.so.5" in checks["compile"]["detail"]


def test_broken_link(archives, cuda_root, home):
    root = installed(archives, cuda_root, home)
    link = root / "lib64" / "libcudnn.so.7"
    link.unlink()
    link.symlink_to("libcudnn.so.7.4.1")
    done, out, checks = verify(root, home)
    assert checks["files"]["status"] == "fail" and "broken link" in checks["files"]["detail"]


def test_elf_for_another_machine(archives, cuda_root, home):
    root = installed(archives, cuda_root, home)
    lib = root / "lib64" / "libcudnn.so.7.4.2"
    lib.write_bytes(patch_machine(lib.read_bytes(), EM_AARCH64))
    done, out, checks = verify(root, home)
    assert checks["elf"]["status"] == "fail" and "built for aarch64" in checks["elf"]["detail"]
    assert checks["load"]["status"] == "fail"


def test_another_copy_first_on_ld_library_path(archives, cuda_root, home, tmp_path):
    root = installed(archives, cuda_root, home)
    other = tmp_path / "other-cudnn"
    other.mkdir()
    shutil.copy(root / "lib64" / "libcudnn.so.7.4.2", other / "libcudnn.so.7.4.2")
    (other / "libcudnn.so.7").symlink_to("libcudnn.so.7.4.2")
    env = {"LD_LIBRARY_PATH": f"{other}:{root / 'lib64'}"}
    done, out, checks = verify(root, home, env=env)
    loader = checks["loader"]
    assert loader["status"] == "warn"
    assert f"programs would load {other}/libcudnn.so.7" in loader["detail"]
    assert "export LD_LIBRARY_PATH=" in loader["detail"]
    env = {"LD_LIBRARY_PATH": f"{root / 'lib64'}:{other}"}
    done, out, checks = verify(root, home, env=env)
    assert checks["loader"]["status"] == "pass"
    assert str(other) in checks["loader"]["detail"]  # the other copy is still listed


def test_headers_without_cuda_runtime_h(archives, cuda_root, home):
    root = installed(archives, cuda_root, home)
    (root / "include" / "cuda_runtime.h").unlink()
    done, out, checks = verify(root, home)
    compile_ = checks["compile"]
    assert compile_["status"] == "fail" and "cuda_runtime.h, which cudnn.h includes, is not in" \
        in compile_["detail"] and "own headers are missing" in compile_["detail"]


def test_cuda_major_mismatch(archives, cuda_root, home):
    root = installed(archives, cuda_root, home, V9, "10.2", "--force")  # refused unforced
    done, out, checks = verify(root, home)
    assert checks["cuda"]["status"] == "fail"
    assert "built for CUDA 12" in checks["cuda"]["detail"] and "CUDA 10.2" in checks["cuda"]["detail"]


def test_same_major_other_minor_passes(archives, cuda_root, home):
    root = installed(archives, cuda_root, home, name=V9, version="12.4")
    done, out, checks = verify(root, home)
    assert checks["cuda"]["status"] == "pass"


def test_nothing_installed(cuda_root, home):
    done, out, checks = verify(cuda_root(), home)
    assert done.returncode == 1 and checks["files"]["status"] == "fail"
    assert "no cuDNN" in checks["files"]["detail"]


def test_manual_install_is_verified_without_manifest(archives, cuda_root, home, tmp_path):
    import tarfile

    root = cuda_root()
    with tarfile.open(archives[V7]) as tar:
        tar.extractall(tmp_path / "x", filter="data")
    for sub in ("include", "lib64"):
        for p in (tmp_path / "x" / "cuda" / sub).iterdir():
            dest = root / sub / p.name
            if p.is_symlink():
                dest.symlink_to(os.readlink(p))
            else:
                shutil.copy(p, dest)
    done, out, checks = verify(root, home)
    assert checks["files"]["status"] == "warn" and "no manifest" in checks["files"]["detail"]
    assert checks["load"]["status"] == "pass" and checks["versions"]["status"] == "pass"


def test_theano_missing_is_a_skip_with_hint(archives, cuda_root, home):
    root = installed(archives, cuda_root, home)
    bare = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
    done, out = run_json(["verify", "--cuda-root", root, "--python", bare], home)
    theano = {c["name"]: c for c in out["checks"]}["theano"]
    if theano["status"] != "skip":
        pytest.skip(f"{bare} has Theano")
    assert "pip install" in theano["detail"]


def test_theano_for_real(archives, cuda_root, home):
    """Theano builds T.exp and a conv net with the theanorc the install wrote; no GPU → warn."""
    # find_spec, not importorskip: importing Theano here, under no config that sets
    # blas.ldflags, crashes on numpy's ILP64 build config (an AttributeError, not a skip).
    if importlib.util.find_spec("theano") is None:
        pytest.skip("the theano extra is not installed")
    root = cuda_root()
    done, out = run_json(["install", archives[V7], "--cuda-root", root, "--theanorc",
                          home / ".theanorc"], home, timeout=900)
    theano = {c["name"]: c for c in out["checks"]}["theano"]
    assert theano["status"] == "warn", theano
    data = theano["data"]
    assert data["theano_version"] == "1.0.5" and data["exp_ok"] is True
    assert data["conv_op"] in ("CorrMM", "ConvOp", "AbstractConv2d")
    assert data["uses_cudnn"] is False and "no GPU" in data["reason"]
    assert "cudnn" in data["optimizer_including"]
    assert data["dnn"]["library_path"] == str(root / "lib64")
    assert done.returncode == 0


def test_a_second_theano_check_compiles_nothing(archives, cuda_root, tmp_path, theano_compiledir):
    """Theano keys some C modules (DimShuffle's) by hash() of their code, which Python salts
    per process: the check's child runs with a fixed seed, so a second verify finds in Theano's
    cache what the first compiled (each one compiled it again, 1.2 s of g++, before)."""
    if importlib.util.find_spec("theano") is None:
        pytest.skip("the theano extra is not installed")
    home = tmp_path / "own-home"  # a compile cache of its own: nothing else writes to it
    home.mkdir()
    # started from the session's (other processes' salts): a salted key is compiled again here
    copy_of_theano_cache(theano_compiledir, home / ".theano")
    root = cuda_root()
    done, _ = run_json(["install", archives[V7], "--cuda-root", root, "--no-verify"], home)
    assert done.returncode == 0, done.stderr
    compiledir = home / ".theano"

    def modules() -> set:
        return {p.parent.name for p in compiledir.glob("compiledir_*/*/mod.cpp")}

    run_json(["verify", "--cuda-root", root, "--no-frameworks"], home, timeout=900)
    first = modules()
    assert first, "Theano compiled nothing: the check did not run its graphs"
    done, out = run_json(["verify", "--cuda-root", root, "--no-frameworks"], home, timeout=900)
    theano = {c["name"]: c for c in out["checks"]}["theano"]
    assert theano["status"] == "warn", theano
    assert modules() == first, f"compiled again: {sorted(modules() - first)}"


def test_gpu_table():
    assert gpus.lookup("Tesla C2075") == "2.0"
    assert gpus.lookup("NVIDIA H200") == "9.0"
    assert gpus.lookup("Tesla K20c") == "3.5"
    assert gpus.lookup("Imaginary 9000") is None


def test_change_with_restored_mtime_is_still_caught(archives, cuda_root, home):
    """verify trusts the recorded hash only while inode, size, mtime and ctime are unchanged."""
    root = installed(archives, cuda_root, home)
    header = root / "include" / "cudnn.h"
    st = header.stat()
    data = bytearray(header.read_bytes())
    data[-2] = ord("X")  # same size
    header.write_bytes(bytes(data))
    os.utime(header, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime put back, ctime moved on
    done, out, checks = verify(root, home)
    assert checks["files"]["status"] == "fail" and "include/cudnn.h" in checks["files"]["detail"]
    done, out, checks = verify(root, home, "--deep")
    assert checks["files"]["status"] == "fail"


def test_side_by_side_judges_what_the_links_select(archives, cuda_root, home, tmp_path):
    """8.9 copied by hand, 9.x installed next to it: verify judges libcudnn.so -> .so.9 ->
    9.3.0 (not the first file in sort order) and lists 8.9.6 as a warning."""
    from test_adopt import hand_copy

    root = cuda_root(version="12.4")
    hand_copy(archives[GENERATION_SAMPLES["8.3.1+"]], root, tmp_path / "x")
    done, _ = run_json(["install", archives[V9], "--cuda-root", root, "--no-theanorc",
                        "--no-verify"], home)
    assert done.returncode == 0, done.stderr
    done, out, checks = verify(root, home)
    for name in ("versions", "load", "elf", "compile", "cuda"):
        assert checks[name]["status"] == "pass", checks[name]
    assert "cudnnGetVersion() = 90300" in checks["load"]["detail"]
    files = checks["files"]
    assert files["status"] == "warn" and "8.9.6 (7 libraries)" in files["detail"]
    assert files["data"]["selected_by"] == "libcudnn.so"
    assert done.returncode == 0 and out["ok"] is True


def test_without_a_manifest_the_link_decides_too(archives, cuda_root, home, tmp_path):
    """Both copied by hand, 9.x first: libcudnn.so now leads to 8.9.6, whose headers are in
    place; 8.9.6 is judged and 9.3.0 listed."""
    from test_adopt import hand_copy

    root = cuda_root(version="12.4")
    hand_copy(archives[V9], root, tmp_path / "a")
    hand_copy(archives[GENERATION_SAMPLES["8.3.1+"]], root, tmp_path / "b")
    for header in ("cudnn_graph.h", "cudnn_graph_v9.h", "cudnn_ops.h", "cudnn_ops_v9.h",
                   "cudnn_adv.h", "cudnn_adv_v9.h", "cudnn_cnn.h", "cudnn_cnn_v9.h"):
        (root / "include" / header).unlink(missing_ok=True)
    done, out, checks = verify(root, home)
    assert checks["versions"]["status"] == "pass", checks["versions"]
    assert checks["load"]["status"] == "pass" and "= 8906" in checks["load"]["detail"]
    assert checks["files"]["status"] == "warn" and "9.3.0 (8 libraries)" in checks["files"]["detail"]
