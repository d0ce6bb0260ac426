"""The frameworks check with real interpreters and real shared libraries.

No framework with cuDNN can run here, so stand-ins play them: pure-Python packages named torch,
tensorflow, cupy, jax and onnxruntime on the child's PYTHONPATH, exposing what the probe calls,
whose native parts are gcc-built libraries: a `libcudnn.so.9` (SONAME libcudnn.so.9, exporting
cudnnGetVersion) in an "old" (9.14.0) and a "new" (9.19.0, laid out like NVIDIA's wheel) copy, and
framework libraries with DT_NEEDED libcudnn.so.9 and, for torch, RUNPATH
$ORIGIN/../../nvidia/cudnn/lib like libtorch_cuda.so. The loader, the child processes, the ELF
files and /proc/self/maps are all real.
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from cudnn_setup.checks import framework_loader as fl
from cudnn_setup.probing import framework_probe as fp
from cudnn_setup.checks import framework_whatif as wi
from cudnn_setup.checks import framework_entry as fe
from cudnn_setup.checks import frameworks_check as fw
from cudnn_setup.errors import UsageError
from cudnn_setup.facts import framework_rules as rules
from cudnn_setup.report import FAIL, PASS, SKIP, WARN

PROBE = Path(fw.__file__).resolve().parent.parent / "probes" / "framework_loads.py"
NO_CACHE = fl.NO_SEARCH

CUDNN_C = """
#include <stddef.h>
size_t cudnnGetVersion(void) { return VERSION; }
"""
FRAMEWORK_C = """
#include <stddef.h>
size_t cudnnGetVersion(void);
size_t fw_compiled_cudnn(void) { return BUILT; }
size_t fw_runtime_cudnn(void) { return cudnnGetVersion(); }
"""

TORCH_PY = '''
import ctypes, os, types
__version__ = "2.11.0+standin"
# Like libtorch_cuda.so: links libcudnn.so.9, found through its RUNPATH.
_fw = ctypes.CDLL(os.path.join(os.path.dirname(__file__), "lib", "libfake_fw.so"))
_fw.fw_compiled_cudnn.restype = _fw.fw_runtime_cudnn.restype = ctypes.c_size_t

def _triple(v):
    return (v // 10000, v // 100 % 100, v % 100)

def _check():
    built, runtime = _triple(_fw.fw_compiled_cudnn()), _triple(_fw.fw_runtime_cudnn())
    if runtime[0] != built[0] or runtime[1] < built[1]:
        raise RuntimeError("cuDNN version incompatibility: PyTorch was compiled  against %s but "
                           "found runtime version %s." % (built, runtime))
    return _fw.fw_runtime_cudnn()

_C = types.SimpleNamespace(_cudnn=types.SimpleNamespace(
    getCompileVersion=lambda: _triple(_fw.fw_compiled_cudnn()),
    getRuntimeVersion=lambda: _triple(_fw.fw_runtime_cudnn()), is_cuda=True))
backends = types.SimpleNamespace(cudnn=types.SimpleNamespace(version=_check,
                                                             is_available=lambda: True))
cuda = types.SimpleNamespace(is_available=lambda: False)
version = types.SimpleNamespace(cuda="13.0")
'''

# Like TensorFlow: its build info names the cuDNN, and it opens cuDNN only once a GPU is used.
TENSORFLOW_PY = '''
import types
__version__ = "2.20.0+standin"
sysconfig = types.SimpleNamespace(get_build_info=lambda: {
    "cuda_version": "13.0", "cudnn_version": "9.19.0", "is_cuda_build": True})
config = types.SimpleNamespace(list_physical_devices=lambda kind: [])
'''

# Like CuPy <= 13 with a preloaded wheel: the copy is opened by full path first, then the
# extension that links libcudnn.so.9 (no RUNPATH) finds it already loaded. It also prints
# megabytes of binary noise, invalid UTF-8 included, on fd 1 and fd 2 while it imports.
CUPY_PY = '''
import os
os.write(1, b"{\\"fake\\": \\"json from the framework\\"}\\n")
for fd in (1, 2):
    noise = b"\\xff\\xfe\\xc3(\\x80 not utf-8 \\xed\\xa0\\x80\\n" * 10
    os.write(fd, noise + b"\\x00\\xff" * 1500000)
__version__ = "13.6.0+standin"
'''
CUPY_CUDA_PY = '''
import types
def _no_device():
    raise RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")
runtime = types.SimpleNamespace(getDeviceCount=_no_device)
'''
CUPY_CUDNN_PY = '''
import ctypes, os
_here = os.path.dirname(os.path.abspath(__file__))
_site = os.path.dirname(os.path.dirname(_here))
ctypes.CDLL(os.path.join(_site, "nvidia", "cudnn", "lib", "libcudnn.so.9"), mode=ctypes.RTLD_GLOBAL)
_ext = ctypes.CDLL(os.path.join(_site, "cupy_backends", "cuda", "libs", "libcupy_cudnn.so"))
_ext.fw_compiled_cudnn.restype = _ext.fw_runtime_cudnn.restype = ctypes.c_size_t
def get_build_version():
    return _ext.fw_compiled_cudnn()
def getVersion():
    return _ext.fw_runtime_cudnn()
'''
# Like TensorFlow on a GPU: its build info names only the major, it opens cuDNN at the first
# convolution, and XLA's check logs its message and fails when the copy is too old.
TENSORFLOW_GPU_PY = '''
import contextlib, ctypes, os, types
__version__ = "2.20.0+gpu-standin"
sysconfig = types.SimpleNamespace(get_build_info=lambda: {
    "cuda_version": "13.0", "cudnn_version": "9", "is_cuda_build": True})
config = types.SimpleNamespace(list_physical_devices=lambda kind: ["/physical_device:GPU:0"])
device = lambda name: contextlib.nullcontext()
ones = reduce_sum = lambda value: value

def _conv2d(x, w, strides, padding):
    lib = ctypes.CDLL(os.path.join(os.path.dirname(__file__), "libtensorflow_framework.so.2"))
    lib.fw_runtime_cudnn.restype = ctypes.c_size_t
    v = lib.fw_runtime_cudnn()
    loaded = "%d.%d.%d" % (v // 10000, v // 100 % 100, v % 100)
    if (v // 10000, v // 100 % 100) < (9, 19):
        os.write(2, ("E0000 cuda_dnn.cc:463] Loaded runtime CuDNN library: %s but source was "
                     "compiled with: 9.19.0.  CuDNN library needs to have matching major version "
                     "and equal or higher minor version.\\n" % loaded).encode())
        raise RuntimeError("DNN library initialization failed.")
    return 81.0

nn = types.SimpleNamespace(conv2d=_conv2d)
'''
ABORTING_PY = 'import os\nos.write(2, b"jax stand-in: about to abort\\n")\nos.abort()\n'
HANGING_PY = "import time\ntime.sleep(120)\n"


def gcc(out: Path, source: str, *flags: str) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.parent / (out.name.replace(".", "_") + ".c")
    src.write_text(source)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(out), str(src), *flags],
                   check=True, capture_output=True, text=True)
    src.unlink()
    return out


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Two cuDNN copies and a site dir of framework stand-ins; extra sites for failures."""
    root = tmp_path_factory.mktemp("frameworks")
    old = root / "old"  # like the system's copy: a versioned file and its SONAME link
    gcc(old / "libcudnn.so.9.14.0", CUDNN_C, "-DVERSION=91400", "-Wl,-soname,libcudnn.so.9")
    (old / "libcudnn.so.9").symlink_to("libcudnn.so.9.14.0")
    site = root / "site"
    new = site / "nvidia" / "cudnn" / "lib"  # like nvidia-cudnn-cu13: one regular file
    gcc(new / "libcudnn.so.9", CUDNN_C, "-DVERSION=91900", "-Wl,-soname,libcudnn.so.9")

    gcc(site / "torch" / "lib" / "libfake_fw.so", FRAMEWORK_C, "-DBUILT=91900",
        f"-L{new}", "-l:libcudnn.so.9", "-Wl,--enable-new-dtags",
        "-Wl,-rpath,$ORIGIN/../../nvidia/cudnn/lib")
    write(site / "torch" / "__init__.py", TORCH_PY)

    gcc(site / "tensorflow" / "libtensorflow_framework.so.2", FRAMEWORK_C, "-DBUILT=91900",
        f"-L{new}", "-l:libcudnn.so.9")
    write(site / "tensorflow" / "__init__.py", TENSORFLOW_PY)

    gcc(site / "cupy_backends" / "cuda" / "libs" / "libcupy_cudnn.so", FRAMEWORK_C,
        "-DBUILT=91400", f"-L{new}", "-l:libcudnn.so.9")
    for pkg in ("cupy_backends", "cupy_backends/cuda", "cupy_backends/cuda/libs"):
        write(site / pkg / "__init__.py", "")
    write(site / "cupy" / "__init__.py", CUPY_PY)
    write(site / "cupy" / "cuda" / "__init__.py", CUPY_CUDA_PY)
    write(site / "cupy" / "cuda" / "cudnn.py", CUPY_CUDNN_PY)

    gpu_tf = root / "site_gpu_tf"
    gcc(gpu_tf / "tensorflow" / "libtensorflow_framework.so.2", FRAMEWORK_C, "-DBUILT=91900",
        f"-L{new}", "-l:libcudnn.so.9")
    write(gpu_tf / "tensorflow" / "__init__.py", TENSORFLOW_GPU_PY)
    crash = root / "site_crash"
    write(crash / "jax" / "__init__.py", ABORTING_PY)
    write(crash / "jaxlib" / "__init__.py", "")
    hang = root / "site_hang"
    write(hang / "onnxruntime" / "__init__.py", HANGING_PY)
    return {"root": root, "old": old, "new": new, "site": site, "crash": crash, "hang": hang,
            "gpu_tf": gpu_tf}


