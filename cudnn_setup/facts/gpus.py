"""GPU names and their compute capabilities: the one table the tool knows them from.

Which compute capabilities a cuDNN release supports is facts/gpu_support.py's table.
"""
from __future__ import annotations

import re

# Marketing name (as the driver reports it, without "NVIDIA ") → compute capability.
COMPUTE_CAPABILITY: dict[str, str] = {
    "Tesla C2050": "2.0", "Tesla C2070": "2.0", "Tesla C2075": "2.0", "Tesla M2090": "2.0",
    "GeForce GTX 480": "2.0", "GeForce GTX 580": "2.0", "GeForce GT 630": "2.1",
    "Tesla K10": "3.0", "GeForce GTX 680": "3.0", "GeForce GTX 770": "3.0",
    "Tesla K20c": "3.5", "Tesla K20m": "3.5", "Tesla K20X": "3.5", "Tesla K40c": "3.5",
    "Tesla K40m": "3.5", "GeForce GTX TITAN": "3.5", "GeForce GTX 780": "3.5", "Tesla K80": "3.7",
    "GeForce GTX 750 Ti": "5.0", "GeForce GTX 970": "5.2", "GeForce GTX 980": "5.2",
    "GeForce GTX TITAN X": "5.2", "Tesla M40": "5.2", "Tesla M60": "5.2",
    "Tesla P100-PCIE-16GB": "6.0", "Tesla P100-SXM2-16GB": "6.0", "Tesla P4": "6.1",
    "Tesla P40": "6.1", "GeForce GTX 1080": "6.1", "GeForce GTX 1080 Ti": "6.1",
    "TITAN Xp": "6.1", "Tesla V100-SXM2-16GB": "7.0", "Tesla V100-PCIE-16GB": "7.0",
    "TITAN V": "7.0", "Tesla T4": "7.5", "GeForce RTX 2080 Ti": "7.5", "A100-SXM4-40GB": "8.0",
    "A100-SXM4-80GB": "8.0", "A100 80GB PCIe": "8.0", "A10": "8.6", "GeForce RTX 3090": "8.6",
    "L4": "8.9", "L40S": "8.9", "GeForce RTX 4090": "8.9", "H100 80GB HBM3": "9.0",
    "H100 PCIe": "9.0", "H200": "9.0", "B200": "10.0", "GeForce RTX 5090": "12.0",
}

THEANO_MIN_CC = "3.0"  # theano/gpuarray/dnn.py refuses older GPUs


def cc_tuple(cc: str) -> tuple[int, int]:
    major, minor = cc.split(".")
    return int(major), int(minor)


def lookup(name: str) -> str | None:
    """Compute capability of a GPU from its name, as drivers and Theano print it."""
    clean = re.sub(r"^NVIDIA\s+", "", name.strip())
    if clean in COMPUTE_CAPABILITY:
        return COMPUTE_CAPABILITY[clean]
    for known, cc in sorted(COMPUTE_CAPABILITY.items(), key=lambda kv: -len(kv[0])):
        if clean.lower().startswith(known.lower()):
            return cc
    return None

