"""Which cuDNN a deep-learning framework loads, and which one it was built against.

    python frameworks.py --list                     which frameworks this interpreter can import
    python frameworks.py NAME [--log FILE] [--cold-driver]
                                                    import NAME (torch, tensorflow, jax,
                                                    onnxruntime, cupy), make it load cuDNN, report
    python frameworks.py --library PATH             cudnnGetVersion() of one libcudnn file

Run by file path under any Python from 3.8 on, standard library only. It reads the run's key
from stdin first (probes/answer.py), then prints exactly one JSON line on stdout and exits 0, whatever the framework does short of killing the process; one
framework per process, so one that aborts hides no other. While the framework runs, its output
(fd 1 and 2, C code included) goes to the --log file, else to stderr, so nothing it prints can
be mistaken for the answer. Reading ELF files and judging the result is the caller's job.
"""
import ctypes
import importlib
import importlib.util
import os
import re
import sys
import threading
import time
import traceback

# The loader reads these once, at start-up: later changes inside the process do not count.
LOADER_ENV = {key: os.environ.get(key) for key in ("LD_LIBRARY_PATH", "LD_PRELOAD")}

FRAMEWORKS = ("torch", "tensorflow", "jax", "onnxruntime", "cupy")
# Distributions that install each framework's top-level package (pip names).
DISTRIBUTIONS = {
    "torch": ("torch",),
    "tensorflow": ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tf-nightly"),
    "jax": ("jax",),
    "onnxruntime": ("onnxruntime-gpu", "onnxruntime", "ort-nightly-gpu"),
    "cupy": ("cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x", "cupy"),
}
JAX_PLUGIN_MODULES = ("jax_cuda13_plugin", "jax_cuda12_plugin")
JAX_PLUGIN_DISTRIBUTIONS = ("jax-cuda13-plugin", "jax-cuda12-plugin", "jax-cuda13-pjrt",
                            "jax-cuda12-pjrt", "jaxlib")
# Where each framework keeps the shared objects that link or open cuDNN, relative to a package
# directory: (package, subdirectory). The caller reads their DT_NEEDED and RUNPATH.
CONSUMER_DIRS = {
    "torch": (("torch", "lib"),),
    "tensorflow": (("tensorflow", ""), ("tensorflow", "python")),
    "jax": (("jaxlib", ""), ("jaxlib", "cuda"), ("jax_cuda13_plugin", ""),
            ("jax_cuda12_plugin", ""), ("jax_plugins", "*")),
    "onnxruntime": (("onnxruntime", "capi"),),
    "cupy": (("cupy_backends", "cuda/libs"), ("cupy", "cuda")),
}
MAX_CONSUMERS = 400
MAX_MAPPED = 4000
TEXT_LIMIT = 2000
CUDNN_FILE = re.compile(r"^libcudnn[a-z_]*\.so(\.\d+)*\Z")
MAIN_CUDNN = re.compile(r"^libcudnn\.so(\.\d+)*\Z")


def text(value, limit=TEXT_LIMIT):
    """A bounded string of anything a framework hands back."""
    try:
        s = value if isinstance(value, str) else repr(value) if not isinstance(
            value, BaseException) else "%s: %s" % (type(value).__name__, value)
    except Exception:  # a __repr__ that raises
        s = "<unprintable %s>" % type(value).__name__
    return s if len(s) <= limit else s[:limit] + "..."


def plain(value):
    """Numbers, strings and tuples of numbers pass; anything else becomes bounded text."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, (tuple, list)) and len(value) <= 8 and all(
            isinstance(v, int) for v in value):
        return [int(v) for v in value]
    return text(value, 200)


def package_dir(name):
    """A package's directory, found without importing it (or None)."""
    try:
        spec = importlib.util.find_spec(name)
    except Exception:
        return None
    if spec is None:
        return None
    locations = list(spec.submodule_search_locations or [])
    if locations:
        return locations[0]
    return os.path.dirname(spec.origin) if spec.origin else None


def distribution_version(names):
    try:
        from importlib import metadata
    except ImportError:
        return None, None
    for name in names:
        try:
            return name, metadata.version(name)
        except Exception:
            continue
    return None, None


def importable():
    """Which frameworks this interpreter could import, without importing any. Distribution
    metadata (a scan of sys.path per name) is read only for those that are there."""
    out = []
    for name in FRAMEWORKS:
        where = package_dir(name)
        entry = {"name": name, "importable": where is not None, "location": where,
                 "distribution": None, "version": None}
        if name == "jax" and where is not None:
            entry["jaxlib"] = package_dir("jaxlib")
            entry["importable"] = entry["jaxlib"] is not None
            entry["plugins"] = [m for m in JAX_PLUGIN_MODULES if package_dir(m)]
            entry["plugin_distribution"] = distribution_version(JAX_PLUGIN_DISTRIBUTIONS)
        if entry["importable"]:
            entry["distribution"], entry["version"] = distribution_version(DISTRIBUTIONS[name])
        out.append(entry)
    return out