def env_for(*sites: Path, **extra: str) -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8",
           "PYTHONPATH": os.pathsep.join(map(str, sites))}
    env.update(extra)
    return env


def by_name(entries):
    """Each entry (or JSON item) by name."""
    return {(e["name"] if isinstance(e, dict) else e.name): e for e in entries}


def test_probe_is_stdlib_only_and_python38_syntax():
    tree = ast.parse(PROBE.read_text(), feature_version=(3, 8))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    frameworks = {"torch", "tensorflow", "jax", "jaxlib", "onnxruntime", "cupy", "cupy_backends",
                  "numpy"}  # imported only inside the probe of that framework
    siblings = {"answer"}  # probes/answer.py, itself checked below
    assert imported - frameworks - siblings <= set(sys.stdlib_module_names)
    answer = ast.parse((PROBE.parent / "answer.py").read_text(), feature_version=(3, 8))
    assert {alias.name for node in ast.walk(answer) if isinstance(node, ast.Import)
            for alias in node.names} <= set(sys.stdlib_module_names)


def test_runpath_copy_loaded_and_compatible(world):
    entries = fw.framework_report(sys.executable, env_for(world["site"]), 60, search=lambda: NO_CACHE)
    torch = by_name(entries)["torch"]
    loaded = torch.cudnn_loaded
    assert loaded.path == str(world["new"] / "libcudnn.so.9")
    assert loaded.dir == str(world["new"])
    assert loaded.version == "9.19.0"  # cudnnGetVersion() of the mapped copy
    assert loaded.why == fl.WHY_RUNPATH
    assert "$ORIGIN/../../nvidia/cudnn/lib" in loaded.detail
    assert "libfake_fw.so" in loaded.detail
    assert torch.cudnn_built_for == "9.19.0"
    assert torch.cudnn_built_for_source == "torch._C._cudnn.getCompileVersion()"
    assert torch.version == "2.11.0+standin"
    assert (torch.compatible, torch.status) == (True, PASS)
    assert "torch" not in sys.modules and "cupy" not in sys.modules


