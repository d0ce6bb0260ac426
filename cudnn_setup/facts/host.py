"""The machine this runs on, in the names cuDNN archives use."""
from __future__ import annotations

import platform

import distro


def host_machine() -> str:
    machine = platform.machine()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine.lower(), machine)


def describe() -> dict:
    """The operating system and machine, for reports."""
    return {"os": distro.name(pretty=True) or "unknown", "machine": host_machine()}
