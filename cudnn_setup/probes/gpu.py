"""Run convolutions through cuDNN on the GPU with ctypes; compare with numpy or time algorithms.

    python gpu.py LIBCUDNN [LIBCUDART]           one small convolution checked against numpy
    python gpu.py --bench LIBCUDNN [LIBCUDART]   cudnnFindConvolutionForwardAlgorithm per layer

Prints one JSON line with status pass | fail | skip; without a driver or a GPU it says skip.
"""
import ctypes
import os
import sys

c_void_p, byref = ctypes.c_void_p, ctypes.byref

# The classic small conv net's layers (batch 100, 3x24x24 input): (N, C, H, W, K, R, S, pad)
BENCH_LAYERS = {"conv1": (100, 3, 24, 24, 20, 5, 5, 0), "conv2": (100, 20, 10, 10, 50, 5, 5, 0)}
CHECK_LAYER = (2, 3, 9, 9, 4, 3, 3, 1)
FWD_ALGOS = ["IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
             "WINOGRAD", "WINOGRAD_NONFUSED"]


class ProbeError(Exception):
    pass


class AlgoPerf(ctypes.Structure):
    _fields_ = [("algo", ctypes.c_int), ("status", ctypes.c_int), ("time", ctypes.c_float),
                ("memory", ctypes.c_size_t), ("determinism", ctypes.c_int),
                ("mathType", ctypes.c_int), ("reserved", ctypes.c_int * 3)]


class Gpu:
    """libcuda facts, libcudart memory and a cuDNN handle for device 0."""

    def __init__(self, cudnn_path, cudart_path):
        self.cudart = ctypes.CDLL(cudart_path or "libcudart.so", mode=ctypes.RTLD_GLOBAL)
        self.cudnn = ctypes.CDLL(cudnn_path, mode=ctypes.RTLD_GLOBAL)
        self.cudnn.cudnnGetVersion.restype = ctypes.c_size_t
        self.cudnn.cudnnGetErrorString.restype = ctypes.c_char_p
        self.handle = c_void_p()
        self.call("cudnnCreate", byref(self.handle))

    def call(self, name, *args):
        status = getattr(self.cudnn, name)(*args)
        if status != 0:
            raise ProbeError(f"{name} returned {status} "
                             f"({self.cudnn.cudnnGetErrorString(status).decode()})")

    def malloc(self, nbytes):
        ptr = c_void_p()
        if self.cudart.cudaMalloc(byref(ptr), ctypes.c_size_t(max(nbytes, 1))) != 0:
            raise ProbeError(f"cudaMalloc of {nbytes} bytes failed")
        return ptr

    def copy(self, dst, src, nbytes, kind):
        if self.cudart.cudaMemcpy(dst, src, ctypes.c_size_t(nbytes), kind) != 0:
            raise ProbeError("cudaMemcpy failed")

    def close(self):
        self.cudnn.cudnnDestroy(self.handle)


class ConvLayer:
    """Descriptors and device buffers for one NCHW float convolution."""

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
            gpu.call("cudnnSetConvolutionMathType", self.cd, 3)  # FMA: no TF32, exact compare
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
                 self.w, self.cd, algo, ws, size, byref(beta), self.yd, self.y)
        if gpu.cudart.cudaDeviceSynchronize() != 0:
            raise ProbeError("the convolution kernel failed (cudaDeviceSynchronize)")
        y = np.zeros(self.shape_out, dtype=np.float32)
        gpu.copy(y.ctypes.data_as(c_void_p), self.y, y.nbytes, 2)
        gpu.cudart.cudaFree(ws)
        return y

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
        for ptr in (self.x, self.w, self.y):
            self.gpu.cudart.cudaFree(ptr)
        for fn, d in (("cudnnDestroyTensorDescriptor", self.xd), ("cudnnDestroyTensorDescriptor", self.yd),
                      ("cudnnDestroyFilterDescriptor", self.wd),
                      ("cudnnDestroyConvolutionDescriptor", self.cd)):
            getattr(self.gpu.cudnn, fn)(d)


def _prod(shape):
    out = 1
    for d in shape:
        out *= d
    return out


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
    return {"gpu": name.value.decode(), "compute_capability": f"{major.value}.{minor.value}",
            "gpu_count": count.value}, None


def check(gpu, out):
    import numpy as np

    n, c, h, w, k, r, s, pad = CHECK_LAYER
    layer = ConvLayer(gpu, *CHECK_LAYER)
    rng = np.random.RandomState(0)
    x = rng.randn(n, c, h, w).astype(np.float32)
    wt = rng.randn(k, c, r, s).astype(np.float32)
    y = layer.forward(x, wt)
    layer.close()
    err = float(np.max(np.abs(y - reference(x.astype(np.float64), wt.astype(np.float64), pad))))
    out.update(max_abs_error=err, shape=list(layer.shape_out), algo="IMPLICIT_GEMM")
    if err > 1e-3:
        raise ProbeError(f"the convolution differs from numpy's by {err:.3g}")


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


def main(argv):
    bench_mode = argv[:1] == ["--bench"]
    args = argv[1:] if bench_mode else argv
    out, why = device_facts()
    if out is None:
        return {"status": "skip", "reason": why}
    try:
        gpu = Gpu(args[0], args[1] if len(args) > 1 else None)
        out["cudnn_version_number"] = int(gpu.cudnn.cudnnGetVersion())
        (bench if bench_mode else check)(gpu, out)
        gpu.close()
    except (ProbeError, OSError, AttributeError) as exc:
        out.update(status="fail", reason=str(exc))
        return out
    out["status"] = "pass"
    return out


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # even under PYTHONSAFEPATH
    from answer import emit

    emit(lambda: main(sys.argv[1:]))
