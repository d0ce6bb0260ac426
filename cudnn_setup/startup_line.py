"""Theano's startup line, explained part by part ("Using gpu device 0: Tesla C2075 (CNMeM is
enabled with initial size: 95.0% of memory, cuDNN not available)").
"""
from __future__ import annotations

import re

from cudnn_setup.facts import gpus
from cudnn_setup.facts.cudnn import version_text

# Minutes per CIFAR-10 conv net run on a K20c, with and without cuDNN: what cuDNN buys.
CIFAR_WITH, CIFAR_WITHOUT = 21, 37


# Every pattern here runs over text a user pasted (any length, any bytes): each is linear, no
# two quantifiers competing for the same characters (the GPU name is taken up to "(" and
# stripped in code, not by a lazy "+?" before a "\s*"), and the message is cut to MAX_MESSAGE.
_STARTUP = re.compile(r"Using gpu device (?P<index>\d{1,4}):(?P<gpu>[^(]*)\((?P<inner>.*)\)")
_NEW_BACKEND = re.compile(r"Mapped name \S{1,200} to device (?P<dev>\S{1,200}):(?P<gpu>[^(]*)")
_CUDNN_VERSION = re.compile(r"(?:Using )?cuDNN (?:version )?(?P<v>\d{4,5})")
_CNMEM = re.compile(r"CNMeM is (enabled|disabled)(?: with initial size: (?P<pct>\d{1,3}(?:\.\d{1,6})?)% "
                    r"of memory)?")
# Theano 1.0's gpuarray backend (device=cuda): "Can not use cuDNN on context None: <why>", the
# why being dnn.dnn_available.msg (theano/gpuarray/dnn.py), which may run over lines.
_CANNOT_USE = re.compile(r"Can not use cuDNN on context (?P<ctx>\S{1,200}): (?P<why>.*)", re.S)
MAX_MESSAGE = 4096  # characters of a startup line looked at; Theano's are under 200


def _why_not_used(why: str) -> str:
    """What Theano 1.0.5's reason for not using cuDNN (dnn.py's messages) means, and the fix."""
    if why.startswith("cannot compile with cuDNN"):
        if "cannot find -lcudnn" in why:
            return ("Theano's test program could not link -lcudnn: no libcudnn.so (the unversioned "
                    "development link) in [dnn] library_path nor the linker's own directories; "
                    "`cudnn-setup theanorc` writes library_path, and `cudnn-setup verify` (its "
                    "compile check builds the same program) says what is missing")
        if "cudnn.h" in why:
            return ("Theano's test program could not find cudnn.h in [dnn] include_path (nor "
                    "[cuda] include_path); `cudnn-setup theanorc` writes the paths of the root "
                    "cuDNN was installed into, and `cudnn-setup verify` checks the header")
        error = next((ln.strip() for ln in why.splitlines()[1:] if "error" in ln), "")
        return ("Theano's test program against cuDNN (cudnn.h, -lcudnn) did not build"
                + (f" ({error[:200]})" if error else "") + "; `cudnn-setup verify`'s compile "
                "check builds the same program and says why")
    if why.startswith("cuDNN version is too old"):
        return ("Theano 1.0.5 uses cuDNN v5 to v7 only; this one is older: install a v5-v7 "
                "release built for the root's CUDA (7.6.5 for CUDA 10.x)")
    if why.startswith("Disabled by dnn.enabled flag"):
        return ("dnn.enabled=False in Theano's config or THEANO_FLAGS turns cuDNN off; remove it "
                "(`cudnn-setup doctor` shows where it is set)")
    if why.startswith("PyGPU not available"):
        return ("pygpu (libgpuarray's Python module), which Theano's GPU backend needs, is not "
                "importable: no GPU code runs, cuDNN or not; install libgpuarray and pygpu")
    if why.startswith("Not on a CUDA device"):
        return "the context is not a CUDA GPU (OpenCL, say): cuDNN runs on NVIDIA GPUs only"
    if why.startswith("Device not supported"):
        return (f"the GPU's compute capability is below {gpus.THEANO_MIN_CC}, the minimum of "
                "Theano's cuDNN support: no cuDNN install can change that")
    if why.startswith("Use cuDNN 7.0.2 or higher for Volta"):
        return ("a Volta (or newer) GPU with a cuDNN older than 7.0.2, which takes hours there: "
                "install 7.0.2 or later, up to 7.6.5")
    return "Theano's own reason, not one this tool knows; `cudnn-setup verify` checks each layer"


