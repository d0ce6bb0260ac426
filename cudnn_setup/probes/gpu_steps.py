"""Run cuDNN on the GPU the way frameworks call it, with ctypes; compare each result with numpy.

    python gpu.py [--have LIB,…] [--plan-cache DIR] LIBCUDNN [LIBCUDART]
                                                 every step below, checked against numpy
                                                 (--have: the release's libraries, for a
                                                 flavour without some: a step needing one it
                                                 lacks is a skip; --plan-cache: where the
                                                 runtime-compiled engine's plan is kept)
    python gpu.py --bench LIBCUDNN [LIBCUDART]   cudnnFindConvolutionForwardAlgorithm per layer

The steps, and the sub-libraries each one needs (cuDNN 9; 8.x has no graph steps):

| step | API | what calls it | sub-libraries |
|---|---|---|---|
| graph_conv_fwd | graph (backend) API, heuristics mode A | PyTorch, TensorFlow, JAX | graph, heuristic, an engine library |
| graph_conv_bwd_data, graph_conv_bwd_filter | the same, backward | training in those | graph, heuristic, an engine library |
| batchnorm_fwd | cudnnBatchNormalizationForwardTraining | PyTorch's batchnorm | ops |
| rnn_fwd | cudnnRNNForward (tanh RNN) | PyTorch's RNN/LSTM/GRU | adv |
| legacy_conv_fwd | cudnnConvolutionForward | Theano, ONNX Runtime, MXNet | cnn |
| fused_runtime_compiled | graph API: conv + bias + ReLU, an engine that compiles at run time | fusions (cudnn-frontend, TensorRT) | graph, engines_runtime_compiled (NVRTC where cuDNN opens it) |

Each step reports the libcudnn* files that were mapped while it ran (from /proc/self/maps), the
stage it reached (descriptors, heuristics, plan, execute, compare) and, on failure, cuDNN's
status and its last error message. Before each step the probe writes "gpu-step: NAME" to
stderr, so a caller whose child died still knows in which step.

The runtime-compiled engine spends most of its step compiling its kernel (NVRTC, about 0.4 s
on an H200, every run). With --plan-cache, the plan it compiled is kept there (cuDNN's own
serialization, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION), keyed by the cuDNN files, the GPU
and the driver; the next run loads that plan and still executes the engine it compiled and
compares its output with numpy. A kept plan that does not load, run or match is set aside and
the engine compiled again, so a damaged cache never decides the verdict.

Prints one JSON line: status pass | warn | fail | skip; without a driver or a GPU it says skip.
Standard library and numpy only.
"""
import ctypes
import hashlib
import json
import os
import sys
import time

# Its sibling modules (maps.py, answer.py) are imported by file location: a probe runs by path,
# outside the package, under any Python 3 (even under PYTHONSAFEPATH).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from maps import mapped_files  # noqa: E402

c_void_p, byref = ctypes.c_void_p, ctypes.byref
c_int64, c_int, c_float, c_double, c_size_t = (ctypes.c_int64, ctypes.c_int, ctypes.c_float,
                                               ctypes.c_double, ctypes.c_size_t)

# The classic small conv net's layers (batch 100, 3x24x24 input): (N, C, H, W, K, R, S, pad)
BENCH_LAYERS = {"conv1": (100, 3, 24, 24, 20, 5, 5, 0), "conv2": (100, 20, 10, 10, 50, 5, 5, 0)}
CHECK_LAYER = (2, 3, 9, 9, 4, 3, 3, 1)
FUSED_LAYER = (2, 16, 8, 8, 16, 3, 3, 1)  # fp16 NHWC: channels a multiple of 8 for tensor cores
FWD_ALGOS = ["IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
             "WINOGRAD", "WINOGRAD_NONFUSED"]

# cuDNN's C enums (cudnn_graph.h, cudnn_ops.h, cudnn_adv.h of 9.x; stable ABI values, checked
# against NVIDIA's headers by tests/test_gpu_probe.py).
FLOAT, HALF = 0, 2  # cudnnDataType_t
T_HANDLE, T_DATA_TYPE, T_BOOLEAN, T_INT64, T_FLOAT, T_DOUBLE, T_VOID_PTR = 0, 1, 2, 3, 4, 5, 6
T_CONV_MODE, T_HEUR_MODE, T_NUMERICAL_NOTE, T_POINTWISE_MODE, T_DESCRIPTOR = 7, 8, 11, 14, 15
T_BEHAVIOR_NOTE = 19
D_POINTWISE, D_CONVOLUTION, D_ENGINE, D_ENGINECFG, D_ENGINEHEUR, D_PLAN = 0, 1, 2, 3, 4, 5
D_OP_CONV_FWD, D_OP_CONV_BWD_FILTER, D_OP_CONV_BWD_DATA, D_OP_POINTWISE = 10, 11, 12, 13
D_OPGRAPH, D_VARIANT_PACK, D_TENSOR = 15, 16, 17
A_POINTWISE_MODE, A_POINTWISE_MATH_PREC = 0, 1
A_CONV_COMP_TYPE, A_CONV_MODE, A_CONV_DILATIONS, A_CONV_STRIDES = 100, 101, 102, 103
A_CONV_POST_PAD, A_CONV_PRE_PAD, A_CONV_SPATIAL_DIMS = 104, 105, 106
A_HEUR_MODE, A_HEUR_GRAPH, A_HEUR_RESULTS = 200, 201, 202
A_CFG_ENGINE = 300
A_PLAN_HANDLE, A_PLAN_CFG, A_PLAN_WORKSPACE, A_PLAN_JSON = 400, 401, 402, 405
T_CHAR = 24  # CUDNN_TYPE_CHAR: a plan's serialized form
# (alpha, beta, conv desc, W, X, Y) of the forward op; bwd data: (…, W, DX, DY); bwd filter:
# (…, DW, X, DY)
A_OP_FWD = (700, 701, 702, 703, 704, 705)
A_OP_BWD_DATA = (706, 707, 708, 709, 710, 711)
A_OP_BWD_FILTER = (712, 713, 714, 715, 716, 717)
A_OP_PW_DESC, A_OP_PW_X, A_OP_PW_B, A_OP_PW_Y = 750, 751, 752, 753
A_GRAPH_HANDLE, A_GRAPH_OPS, A_GRAPH_ENGINE_COUNT = 800, 801, 802
A_T_ALIGN, A_T_DTYPE, A_T_DIMS, A_T_STRIDES, A_T_UID, A_T_VIRTUAL = 900, 901, 902, 903, 906, 907
A_VP_UIDS, A_VP_PTRS, A_VP_WORKSPACE = 1000, 1001, 1003
A_ENGINE_GRAPH, A_ENGINE_INDEX, A_ENGINE_NUMERICAL, A_ENGINE_BEHAVIOR = 1300, 1301, 1303, 1305
HEUR_MODE_A, HEUR_MODE_FALLBACK = 3, 2
CROSS_CORRELATION = 1
PW_ADD, PW_RELU_FWD = 0, 100
NOTE_RUNTIME_COMPILATION = 0  # cudnnBackendBehaviorNote_t
NOTE_TENSOR_CORE, NOTE_DOWN_CONVERT = 0, 1  # cudnnBackendNumericalNote_t
BATCHNORM_SPATIAL = 1
RNN_TANH, RNN_NO_BIAS, RNN_UNIDIRECTIONAL, RNN_LINEAR_INPUT, RNN_ALGO_STANDARD = 1, 0, 0, 0, 0
RNN_SEQ_MAJOR_UNPACKED, FWD_MODE_INFERENCE = 0, 0
FMA_MATH = 3

