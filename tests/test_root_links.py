"""One rule for symlinked directories in a CUDA root: followed when they resolve inside the root's
real tree (NVIDIA's runfile layout), refused, naming the link, when they leave it."""
import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import run_json, tree_state
from cudnn_setup.placement.targets import root_dirs
from cudnn_setup.facts.cuda import find_cuda_root
from fixtures.generate import GENERATION_SAMPLES


V7 = GENERATION_SAMPLES["v4-v7"]
TARGET = "targets/x86_64-linux"


def runfile_layout(root: Path) -> Path:
    """include -> targets/x86_64-linux/include, lib64 -> targets/x86_64-linux/lib."""
    shutil.move(str(root / "include"), str(root / TARGET / "include"))
    (root / "include").symlink_to(f"{TARGET}/include")
    (root / "lib64").symlink_to(f"{TARGET}/lib")
    return root


def test_links_inside_the_root_are_followed(archives, cuda_root, home, bare_python):
    root = runfile_layout(cuda_root(layout="targets"))
    before = tree_state(root)
    # verified with an interpreter that has no Theano: the subject is the files, not Theano
    done, out = run_json(["install", archives[V7], "--cuda-root", root, "--no-theanorc",
                          "--python", bare_python], home)
    assert done.returncode == 0, done.stderr
    assert (root / TARGET / "include" / "cudnn.h").is_file()
    assert (root / TARGET / "lib" / "libcudnn.so.7.4.2").is_file()
    assert os.path.islink(root / "include") and os.path.islink(root / "lib64")
    manifest = json.loads((root / ".cudnn-setup" / "manifest.json").read_text())
    assert {f["path"].rsplit("/", 1)[0] for f in manifest["files"]} == {f"{TARGET}/include",
                                                                          f"{TARGET}/lib"}
    assert manifest["include_dir"] == f"{TARGET}/include"
    checks = {c["name"]: c["status"] for c in out["checks"]}
    assert checks["files"] == "pass" and checks["load"] == "pass"
    run_json(["uninstall", "--cuda-root", root], home)
    assert tree_state(root) == before


@pytest.mark.parametrize("which", ["include", "lib64"])
def test_links_out_of_the_root_are_refused_alike(which, archives, cuda_root, home, tmp_path):
    root = cuda_root()
    outside = tmp_path / "elsewhere"
    shutil.move(str(root / which), str(outside))
    (root / which).symlink_to(outside)
    before, before_outside = tree_state(root), tree_state(outside)
    for extra in ((), ("--dry-run",)):
        done, out = run_json(["install", archives[V7], "--cuda-root", root, "--no-theanorc",
                              *extra], home)
        assert done.returncode == 5, done.stderr
        assert out["error"]["code"] == "link-outside-root"
        assert f"{root / which} -> {outside}" in out["error"]["message"]
        assert tree_state(root) == before and tree_state(outside) == before_outside


def test_a_link_into_the_state_dir_is_refused(archives, cuda_root, home):
    root = cuda_root()
    shutil.rmtree(root / "lib64")
    (root / ".cudnn-setup" / "lib").mkdir(parents=True)
    (root / "lib64").symlink_to(".cudnn-setup/lib")
    done, out = run_json(["install", archives[V7], "--cuda-root", root, "--no-theanorc"], home)
    assert done.returncode == 5 and out["error"]["code"] == "link-outside-root"


def test_the_real_toolkit_here_resolves_inside_itself():
    """Read only: /usr/local/cuda (a link to cuda-13.0 here, lib64 -> lib)."""
    real = Path("/usr/local/cuda")
    if not (real / "include" / "cuda.h").exists():
        pytest.skip("no CUDA toolkit in /usr/local/cuda")
    include, lib = root_dirs(find_cuda_root({}, real))
    assert not include.startswith(("/", "..")) and not lib.startswith(("/", ".."))
    assert (real / include).is_dir() and (real / lib).is_dir()
