"""The sub-library and driver probes, run as child processes on gcc-built libraries.

A stand-in libcuda.so.1 (gcc-built, answering like a driver with two GPUs) takes the place of
the one thing that cannot exist here: an NVIDIA driver with a GPU."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cudnn_setup.facts.ldresolve.closure import closure
from cudnn_setup.facts.ldresolve.environment import Environment
from cudnn_setup.facts.ldresolve.ldconfig import read_cache
from cudnn_setup.facts.ldresolve.loader_facts import probe_loader
from fixtures.deplibs import build

PROBES = Path(__file__).resolve().parent.parent / "cudnn_setup" / "probes"


def run_probe(name, args, env_extra, path=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LD_", "CUDA"))}
    env.update(env_extra)
    if path is not None:
        env["PATH"] = path
    done = subprocess.run([sys.executable, str(PROBES / f"{name}.py"), *map(str, args)],
                          capture_output=True, timeout=120, env=env, input=b"run-key\n")
    lines = done.stdout.splitlines()
    assert len(lines) == 1, (done.stdout, done.stderr)  # stdout is the answer line alone
    line = json.loads(lines[0].decode("utf-8", "replace"))
    assert line["answer_key"] == "run-key"  # the key it was handed on stdin
    return line["answer"], done


@pytest.fixture
def mixed(tmp_path):
    """A cuDNN 9 in new/ and an older libcudnn_ops.so.9 in old/; cnn missing, adv aborts."""
    w = tmp_path / "w"
    new, old = tmp_path / "new", tmp_path / "old"
    ops = build(new / "libcudnn_ops.so.9", "libcudnn_ops.so.9", work=w, version=90100)
    build(old / "libcudnn_ops.so.9", "libcudnn_ops.so.9", work=w, version=90000)
    build(new / "libcudnn_adv.so.9", "libcudnn_adv.so.9", work=w, abort=True)
    build(new / "libcudnn_graph.so.9", "libcudnn_graph.so.9", work=w, noise=True)
    main = build(new / "libcudnn.so.9", "libcudnn.so.9", work=w, version=90100, runpath="$ORIGIN",
                 check=("cudnnOpsVersionCheck", "libcudnn_ops.so.9"), needed=[ops])
    return main, new, old


SUBS = ["libcudnn_ops.so.9", "libcudnn_cnn.so.9", "libcudnn_adv.so.9", "libcudnn_graph.so.9"]


def test_older_sub_library_first_on_the_path_is_reported_with_its_version(mixed):
    main, new, old = mixed
    out, done = run_probe("sublibs", [main, *SUBS], {"LD_LIBRARY_PATH": f"{old}:{new}"})
    assert out["loaded"] and out["version"] == 90100 and out["version_from"] == "cudnnGetVersion"
    ops, cnn, adv, graph = out["sublibraries"]
    assert ops["path"] == str(old / "libcudnn_ops.so.9") == ops["mapped"]
    assert (ops["version"], ops["version_from"]) == (90000, "cudnnGetVersion")
    assert ops["version_check"] == {"function": "cudnnOpsVersionCheck", "status": 2002, "mapped": [],
                                    "opened": []}
    assert cnn["loaded"] is False
    assert "libcudnn_cnn.so.9: cannot open shared object file" in cnn["dlerror"]
    assert adv["signal"] == "SIGABRT" and "died of SIGABRT" in adv["error"]
    assert graph["loaded"] and graph["version_from"] == "file name" and graph["version"] == "9"
    assert b"not UTF-8" in done.stderr  # the constructor's bytes went to stderr, not into the JSON
    # ldresolve agrees with the real loader about which copy of ops is taken
    deps = closure([main], Environment(ld_library_path=f"{old}:{new}", cache=read_cache(),
                                       facts=probe_loader()))
    assert next(d for d in deps if d.name == "libcudnn_ops.so.9").resolution.path == ops["path"]


def test_coherent_set_passes_cudnns_own_version_check(mixed):
    main, new, _ = mixed
    out, _ = run_probe("sublibs", [main, "libcudnn_ops.so.9"], {"LD_LIBRARY_PATH": str(new)})
    [ops] = out["sublibraries"]
    assert ops["path"] == str(new / "libcudnn_ops.so.9") and ops["version"] == 90100
    assert ops["version_check"]["status"] == 0


def test_cudnns_own_loading_uses_its_runpath_where_a_soname_dlopen_does_not(tmp_path):
    w = tmp_path / "w"
    lib = tmp_path / "wheel" / "nvidia" / "cudnn" / "lib"
    build(lib / "libcudnn_cnn.so.9", "libcudnn_cnn.so.9", work=w, version=90100)
    main = build(lib / "libcudnn.so.9", "libcudnn.so.9", work=w, version=90100, runpath="$ORIGIN",
                 check=("cudnnCnnVersionCheck", "libcudnn_cnn.so.9"))
    out, _ = run_probe("sublibs", [main, "libcudnn_cnn.so.9"], {})
    [cnn] = out["sublibraries"]
    assert cnn["loaded"] is False  # no LD_LIBRARY_PATH: a plain dlopen by soname cannot find it
    assert cnn["version_check"] == {"function": "cudnnCnnVersionCheck", "status": 0,
                                    "mapped": [str(lib / "libcudnn_cnn.so.9")],
                                    "opened": [str(lib / "libcudnn_cnn.so.9")]}


def test_main_library_that_cannot_load_says_why(tmp_path):
    out, _ = run_probe("sublibs", [tmp_path / "libcudnn.so.9", "libcudnn_ops.so.9"], {})
    assert out["loaded"] is False and "cannot open shared object file" in out["dlerror"]
    assert out["sublibraries"] == []


FAKE_CUDA = r"""
int cuDriverGetVersion(int *v) { *v = FIX_DRIVER; return 0; }
int cuInit(unsigned flags) { (void)flags; return FIX_INIT; }
int cuDeviceGetCount(int *n) { *n = 2; return 0; }
int cuDeviceGet(int *d, int i) { *d = i; return 0; }
int cuDeviceGetName(char *name, int len, int dev) {
    const char *n = dev ? "Tesla K80" : "NVIDIA H200";
    int i = 0;
    for (; n[i] && i < len - 1; i++) name[i] = n[i];
    name[i] = 0;
    return 0;
}
int cuDeviceGetAttribute(int *v, int attr, int dev) {
    if (attr == 75) *v = dev ? 3 : 9;
    else if (attr == 76) *v = dev ? 7 : 0;
    return 0;
}
"""


def fake_driver(directory: Path, init=0, driver=13000) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    src = directory / "cuda.c"
    src.write_text(FAKE_CUDA)
    subprocess.run(["gcc", "-shared", "-fPIC", f"-DFIX_INIT={init}", f"-DFIX_DRIVER={driver}",
                    "-Wl,-soname,libcuda.so.1", str(src), "-o", str(directory / "libcuda.so.1")],
                   check=True)
    return directory


def test_driver_probe_lists_each_gpu_and_the_cuda_it_supports(tmp_path):
    d = fake_driver(tmp_path / "drv")
    out, _ = run_probe("driver", ["--no-smi"], {"LD_LIBRARY_PATH": str(d)})
    assert out["status"] == "pass" and out["found_via"] == "libcuda.so.1"
    assert (out["cuda_driver_version"], out["cuda"]) == (13000, "13.0")
    assert out["gpus"] == [{"index": 0, "name": "NVIDIA H200", "compute_capability": "9.0"},
                           {"index": 1, "name": "Tesla K80", "compute_capability": "3.7"}]


def test_driver_without_a_gpu_is_a_skip_with_the_reason(tmp_path):
    d = fake_driver(tmp_path / "drv", init=100, driver=12040)
    out, _ = run_probe("driver", ["--no-smi"], {"LD_LIBRARY_PATH": str(d)})
    assert out["status"] == "skip" and out["reason"] == "the driver sees no CUDA-capable GPU"
    assert out["cuda"] == "12.4" and out["gpus"] == []


def test_no_driver_is_a_skip_and_nvidia_smi_is_the_fallback(tmp_path):
    out, _ = run_probe("driver", [], {}, path=str(tmp_path))
    assert out["status"] == "skip"
    assert "libcuda.so.1 cannot be loaded" in out["reason"] and "nvidia-smi" in out["reason"]
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nif [ \"$1\" ]; then echo 'NVIDIA H200, 9.0, 580.65.06'; "
                   "else echo '| NVIDIA-SMI 580.65.06  Driver Version: 580.65.06  CUDA Version: 13.0 |'; fi\n")
    smi.chmod(0o755)
    out, _ = run_probe("driver", [], {}, path=f"{tmp_path}:/usr/bin:/bin")
    assert out["status"] == "pass" and out["found_via"] == "nvidia-smi"
    assert out["gpus"] == [{"index": 0, "name": "NVIDIA H200", "compute_capability": "9.0"}]
    assert (out["driver_version"], out["cuda_driver_version"]) == ("580.65.06", 13000)