# Which sub-libraries a step needs, stage by stage: the one a failure at that stage points to.
STAGE_LIBS = {"descriptors": "libcudnn_graph", "heuristics": "libcudnn_heuristic"}
STEP_LIBS = {
    "graph_conv_fwd": ["libcudnn_graph", "libcudnn_heuristic", "libcudnn_engines_precompiled"],
    "graph_conv_bwd_data": ["libcudnn_graph", "libcudnn_heuristic", "libcudnn_engines_precompiled"],
    "graph_conv_bwd_filter": ["libcudnn_graph", "libcudnn_heuristic",
                              "libcudnn_engines_precompiled"],
    "batchnorm_fwd": ["libcudnn_ops"],
    "rnn_fwd": ["libcudnn_adv"],
    "legacy_conv_fwd": ["libcudnn_cnn"],
    "fused_runtime_compiled": ["libcudnn_graph", "libcudnn_engines_runtime_compiled"],
}
RUNTIME_ENGINE = "fused_runtime_compiled"


class ProbeError(Exception):
    def __init__(self, message, stage=None, status=None):
        super().__init__(message)
        self.stage, self.status = stage, status


class Skip(Exception):
    """A step that cannot run here for a reason outside cuDNN (a warn, naming the reason)."""


class AlgoPerf(ctypes.Structure):
    _fields_ = [("algo", ctypes.c_int), ("status", ctypes.c_int), ("time", ctypes.c_float),
                ("memory", ctypes.c_size_t), ("determinism", ctypes.c_int),
                ("mathType", ctypes.c_int), ("reserved", ctypes.c_int * 3)]


def mapped_cudnn_files():
    """libcudnn* and libnvrtc* files mapped into this process."""
    return mapped_files((b"libcudnn", b"libnvrtc"))


class Gpu:
    """libcudart memory and a cuDNN handle for device 0."""

    def __init__(self, cudnn_path, cudart_path):
        self.cudart = ctypes.CDLL(cudart_path or "libcudart.so", mode=ctypes.RTLD_GLOBAL)
        self.cudnn = ctypes.CDLL(cudnn_path, mode=ctypes.RTLD_GLOBAL)
        self.path = cudnn_path
        self.cudnn.cudnnGetVersion.restype = ctypes.c_size_t
        self.cudnn.cudnnGetErrorString.restype = ctypes.c_char_p
        self.cudart.cudaMalloc.argtypes = [ctypes.POINTER(c_void_p), c_size_t]
        self.cudart.cudaMemcpy.argtypes = [c_void_p, c_void_p, c_size_t, c_int]
        self.cudart.cudaMemset.argtypes = [c_void_p, c_int, c_size_t]
        self.cudart.cudaFree.argtypes = [c_void_p]
        self.version = int(self.cudnn.cudnnGetVersion())
        self.handle = c_void_p()
        self.buffers = []
        self.call("cudnnCreate", byref(self.handle))

    def last_error(self):
        fn = getattr(self.cudnn, "cudnnGetLastErrorString", None)
        if fn is None:
            return ""
        buf = ctypes.create_string_buffer(1024)
        fn.argtypes = [ctypes.c_char_p, c_size_t]
        fn.restype = None
        fn(buf, 1024)
        return buf.value.decode("utf-8", "replace").strip()

    def call(self, name, *args, stage=None):
        status = getattr(self.cudnn, name)(*args)
        if status != 0:
            text = self.cudnn.cudnnGetErrorString(status)
            text = text.decode("utf-8", "replace") if text else str(status)
            last = self.last_error()
            raise ProbeError(f"{name} returned {status} ({text})" + (f": {last[:300]}" if last else ""),
                             stage, status)

    def malloc(self, nbytes):
        ptr = c_void_p()
        if self.cudart.cudaMalloc(byref(ptr), max(int(nbytes), 1)) != 0:
            raise ProbeError(f"cudaMalloc of {nbytes} bytes failed")
        self.buffers.append(ptr)
        return ptr

    def upload(self, array):
        ptr = self.malloc(array.nbytes)
        self.copy(ptr, array.ctypes.data_as(c_void_p), array.nbytes, 1)
        return ptr

    def zeros(self, nbytes):
        ptr = self.malloc(nbytes)
        self.cudart.cudaMemset(ptr, 0, max(int(nbytes), 1))
        return ptr

    def download(self, ptr, shape, dtype):
        import numpy as np

        out = np.zeros(shape, dtype=dtype)
        self.sync()
        self.copy(out.ctypes.data_as(c_void_p), ptr, out.nbytes, 2)
        return out

    def copy(self, dst, src, nbytes, kind):
        if self.cudart.cudaMemcpy(dst, src, int(nbytes), kind) != 0:
            raise ProbeError("cudaMemcpy failed", "execute")

    def sync(self):
        if self.cudart.cudaDeviceSynchronize() != 0:
            raise ProbeError("a kernel failed (cudaDeviceSynchronize)", "execute")

    def free_all(self):
        for ptr in self.buffers:
            self.cudart.cudaFree(ptr)
        self.buffers = []

    def close(self):
        self.free_all()
        self.cudnn.cudnnDestroy(self.handle)


# --- the graph (backend) API ------------------------------------------------------------------

_CTYPE = {T_HANDLE: c_void_p, T_DATA_TYPE: c_int, T_BOOLEAN: ctypes.c_bool, T_INT64: c_int64,
          T_FLOAT: c_float, T_DOUBLE: c_double, T_VOID_PTR: c_void_p, T_CONV_MODE: c_int,
          T_HEUR_MODE: c_int, T_NUMERICAL_NOTE: c_int, T_POINTWISE_MODE: c_int,
          T_DESCRIPTOR: c_void_p, T_BEHAVIOR_NOTE: c_int}


