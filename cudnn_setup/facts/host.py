"""The machine this runs on, in the names cuDNN archives use."""
from __future__ import annotations

import platform
from pathlib import Path

import distro

from cudnn_setup.text import escape

# What marks a Jetson (NVIDIA Tegra SoC): L4T's release file, written by every JetPack
# ("# R36 (release), REVISION: 4.0, …"), or the device tree's compatible list, NUL-separated
# ("nvidia,p3737-0000+p3701-0000\0nvidia,tegra234\0"), which also holds on a Jetson running
# another distribution. Both are read below a root directory the caller gives (tests: a fake one).
TEGRA_RELEASE = "etc/nv_tegra_release"
DEVICE_TREE_COMPATIBLE = "proc/device-tree/compatible"
_READ_LIMIT = 4096  # both files are a line or two


def host_machine() -> str:
    machine = platform.machine()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine.lower(), machine)


def _head(path: Path) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read(_READ_LIMIT)
    except OSError:  # absent, unreadable, a directory: no evidence
        return None


def tegra_evidence(root: Path) -> str | None:
    """What shows that the machine whose filesystem starts at `root` is a Jetson, or None.

    The release file counts when it names an L4T release (`# R<n>`); the device tree when one
    of its compatible strings starts with `nvidia,tegra`. The answer quotes what was read
    (bounded, escaped), for `list` to say why it picked the Jetson builds."""
    release = _head(root / TEGRA_RELEASE)
    if release is not None:
        first = release.split(b"\n", 1)[0].decode("utf-8", "replace").strip()
        if first.startswith("# R") and first[3:4].isdigit():
            return f"/{TEGRA_RELEASE}: {escape(first.split(',', 1)[0][2:])[:40]}"
    compatible = _head(root / DEVICE_TREE_COMPATIBLE)
    if compatible is not None:
        for entry in compatible.split(b"\0"):
            text = entry.decode("ascii", "replace").strip()
            if text.startswith("nvidia,tegra"):
                return f"device tree compatible {escape(text)[:40]}"
    return None



def describe() -> dict:
    """The operating system and machine, for reports."""
    return {"os": distro.name(pretty=True) or "unknown", "machine": host_machine()}