def consumers(name):
    """The framework's shared objects that may link or open cuDNN (paths only)."""
    found = []
    for package, sub in CONSUMER_DIRS.get(name, ()):
        base = package_dir(package)
        if not base:
            continue
        dirs = [os.path.join(base, sub)] if sub != "*" else [
            os.path.join(base, d) for d in sorted(os.listdir(base))
            if os.path.isdir(os.path.join(base, d))]
        for d in dirs:
            try:
                names = sorted(os.listdir(d))
            except OSError:
                continue
            for n in names:
                p = os.path.join(d, n)
                if ".so" in n and os.path.isfile(p) and len(found) < MAX_CONSUMERS:
                    found.append(os.path.realpath(p))
    return found


def mapped_objects():
    """Every file mapped into this process that looks like a shared object, in map order."""
    out, seen = [], set()
    try:
        with open("/proc/self/maps", "rb") as f:
            for raw in f:
                parts = raw.rstrip(b"\n").split(None, 5)
                if len(parts) < 6 or not parts[5].startswith(b"/"):
                    continue
                path = parts[5].decode("utf-8", "surrogateescape")
                if path.endswith(" (deleted)"):
                    path = path[:-len(" (deleted)")]
                if ".so" not in os.path.basename(path) or path in seen:
                    continue
                seen.add(path)
                out.append(path)
                if len(out) >= MAX_MAPPED:
                    break
    except OSError:
        pass
    return out


def cudnn_libraries(mapped):
    """The libcudnn files mapped here; for the main library, cudnnGetVersion() of that copy."""
    out = []
    for path in mapped:
        if not CUDNN_FILE.match(os.path.basename(path)):
            continue
        entry = {"path": path, "get_version": None}
        if MAIN_CUDNN.match(os.path.basename(path)):
            try:
                # RTLD_NOLOAD: the handle of the copy already mapped, never a new load.
                lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
                fn = lib.cudnnGetVersion
                fn.restype, fn.argtypes = ctypes.c_size_t, []
                entry["get_version"] = int(fn())
            except (OSError, AttributeError) as exc:
                entry["get_version_error"] = text(exc, 300)
        out.append(entry)
    return out


# Each framework's probe fills `out` in place, so whatever it learned before a failure stays.
# Keys: version, built_for {value, source}, runtime {value, source}, gpu {available, reason},
# ran {ok, what} (a cuDNN operation on the GPU), own_check {status, message}, skip_reason.

def probe_torch(out):
    import torch
    out["version"] = text(getattr(torch, "__version__", None), 100)
    out["cuda_version"] = plain(getattr(getattr(torch, "version", None), "cuda", None))
    # torch/csrc/cuda/shared/cudnn.cpp binds torch._C._cudnn: getCompileVersion() is the
    # CUDNN_MAJOR/MINOR/PATCHLEVEL it was built with, getRuntimeVersion() what cudnnGetProperty()
    # of the loaded library says, is_cuda False on ROCm (MIOpen); a CPU-only build has no _cudnn.
    binding = getattr(getattr(torch, "_C", None), "_cudnn", None)
    if binding is None:
        out["skip_reason"] = "this PyTorch has no cuDNN support (torch._C._cudnn is missing)"
        return
    if getattr(binding, "is_cuda", True) is False:
        out["skip_reason"] = "this PyTorch is a ROCm build: MIOpen, not cuDNN"
        return
    if hasattr(binding, "getCompileVersion"):
        out["built_for"] = {"value": plain(binding.getCompileVersion()),
                            "source": "torch._C._cudnn.getCompileVersion()"}
    elif hasattr(torch._C, "_cudnn_version"):  # PyTorch before 1.8
        out["built_for"] = {"value": plain(torch._C._cudnn_version()),
                            "source": "torch._C._cudnn_version()"}
    if hasattr(binding, "getRuntimeVersion"):
        out["runtime"] = {"value": plain(binding.getRuntimeVersion()),
                          "source": "torch._C._cudnn.getRuntimeVersion()"}
    try:  # PyTorch's own compatibility check (torch/backends/cudnn/__init__.py, _init)
        out["runtime_int"] = plain(torch.backends.cudnn.version())
        out["own_check"] = {"status": "passed", "message": "torch.backends.cudnn.version()"}
    except Exception as exc:
        out["own_check"] = {"status": "raised", "message": text(exc)}
    if not torch.cuda.is_available():
        out["gpu"] = {"available": False, "reason": "torch.cuda.is_available() is False"}
        return
    out["gpu"] = {"available": True, "reason": text(torch.cuda.get_device_name(0), 200)}
    x = torch.ones(1, 1, 5, 5, device="cuda")
    w = torch.ones(1, 1, 3, 3, device="cuda")
    with torch.backends.cudnn.flags(enabled=True):
        total = float(torch.nn.functional.conv2d(x, w).sum())
    torch.cuda.synchronize()
    out["ran"] = {"ok": total == 81.0, "what": "conv2d 1x1x5x5 * 3x3 on cuda:0 = %r" % total}