class Backend:
    """Descriptors of cuDNN's backend API: create, set attributes, finalize; all destroyed at
    the end of a step."""

    def __init__(self, gpu):
        self.gpu, self.lib, self.made, self.configs = gpu, gpu.cudnn, [], []
        self.lib.cudnnBackendSetAttribute.argtypes = [c_void_p, c_int, c_int, c_int64, c_void_p]
        self.lib.cudnnBackendGetAttribute.argtypes = [c_void_p, c_int, c_int, c_int64,
                                                      ctypes.POINTER(c_int64), c_void_p]
        self.lib.cudnnBackendCreateDescriptor.argtypes = [c_int, ctypes.POINTER(c_void_p)]
        self.lib.cudnnBackendFinalize.argtypes = [c_void_p]
        self.lib.cudnnBackendDestroyDescriptor.argtypes = [c_void_p]
        self.lib.cudnnBackendExecute.argtypes = [c_void_p, c_void_p, c_void_p]

    def create(self, kind, stage="descriptors"):
        desc = c_void_p()
        self.gpu.call("cudnnBackendCreateDescriptor", kind, byref(desc), stage=stage)
        self.made.append(desc)
        return desc

    def set(self, desc, attr, atype, values, stage="descriptors"):
        values = values if isinstance(values, (list, tuple)) else [values]
        ctype = _CTYPE[atype]
        arr = (ctype * len(values))(*[v.value if isinstance(v, c_void_p) else v for v in values])
        self.gpu.call("cudnnBackendSetAttribute", desc, attr, atype, len(values),
                      ctypes.cast(arr, c_void_p), stage=stage)

    def get(self, desc, attr, atype, count, stage="descriptors"):
        arr = (_CTYPE[atype] * max(count, 1))()
        got = c_int64()
        self.gpu.call("cudnnBackendGetAttribute", desc, attr, atype, count, byref(got),
                      ctypes.cast(arr, c_void_p), stage=stage)
        return list(arr)[:got.value]

    def finalize(self, desc, stage="descriptors"):
        self.gpu.call("cudnnBackendFinalize", desc, stage=stage)
        return desc

    def make(self, kind, attrs, stage="descriptors"):
        desc = self.create(kind, stage)
        for attr, atype, values in attrs:
            self.set(desc, attr, atype, values, stage)
        return self.finalize(desc, stage)

    def tensor(self, uid, dims, strides, dtype=FLOAT, virtual=False):
        return self.make(D_TENSOR, [(A_T_DTYPE, T_DATA_TYPE, dtype), (A_T_DIMS, T_INT64, dims),
                                    (A_T_STRIDES, T_INT64, strides), (A_T_UID, T_INT64, uid),
                                    (A_T_ALIGN, T_INT64, 16), (A_T_VIRTUAL, T_BOOLEAN, virtual)])

    def conv(self, pad, comp=FLOAT):
        return self.make(D_CONVOLUTION, [
            (A_CONV_COMP_TYPE, T_DATA_TYPE, comp), (A_CONV_MODE, T_CONV_MODE, CROSS_CORRELATION),
            (A_CONV_SPATIAL_DIMS, T_INT64, 2), (A_CONV_DILATIONS, T_INT64, [1, 1]),
            (A_CONV_STRIDES, T_INT64, [1, 1]), (A_CONV_PRE_PAD, T_INT64, [pad, pad]),
            (A_CONV_POST_PAD, T_INT64, [pad, pad])])

    def graph(self, ops):
        return self.make(D_OPGRAPH, [(A_GRAPH_HANDLE, T_HANDLE, self.gpu.handle),
                                     (A_GRAPH_OPS, T_DESCRIPTOR, ops)])

    def engine_notes(self, engine):
        behavior = self.get(engine, A_ENGINE_BEHAVIOR, T_BEHAVIOR_NOTE, 16)
        numerical = self.get(engine, A_ENGINE_NUMERICAL, T_NUMERICAL_NOTE, 16)
        index = self.get(engine, A_ENGINE_INDEX, T_INT64, 1)
        return {"global_index": int(index[0]) if index else None,
                "runtime_compiled": NOTE_RUNTIME_COMPILATION in behavior,
                "tensor_core": NOTE_TENSOR_CORE in numerical,
                "down_converts": NOTE_DOWN_CONVERT in numerical}

    def heuristics(self, graph, mode=HEUR_MODE_A, limit=16):
        """The engine configs heuristics `mode` proposes for `graph`, best first."""
        heur = self.make(D_ENGINEHEUR, [(A_HEUR_GRAPH, T_DESCRIPTOR, graph),
                                        (A_HEUR_MODE, T_HEUR_MODE, mode)], stage="heuristics")
        count = c_int64()
        self.gpu.call("cudnnBackendGetAttribute", heur, A_HEUR_RESULTS, T_DESCRIPTOR, 0,
                      byref(count), None, stage="heuristics")
        n = min(int(count.value), limit)
        if n <= 0:
            raise ProbeError("heuristics returned no engine configuration", "heuristics")
        cfgs = [self.create(D_ENGINECFG, "heuristics") for _ in range(n)]
        self.configs += cfgs
        arr = (c_void_p * n)(*[c.value for c in cfgs])
        got = c_int64()
        self.gpu.call("cudnnBackendGetAttribute", heur, A_HEUR_RESULTS, T_DESCRIPTOR, n,
                      byref(got), ctypes.cast(arr, c_void_p), stage="heuristics")
        if got.value <= 0:  # seen with a libcudnn_heuristic that has no code
            raise ProbeError(f"heuristics counted {count.value} engine configurations and "
                             "returned none", "heuristics")
        return cfgs[:int(got.value)]

    def config_engine(self, cfg):
        engine = self.create(D_ENGINE, "heuristics")
        arr = (c_void_p * 1)(engine.value)
        got = c_int64()
        self.gpu.call("cudnnBackendGetAttribute", cfg, A_CFG_ENGINE, T_DESCRIPTOR, 1,
                      byref(got), ctypes.cast(arr, c_void_p), stage="heuristics")
        return engine

    def engines(self, graph):
        """Every engine of `graph` by global index that finalizes (supports it) here."""
        count = self.get(graph, A_GRAPH_ENGINE_COUNT, T_INT64, 1)
        out = []
        for index in range(int(count[0]) if count else 0):
            engine = self.create(D_ENGINE, "plan")
            self.set(engine, A_ENGINE_GRAPH, T_DESCRIPTOR, graph, "plan")
            self.set(engine, A_ENGINE_INDEX, T_INT64, index, "plan")
            try:
                self.finalize(engine, "plan")
            except ProbeError:
                continue
            out.append(engine)
        return out

    def config_of(self, engine):
        return self.make(D_ENGINECFG, [(A_CFG_ENGINE, T_DESCRIPTOR, engine)], stage="plan")

    def plan(self, cfg):
        plan = self.make(D_PLAN, [(A_PLAN_HANDLE, T_HANDLE, self.gpu.handle),
                                  (A_PLAN_CFG, T_DESCRIPTOR, cfg)], stage="plan")
        size = self.get(plan, A_PLAN_WORKSPACE, T_INT64, 1, stage="plan")
        return plan, int(size[0]) if size else 0

    def plan_text(self, plan):
        """The plan in cuDNN's serialized form (what the plan cache keeps), or None where this
        cuDNN cannot serialize it."""
        count = c_int64()
        try:
            self.gpu.call("cudnnBackendGetAttribute", plan, A_PLAN_JSON, T_CHAR, 0, byref(count),
                          None, stage="plan")
            if not 0 < count.value <= PlanCache.LIMIT:
                return None
            buf = ctypes.create_string_buffer(int(count.value))
            self.gpu.call("cudnnBackendGetAttribute", plan, A_PLAN_JSON, T_CHAR, count.value,
                          byref(count), ctypes.cast(buf, c_void_p), stage="plan")
        except ProbeError:
            return None
        return buf.raw[:max(int(count.value), 0)].rstrip(b"\0").decode("latin-1")

    def plan_from_text(self, text):
        """A plan rebuilt from its serialized form, and its workspace size."""
        raw = text.encode("latin-1")
        plan = self.create(D_PLAN, "plan")
        self.set(plan, A_PLAN_HANDLE, T_HANDLE, self.gpu.handle, "plan")
        buf = ctypes.create_string_buffer(raw, len(raw))
        self.gpu.call("cudnnBackendSetAttribute", plan, A_PLAN_JSON, T_CHAR, len(raw),
                      ctypes.cast(buf, c_void_p), stage="plan")
        self.finalize(plan, "plan")
        size = self.get(plan, A_PLAN_WORKSPACE, T_INT64, 1, stage="plan")
        return plan, int(size[0]) if size else 0

    def first_plan(self, cfgs):
        """The first config that makes an execution plan, as frameworks take it."""
        errors = []
        for cfg in cfgs:
            try:
                plan, ws = self.plan(cfg)
            except ProbeError as exc:
                errors.append(str(exc))
                continue
            return cfg, plan, ws
        raise ProbeError(f"none of the {len(cfgs)} engine configurations makes an execution plan"
                         + (f" (first: {errors[0]})" if errors else ""), "plan")

    def execute(self, plan, ws_size, pointers):
        ws = self.gpu.malloc(ws_size) if ws_size else c_void_p()
        uids = sorted(pointers)
        pack = self.make(D_VARIANT_PACK, [
            (A_VP_UIDS, T_INT64, uids), (A_VP_PTRS, T_VOID_PTR, [pointers[u] for u in uids]),
            (A_VP_WORKSPACE, T_VOID_PTR, ws)], stage="execute")
        self.gpu.call("cudnnBackendExecute", self.gpu.handle, plan, pack, stage="execute")
        self.gpu.sync()

    def close(self):
        for desc in reversed(self.made):
            self.lib.cudnnBackendDestroyDescriptor(desc)
        self.made = []


