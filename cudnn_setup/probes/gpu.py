"""Run one small convolution through cuDNN on the GPU and compare it with numpy.

`python -m cudnn_setup.probes.gpu LIBCUDNN [LIBCUDART]`; prints one JSON line with
status pass | fail | skip. Without a driver or a GPU it says skip and why.
"""
import ctypes
import json
import sys

N, C, H, W = 2, 3, 9, 9
K, R, S = 4, 3, 3
PAD = 1


def _fail(out, why):
    out.update(status="fail", reason=why)
    return out


def _cudnn_call(cudnn, out, name, *args):
    status = getattr(cudnn, name)(*args)
    if status != 0:
        err = cudnn.cudnnGetErrorString
        err.restype = ctypes.c_char_p
        raise RuntimeError(f"{name} returned {status} ({err(status).decode()})")


def reference(x, w):
    import numpy as np

    xp = np.pad(x, ((0, 0), (0, 0), (PAD, PAD), (PAD, PAD)))
    out = np.zeros((N, K, H, W), dtype=np.float64)
    for i in range(H):
        for j in range(W):
            patch = xp[:, :, i:i + R, j:j + S]
            out[:, :, i, j] = np.tensordot(patch, w, axes=([1, 2, 3], [1, 2, 3]))
    return out


def probe(cudnn_path, cudart_path):
    out = {}
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        out.update(status="skip", reason=f"no NVIDIA driver: libcuda.so.1 cannot be loaded ({exc})")
        return out
    rc = cuda.cuInit(0)
    if rc != 0:
        why = "no CUDA-capable GPU" if rc == 100 else f"cuInit failed with CUDA error {rc}"
        out.update(status="skip", reason=why)
        return out
    count = ctypes.c_int()
    cuda.cuDeviceGetCount(ctypes.byref(count))
    if count.value == 0:
        out.update(status="skip", reason="the driver sees no GPU")
        return out
    dev = ctypes.c_int()
    cuda.cuDeviceGet(ctypes.byref(dev), 0)
    name = ctypes.create_string_buffer(256)
    cuda.cuDeviceGetName(name, 256, dev)
    major, minor = ctypes.c_int(), ctypes.c_int()
    cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, dev)
    cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev)
    out.update(gpu=name.value.decode(), compute_capability=f"{major.value}.{minor.value}",
               gpu_count=count.value)
    try:
        cudart = ctypes.CDLL(cudart_path or "libcudart.so", mode=ctypes.RTLD_GLOBAL)
    except OSError as exc:
        return _fail(out, f"libcudart cannot be loaded: {exc}")
    cudnn = ctypes.CDLL(cudnn_path, mode=ctypes.RTLD_GLOBAL)
    cudnn.cudnnGetVersion.restype = ctypes.c_size_t
    out["cudnn_version_number"] = int(cudnn.cudnnGetVersion())
    try:
        return _convolve(cudnn, cudart, out)
    except RuntimeError as exc:
        return _fail(out, str(exc))


def _convolve(cudnn, cudart, out):
    import numpy as np

    c_void_p, byref = ctypes.c_void_p, ctypes.byref
    handle = c_void_p()
    _cudnn_call(cudnn, out, "cudnnCreate", byref(handle))
    xd, yd, wd, cd = c_void_p(), c_void_p(), c_void_p(), c_void_p()
    _cudnn_call(cudnn, out, "cudnnCreateTensorDescriptor", byref(xd))
    _cudnn_call(cudnn, out, "cudnnCreateTensorDescriptor", byref(yd))
    _cudnn_call(cudnn, out, "cudnnCreateFilterDescriptor", byref(wd))
    _cudnn_call(cudnn, out, "cudnnCreateConvolutionDescriptor", byref(cd))
    _cudnn_call(cudnn, out, "cudnnSetTensor4dDescriptor", xd, 0, 0, N, C, H, W)  # NCHW, float
    _cudnn_call(cudnn, out, "cudnnSetFilter4dDescriptor", wd, 0, 0, K, C, R, S)
    _cudnn_call(cudnn, out, "cudnnSetConvolution2dDescriptor", cd, PAD, PAD, 1, 1, 1, 1, 1, 0)
    if hasattr(cudnn, "cudnnSetConvolutionMathType"):
        # CUDNN_FMA_MATH: no TF32, so the result can be compared closely with float64 numpy.
        _cudnn_call(cudnn, out, "cudnnSetConvolutionMathType", cd, 3)
    dims = [ctypes.c_int() for _ in range(4)]
    _cudnn_call(cudnn, out, "cudnnGetConvolution2dForwardOutputDim", cd, xd, wd,
                *[byref(d) for d in dims])
    if [d.value for d in dims] != [N, K, H, W]:
        raise RuntimeError(f"unexpected output shape {[d.value for d in dims]}")
    _cudnn_call(cudnn, out, "cudnnSetTensor4dDescriptor", yd, 0, 0, N, K, H, W)
    algo = 0  # CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM
    ws_size = ctypes.c_size_t()
    _cudnn_call(cudnn, out, "cudnnGetConvolutionForwardWorkspaceSize", handle, xd, wd, cd, yd,
                algo, byref(ws_size))
    rng = np.random.RandomState(0)
    x = rng.randn(N, C, H, W).astype(np.float32)
    w = rng.randn(K, C, R, S).astype(np.float32)
    y = np.zeros((N, K, H, W), dtype=np.float32)
    ptrs = {}
    for key, nbytes in (("x", x.nbytes), ("w", w.nbytes), ("y", y.nbytes),
                        ("ws", max(ws_size.value, 1))):
        ptrs[key] = c_void_p()
        if cudart.cudaMalloc(byref(ptrs[key]), ctypes.c_size_t(nbytes)) != 0:
            raise RuntimeError(f"cudaMalloc of {nbytes} bytes failed")
    for key, arr in (("x", x), ("w", w)):
        if cudart.cudaMemcpy(ptrs[key], arr.ctypes.data_as(c_void_p), ctypes.c_size_t(arr.nbytes), 1):
            raise RuntimeError("cudaMemcpy to the GPU failed")
    alpha, beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
    _cudnn_call(cudnn, out, "cudnnConvolutionForward", handle, byref(alpha), xd, ptrs["x"], wd,
                ptrs["w"], cd, algo, ptrs["ws"], ws_size, byref(beta), yd, ptrs["y"])
    if cudart.cudaDeviceSynchronize() != 0:
        raise RuntimeError("the convolution kernel failed (cudaDeviceSynchronize)")
    if cudart.cudaMemcpy(y.ctypes.data_as(c_void_p), ptrs["y"], ctypes.c_size_t(y.nbytes), 2):
        raise RuntimeError("cudaMemcpy from the GPU failed")
    for p in ptrs.values():
        cudart.cudaFree(p)
    for fn, d in (("cudnnDestroyTensorDescriptor", xd), ("cudnnDestroyTensorDescriptor", yd),
                  ("cudnnDestroyFilterDescriptor", wd), ("cudnnDestroyConvolutionDescriptor", cd)):
        getattr(cudnn, fn)(d)
    cudnn.cudnnDestroy(handle)
    ref = reference(x.astype(np.float64), w.astype(np.float64))
    err = float(np.max(np.abs(y - ref)))
    out.update(max_abs_error=err, shape=[N, K, H, W], algo="IMPLICIT_GEMM",
               checksum=float(y.sum()))
    if err > 1e-3:
        return _fail(out, f"the convolution differs from numpy's by {err:.3g}")
    out["status"] = "pass"
    return out


if __name__ == "__main__":
    result = probe(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
    print(json.dumps(result), flush=True)