def explain(message: str) -> list[dict]:
    """Explain a Theano startup line, part by part."""
    parts: list[dict] = []
    text = message[:MAX_MESSAGE].strip()
    m = _STARTUP.search(text) or _NEW_BACKEND.search(text)
    gpu_name = (m["gpu"].strip() or None) if m else None
    if m and "index" in m.groupdict():
        parts.append({"part": f"Using gpu device {m['index']}", "meaning":
                      "Theano's old CUDA backend (device=gpu) picked GPU number "
                      f"{m['index']}; the backend and its messages date from Theano 0.7–0.9"})
    if gpu_name:
        cc = gpus.lookup(gpu_name)
        meaning = f"the GPU is a {gpu_name}"
        if cc:
            meaning += f", compute capability {cc}"
            if gpus.cc_tuple(cc) < gpus.cc_tuple(gpus.THEANO_MIN_CC):
                meaning += (f": older than {gpus.THEANO_MIN_CC}, the minimum of cuDNN and of "
                            "Theano's cuDNN support, so cuDNN can never be used on it")
        else:
            meaning += " (not in this tool's table of GPUs)"
        parts.append({"part": gpu_name, "meaning": meaning, "compute_capability": cc})
    inner = m["inner"] if m and "inner" in m.groupdict() else text
    cnmem = _CNMEM.search(inner)
    if cnmem:
        if cnmem.group(1) == "enabled":
            pct = cnmem["pct"]
            meaning = ("CNMeM is NVIDIA's memory pool library: Theano reserves GPU memory once and "
                       "hands it out itself, which is much faster than asking the driver for every "
                       "allocation")
            if pct:
                meaning += (f"; {pct}% means it grabbed {pct}% of the GPU's memory at start "
                            "(lib.cnmem=0.95), leaving little for other programs on that GPU")
        else:
            meaning = "Theano allocates GPU memory from the driver each time (lib.cnmem=0)"
        parts.append({"part": cnmem.group(0), "meaning": meaning})
    if re.search(r"cuDNN not available", inner):
        reason = "Theano could not use cuDNN"
        cc = next((p.get("compute_capability") for p in parts if p.get("compute_capability")), None)
        if cc and gpus.cc_tuple(cc) < gpus.cc_tuple(gpus.THEANO_MIN_CC):
            reason += (f": this GPU has compute capability {cc} and Theano's cuDNN path needs "
                       f"{gpus.THEANO_MIN_CC} or newer, so no cuDNN install can change that")
        else:
            reason += (": it could not find, compile against or load cuDNN (cudnn.h and libcudnn "
                       "not found with [dnn] include_path/library_path, or a version Theano does "
                       "not support); run `cudnn-setup verify` to find which")
        parts.append({"part": "cuDNN not available", "meaning": reason + ". Cost: convolutions run "
                      "without cuDNN (Theano's own GEMM-based kernels), e.g. a CIFAR-10 conv net "
                      f"took {CIFAR_WITHOUT} min instead of {CIFAR_WITH} on a K20c; a plain MLP "
                      "loses nothing, having no convolutions"})
    v = _CUDNN_VERSION.search(inner)
    if v:
        number = int(v["v"])
        parts.append({"part": v.group(0), "meaning": f"Theano uses cuDNN {version_text(number)} "
                      f"(CUDNN_VERSION {number}): convolutions go through cuDNN"})
    cannot = _CANNOT_USE.search(text)
    if cannot:
        why = cannot["why"].strip()
        parts.append({"part": f"Can not use cuDNN on context {cannot['ctx']}", "meaning":
                      "Theano 1.0's GPU backend (device=cuda) will not use cuDNN on this GPU "
                      "context: convolutions run without it (Theano's own GEMM-based kernels)"})
        parts.append({"part": why.splitlines()[0] if why else why,
                      "meaning": _why_not_used(why)})
    if "Mixed dnn version" in text:
        parts.append({"part": "Mixed dnn version", "meaning": "the cudnn.h Theano compiled "
                      "against and the libcudnn it loaded are different versions; reinstall one "
                      "cuDNN (`cudnn-setup install`) and remove or shadow the other"})
    if not parts:
        parts.append({"part": text, "meaning": "not a Theano startup line this tool knows"})
    return parts
