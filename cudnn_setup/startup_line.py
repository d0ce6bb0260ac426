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
MAX_MESSAGE = 4096  # characters of a startup line looked at; Theano's are under 200


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
    if "Mixed dnn version" in text:
        parts.append({"part": "Mixed dnn version", "meaning": "the cudnn.h Theano compiled "
                      "against and the libcudnn it loaded are different versions; reinstall one "
                      "cuDNN (`cudnn-setup install`) and remove or shadow the other"})
    if not parts:
        parts.append({"part": text, "meaning": "not a Theano startup line this tool knows"})
    return parts
