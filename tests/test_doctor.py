"""doctor: the machine's cuDNN picture, and Theano's startup line explained."""
import importlib.util
import os
import subprocess
import sys

import pytest

from conftest import clean_env, run_json
from cudnn_setup.startup_line import explain
from cudnn_setup.theanorc_merge import effective_config as theano_config

C2075 = ("Using gpu device 0: Tesla C2075 (CNMeM is enabled with initial size: 95.0% of memory, "
         "cuDNN not available)")


def test_classic_startup_line_is_explained_part_by_part():
    parts = {p["part"]: p for p in explain(C2075)}
    assert parts["Tesla C2075"]["compute_capability"] == "2.0"
    assert "can never be used" in parts["Tesla C2075"]["meaning"]
    cnmem = parts["CNMeM is enabled with initial size: 95.0% of memory"]["meaning"]
    assert "memory pool" in cnmem and "95.0%" in cnmem
    why = parts["cuDNN not available"]["meaning"]
    assert "compute capability 2.0" in why and "3.0" in why
    assert "37 min instead of 21" in why and "MLP loses nothing" in why


def test_supported_gpu_without_cudnn_points_to_verify():
    parts = {p["part"]: p for p in explain("Using gpu device 0: Tesla K20c (CNMeM is disabled, "
                                           "cuDNN not available)")}
    assert parts["Tesla K20c"]["compute_capability"] == "3.5"
    assert "cudnn-setup verify" in parts["cuDNN not available"]["meaning"]
    assert "driver" in parts["CNMeM is disabled"]["meaning"]


def test_cudnn_in_use_and_new_backend_lines():
    parts = explain("Using gpu device 0: GeForce GTX 980 (CNMeM is disabled, cuDNN 5105)")
    assert any("cuDNN 5.1.5" in p["meaning"] for p in parts)
    parts = explain("Mapped name None to device cuda0: Tesla K80 (0000:00:1E.0)")
    assert any(p.get("compute_capability") == "3.7" for p in parts)
    assert "9.19.0" in explain("Using cuDNN version 91900 on context None")[0]["meaning"]


def test_theano_config_later_files_and_flags_win(tmp_path):
    a, b = tmp_path / "a.rc", tmp_path / "b.rc"
    a.write_text("[global]\ndevice = cuda\nfloatX = float32\n")
    b.write_text("[global]\ndevice = cpu\n[dnn]\nlibrary_path = /x\n")
    env = {"THEANORC": os.pathsep.join([str(a), str(b)]), "THEANO_FLAGS": "dnn.library_path=/y"}
    eff = theano_config(env, tmp_path)["effective"]
    assert eff["global.device"] == {"value": "cpu", "from": "theanorc"}
    assert eff["global.floatx"]["value"] == "float32"
    assert eff["dnn.library_path"] == {"value": "/y", "from": "THEANO_FLAGS"}


def test_doctor_cli_lists_roots_copies_and_problems(archives, cuda_root, home):
    r7, r9 = cuda_root(version="10.2"), cuda_root(version="12.4")
    for root, name in ((r7, "cudnn-10.0-linux-x64-v7.4.2.24.tgz"),
                       (r9, "cudnn-linux-x86_64-9.3.0.99_cuda12-archive.tar.xz")):
        run_json(["install", archives[name], "--cuda-root", root, "--no-verify"], home)
    done, out = run_json(["doctor", C2075, "--cuda-root", r7], home,
                         env_extra={"CUDA_HOME": str(r9)})
    assert done.returncode == 1, done.stderr  # a GPU that can run no cuDNN is a failure
    roots = [r["path"] for r in out["cuda_roots"] if r["usable"]]
    assert roots[:2] == [str(r7), str(r9)]
    versions = {c["version"] for c in out["cudnn_copies"]}
    assert {"7.4.2", "9.3.0"} <= versions
    messages = [p["message"] for p in out["problems"]]
    assert any("several cuDNN versions" in m for m in messages)
    top = out["problems"][0]  # the C2075 comes first
    assert (top["severity"], top["check"], top["rank"]) == ("fail", "gpu", 0)
    assert [p["severity"] for p in out["problems"]].count("fail") == 1
    assert {c["name"]: c for c in out["checks"]}["problems"]["status"] == "fail"
    assert any(e["part"] == "Tesla C2075" for e in out["explanation"])
    assert "explanation:" in done.stderr


def test_doctor_notices_theano_dnn_paths_left_pointing_at_an_uninstalled_root(archives,
                                                                              cuda_root, home):
    root = cuda_root(version="10.2")
    rc = home / ".theanorc"
    done, _ = run_json(["install", archives["cudnn-10.0-linux-x64-v7.4.2.24.tgz"], "--cuda-root",
                        root, "--theanorc", rc, "--no-verify", "--no-frameworks"], home)
    assert done.returncode == 0, done.stderr
    done, _ = run_json(["uninstall", "--cuda-root", root], home)
    assert done.returncode == 0, done.stderr
    done, out = run_json(["doctor", "--cuda-root", root], home)
    stale = [p for p in out["problems"] if p["check"] == "theano-config"
             and "points where there is no cuDNN" in p["message"]]
    assert [p["severity"] for p in stale] == ["fail", "fail"]  # optimizer_including=cudnn stops
    assert str(root / "include") in stale[0]["message"] and "cudnn-setup theanorc" in stale[0]["fix"]
    assert done.returncode == 1


