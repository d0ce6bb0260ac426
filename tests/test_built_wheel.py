"""The tool as its wheel installs it, not as the checkout runs it: built from this tree,
installed into a directory of its own, run by an interpreter that cannot import the checkout.
Every file the tool runs (the probes it starts by path, the release table it reads) must be in
the wheel."""
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from conftest import REPO, clean_env

SAMPLE = REPO / "fixtures" / "samples" / "cudnn-10.0-linux-x64-v7.4.2.24.tgz"


def _source(to: Path) -> Path:
    """What the wheel is built from, without what a build may have left in the checkout
    (setuptools would take a stale build/lib for the package)."""
    shutil.copytree(REPO / "cudnn_setup", to / "cudnn_setup",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, to / name)
    return to


def test_the_built_wheel_installs_the_sample_and_verifies_it(tmp_path, home, cuda_root):
    dist = tmp_path / "dist"
    source = _source(tmp_path / "src")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-index",
                            "--no-build-isolation", "-w", str(dist), str(source)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = dist.glob("cudnn_setup-*.whl")
    target = tmp_path / "installed"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    "--target", str(target), str(wheel)], check=True, capture_output=True,
                   timeout=300)
    # -S: no site, so no .pth of this venv puts the checkout on the path; the dependencies come
    # from the venv's site-packages, named outright
    env = clean_env(home, PYTHONPATH=os.pathsep.join([str(target),
                                                      sysconfig.get_paths()["purelib"]]))

    def run(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-S", *argv], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)

    where = run("-c", "import cudnn_setup; print(cudnn_setup.__file__)")
    assert Path(where.stdout.strip()).is_relative_to(target), where.stdout + where.stderr
    root = cuda_root("10.0")
    done = run("-m", "cudnn_setup", "install", str(SAMPLE), "--cuda-root", str(root),
               "--no-theanorc", "--no-verify", "--no-frameworks", "--json")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    done = run("-m", "cudnn_setup", "verify", "--cuda-root", str(root), "--no-theano",
               "--no-frameworks", "--json")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    checks = {c["name"]: c["status"] for c in out["checks"]}
    # the load check runs a probe by its path in the installed package
    assert checks.get("load") == "pass", (checks, done.stderr[-2000:])
    done = run("-m", "cudnn_setup", "list", "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["releases"], done.stderr[-2000:]