def test_old_copy_first_on_ld_library_path_breaks_torch(world):
    env = env_for(world["site"], LD_LIBRARY_PATH=str(world["old"]))
    torch = by_name(fw.framework_report(sys.executable, env, 60, search=lambda: NO_CACHE))["torch"]
    loaded = torch.cudnn_loaded
    assert loaded.path == str(world["old"] / "libcudnn.so.9.14.0")
    assert (loaded.why, loaded.version) == (fl.WHY_LD_PATH, "9.14.0")
    assert (torch.compatible, torch.status) == (False, FAIL)
    assert "9.19.0" in torch.reason and "9.14.0" in torch.reason
    assert "cuDNN version incompatibility" in torch.reason  # its own check, reported too
    check = fw.frameworks_check([torch])
    assert check.status == FAIL and check.detail.startswith("torch 2.11.0+standin: ")


def test_full_path_preload_noise_and_no_gpu(world):
    entries = by_name(fw.framework_report(sys.executable, env_for(world["site"]), 60,
                                          search=lambda: NO_CACHE))
    cupy = entries["cupy"]  # megabytes of invalid UTF-8 on both fds did not get in the way
    assert cupy.version == "13.6.0+standin"
    assert cupy.cudnn_loaded.why == fl.WHY_FULL_PATH
    assert cupy.cudnn_loaded.version == "9.19.0"
    assert (cupy.cudnn_built_for, cupy.status) == ("9.14.0", PASS)
    tf = entries["tensorflow"]  # loads cuDNN only with a GPU: a skip, not a failure
    assert (tf.status, tf.cudnn_loaded, tf.cudnn_built_for) == (SKIP, None, "9.19.0")
    assert "no GPU" in tf.reason
    assert set(entries) == {"torch", "tensorflow", "cupy"}


