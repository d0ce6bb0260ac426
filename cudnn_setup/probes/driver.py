"""Report the NVIDIA driver and every GPU it sees: `python driver.py [--nvml | --no-nvml]
[--no-smi]`. With --nvml only NVML is asked (its answer, or status "error" and why); with
--no-nvml NVML is not touched at all: a hung NVML (a GPU fallen off the bus) then cannot hold
this child, and the parent asks NVML alone under a short limit first.

NVML (libnvidia-ml.so.1) is asked first: the driver's release, the newest CUDA it runs
(nvmlSystemGetCudaDriverVersion_v2) and each GPU's name and compute capability, in tens of
milliseconds. Where NVML is absent, fails, or cannot answer as CUDA would (CUDA_VISIBLE_DEVICES
hides GPUs from CUDA, not from NVML), the CUDA driver API in libcuda.so.1 answers: its
cuDriverGetVersion() (no context needed), cuInit (a quarter of a second on a GPU machine) and
cuDeviceGetName / cuDeviceGetAttribute(75, 76); the release then comes from NVML or
/proc/driver/nvidia/version. nvidia-smi is asked only when libcuda cannot be used. Without a
driver or a GPU: status "skip" and why.

Prints one JSON line. Standard library only.
"""
import ctypes
import os
import re
import subprocess
import sys

CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
CUDA_ERROR_NO_DEVICE = 100
MAX_GPUS = 64
SMI_TIMEOUT = 30
NVML_SUCCESS = 0
NVML_NAME_SIZE = 96  # NVML_DEVICE_NAME_V2_BUFFER_SIZE
# Set, these make CUDA see other GPUs (or in another order) than NVML lists: CUDA is asked.
CUDA_DEVICE_ENV = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")


def _text(raw):
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)


def driver_release(nvml=True):
    """The driver's release number, from NVML (unless `nvml` is False) or the kernel module."""
    release = _nvml_release() if nvml else None
    if release:
        return release, "NVML"
    try:
        with open("/proc/driver/nvidia/version", "rb") as f:
            m = re.search(rb"Kernel Module\s+(?:for \S+\s+)?(\d+\.\d+(?:\.\d+)?)", f.read(4096))
            if m:
                return _text(m.group(1)), "/proc/driver/nvidia/version"
    except OSError:
        pass
    return None, None


def _nvml_release():
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        if nvml.nvmlInit_v2() == 0:
            buf = ctypes.create_string_buffer(96)
            rc = nvml.nvmlSystemGetDriverVersion(buf, ctypes.c_uint(len(buf)))
            nvml.nvmlShutdown()
            if rc == 0 and buf.value:
                return _text(buf.value)
    except (OSError, AttributeError):
        pass
    return None


def from_nvml(out, environ=os.environ):
    """Everything from NVML, into `out` only when all of it was answered; else why not."""
    if any(name in environ for name in CUDA_DEVICE_ENV):
        return "CUDA_VISIBLE_DEVICES or CUDA_DEVICE_ORDER is set"
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        init, shutdown = nvml.nvmlInit_v2, nvml.nvmlShutdown
    except (OSError, AttributeError) as exc:
        return f"NVML cannot be used ({exc})"
    rc = init()
    if rc != NVML_SUCCESS:
        return f"nvmlInit_v2 failed with NVML error {rc}"
    try:
        return _ask_nvml(nvml, out)
    except AttributeError as exc:  # an NVML older than these entry points
        return f"NVML lacks a function ({exc})"
    finally:
        shutdown()


def _ask_nvml(nvml, out):
    release = ctypes.create_string_buffer(96)
    cuda, count = ctypes.c_int(), ctypes.c_uint()
    if nvml.nvmlSystemGetDriverVersion(release, ctypes.c_uint(len(release))) != NVML_SUCCESS:
        return "nvmlSystemGetDriverVersion failed"
    if nvml.nvmlSystemGetCudaDriverVersion_v2(ctypes.byref(cuda)) != NVML_SUCCESS:
        return "nvmlSystemGetCudaDriverVersion_v2 failed"
    if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != NVML_SUCCESS:
        return "nvmlDeviceGetCount_v2 failed"
    gpus = []
    for i in range(min(count.value, MAX_GPUS)):
        handle = ctypes.c_void_p()
        name = ctypes.create_string_buffer(NVML_NAME_SIZE)
        major, minor = ctypes.c_int(), ctypes.c_int()
        if nvml.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(i), ctypes.byref(handle)) \
                != NVML_SUCCESS \
                or nvml.nvmlDeviceGetName(handle, name, ctypes.c_uint(len(name))) != NVML_SUCCESS \
                or nvml.nvmlDeviceGetCudaComputeCapability(handle, ctypes.byref(major),
                                                            ctypes.byref(minor)) != NVML_SUCCESS:
            return f"NVML cannot describe GPU {i}"
        gpus.append({"index": i, "name": _text(name.value)[:200],
                     "compute_capability": f"{major.value}.{minor.value}"})
    out.update(driver_version=_text(release.value), driver_version_from="NVML",
               cuda_driver_version=cuda.value,
               cuda=f"{cuda.value // 1000}.{cuda.value % 1000 // 10}",
               found_via="libnvidia-ml.so.1", gpus=gpus, status="pass" if gpus else "skip")
    if not gpus:
        out["reason"] = "the driver sees no GPU"
    return None