def probe_tensorflow(out):
    import tensorflow as tf
    out["version"] = text(getattr(tf, "__version__", None), 100)
    # tf.sysconfig.get_build_info(): the build's cuda_version / cudnn_version (often only the
    # major), https://www.tensorflow.org/api_docs/python/tf/sysconfig/get_build_info
    info = dict(tf.sysconfig.get_build_info())
    out["cuda_version"] = plain(info.get("cuda_version"))
    if not info.get("is_cuda_build", info.get("cudnn_version") is not None):
        out["skip_reason"] = "this TensorFlow is not a CUDA build"
        return
    out["built_for"] = {"value": plain(info.get("cudnn_version")),
                        "source": "tf.sysconfig.get_build_info()['cudnn_version']"}
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        out["gpu"] = {"available": False,
                      "reason": "tf.config.list_physical_devices('GPU') is empty"}
        out["skip_reason"] = "TensorFlow sees no GPU, so it does not load cuDNN"
        return
    out["gpu"] = {"available": True, "reason": text(gpus[0], 200)}
    # TensorFlow opens cuDNN and runs XLA's version check when its DNN support starts, at the
    # first convolution.
    with tf.device("/GPU:0"):
        y = tf.nn.conv2d(tf.ones([1, 5, 5, 1]), tf.ones([3, 3, 1, 1]), strides=1,
                         padding="VALID")
        total = float(tf.reduce_sum(y))
    out["ran"] = {"ok": total == 81.0, "what": "tf.nn.conv2d on /GPU:0 = %r" % total}
    out["own_check"] = {"status": "passed", "message": "a convolution ran on the GPU"}


def probe_jax(out):
    import jax
    import jaxlib
    out["version"] = text(getattr(jax, "__version__", None), 100)
    out["jaxlib_version"] = text(getattr(jaxlib, "__version__", None), 100)
    # jax.devices() lets the CUDA plugin initialise first, as in any JAX program: it preloads
    # NVIDIA's wheels by full path and runs its version checks (jax_plugins/cuda/__init__.py).
    try:
        devices = jax.devices()
    except Exception as exc:
        devices = []
        out["devices_error"] = text(exc)
    gpus = [d for d in devices if getattr(d, "platform", "") in ("gpu", "cuda")]
    versions = None
    for package in JAX_PLUGIN_MODULES + ("jaxlib.cuda",):
        try:
            versions = importlib.import_module(package + "._versions")
            out["plugin"] = package
            break
        except Exception:
            continue
    if versions is None:
        out["skip_reason"] = "no CUDA plugin for jaxlib (jax-cuda13-plugin / jax-cuda12-plugin)"
        return
    # The plugin's _versions module: cudnn_build_version() is CUDNN_VERSION at build time,
    # cudnn_get_version() calls cudnnGetVersion() (jax/_src/lib cuda_versions).
    out["built_for"] = {"value": plain(versions.cudnn_build_version()),
                        "source": out["plugin"] + "._versions.cudnn_build_version()"}
    try:
        out["runtime"] = {"value": plain(versions.cudnn_get_version()),
                          "source": out["plugin"] + "._versions.cudnn_get_version()"}
    except Exception as exc:
        out["runtime_error"] = text(exc)
    if not gpus:
        out["gpu"] = {"available": False, "reason": "jax.devices() has no GPU: %s" % text(
            [getattr(d, "platform", "?") for d in devices], 200)}
        return
    out["gpu"] = {"available": True, "reason": text(gpus[0], 200)}
    import jax.numpy as jnp
    x = jax.device_put(jnp.ones((1, 1, 5, 5), jnp.float32), gpus[0])
    w = jax.device_put(jnp.ones((1, 1, 3, 3), jnp.float32), gpus[0])
    total = float(jax.lax.conv(x, w, (1, 1), "VALID").sum())
    out["ran"] = {"ok": total == 81.0,
                  "what": "jax.lax.conv on %s = %r" % (text(gpus[0], 80), total)}
    out["own_check"] = {"status": "passed", "message": "a convolution ran on the GPU"}