def test_crashing_and_hanging_frameworks_hide_no_other(world):
    env = env_for(world["site"], world["crash"], world["hang"])
    entries = by_name(fw.framework_report(sys.executable, env, 4, search=lambda: NO_CACHE))
    assert "SIGABRT" in entries["jax"].reason
    assert "about to abort" in entries["jax"].reason
    assert entries["jax"].status == WARN
    assert "did not finish in 4 s" in entries["onnxruntime"].reason
    assert entries["torch"].status == PASS and entries["cupy"].status == PASS
    check = fw.frameworks_check(list(entries.values()))
    assert check.status == WARN and len(check.detail.split(" | ")) == 5
    jax = by_name_fw(wi.what_if(sys.executable, env, wi.register_with_ldconfig(world["old"]), 4,
                                search=lambda: NO_CACHE, current=list(entries.values())))["jax"]
    assert (jax["affected"], jax["breaks"]) == (None, None) and "not known" in jax["reason"]


def test_tensorflow_on_a_gpu_judged_by_its_log_and_its_own_check(world):
    def report(**extra):
        env = env_for(world["gpu_tf"], **extra)
        return by_name(fw.framework_report(sys.executable, env, 60, search=lambda: NO_CACHE))["tensorflow"]

    old = report(LD_LIBRARY_PATH=str(world["old"]))
    assert old.cudnn_loaded.version == "9.14.0" and old.status == FAIL
    assert old.cudnn_built_for == "9.19.0"  # from XLA's message: the build info says "9"
    assert "Loaded runtime CuDNN library: 9.14.0 but source was compiled with: 9.19.0" in \
        old.reason
    new = report(LD_LIBRARY_PATH=str(world["new"]))
    assert (new.cudnn_built_for, new.status, new.compatible) == ("9", PASS, True)
    assert "its own check passed" in new.reason
    missing = report()  # no RUNPATH, nothing on the path: the convolution cannot open cuDNN
    assert missing.status == FAIL and "libcudnn.so.9" in missing.reason


def test_what_if_ld_library_path_runs_the_probe_again(world):
    env = env_for(world["site"])
    results = wi.what_if(sys.executable, env, wi.prepend_to_ld_library_path(world["old"]), 60,
                         search=lambda: NO_CACHE)
    result = by_name_fw(results)
    torch = result["torch"]
    assert torch["breaks"] is True and torch["affected"] is True
    assert torch["would_load"]["version"] == "9.14.0"
    assert torch["would_load"]["why"] == fl.WHY_LD_PATH
    assert torch["built_for"] == "9.19.0" and torch["loads_now"]["version"] == "9.19.0"
    assert "per-program environment" in torch["safe_alternative"]
    assert "9.19.0 or newer" in torch["safe_alternative"]
    cupy = result["cupy"]  # its copy is opened by full path: LD_LIBRARY_PATH changes nothing
    assert (cupy["affected"], cupy["breaks"]) == (False, False)
    tf = result["tensorflow"]  # no GPU, so no cuDNN loaded: where its library would find one
    assert (tf["affected"], tf["breaks"]) == (True, True)
    assert tf["would_load"]["path"] == str(world["old"] / "libcudnn.so.9.14.0")
    assert "once it loads cuDNN" in tf["reason"]
    warnings = wi.what_if_warnings(results)
    assert [w.split(" ")[0] for w in warnings] == ["torch", "tensorflow"]
    assert warnings[0].startswith("torch 2.11.0+standin would break: would load cuDNN 9.14.0")