def nchw_strides(dims):
    n, c, h, w = dims
    return [c * h * w, h * w, w, 1]


def nhwc_strides(dims):
    n, c, h, w = dims
    return [c * h * w, 1, w * c, c]


# --- numpy references -------------------------------------------------------------------------

def reference(x, w, pad):
    import numpy as np

    n, _, h, width = x.shape
    k, _, r, s = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = h + 2 * pad - r + 1, width + 2 * pad - s + 1
    out = np.zeros((n, k, oh, ow), dtype=np.float64)
    for i in range(oh):
        for j in range(ow):
            out[:, :, i, j] = np.tensordot(xp[:, :, i:i + r, j:j + s], w, axes=([1, 2, 3], [1, 2, 3]))
    return out


def reference_bwd_data(dy, w, pad, x_shape):
    """dx of a stride-1 cross-correlation: each output position's gradient spread back."""
    import numpy as np

    n, c, h, width = x_shape
    k, _, r, s = w.shape
    dxp = np.zeros((n, c, h + 2 * pad, width + 2 * pad), dtype=np.float64)
    for i in range(dy.shape[2]):
        for j in range(dy.shape[3]):
            dxp[:, :, i:i + r, j:j + s] += np.tensordot(dy[:, :, i, j], w, axes=([1], [0]))
    return dxp[:, :, pad:pad + h, pad:pad + width]


def reference_bwd_filter(x, dy, pad, w_shape):
    import numpy as np

    k, c, r, s = w_shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    dw = np.zeros(w_shape, dtype=np.float64)
    for i in range(dy.shape[2]):
        for j in range(dy.shape[3]):
            dw += np.tensordot(dy[:, :, i, j], xp[:, :, i:i + r, j:j + s], axes=([0], [0]))
    return dw


def reference_batchnorm(x, scale, bias, eps):
    mean = x.mean(axis=(0, 2, 3), keepdims=True)
    var = x.var(axis=(0, 2, 3), keepdims=True)
    return (x - mean) / (var + eps) ** 0.5 * scale.reshape(1, -1, 1, 1) + bias.reshape(1, -1, 1, 1)


def reference_rnn(x, wi, wr):
    """A one-layer tanh RNN without bias from h0 = 0: x is (seq, batch, input)."""
    import numpy as np

    h = np.zeros((x.shape[1], wr.shape[0]))
    out = []
    for t in range(x.shape[0]):
        h = np.tanh(x[t] @ wi.T + h @ wr.T)
        out.append(h)
    return np.stack(out)


def compare(got, want, tolerance, what):
    """Max abs error relative to the reference's scale; a ProbeError past `tolerance`."""
    import numpy as np

    scale = max(1.0, float(np.max(np.abs(want))))
    err = float(np.max(np.abs(got.astype(np.float64) - want))) / scale
    if not np.isfinite(err) or err > tolerance:
        raise ProbeError(f"{what} differs from numpy's by {err:.3g} (relative; limit "
                         f"{tolerance:g})", "compare")
    return err


# --- the steps --------------------------------------------------------------------------------

def _conv_data(spec, seed=0):
    import numpy as np

    n, c, h, w, k, r, s, pad = spec
    rng = np.random.RandomState(seed)
    return (rng.randn(n, c, h, w).astype(np.float32), rng.randn(k, c, r, s).astype(np.float32),
            (n, k, h + 2 * pad - r + 1, w + 2 * pad - s + 1))


def _tolerance(notes):
    # TF32 (tensor cores on fp32 data) keeps 10 bits of mantissa: what PyTorch allows for cuDNN
    return 1e-2 if notes.get("tensor_core") or notes.get("down_converts") else 1e-4


def graph_conv(gpu, out, direction):
    """One convolution through the graph API, heuristics mode A, the first config that plans."""
    import numpy as np

    n, c, h, w, k, r, s, pad = CHECK_LAYER
    x, wt, y_shape = _conv_data(CHECK_LAYER)
    dy = np.random.RandomState(1).randn(*y_shape).astype(np.float32)
    be = Backend(gpu)
    try:
        xs, ws, ys = (n, c, h, w), (k, c, r, s), y_shape
        tx = be.tensor(1, xs, nchw_strides(xs))
        tw = be.tensor(2, ws, nchw_strides(ws))
        ty = be.tensor(3, ys, nchw_strides(ys))
        conv = be.conv(pad)
        kind, names = {"fwd": (D_OP_CONV_FWD, A_OP_FWD), "bwd_data": (D_OP_CONV_BWD_DATA, A_OP_BWD_DATA),
                       "bwd_filter": (D_OP_CONV_BWD_FILTER, A_OP_BWD_FILTER)}[direction]
        alpha, beta, cdesc, a, b, cc = names
        # the op's three tensors, in the order of its attribute names
        tensors = {"fwd": (tw, tx, ty), "bwd_data": (tw, tx, ty), "bwd_filter": (tw, tx, ty)}[direction]
        op = be.make(kind, [(alpha, T_FLOAT, 1.0), (beta, T_FLOAT, 0.0), (cdesc, T_DESCRIPTOR, conv),
                            (a, T_DESCRIPTOR, tensors[0]), (b, T_DESCRIPTOR, tensors[1]),
                            (cc, T_DESCRIPTOR, tensors[2])])
        graph = be.graph([op])
        cfgs = be.heuristics(graph, HEUR_MODE_A)
        out["stage"] = "plan"
        cfg, plan, ws_size = be.first_plan(cfgs)
        notes = be.engine_notes(be.config_engine(cfg))
        out["engine"] = notes
        out["sublibraries"] = ["libcudnn_graph", "libcudnn_heuristic",
                               "libcudnn_engines_runtime_compiled" if notes["runtime_compiled"]
                               else "libcudnn_engines_precompiled"]
        out["stage"] = "execute"
        px, pw, py = gpu.upload(x), gpu.upload(wt), gpu.upload(dy)
        be.execute(plan, ws_size, {1: px.value, 2: pw.value, 3: py.value})
        out["stage"] = "compare"
        x64, w64 = x.astype(np.float64), wt.astype(np.float64)
        if direction == "fwd":
            got, want = gpu.download(py, y_shape, np.float32), reference(x64, w64, pad)
        elif direction == "bwd_data":
            got = gpu.download(px, x.shape, np.float32)
            want = reference_bwd_data(dy.astype(np.float64), w64, pad, x.shape)
        else:
            got = gpu.download(pw, wt.shape, np.float32)
            want = reference_bwd_filter(x64, dy.astype(np.float64), pad, wt.shape)
        out["max_rel_error"] = compare(got, want, _tolerance(notes), f"the {direction} result")
    finally:
        be.close()
        gpu.free_all()