def _varint(n):
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number, payload):
    """A protobuf field: varint for ints, length-delimited for bytes."""
    if isinstance(payload, int):
        return _varint(number << 3) + _varint(payload)
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def conv_model():
    """An ONNX model (protobuf, written by hand: no onnx package needed) with one Conv: X
    1x1x5x5 float, W an all-ones 1x1x3x3 initializer, Y 1x1x3x3. Field numbers from onnx.proto."""
    import struct

    def tensor_type(dims):
        shape = b"".join(_field(1, _field(1, d)) for d in dims)  # TensorShapeProto.dim.dim_value
        return _field(1, _field(1, 1) + _field(2, shape))  # TypeProto.tensor_type, FLOAT

    def value_info(name, dims):
        return _field(1, name.encode()) + _field(2, tensor_type(dims))

    weight = (b"".join(_field(1, d) for d in (1, 1, 3, 3)) + _field(2, 1) +
              _field(8, b"W") + _field(9, struct.pack("<9f", *([1.0] * 9))))
    node = _field(1, b"X") + _field(1, b"W") + _field(2, b"Y") + _field(4, b"Conv")
    graph = (_field(1, node) + _field(2, b"probe") + _field(5, weight) +
             _field(11, value_info("X", (1, 1, 5, 5))) + _field(12, value_info("Y", (1, 1, 3, 3))))
    return _field(1, 8) + _field(7, graph) + _field(8, _field(1, b"") + _field(2, 13))


def probe_onnxruntime(out):
    import onnxruntime as ort
    out["version"] = text(getattr(ort, "__version__", None), 100)
    # onnxruntime/__init__.py sets package_name and cuda_version from capi/build_and_package_info;
    # the cuDNN it was built against is not recorded there (the caller reads the CUDA provider
    # library's DT_NEEDED libcudnn.so.N for the major).
    out["package"] = plain(getattr(ort, "package_name", None))
    out["cuda_version"] = plain(getattr(ort, "cuda_version", None))
    providers = list(ort.get_available_providers())
    out["providers"] = [text(p, 60) for p in providers[:20]]
    if "CUDAExecutionProvider" not in providers:
        out["skip_reason"] = "no CUDAExecutionProvider: a CPU build of ONNX Runtime, no cuDNN"
        return
    # Creating a session with the CUDA provider loads libonnxruntime_providers_cuda.so, which
    # links libcudnn.so.N; running it executes the Conv through cuDNN.
    session = ort.InferenceSession(conv_model(), providers=["CUDAExecutionProvider"])
    active = list(session.get_providers())
    if "CUDAExecutionProvider" not in active:
        out["gpu"] = {"available": False,
                      "reason": "the session fell back to %s" % text(active, 200)}
        return
    import numpy
    out["gpu"] = {"available": True, "reason": "CUDAExecutionProvider active"}
    total = float(session.run(None, {"X": numpy.ones((1, 1, 5, 5), numpy.float32)})[0].sum())
    out["ran"] = {"ok": total == 81.0, "what": "ONNX Conv on CUDAExecutionProvider = %r" % total}


def probe_cupy(out):
    import cupy
    out["version"] = text(getattr(cupy, "__version__", None), 100)
    try:
        import cupy.cuda.cudnn as cudnn  # CuPy <= 13; v14 removed cuDNN support entirely
    except Exception as first:
        try:
            from cupy_backends.cuda.libs import cudnn
        except Exception as exc:
            out["skip_reason"] = "this CuPy has no cuDNN module (%s; CuPy v14 dropped cuDNN)" % (
                text(first if isinstance(first, ImportError) else exc, 300))
            return
    # cupy_backends/cuda/libs/cudnn.pyx: get_build_version() returns CUDNN_VERSION of the build,
    # getVersion() cudnnGetVersion() of the loaded library.
    out["built_for"] = {"value": plain(cudnn.get_build_version()),
                        "source": "cupy.cuda.cudnn.get_build_version()"}
    out["runtime"] = {"value": plain(cudnn.getVersion()), "source": "cupy.cuda.cudnn.getVersion()"}
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:
        out["gpu"] = {"available": False, "reason": text(exc, 300)}
        return
    if count < 1:
        out["gpu"] = {"available": False, "reason": "cupy.cuda.runtime.getDeviceCount() is 0"}
        return
    out["gpu"] = {"available": True, "reason": "%d %s" % (count, "device" if count == 1 else "devices")}
    handle = cupy.cuda.device.get_cudnn_handle()  # cudnnCreate() on the current device
    out["ran"] = {"ok": bool(handle), "what": "cudnnCreate() through cupy.cuda.device"}