def test_relative_paths_are_taken_from_the_callers_directory(archives, cuda_root, home, tmp_path):
    """doctor --cuda-root and verify --lib-dir given relative paths judge the same files as
    with absolute ones (the loader's search used to read them against another directory)."""
    from conftest import run_json

    root = cuda_root()
    run_json(["install", archives["cudnn-10.0-linux-x64-v7.4.2.24.tgz"], "--cuda-root", root,
              "--no-theanorc", "--no-verify"], home)
    rel = os.path.relpath(root, tmp_path)
    for argv in (["doctor", "--cuda-root"], ["verify", "--no-theano", "--lib-dir"]):
        target = rel if argv[0] == "doctor" else os.path.join(rel, "lib64")
        absolute = root if argv[0] == "doctor" else root / "lib64"
        _, by_rel = run_json([*argv, target], home, cwd=tmp_path)
        _, by_abs = run_json([*argv, absolute], home, cwd=tmp_path)
        statuses = lambda out: {c["name"]: c["status"] for c in out["checks"]}
        assert statuses(by_rel) == statuses(by_abs), argv


def test_theano_1_0s_line_for_an_unusable_cudnn_is_explained(archives, cuda_root, home):
    """Theano 1.0.5 (device=cuda) says "Can not use cuDNN on context None: <why>" when cuDNN
    cannot be used; doctor answered "not a Theano startup line this tool knows" to it, the line
    a user of this Theano pastes most."""
    line = ("Can not use cuDNN on context None: cannot compile with cuDNN. We got this error:\n"
            "/usr/bin/ld: cannot find -lcudnn\ncollect2: error: ld returned 1 exit status")
    root = cuda_root()
    done, out = run_json(["doctor", line, "--cuda-root", root], home)
    parts = {p["part"]: p["meaning"] for p in out["explanation"]}
    assert "Theano 1.0's GPU backend (device=cuda) will not use cuDNN" in \
        parts["Can not use cuDNN on context None"], parts
    assert "could not link -lcudnn" in parts["cannot compile with cuDNN. We got this error:"]
    for why, says in (("Disabled by dnn.enabled flag", "dnn.enabled=False"),
                      ("PyGPU not available", "pygpu"),
                      ("Device not supported", "compute capability"),
                      ("cuDNN version is too old. Update to v5* or higher, was 4007.", "v5 to v7"),
                      ("Use cuDNN 7.0.2 or higher for Volta.", "7.0.2")):
        said = explain(f"Can not use cuDNN on context cuda0: {why}")
        parts = {p["part"]: p["meaning"] for p in said}
        assert says in parts[why], (why, parts)


@pytest.mark.skipif(importlib.util.find_spec("theano") is None,
                    reason="the theano extra is not installed")
def test_doctor_says_when_the_pythons_theano_cannot_import_under_the_config(archives, cuda_root,
                                                                            home):
    """doctor runs no Theano, and said nothing wrong (exit 0, no problem about Theano) where
    `import theano` in --python stops on numpy's missing blas_opt_info, which verify's theano
    check fails on. It says so, naming the command that writes what is missing."""
    root = cuda_root(version="10.2")
    rc = home / ".theanorc"
    rc.write_text("[global]\noptimizer_including = cudnn\n")
    imported = subprocess.run([sys.executable, "-c", "import theano"], capture_output=True,
                              text=True, timeout=300, env=clean_env(home))
    assert "blas_opt_info" in imported.stderr  # the user's own import fails
    done, out = run_json(["doctor", "--cuda-root", root, "--python", sys.executable], home)
    blocked = [p for p in out["problems"] if p["check"] == "theano-config"
               and "`import theano` fails" in p["message"]]
    assert len(blocked) == 1 and "blas_opt_info" in blocked[0]["message"], out["problems"]
    assert blocked[0]["fix"] == f"run `cudnn-setup theanorc --python {sys.executable}`"
    rc.write_text(rc.read_text() + "\n[blas]\nldflags =\n")  # what theanorc writes here
    done, out = run_json(["doctor", "--cuda-root", root, "--python", sys.executable], home)
    assert not [p for p in out["problems"] if "`import theano` fails" in p["message"]]


def test_doctor_with_theano_flags_that_cannot_be_parsed_says_so(cuda_root, home):
    """THEANO_FLAGS with an unclosed quote is a problem doctor lists ("cannot be parsed"), but
    the question whether --python's Theano can import read the flags again, unguarded, and
    doctor ended in exit 70, an internal error, on the very thing it diagnoses."""
    root = cuda_root(version="10.2")
    done, out = run_json(["doctor", "--cuda-root", root, "--python", sys.executable], home,
                         {"THEANO_FLAGS": 'device="cuda'})
    assert done.returncode != 70 and out["error"] is None, out["error"]
    assert any("THEANO_FLAGS cannot be parsed" in p["message"] for p in out["problems"]), \
        out["problems"]