def test_what_if_of_a_directory_already_first_on_ld_library_path_is_what_they_load_now(
        world, monkeypatch):
    """A re-install once the advice was taken: with the directory already first, the loader
    searches the same directories in the same order, so the frameworks are not imported again;
    the answer is the one running them again gives."""
    old = str(world["old"])
    env = env_for(world["site"], LD_LIBRARY_PATH=old)
    now = fw.framework_report(sys.executable, env, 60, search=lambda: NO_CACHE)
    change = wi.prepend_to_ld_library_path(world["old"])
    again = by_name(fw.framework_report(sys.executable, dict(env, LD_LIBRARY_PATH=f"{old}:{old}"),
                                        60, search=lambda: NO_CACHE))
    ran = [wi._tried(change, e, again.get(e.name), sys.executable, env, 60) for e in now]

    def imported_again(*args, **kwargs):
        raise AssertionError("the frameworks were imported again")

    monkeypatch.setattr(wi, "framework_report", imported_again)
    got = wi.what_if(sys.executable, env, change, 60, search=lambda: NO_CACHE, current=now)
    assert got == ran
    assert by_name_fw(got)["torch"]["reason"].startswith("unchanged: it still loads cuDNN 9.14.0")
    assert wi.already_first(f"{old}/:/x", old) and not wi.already_first(f"/x:{old}", old)
    assert not wi.already_first(f":{old}", old) and not wi.already_first("$ORIGIN", old)


def test_what_if_ldconfig_is_deduced_from_the_loader_order(world):
    env = env_for(world["site"])
    result = by_name_fw(wi.what_if(sys.executable, env, wi.register_with_ldconfig(world["old"]),
                                   60, search=lambda: NO_CACHE))
    torch = result["torch"]  # found through RUNPATH, read before the ldconfig cache
    assert (torch["affected"], torch["breaks"]) == (False, False)
    assert "RUNPATH" in torch["reason"]
    tf = result["tensorflow"]  # would open libcudnn.so.9 by the cache once it has a GPU
    assert (tf["affected"], tf["breaks"]) == (True, True)
    assert tf["would_load"]["path"] == str(world["old"] / "libcudnn.so.9.14.0")
    assert tf["would_load"]["version"] == "9.14.0" and tf["built_for"] == "9.19.0"
    assert "ldconfig cache" in tf["reason"] and tf["safe_alternative"]
    # The same directory early on LD_LIBRARY_PATH, and a copy at least as new via ldconfig.
    newer = by_name_fw(wi.what_if(sys.executable, env, wi.register_with_ldconfig(world["new"]),
                                  60, search=lambda: NO_CACHE))
    assert newer["tensorflow"]["affected"] is True and newer["tensorflow"]["breaks"] is False


def test_ldconfig_what_if_reads_the_version_from_the_library_when_the_name_has_none(world,
                                                                                   tmp_path):
    bare = tmp_path / "bare"  # like a wheel's directory: libcudnn.so.9 only, no version in it
    gcc(bare / "libcudnn.so.9", CUDNN_C, "-DVERSION=91200", "-Wl,-soname,libcudnn.so.9")
    tf = by_name_fw(wi.what_if(sys.executable, env_for(world["site"]),
                               wi.register_with_ldconfig(bare), 60, search=lambda: NO_CACHE))["tensorflow"]
    assert tf["would_load"]["version"] == "9.12.0" and tf["breaks"] is True


def test_no_framework_is_a_skip(world, tmp_path):
    python = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
    check, entries = fw.frameworks_of(python, env_for(tmp_path), 30, search=lambda: NO_CACHE)
    assert entries == [] and check.status == SKIP and python in check.detail


def test_an_interpreter_that_cannot_run_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError):
        fw.framework_report(str(tmp_path / "no-python"), env_for(tmp_path), 10)
    check, entries = fw.frameworks_of(str(tmp_path / "no-python"), env_for(tmp_path), 10)
    assert check.status == WARN and entries == []


def test_json_has_the_documented_fields_only(world):
    entries = fw.framework_report(sys.executable, env_for(world["site"]), 60, search=lambda: NO_CACHE)
    items = by_name(fw.frameworks_json(entries))
    assert set(items["torch"]) == set(fe.JSON_FIELDS)
    assert set(items["torch"]["cudnn_loaded"]) == {"path", "dir", "version", "why", "detail"}
    assert items["tensorflow"]["cudnn_loaded"] is None
    import json
    json.dumps(items)  # no private objects leak