PROBES = {"torch": probe_torch, "tensorflow": probe_tensorflow, "jax": probe_jax,
          "onnxruntime": probe_onnxruntime, "cupy": probe_cupy}


def warm_driver():
    """Start CUDA's driver and device 0's primary context on a thread while the framework is
    imported: every framework probed here runs on the primary context, so its first CUDA call
    finds it made instead of making it then (0.2-0.4 s on an H200), and the import, which holds
    the GIL, overlaps the driver's work, which does not. libcuda.so.1 is opened by its SONAME,
    as the frameworks open it, so the same driver is the one they get; a machine without one
    (or a failing driver) leaves the framework to find that out and say so itself."""
    def start():
        try:
            cuda = ctypes.CDLL("libcuda.so.1")
            device, context = ctypes.c_int(), ctypes.c_void_p()
            if cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(device), 0) == 0:
                # retained for the life of the process: released, the context would go
                cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device)
        except Exception:
            pass

    thread = threading.Thread(target=start, daemon=True)
    thread.start()
    return thread


def probe(name, warm=True):
    out = {"name": name, "importable": False, "imported": False}
    entry = next(e for e in importable() if e["name"] == name)
    out["importable"], out["distribution"] = entry["importable"], entry["distribution"]
    out["consumers"] = consumers(name)
    if not entry["importable"]:
        out["skip_reason"] = "%s is not importable here" % name
        return out
    started = time.monotonic()
    if warm:
        warm_driver()
    try:
        PROBES[name](out)
        out["imported"] = True
    except BaseException as exc:  # an import or a framework call failed: keep what was learned
        out["imported"] = "version" in out
        out["error"] = text(exc)
        out["error_where"] = text(traceback.format_exc(limit=-3), 1500)
    out["seconds"] = round(time.monotonic() - started, 3)
    mapped = mapped_objects()
    out["mapped"] = mapped
    out["cudnn_libraries"] = cudnn_libraries(mapped)
    return out


def main(argv):
    common = {"probe": "frameworks", "python": sys.version.split()[0],
              "executable": os.path.realpath(sys.executable or ""),
              "exe": os.path.realpath("/proc/self/exe"), "env": LOADER_ENV}
    if argv[:1] == ["--list"]:
        common["frameworks"] = importable()
        return common
    if argv[:1] == ["--library"] and len(argv) == 2:
        # One library file's own cudnnGetVersion(), for a copy no framework has loaded yet.
        lib = ctypes.CDLL(argv[1])
        fn = lib.cudnnGetVersion
        fn.restype, fn.argtypes = ctypes.c_size_t, []
        common["library"] = {"path": os.path.realpath(argv[1]), "get_version": int(fn())}
        return common
    if not argv or argv[0] not in PROBES:
        common["error"] = ("usage: frameworks.py --list | --library PATH | NAME [--log FILE] "
                           "with NAME in %s" % ", ".join(FRAMEWORKS))
        return common
    # --cold-driver: the framework makes its CUDA context itself (to measure what warming saves)
    common["framework"] = probe(argv[0], warm="--cold-driver" not in argv[1:])
    return common


def run():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # even under PYTHONSAFEPATH
    from answer import line as answer_line, take_key

    key = take_key()  # before any framework is imported: nothing it runs can read the key
    argv = sys.argv[1:]
    log = argv[argv.index("--log") + 1] if "--log" in argv[:-1] else None
    stdout = os.dup(1)
    try:
        # The framework's own printing goes to the log (or stderr): our stdout carries one line.
        target = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600) if log else os.dup(2)
        os.dup2(target, 1)
        os.dup2(target, 2)
        os.close(target)
    except OSError:
        pass
    try:
        answer = main([a for a in argv if a != "--log" and a != log])
    except BaseException as exc:
        answer = {"probe": "frameworks", "error": text(exc)}
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass
    line = answer_line(key, answer, default=text, ensure_ascii=True, separators=(",", ":"))
    os.dup2(stdout, 1)
    data = memoryview(line)
    while data:
        data = data[os.write(1, data):]
    # No interpreter teardown: framework destructors (CUDA contexts, thread pools) can hang or
    # crash at exit, and the answer is already out.
    os._exit(0)


if __name__ == "__main__":
    run()