def legacy_conv(gpu, out):
    layer = ConvLayer(gpu, *CHECK_LAYER)
    try:
        import numpy as np

        x, wt, _ = _conv_data(CHECK_LAYER)
        y = layer.forward(x, wt)
        out["stage"] = "compare"
        out["shape"] = list(layer.shape_out)
        out["algo"] = "IMPLICIT_GEMM"
        out["max_rel_error"] = compare(y, reference(x.astype(np.float64), wt.astype(np.float64),
                                                    CHECK_LAYER[7]), 1e-4, "the convolution")
    finally:
        layer.close()


def _tensor4d(gpu, dims, dtype=FLOAT):
    desc = c_void_p()
    gpu.call("cudnnCreateTensorDescriptor", byref(desc))
    gpu.call("cudnnSetTensor4dDescriptor", desc, 0, dtype, *dims)
    return desc


def batchnorm(gpu, out):
    import numpy as np

    n, c, h, w = 4, 3, 5, 5
    rng = np.random.RandomState(2)
    x = rng.randn(n, c, h, w).astype(np.float32)
    scale = rng.rand(c).astype(np.float32) + 0.5
    bias = rng.randn(c).astype(np.float32)
    eps = 1e-5
    xd, pd = _tensor4d(gpu, (n, c, h, w)), _tensor4d(gpu, (1, c, 1, 1))
    try:
        px, py = gpu.upload(x), gpu.zeros(x.nbytes)
        ps, pb = gpu.upload(scale), gpu.upload(bias)
        rm, rv, sm, sv = (gpu.zeros(4 * c) for _ in range(4))
        alpha, beta = c_float(1.0), c_float(0.0)
        fn = gpu.cudnn.cudnnBatchNormalizationForwardTraining
        fn.argtypes = [c_void_p, c_int, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p,
                       c_void_p, c_void_p, c_void_p, c_double, c_void_p, c_void_p, c_double,
                       c_void_p, c_void_p]
        out["stage"] = "execute"
        gpu.call("cudnnBatchNormalizationForwardTraining", gpu.handle, BATCHNORM_SPATIAL,
                 byref(alpha), byref(beta), xd, px, xd, py, pd, ps, pb, 1.0, rm, rv, eps, sm, sv,
                 stage="execute")
        got = gpu.download(py, x.shape, np.float32)
        out["stage"] = "compare"
        out["max_rel_error"] = compare(got, reference_batchnorm(x.astype(np.float64),
                                                                scale.astype(np.float64),
                                                                bias.astype(np.float64), eps),
                                       1e-3, "the batch normalization")
    finally:
        gpu.cudnn.cudnnDestroyTensorDescriptor(xd)
        gpu.cudnn.cudnnDestroyTensorDescriptor(pd)
        gpu.free_all()