def test_probe_prints_exactly_one_json_line(world):
    done = subprocess.run([sys.executable, str(PROBE), "cupy"], env=env_for(world["site"]),
                          capture_output=True, timeout=60, input=b"k\n")
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and len(lines) == 1  # the framework's own JSON went to stderr
    assert b"json from the framework" in done.stderr


def test_probe_answers_bad_arguments_with_json():
    done = subprocess.run([sys.executable, str(PROBE), "nonsense"], capture_output=True,
                          timeout=30, input=b"k\n")
    assert done.returncode == 0 and b'"error":"usage:' in done.stdout


def test_hostile_child_answers_are_dropped(world):
    run = fp.Run({"probe": "frameworks", "exe": 5, "env": "x", "framework": {
        "version": ["not", "a", "string"], "mapped": ["relative.so", 7, "/x\0y.so"],
        "cudnn_libraries": [{"path": "/etc/passwd", "get_version": "91900"}, "junk"],
        "built_for": {"value": {"nested": 1}}, "consumers": "nope"}}, None, "")
    entry = fw.entry_of("torch", fp.Listed("torch", True, "1"), run, NO_CACHE, fl.ElfFacts())
    assert entry.cudnn_loaded is None and entry.cudnn_built_for is None
    assert entry.status == SKIP and entry.version == "1"


def test_elf_reader_rejects_damaged_files(tmp_path):
    for name, data in {"empty.so": b"", "text.so": b"hello", "cut.so": b"\x7fELF\x02\x01\x01"
                       + b"\0" * 9 + b"\x03\x00\x3e\x00" + b"\xff" * 40}.items():
        (tmp_path / name).write_bytes(data)
        assert fl.ElfFacts()(str(tmp_path / name)) is None
    assert fl.ElfFacts()(str(tmp_path / "missing.so")) is None


def by_name_fw(entries):
    """Each what-if result by framework, in the form the JSON carries."""
    return {e.framework: e.to_dict() for e in entries}


@pytest.mark.parametrize("framework,built,loaded,status", [
    ("torch", (9, 19, 0), (9, 14, 0), rules.INCOMPATIBLE),  # the H200 reproduction
    ("torch", (9, 14, 0), (9, 19, 0), rules.COMPATIBLE),
    ("torch", (9, 19, 0), (9, 19, 3), rules.COMPATIBLE),
    ("torch", (9, 1, 0), (8, 9, 7), rules.INCOMPATIBLE),
    ("torch", (6, 0, 21), (6, 1, 0), rules.INCOMPATIBLE),  # below 7 the minor must match
    ("torch", (6, 0, 21), (6, 0, 20), rules.COMPATIBLE),
    ("tensorflow", "9.3.0", "9.1.0", rules.INCOMPATIBLE),
    ("tensorflow", "9", "9.1.0", rules.UNKNOWN),  # only the major in its build info
    ("jax", 91900, 91000, rules.INCOMPATIBLE),
    ("jax", 91000, 91000, rules.COMPATIBLE),
    ("jax", 90800, 91000, rules.INCOMPATIBLE),  # 9.10.0 with another build version
    ("jax", 90800, 91001, rules.COMPATIBLE),
    ("onnxruntime", "9", "9.14.0", rules.COMPATIBLE),
    ("onnxruntime", "8", "9.14.0", rules.INCOMPATIBLE),
    ("cupy", 8907, 8600, rules.INCOMPATIBLE),
    ("cupy", None, 8600, rules.UNKNOWN),
    ("torch", "9.19.0", None, rules.UNKNOWN),
])
def test_rules(framework, built, loaded, status):
    got, reason = rules.judge(framework, built, loaded)
    assert got == status and reason


@pytest.mark.parametrize("value,expected", [
    (91900, (9, 19, 0)), (8907, (8, 9, 7)), (7605, (7, 6, 5)), ("9.19.0", (9, 19, 0)),
    ("9", (9,)), ((9, 14, 0), (9, 14, 0)), ("91400", (9, 14, 0)), (45000, None), (True, None),
    ("nine", None), ([9, "x"], None), (-1, None),
])
def test_versions(value, expected):
    assert rules.parse_version(value) == expected