def from_libcuda(out):
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        return f"no NVIDIA driver: libcuda.so.1 cannot be loaded ({exc})"
    version = ctypes.c_int()
    if cuda.cuDriverGetVersion(ctypes.byref(version)) == 0:
        out["cuda_driver_version"] = version.value
        out["cuda"] = f"{version.value // 1000}.{version.value % 1000 // 10}"
        out["found_via"] = "libcuda.so.1"
    rc = cuda.cuInit(0)
    if rc != 0:
        out["status"] = "skip"
        out["reason"] = ("the driver sees no CUDA-capable GPU" if rc == CUDA_ERROR_NO_DEVICE
                         else f"cuInit failed with CUDA error {rc}")
        return None
    count = ctypes.c_int()
    if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value <= 0:
        out["status"], out["reason"] = "skip", "the driver sees no GPU"
        return None
    for i in range(min(count.value, MAX_GPUS)):
        dev = ctypes.c_int()
        if cuda.cuDeviceGet(ctypes.byref(dev), i) != 0:
            continue
        name = ctypes.create_string_buffer(256)
        cuda.cuDeviceGetName(name, 256, dev)
        major, minor = ctypes.c_int(), ctypes.c_int()
        cuda.cuDeviceGetAttribute(ctypes.byref(major), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
        cuda.cuDeviceGetAttribute(ctypes.byref(minor), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
        out["gpus"].append({"index": i, "name": _text(name.value)[:200],
                            "compute_capability": f"{major.value}.{minor.value}"})
    out["status"] = "pass"
    return None


def from_smi(out, smi="nvidia-smi"):
    """Fallback: nvidia-smi's CSV query (compute_cap needs a 510+ driver) and its header."""
    try:
        done = subprocess.run([smi, "--query-gpu=name,compute_cap,driver_version",
                               "--format=csv,noheader"], capture_output=True, timeout=SMI_TIMEOUT)
        header = subprocess.run([smi], capture_output=True, timeout=SMI_TIMEOUT)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"nvidia-smi cannot be run ({exc})"
    if done.returncode != 0:
        return f"nvidia-smi failed: {_text(done.stdout + done.stderr).strip()[:300]}"
    for i, line in enumerate(_text(done.stdout).splitlines()[:MAX_GPUS]):
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3 and re.fullmatch(r"\d+\.\d+", parts[1]):
            out["gpus"].append({"index": i, "name": parts[0][:200], "compute_capability": parts[1]})
            out["driver_version"] = parts[2]
            out["driver_version_from"] = "nvidia-smi"
    m = re.search(r"CUDA Version:\s*(\d+)\.(\d+)", _text(header.stdout))
    if m:
        out["cuda_driver_version"] = int(m.group(1)) * 1000 + int(m.group(2)) * 10
        out["cuda"] = f"{m.group(1)}.{m.group(2)}"
    out["found_via"] = "nvidia-smi"
    out["status"] = "pass" if out["gpus"] else "skip"
    if not out["gpus"]:
        out["reason"] = "nvidia-smi lists no GPU"
    return None


def main(argv):
    out = {"status": None, "gpus": [], "cuda_driver_version": None, "cuda": None,
           "driver_version": None, "found_via": None}
    asked = "--no-nvml" not in argv
    if asked:
        why = from_nvml(out)
        if why is None:
            return out
        if "--nvml" in argv:
            out["status"], out["reason"] = "error", why
            release, _ = driver_release()
            out["driver_version"] = release  # for the parent, which asks CUDA next
            return out
    release, release_from = driver_release(nvml=asked)
    if release:
        out["driver_version"], out["driver_version_from"] = release, release_from
    try:
        why = from_libcuda(out)
    except AttributeError as exc:  # a libcuda.so.1 without the driver API's entry points
        why = f"libcuda.so.1 lacks a driver API function ({exc})"
    if why is not None:
        smi_why = None if "--no-smi" in argv else from_smi(out)
        if out["status"] is None:
            out["status"] = "skip"
            out["reason"] = why + (f"; {smi_why}" if smi_why else "")
    return out


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # even under PYTHONSAFEPATH
    from answer import emit

    emit(lambda: main(sys.argv[1:]))