def rnn(gpu, out):
    import numpy as np

    seq, batch, isize, hsize = 3, 2, 4, 5
    lib = gpu.cudnn
    made = []

    def create(kind):
        desc = c_void_p()
        gpu.call(f"cudnnCreate{kind}Descriptor", byref(desc))
        made.append((kind, desc))
        return desc

    try:
        drop = create("Dropout")
        states = c_size_t()
        gpu.call("cudnnDropoutGetStatesSize", gpu.handle, byref(states))
        lib.cudnnSetDropoutDescriptor.argtypes = [c_void_p, c_void_p, c_float, c_void_p, c_size_t,
                                                  ctypes.c_ulonglong]
        gpu.call("cudnnSetDropoutDescriptor", drop, gpu.handle, 0.0, gpu.malloc(states.value),
                 states.value, 0)
        desc = create("RNN")
        # algo, cell, bias, direction, input mode, data type, math precision, math type, input
        # size, hidden size, projection size, layers
        lib.cudnnSetRNNDescriptor_v8.argtypes = [c_void_p] + [c_int] * 12 + [c_void_p, ctypes.c_uint]
        gpu.call("cudnnSetRNNDescriptor_v8", desc, RNN_ALGO_STANDARD, RNN_TANH, RNN_NO_BIAS,
                 RNN_UNIDIRECTIONAL, RNN_LINEAR_INPUT, FLOAT, FLOAT, FMA_MATH, isize, hsize, hsize,
                 1, drop, 0)
        lengths = (c_int * batch)(*([seq] * batch))
        xd, yd = create("RNNData"), create("RNNData")
        lib.cudnnSetRNNDataDescriptor.argtypes = [c_void_p, c_int, c_int, c_int, c_int, c_int,
                                                  c_void_p, c_void_p]
        pad = c_float(0.0)
        gpu.call("cudnnSetRNNDataDescriptor", xd, FLOAT, RNN_SEQ_MAJOR_UNPACKED, seq, batch, isize,
                 lengths, byref(pad))
        gpu.call("cudnnSetRNNDataDescriptor", yd, FLOAT, RNN_SEQ_MAJOR_UNPACKED, seq, batch, hsize,
                 lengths, byref(pad))
        hd = create("Tensor")
        dims, strides = (c_int * 3)(1, batch, hsize), (c_int * 3)(batch * hsize, hsize, 1)
        gpu.call("cudnnSetTensorNdDescriptor", hd, FLOAT, 3, dims, strides)
        wsize, work, reserve = c_size_t(), c_size_t(), c_size_t()
        gpu.call("cudnnGetRNNWeightSpaceSize", gpu.handle, desc, byref(wsize))
        gpu.call("cudnnGetRNNTempSpaceSizes", gpu.handle, desc, FWD_MODE_INFERENCE, xd,
                 byref(work), byref(reserve))
        rng = np.random.RandomState(3)
        weights = (rng.randn(wsize.value // 4) * 0.5).astype(np.float32)
        pw = gpu.upload(weights)
        mats = []
        md, bd = create("Tensor"), create("Tensor")
        lib.cudnnGetRNNWeightParams.argtypes = [c_void_p, c_void_p, ctypes.c_int32, c_size_t,
                                                c_void_p, ctypes.c_int32, c_void_p,
                                                ctypes.POINTER(c_void_p), c_void_p,
                                                ctypes.POINTER(c_void_p)]
        for lin in (0, 1):  # input weights W, then recurrent weights R
            maddr, baddr = c_void_p(), c_void_p()
            gpu.call("cudnnGetRNNWeightParams", gpu.handle, desc, 0, wsize.value, pw, lin, md,
                     byref(maddr), bd, byref(baddr))
            dt, nb = c_int(), c_int()
            mdims, mstrides = (c_int * 3)(), (c_int * 3)()
            gpu.call("cudnnGetTensorNdDescriptor", md, 3, byref(dt), byref(nb), mdims, mstrides)
            offset = (maddr.value - pw.value) // 4
            rows, cols = mdims[1], mdims[2]
            idx = offset + np.arange(rows)[:, None] * mstrides[1] + np.arange(cols)[None, :] * mstrides[2]
            mats.append(weights[idx].astype(np.float64))
        x = rng.randn(seq, batch, isize).astype(np.float32)
        px, py = gpu.upload(x), gpu.zeros(4 * seq * batch * hsize)
        dev_lengths = gpu.upload(np.array([seq] * batch, dtype=np.int32))
        pwork = gpu.malloc(work.value)
        pres = gpu.malloc(reserve.value) if reserve.value else c_void_p()
        lib.cudnnRNNForward.argtypes = [c_void_p, c_void_p, c_int, c_void_p, c_void_p, c_void_p,
                                        c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p,
                                        c_void_p, c_void_p, c_size_t, c_void_p, c_size_t, c_void_p,
                                        c_size_t, c_void_p]
        out["stage"] = "execute"
        gpu.call("cudnnRNNForward", gpu.handle, desc, FWD_MODE_INFERENCE, dev_lengths, xd, px, yd,
                 py, hd, None, None, hd, None, None, wsize.value, pw, work.value, pwork,
                 reserve.value, pres, stage="execute")
        got = gpu.download(py, (seq, batch, hsize), np.float32)
        out["stage"] = "compare"
        out["max_rel_error"] = compare(got, reference_rnn(x.astype(np.float64), *mats), 1e-4,
                                       "the RNN's output")
    finally:
        for kind, desc in reversed(made):
            getattr(lib, f"cudnnDestroy{kind}Descriptor")(desc)
        gpu.free_all()


def nvrtc_missing(gpu):
    """The NVRTC cuDNN would open for runtime-compiled engines, when it cannot be loaded."""
    fn = getattr(gpu.cudnn, "cudnnGetCudartVersion", None)
    if fn is None:
        return None
    fn.restype = ctypes.c_size_t
    major = int(fn()) // 1000
    name = f"libnvrtc.so.{major}"
    try:
        ctypes.CDLL(name)
    except OSError as exc:
        return f"{name} cannot be loaded ({exc})"
    return None


class PlanCache:
    """The runtime-compiled engine's plan between runs: one file per cuDNN (the files' identity),
    GPU, driver and layer, in a directory of the user's own (0700, files 0600). What is read
    back is bounded and only ever handed to cuDNN in this child; a file that is not a regular
    file of this user is not read."""

    LIMIT = 16 << 20
    FORMAT = 1

    def __init__(self, directory, gpu, facts):
        self.directory = directory
        ident = [self.FORMAT, gpu.version, facts.get("gpu"), facts.get("compute_capability"),
                 facts.get("driver_version"), list(FUSED_LAYER)]
        lib_dir = os.path.dirname(os.path.realpath(gpu.path))
        for name in sorted(os.listdir(lib_dir)):
            if name.startswith(("libcudnn.so", "libcudnn_graph.so",
                                "libcudnn_engines_runtime_compiled.so")):
                try:
                    st = os.stat(os.path.join(lib_dir, name))
                except OSError:
                    continue
                ident.append([name, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns])
        digest = hashlib.sha256(json.dumps(ident).encode()).hexdigest()[:32]
        self.path = os.path.join(directory, f"fused-{digest}.json")

    def load(self):
        """(plan text, engine notes) kept by an earlier run, or None."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not (st.st_mode & 0o170000 == 0o100000 and st.st_uid == os.geteuid()
                    and st.st_size <= self.LIMIT):
                return None
            with os.fdopen(os.dup(fd), "rb") as f:
                data = json.loads(f.read(self.LIMIT + 1))
        except (OSError, ValueError):
            return None
        finally:
            os.close(fd)
        if not (isinstance(data, dict) and data.get("format") == self.FORMAT
                and isinstance(data.get("plan"), str) and isinstance(data.get("engine"), dict)):
            return None
        return data["plan"], data["engine"]

    def save(self, plan_text, notes):
        try:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            tmp = f"{self.path}.{os.getpid()}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump({"format": self.FORMAT, "plan": plan_text, "engine": notes}, f)
            os.replace(tmp, self.path)
            return True
        except OSError:
            return False


def fused(gpu, out, cache=None):
    """conv (fp16, NHWC) + bias + ReLU through an engine that compiles its kernel at run time;
    a warn, naming it, where the NVRTC cuDNN opens for that cannot be loaded. With `cache`
    (PlanCache), the plan compiled by an earlier run is executed and compared instead of
    compiling it again; one that fails anywhere is set aside and the engine compiled."""
    kept = cache.load() if cache is not None else None
    if kept is not None:
        try:
            fused_graph(gpu, out, kept)
            return
        except ProbeError as exc:
            out["kept_plan_set_aside"] = str(exc)[:200]
            for key in ("engine", "max_rel_error", "timings"):
                out.pop(key, None)
    try:
        fused_graph(gpu, out, keep=cache.save if cache is not None else None)
    except ProbeError:
        missing = None if any("libnvrtc" in os.path.basename(p) for p in mapped_cudnn_files()) \
            else nvrtc_missing(gpu)
        if missing:
            raise Skip(f"{missing}: cuDNN's runtime-compiled engines (fusions) cannot run here; "
                       "precompiled engines still do") from None
        raise


def fused_graph(gpu, out, kept=None, keep=None):
    """The fused graph's plan: `kept` (plan text, engine notes) from the plan cache, else
    compiled through heuristics (every engine when they propose no runtime-compiled one);
    executed and compared with numpy either way. `keep(plan text, notes)`: called with a plan
    this run compiled once its output matched, to keep it for the next run."""
    import numpy as np

    timings = out.setdefault("timings", {})
    mark = time.monotonic()

    n, c, h, w, k, r, s, pad = FUSED_LAYER
    rng = np.random.RandomState(4)
    x = rng.randn(n, c, h, w).astype(np.float16)
    wt = (rng.randn(k, c, r, s) * 0.2).astype(np.float16)
    bias = rng.randn(k).astype(np.float16)
    ys = (n, k, h + 2 * pad - r + 1, w + 2 * pad - s + 1)
    be = Backend(gpu)
    try:
        xs, wsh, bs = (n, c, h, w), (k, c, r, s), (1, k, 1, 1)
        tx, tw = be.tensor(1, xs, nhwc_strides(xs), HALF), be.tensor(2, wsh, nhwc_strides(wsh), HALF)
        tb = be.tensor(3, bs, nhwc_strides(bs), HALF)
        tconv = be.tensor(10, ys, nhwc_strides(ys), FLOAT, virtual=True)
        tadd = be.tensor(11, ys, nhwc_strides(ys), FLOAT, virtual=True)
        ty = be.tensor(4, ys, nhwc_strides(ys), HALF)
        conv = be.conv(pad)
        alpha, beta, cdesc, a_w, a_x, a_y = A_OP_FWD
        op_conv = be.make(D_OP_CONV_FWD, [(alpha, T_FLOAT, 1.0), (beta, T_FLOAT, 0.0),
                                          (cdesc, T_DESCRIPTOR, conv), (a_w, T_DESCRIPTOR, tw),
                                          (a_x, T_DESCRIPTOR, tx), (a_y, T_DESCRIPTOR, tconv)])
        add = be.make(D_POINTWISE, [(A_POINTWISE_MODE, T_POINTWISE_MODE, PW_ADD),
                                    (A_POINTWISE_MATH_PREC, T_DATA_TYPE, FLOAT)])
        relu = be.make(D_POINTWISE, [(A_POINTWISE_MODE, T_POINTWISE_MODE, PW_RELU_FWD),
                                     (A_POINTWISE_MATH_PREC, T_DATA_TYPE, FLOAT)])
        op_add = be.make(D_OP_POINTWISE, [(A_OP_PW_DESC, T_DESCRIPTOR, add),
                                          (A_OP_PW_X, T_DESCRIPTOR, tconv),
                                          (A_OP_PW_B, T_DESCRIPTOR, tb),
                                          (A_OP_PW_Y, T_DESCRIPTOR, tadd)])
        op_relu = be.make(D_OP_POINTWISE, [(A_OP_PW_DESC, T_DESCRIPTOR, relu),
                                           (A_OP_PW_X, T_DESCRIPTOR, tadd),
                                           (A_OP_PW_Y, T_DESCRIPTOR, ty)])
        graph = be.graph([op_conv, op_add, op_relu])
        timings["graph"] = round(time.monotonic() - mark, 4)
        mark = time.monotonic()
        if kept is not None:
            out["stage"] = "plan"
            plan, ws_size = be.plan_from_text(kept[0])
            notes = dict(kept[1], runtime_compiled=True)
            out["plan"] = "kept from an earlier run"
        else:
            plan, ws_size, notes = _compiled_plan(be, graph, out)
            out["plan"] = "compiled"
        timings["plan"] = round(time.monotonic() - mark, 4)
        mark = time.monotonic()
        out["engine"] = notes
        out["stage"] = "execute"
        nhwc = lambda a: np.ascontiguousarray(a.transpose(0, 2, 3, 1))  # noqa: E731
        px, pw, pb = gpu.upload(nhwc(x)), gpu.upload(nhwc(wt)), gpu.upload(bias)
        py = gpu.zeros(2 * ys[0] * ys[1] * ys[2] * ys[3])
        be.execute(plan, ws_size, {1: px.value, 2: pw.value, 3: pb.value, 4: py.value})
        got = gpu.download(py, (ys[0], ys[2], ys[3], ys[1]), np.float16).transpose(0, 3, 1, 2)
        out["stage"] = "compare"
        want = np.maximum(reference(x.astype(np.float64), wt.astype(np.float64), pad)
                          + bias.astype(np.float64).reshape(1, -1, 1, 1), 0)
        out["max_rel_error"] = compare(got, want, 2e-2, "the fused conv+bias+ReLU")
        timings["execute"] = round(time.monotonic() - mark, 4)
        if keep is not None and kept is None:
            text = be.plan_text(plan)
            out["plan"] = ("compiled; kept for the next run" if text and keep(text, notes) else
                           "compiled; not kept (cuDNN gave no serialized plan, or the cache "
                           "could not be written)")
    finally:
        be.close()
        gpu.free_all()


def _compiled_plan(be, graph, out):
    """(plan, workspace size, engine notes) of the first runtime-compiled engine that makes a
    plan for `graph`: what heuristics propose, as a framework would take it, else every engine."""
    out["stage"] = "heuristics"
    try:  # what heuristics propose, as a framework would take it; else every engine
        cfgs = be.heuristics(graph, HEUR_MODE_A)
        found = [(cfg, be.engine_notes(be.config_engine(cfg))) for cfg in cfgs]
    except ProbeError:
        found = []
    out["stage"] = "plan"
    if not any(notes["runtime_compiled"] for _, notes in found):
        # an engine made into a config only when it is tried
        found = [(e, be.engine_notes(e)) for e in be.engines(graph)]
    out["engines_supported"] = [notes["global_index"] for _, notes in found]
    compiled = [(desc, notes) for desc, notes in found if notes["runtime_compiled"]]
    if not compiled:
        raise ProbeError(f"no runtime-compiled engine supports a conv+bias+ReLU graph here "
                         f"({len(found)} engines do)", "plan")
    errors, chosen = [], None
    for desc, notes in compiled:
        try:
            cfg = desc if desc in be.configs else be.config_of(desc)
            plan, ws_size = be.plan(cfg)
        except ProbeError as exc:
            errors.append(str(exc))
            continue
        chosen = (plan, ws_size, notes)
        break
    if chosen is None:
        raise ProbeError(f"no runtime-compiled engine makes an execution plan (first: "
                         f"{errors[0] if errors else '?'})", "plan")
    return chosen


class ConvLayer:
    """Descriptors and device buffers for one NCHW float convolution (the legacy API)."""

    def __init__(self, gpu, n, c, h, w, k, r, s, pad, exact=True):
        self.gpu, self.shape_in, self.shape_w = gpu, (n, c, h, w), (k, c, r, s)
        self.xd, self.yd, self.wd, self.cd = c_void_p(), c_void_p(), c_void_p(), c_void_p()
        gpu.call("cudnnCreateTensorDescriptor", byref(self.xd))
        gpu.call("cudnnCreateTensorDescriptor", byref(self.yd))
        gpu.call("cudnnCreateFilterDescriptor", byref(self.wd))
        gpu.call("cudnnCreateConvolutionDescriptor", byref(self.cd))
        gpu.call("cudnnSetTensor4dDescriptor", self.xd, 0, 0, n, c, h, w)  # NCHW, float
        gpu.call("cudnnSetFilter4dDescriptor", self.wd, 0, 0, k, c, r, s)
        # pad, stride 1, dilation 1, CUDNN_CROSS_CORRELATION, float compute
        gpu.call("cudnnSetConvolution2dDescriptor", self.cd, pad, pad, 1, 1, 1, 1, 1, 0)
        if exact and hasattr(gpu.cudnn, "cudnnSetConvolutionMathType"):
            gpu.call("cudnnSetConvolutionMathType", self.cd, FMA_MATH)  # no TF32: exact compare
        dims = [ctypes.c_int() for _ in range(4)]
        gpu.call("cudnnGetConvolution2dForwardOutputDim", self.cd, self.xd, self.wd,
                 *[byref(d) for d in dims])
        self.shape_out = tuple(d.value for d in dims)
        gpu.call("cudnnSetTensor4dDescriptor", self.yd, 0, 0, *self.shape_out)
        self.x = gpu.malloc(4 * _prod(self.shape_in))
        self.w = gpu.malloc(4 * _prod(self.shape_w))
        self.y = gpu.malloc(4 * _prod(self.shape_out))

    def workspace(self, algo):
        size = ctypes.c_size_t()
        self.gpu.call("cudnnGetConvolutionForwardWorkspaceSize", self.gpu.handle, self.xd, self.wd,
                      self.cd, self.yd, algo, byref(size))
        return size

    def forward(self, x, w, algo=0):
        import numpy as np

        gpu = self.gpu
        gpu.copy(self.x, x.ctypes.data_as(c_void_p), x.nbytes, 1)
        gpu.copy(self.w, w.ctypes.data_as(c_void_p), w.nbytes, 1)
        size = self.workspace(algo)
        ws = gpu.malloc(size.value)
        alpha, beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
        gpu.call("cudnnConvolutionForward", gpu.handle, byref(alpha), self.xd, self.x, self.wd,
                 self.w, self.cd, algo, ws, size, byref(beta), self.yd, self.y, stage="execute")
        return gpu.download(self.y, self.shape_out, np.float32)

    def find(self):
        """Every forward algorithm cuDNN can run here, timed by cuDNN itself, fastest first."""
        perf = (AlgoPerf * 8)()
        count = ctypes.c_int()
        self.gpu.call("cudnnFindConvolutionForwardAlgorithm", self.gpu.handle, self.xd, self.wd,
                      self.cd, self.yd, 8, byref(count), perf)
        return [{"algo": FWD_ALGOS[p.algo] if p.algo < len(FWD_ALGOS) else str(p.algo),
                 "ms": round(float(p.time), 4), "workspace_bytes": int(p.memory)}
                for p in perf[:count.value] if p.status == 0]

    def close(self):
        self.gpu.free_all()
        for fn, d in (("cudnnDestroyTensorDescriptor", self.xd), ("cudnnDestroyTensorDescriptor", self.yd),
                      ("cudnnDestroyFilterDescriptor", self.wd),
                      ("cudnnDestroyConvolutionDescriptor", self.cd)):
            getattr(self.gpu.cudnn, fn)(d)


def _prod(shape):
    out = 1
    for d in shape:
        out *= d
    return out


def device_facts():
    """Driver facts for device 0, or a skip reason."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        return None, f"no NVIDIA driver: libcuda.so.1 cannot be loaded ({exc})"
    rc = cuda.cuInit(0)
    if rc != 0:
        return None, "no CUDA-capable GPU" if rc == 100 else f"cuInit failed with CUDA error {rc}"
    count = ctypes.c_int()
    cuda.cuDeviceGetCount(byref(count))
    if count.value == 0:
        return None, "the driver sees no GPU"
    dev = ctypes.c_int()
    cuda.cuDeviceGet(byref(dev), 0)
    name = ctypes.create_string_buffer(256)
    cuda.cuDeviceGetName(name, 256, dev)
    major, minor = ctypes.c_int(), ctypes.c_int()
    cuda.cuDeviceGetAttribute(byref(major), 75, dev)
    cuda.cuDeviceGetAttribute(byref(minor), 76, dev)
    driver = ctypes.c_int()
    cuda.cuDriverGetVersion(byref(driver))
    return {"gpu": name.value.decode("utf-8", "replace"),
            "compute_capability": f"{major.value}.{minor.value}", "gpu_count": count.value,
            "driver_version": driver.value}, None


STEPS = (
    ("graph_conv_fwd", lambda gpu, out: graph_conv(gpu, out, "fwd")),
    ("graph_conv_bwd_data", lambda gpu, out: graph_conv(gpu, out, "bwd_data")),
    ("graph_conv_bwd_filter", lambda gpu, out: graph_conv(gpu, out, "bwd_filter")),
    ("batchnorm_fwd", batchnorm),
    ("rnn_fwd", rnn),
    ("legacy_conv_fwd", legacy_conv),
    (RUNTIME_ENGINE, fused),
)
GRAPH_STEPS = {"graph_conv_fwd", "graph_conv_bwd_data", "graph_conv_bwd_filter", RUNTIME_ENGINE}


def blamed(name, entry):
    """The sub-library a failed step points to, by the stage it failed in. A graph step that
    plans, runs or compares wrong may be its engine library or the heuristics that chose the
    engine (a libcudnn_heuristic with no code lets cuDNN return success without computing):
    both are named; the elf, coherence and deps checks tell which file is damaged."""
    stage = entry.get("stage")
    if name == RUNTIME_ENGINE:
        return STAGE_LIBS["descriptors"] if stage == "descriptors" \
            else "libcudnn_engines_runtime_compiled"
    if name in GRAPH_STEPS:
        if stage in ("descriptors", "heuristics"):
            return STAGE_LIBS[stage]
        engine = next((lib for lib in entry.get("sublibraries", []) if "engines" in lib),
                      "libcudnn_engines_precompiled")
        return f"{engine} (which runs the engine) or libcudnn_heuristic (which chose it)"
    return STEP_LIBS[name][-1]


def run_step(gpu, name, work, log=sys.stderr):
    entry = {"name": name, "sublibraries": STEP_LIBS[name], "stage": "descriptors"}
    print(f"gpu-step: {name}", file=log, flush=True)
    before = mapped_cudnn_files()
    start = time.monotonic()
    try:
        work(gpu, entry)
        entry["status"] = "pass"
    except Skip as exc:
        entry.update(status="warn", reason=str(exc))
    except Exception as exc:  # noqa: BLE001 -- one step's failure, whatever it is, is its entry
        if isinstance(exc, ProbeError) and exc.stage:
            entry["stage"] = exc.stage  # where the call that failed belongs, not the last mark
        reason = str(exc) if isinstance(exc, (ProbeError, OSError)) else f"{type(exc).__name__}: {exc}"
        entry.update(status="fail", reason=reason[:500], blamed=blamed(name, entry))
        if isinstance(exc, ProbeError) and exc.status is not None:
            entry["cudnn_status"] = exc.status
    entry["seconds"] = round(time.monotonic() - start, 4)
    entry["mapped"] = sorted(mapped_cudnn_files() - before)
    return entry


def steps_for(version):
    """Every step for cuDNN 9; 8.x has the legacy steps only (its graph API is another ABI)."""
    if version >= 90000:
        return STEPS
    return tuple(s for s in STEPS if s[0] not in GRAPH_STEPS)


def check(gpu, out, only=None, have=None, cache=None):
    """Every step (those in `only`); with `have` (the libraries a release of another flavour
    is made of: the JIT one), a step that needs a library the release does not have is a
    skip, not a failure; `cache`: the runtime-compiled engine's PlanCache."""
    entries = []
    for name, work in steps_for(gpu.version):
        if name == RUNTIME_ENGINE and cache is not None:
            work = lambda g, entry: fused(g, entry, cache)  # noqa: E731
        if only and name not in only:
            continue
        lacking = [lib for lib in STEP_LIBS[name] if have is not None and lib not in have]
        if lacking:
            entries.append({"name": name, "sublibraries": STEP_LIBS[name], "status": "skip",
                            "reason": f"this release has no {', '.join(lacking)}"})
            continue
        entries.append(run_step(gpu, name, work))
    out["steps"] = entries
    failed = [e for e in entries if e["status"] == "fail"]
    warned = [e for e in entries if e["status"] == "warn"]
    return "fail" if failed else "warn" if warned else "pass"


def bench(gpu, out):
    layers = {}
    for name, spec in BENCH_LAYERS.items():
        layer = ConvLayer(gpu, *spec, exact=False)  # let cuDNN pick tensor-core paths too
        layer.find()  # the first search also pays for loading kernels
        algos = layer.find()
        layers[name] = {"input": list(layer.shape_in), "filter": list(layer.shape_w),
                        "output": list(layer.shape_out), "algorithms": algos,
                        "fastest": algos[0] if algos else None}
        layer.close()
    out["layers"] = layers
    return "pass"


def main(argv):
    bench_mode = argv[:1] == ["--bench"]
    args = argv[1:] if bench_mode else argv
    only = have = plans = None
    while args[:1] in (["--only"], ["--have"], ["--plan-cache"], ["--numpy-path"]) and \
            len(args) > 1:
        if args[0] == "--plan-cache":
            plans = args[1]
        elif args[0] == "--numpy-path":  # run without site: numpy's directory, named outright
            sys.path.append(args[1])
        else:
            names = set(args[1].split(","))
            only, have = (names, have) if args[0] == "--only" else (only, names)
        args = args[2:]
    if not args:
        return {"status": "fail", "reason": "usage: gpu.py [--bench] [--only STEP,…] "
                                            "[--have LIBRARY,…] [--plan-cache DIR] "
                                            "[--numpy-path DIR] LIBCUDNN [LIBCUDART]"}
    mark = time.monotonic()
    out, why = device_facts()
    if out is None:
        return {"status": "skip", "reason": why}
    try:  # the references every step is checked against: without them nothing can pass
        __import__("numpy")
    except ImportError as exc:
        return {"status": "skip", "reason": f"numpy cannot be imported here ({exc}), and every "
                "step is checked against numpy's result; install numpy where cudnn-setup "
                "runs to check cuDNN on the GPU"}
    timings = {"device": round(time.monotonic() - mark, 4)}
    try:
        mark = time.monotonic()
        gpu = Gpu(args[0], args[1] if len(args) > 1 else None)
        timings["load"] = round(time.monotonic() - mark, 4)
        out["timings"] = timings
        out["cudnn_version_number"] = gpu.version
        cache = PlanCache(plans, gpu, out) if plans and not bench_mode else None
        out["status"] = bench(gpu, out) if bench_mode else check(gpu, out, only, have, cache)
        gpu.close()
    except (ProbeError, OSError, AttributeError) as exc:
        out.update(status="fail", reason=str(exc))
    return out


if __name__ == "__main__":
    from answer import emit

    emit(lambda: main(sys.argv[1:]))