@pytest.mark.real_cudnn
def test_real_cudnn_shim_from_nvidias_wheel(tmp_path):
    """With NVIDIA's wheel in CUDNN_SETUP_WHEEL_CACHE: the real libcudnn.so.9, loaded through a
    stand-in framework's RUNPATH, reports its own version to the probe."""
    cache = os.environ.get("CUDNN_SETUP_WHEEL_CACHE")
    wheels = sorted(Path(cache).glob("nvidia_cudnn_cu12-9.*.whl")) if cache else []
    if not wheels:
        pytest.skip("no nvidia-cudnn-cu12 wheel in CUDNN_SETUP_WHEEL_CACHE")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheels[-1]) as wheel:
        for member in ("nvidia/cudnn/lib/libcudnn.so.9", "nvidia/cudnn/lib/libcudnn_graph.so.9"):
            wheel.extract(member, site)
    lib = site / "nvidia" / "cudnn" / "lib"
    version = wheels[-1].name.split("-")[1].split(".")[:3]
    number = int(version[0]) * 10000 + int(version[1]) * 100 + int(version[2])
    gcc(site / "torch" / "lib" / "libfake_fw.so", FRAMEWORK_C, f"-DBUILT={number}", f"-L{lib}",
        "-l:libcudnn.so.9", "-Wl,--enable-new-dtags", "-Wl,-rpath,$ORIGIN/../../nvidia/cudnn/lib")
    write(site / "torch" / "__init__.py", TORCH_PY)
    entries = fw.framework_report(sys.executable, env_for(site), 60, search=lambda: NO_CACHE)
    torch = by_name(entries)["torch"]
    assert torch.cudnn_loaded.version == ".".join(version)
    assert torch.cudnn_loaded.why == fl.WHY_RUNPATH and torch.status == PASS


def test_dt_rpath_comes_before_ld_library_path_and_the_what_if_runs_it(world, tmp_path):
    """Like libtorch_cuda.so in PyTorch's wheels: DT_RPATH, not RUNPATH. The loader reads it
    before LD_LIBRARY_PATH, so an older copy there does not win, and the LD_LIBRARY_PATH what-if,
    which runs the framework again, says so."""
    site = tmp_path / "site"
    lib = site / "nvidia" / "cudnn" / "lib"
    lib.mkdir(parents=True)
    (lib / "libcudnn.so.9").symlink_to(world["new"] / "libcudnn.so.9")
    gcc(site / "torch" / "lib" / "libfake_fw.so", FRAMEWORK_C, "-DBUILT=91900", f"-L{lib}",
        "-l:libcudnn.so.9", "-Wl,--disable-new-dtags", "-Wl,-rpath,$ORIGIN/../../nvidia/cudnn/lib")
    write(site / "torch" / "__init__.py", TORCH_PY)
    env = env_for(site, LD_LIBRARY_PATH=str(world["old"]))
    torch = by_name(fw.framework_report(sys.executable, env, 60, search=lambda: NO_CACHE))["torch"]
    assert torch.cudnn_loaded.version == "9.19.0" and torch.status == PASS
    assert torch.cudnn_loaded.why == fl.WHY_RPATH
    assert torch.cudnn_loaded.detail == "DT_RPATH $ORIGIN/../../nvidia/cudnn/lib of libfake_fw.so"
    tried = by_name_fw(wi.what_if(sys.executable, env_for(site),
                                  wi.prepend_to_ld_library_path(world["old"]), 60,
                                  search=lambda: NO_CACHE))["torch"]
    assert (tried["affected"], tried["breaks"]) == (False, False)
    assert tried["reason"].startswith("unchanged: it still loads cuDNN 9.19.0")


