"""`install 9.28 --from pypi` with NVIDIA's real nvidia-cudnn-cu12 wheel, into a real CUDA 12
root built from NVIDIA's runtime, cuBLAS, nvcc and NVRTC wheels; verified, then uninstalled
byte for byte.

Opt-in (marker real_cudnn): CUDNN_SETUP_WHEEL_CACHE names a directory holding
nvidia_cudnn_cu12-9.28.0.42-*.whl, nvidia_cuda_runtime_cu12-*.whl and nvidia_cublas_cu12-*.whl
(and, for the compile check, nvidia_cuda_nvcc_cu12-*.whl; nvidia_cuda_nvrtc_cu12-*.whl for
NVRTC). The index is real PyPI when CUDNN_SETUP_REAL_PYPI=1 (its page and its sha256; the
cached wheel is reused only when it has that sha256), else a PEP 503 page on disk listing the
cached wheel with its sha256."""
import hashlib
import os
from pathlib import Path

import pytest

from conftest import run_json, tree_state
from fixtures.wheel_root import build
from fixtures.wheels import IndexFile, project_html

pytestmark = pytest.mark.real_cudnn
CACHE = os.environ.get("CUDNN_SETUP_WHEEL_CACHE")
CUDNN = "nvidia_cudnn_cu12-9.28.0.42-*.whl"


def _one(pattern: str, required: bool = True) -> Path | None:
    found = sorted(Path(CACHE).glob(pattern)) if CACHE else []
    if not found and required:
        pytest.skip(f"{pattern} is not in CUDNN_SETUP_WHEEL_CACHE ({CACHE})")
    return found[-1] if found else None


@pytest.fixture
def real_root(tmp_path):
    if not CACHE:
        pytest.skip("set CUDNN_SETUP_WHEEL_CACHE to a directory with NVIDIA's wheels")
    others = [p for p in (_one("nvidia_cuda_nvcc_cu12-*.whl", False),
                          _one("nvidia_cuda_nvrtc_cu12-*.whl", False)) if p]
    return build(tmp_path / "cuda", _one("nvidia_cuda_runtime_cu12-*.whl"),
                 _one("nvidia_cublas_cu12-*.whl"), *others)


def test_install_9_28_from_pypi_verifies_and_uninstalls_byte_for_byte(real_root, tmp_path, home):
    wheel = _one(CUDNN).resolve()  # the file itself: a cache entry may not be a symlink
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    cache = tmp_path / "cache" / "cudnn-setup"
    cache.mkdir(parents=True)
    os.link(wheel, cache / wheel.name)  # the Downloader reuses it only if the sha256 matches
    if os.environ.get("CUDNN_SETUP_REAL_PYPI") == "1":
        index_args = []  # the index pip would use: PyPI (the test's pip config is empty)
    else:
        index = tmp_path / "simple" / "nvidia-cudnn-cu12"
        index.mkdir(parents=True)
        (index / "index.html").write_bytes(project_html(
            "nvidia-cudnn-cu12", [IndexFile(wheel.name, wheel.as_uri(), digest)]))
        index_args = ["--index-url", (tmp_path / "simple").as_uri()]
    before = tree_state(real_root)
    done, out = run_json(["install", "9.28", "--from", "pypi", *index_args, "--cuda-root",
                          real_root, "--no-theanorc", "--no-frameworks"], home,
                         {"XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert out["error"] is None, done.stderr
    # every check passes or says why it cannot run here (no driver, no GPU): exit 0
    assert done.returncode == 0, [c for c in out["checks"] if c["status"] == "fail"]
    assert out["release"]["version"] == "9.28.0.42" and out["cudnn_version"] == "9.28.0"
    assert out["provenance"]["source"] == "pypi" and out["provenance"]["sha256"] == digest
    checks = {c["name"]: c for c in out["checks"]}
    for name in ("files", "elf", "versions", "load", "coherence", "cuda"):
        assert checks[name]["status"] == "pass", checks[name]
    assert checks["deps"]["status"] in ("pass", "warn"), checks["deps"]
    if (real_root / "include" / "crt").is_dir():
        assert checks["compile"]["status"] == "pass", checks["compile"]
    lib = real_root / "lib"
    assert (lib / "libcudnn.so.9.28.0").is_file() and os.readlink(lib / "libcudnn.so.9") == \
        "libcudnn.so.9.28.0" and os.readlink(lib / "libcudnn.so") == "libcudnn.so.9"
    assert any("RUNPATH" in n for n in out["install"]["notes"])
    done, out = run_json(["uninstall", "--cuda-root", real_root], home)
    assert done.returncode == 0, done.stderr
    assert tree_state(real_root) == before
