"""cuDNN copied by hand with NVIDIA's steps, then `install`, then `uninstall`: the hand-copied
tree comes back byte for byte, and `changed` says what was written."""
import os
import subprocess
from pathlib import Path

from conftest import run_json, tree_state
from fixtures.generate import GENERATION_SAMPLES

V8L = GENERATION_SAMPLES["8.3.1+"]
V9 = GENERATION_SAMPLES["9.x"]


def hand_copy(archive: Path, root: Path, scratch: Path, keep_links: bool = True) -> None:
    """NVIDIA's tar-file steps: extract, cp the headers, cp -P the libraries, chmod a+r.
    Without -P (a common slip), the links become copies of the library."""
    scratch.mkdir()
    subprocess.run(["tar", "-xf", str(archive), "-C", str(scratch)], check=True)
    top = next(scratch.iterdir())
    cp = "cp -P" if keep_links else "cp"
    subprocess.run(f"cp {top}/include/cudnn*.h {root}/include/ && {cp} {top}/lib/libcudnn* "
                   f"{root}/lib64/ && chmod a+r {root}/include/cudnn*.h {root}/lib64/libcudnn*",
                   shell=True, check=True)


def cudnn_paths(root: Path) -> list[str]:
    return sorted(f"{d}/{p.name}" for d in ("include", "lib64") for p in (root / d).iterdir()
                  if p.name.startswith(("cudnn", "libcudnn")))


def inodes(root: Path) -> dict:
    return {p: os.lstat(root / p).st_ino for p in cudnn_paths(root)}


def install(archive, root, home, *extra):
    return run_json(["install", archive, "--cuda-root", root, "--no-theanorc", "--no-verify",
                     *extra], home)


def test_same_version_by_hand_is_adopted_and_left_on_uninstall(archives, cuda_root, home, tmp_path):
    root = cuda_root("12.4")
    hand_copy(archives[V8L], root, tmp_path / "x")
    hand, ino = tree_state(root), inodes(root)
    done, out = install(archives[V8L], root, home, "--dry-run")
    assert out["would_change"] is True
    assert {a["action"] for a in out["install"]["plan"]} == {"adopt"}
    assert tree_state(root) == hand
    done, out = install(archives[V8L], root, home)
    assert done.returncode == 0, done.stderr
    assert out["changed"] is True  # the tool's record of the hand copy is new
    assert sorted(out["install"]["adopted"]) == cudnn_paths(root)
    assert out["install"]["plan"] == [{"action": "adopt", "path": p}
                                      for p in out["install"]["adopted"]]
    assert "copied there by hand: nothing written" in done.stderr
    assert inodes(root) == ino, "not one file rewritten"
    assert {k: v for k, v in tree_state(root).items() if not k.startswith(".cudnn-setup")} == hand
    done, out = install(archives[V8L], root, home)
    assert out["changed"] is False
    done, out = run_json(["verify", "--cuda-root", root, "--no-theano"], home)
    checks = {c["name"]: c for c in out["checks"]}
    assert checks["files"]["status"] == "pass" and checks["files"]["data"]["managed"] is True
    done, out = run_json(["uninstall", "--cuda-root", root], home)
    assert done.returncode == 0 and out["changed"] is True
    assert {a["action"] for a in out["uninstall"]["plan"]} == {"keep"}
    assert tree_state(root) == hand and inodes(root) == ino


def test_copy_without_links_is_backed_up_where_it_differs(archives, cuda_root, home, tmp_path):
    root = cuda_root("12.4")
    hand_copy(archives[V8L], root, tmp_path / "x", keep_links=False)
    hand = tree_state(root)
    assert not (root / "lib64" / "libcudnn.so").is_symlink()
    done, out = install(archives[V8L], root, home)
    assert done.returncode == 0 and out["changed"] is True
    backed = set(out["install"]["backed_up"])
    assert "lib64/libcudnn.so" in backed and "lib64/libcudnn.so.8" in backed
    assert "lib64/libcudnn.so.8.9.6" in out["install"]["adopted"]
    assert os.readlink(root / "lib64" / "libcudnn.so") == "libcudnn.so.8"
    run_json(["uninstall", "--cuda-root", root], home)
    assert tree_state(root) == hand


def test_other_version_by_hand_comes_back_after_uninstall(archives, cuda_root, home, tmp_path):
    root = cuda_root("12.4")
    hand_copy(archives[V8L], root, tmp_path / "x")
    hand = tree_state(root)
    done, out = install(archives[V9], root, home)
    assert done.returncode == 0 and out["changed"] is True
    assert "include/cudnn.h" in out["install"]["backed_up"]
    assert (root / "lib64" / "libcudnn_ops_infer.so.8.9.6").is_file()  # not the tool's: kept
    done, out = run_json(["uninstall", "--cuda-root", root], home)
    assert done.returncode == 0
    assert tree_state(root) == hand


def test_adopted_then_upgraded_then_downgraded_then_uninstalled(archives, cuda_root, home,
                                                                tmp_path):
    root = cuda_root("12.4")
    hand_copy(archives[V8L], root, tmp_path / "x")
    hand = tree_state(root)
    for name in (V8L, V9, V8L, V9):
        done, out = install(archives[name], root, home)
        assert done.returncode == 0 and out["changed"] is True, done.stderr
    done, out = run_json(["uninstall", "--cuda-root", root], home)
    assert done.returncode == 0, done.stderr
    assert tree_state(root) == hand


def test_forced_install_over_a_hand_copy_backs_it_up(archives, cuda_root, home, tmp_path):
    root = cuda_root("12.4")
    hand_copy(archives[V8L], root, tmp_path / "x")
    hand, ino = tree_state(root), inodes(root)
    done, out = install(archives[V8L], root, home, "--force")
    assert done.returncode == 0 and out["changed"] is True
    assert not out["install"]["adopted"] and len(out["install"]["backed_up"]) == len(ino)
    assert all(inodes(root)[p] != ino[p] for p in ino), "every file written anew"
    run_json(["uninstall", "--cuda-root", root], home)
    assert tree_state(root) == hand and inodes(root) == ino