def test_what_if_names_a_mix_of_copies_behind_the_same_shim():
    """Seen on a GPU machine: with an older cuDNN first on LD_LIBRARY_PATH, torch still maps the
    wheel's libcudnn.so.9 (its DT_RPATH wins) but cuDNN reports the older version, because the
    sub-libraries the shim opens come from LD_LIBRARY_PATH first. That is a change, not 'unchanged'."""
    from cudnn_setup.checks import framework_whatif as W

    wheel = "/venv/site-packages/nvidia/cudnn/lib"
    change = W.prepend_to_ld_library_path("/opt/old/lib64")
    from msgspec.structs import replace

    now = fe.FrameworkEntry("torch", "2.11.0", "", cudnn_built_for="9.19.0",
                            loader=fe.LoaderView(fl.ChildLoader({}, None, NO_CACHE, fl.ElfFacts()),
                                                 (), (), None),
                            cudnn_loaded=fe.LoadedCopy(f"{wheel}/libcudnn.so.9", wheel, "9.19.0",
                                                       "rpath", "DT_RPATH of libtorch_cuda.so"))
    after = replace(now, cudnn_loaded=replace(now.cudnn_loaded, version="9.14.0"))
    out = W._tried(change, now, after, "python3", {}, 10)
    assert out.affected is True and out.breaks is True
    assert "unchanged" not in out.reason
    assert "9.14.0 instead of 9.19.0" in out.reason and "/opt/old/lib64" in out.reason
    assert out.safe_alternative
    same = W._tried(change, now, replace(now), "python3", {}, 10)
    assert same.affected is False and same.reason.startswith("unchanged")


# A driver stand-in: each call is written to $FAKE_CUDA_LOG with the monotonic time it began
# and ended, and cuInit takes 0.3 s, as a real driver's start does.
FAKE_CUDA_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
                          return t.tv_sec + t.tv_nsec / 1e9; }
static void note(const char *what, double began) {
    FILE *f = fopen(getenv("FAKE_CUDA_LOG"), "a");
    if (f) { fprintf(f, "%s %.6f %.6f\n", what, began, now()); fclose(f); }
}
int cuInit(unsigned flags) { double b = now(); struct timespec s = {0, 300000000};
                             nanosleep(&s, 0); note("cuInit", b); return 0; }
int cuDeviceGet(int *d, int ordinal) { double b = now(); *d = ordinal; note("cuDeviceGet", b);
                                       return 0; }
int cuDevicePrimaryCtxRetain(void **ctx, int d) { double b = now(); *ctx = (void *)1;
                                                  note("cuDevicePrimaryCtxRetain", b); return 0; }
"""
# A framework whose import takes 0.5 s of Python (holding the GIL, as a real import mostly does)
SLOW_TORCH_PY = TORCH_PY + '''
import time as _time
_end = _time.monotonic() + 0.5
while _time.monotonic() < _end:
    pass
with open(os.environ["FAKE_CUDA_LOG"], "a") as _log:
    _log.write("imported %.6f %.6f\\n" % (_end - 0.5, _time.monotonic()))
'''


def test_the_driver_starts_while_the_framework_imports(world, tmp_path):
    """The probe starts CUDA's driver and the primary context on a thread during the import
    (the framework's first CUDA call then finds it made); `--cold-driver` leaves it alone."""
    driver = gcc(tmp_path / "driver" / "libcuda.so.1", FAKE_CUDA_C, "-Wl,-soname,libcuda.so.1")
    site = tmp_path / "site"
    write(site / "torch" / "__init__.py", SLOW_TORCH_PY)
    (site / "torch" / "lib").mkdir()
    (site / "torch" / "lib" / "libfake_fw.so").symlink_to(
        world["site"] / "torch" / "lib" / "libfake_fw.so")
    (site / "nvidia").symlink_to(world["site"] / "nvidia")

    def calls(*flags: str) -> dict[str, tuple[float, float]]:
        log = tmp_path / f"calls{len(flags)}.log"
        done = subprocess.run([sys.executable, str(PROBE), "torch", *flags], input=b"k\n",
                              env=env_for(site, LD_LIBRARY_PATH=str(driver.parent),
                                          FAKE_CUDA_LOG=str(log)),
                              capture_output=True, timeout=60)
        assert done.returncode == 0 and b'"imported":true' in done.stdout, done.stdout
        return {name: (float(began), float(ended)) for name, began, ended in
                (line.split() for line in log.read_text().splitlines())}

    warm = calls()
    assert list(warm) == ["cuInit", "cuDeviceGet", "cuDevicePrimaryCtxRetain", "imported"]
    # the driver's 0.3 s start ran inside the import's 0.5 s, not before or after it
    assert warm["imported"][0] < warm["cuInit"][1] < warm["imported"][1]
    cold = calls("--cold-driver")
    assert list(cold) == ["imported"]
