"""The machine this runs on, in the names cuDNN archives use."""
from __future__ import annotations

import platform

import distro


def host_machine() -> str:
    machine = platform.machine()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine.lower(), machine)


def wheel_platform_tags() -> list[str]:
    """This machine's wheel platform tags, most specific first (manylinux ones by its glibc),
    as pip computes them."""
    from packaging.tags import platform_tags
    return list(platform_tags())


def describe() -> dict:
    """The operating system and machine, for reports."""
    return {"os": distro.name(pretty=True) or "unknown", "machine": host_machine()}
