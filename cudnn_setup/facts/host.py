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


_WHEEL_ARCH = {"linux-x86_64": "x86_64", "linux-sbsa": "aarch64", "linux-aarch64": "aarch64"}


def wheel_tags_for(platform: str, machine_tags: list[str]) -> list[str]:
    """The wheel platform tags a build for NVIDIA's `platform` key may carry: this machine's
    own (`machine_tags`) when it is that machine's architecture, else every manylinux tag of
    that architecture (a mirror built here for another fleet)."""
    arch = _WHEEL_ARCH.get(platform)
    if arch is None:
        return []
    if any(t.endswith("_" + arch) for t in machine_tags):
        return machine_tags
    return ([f"manylinux_2_{minor}_{arch}" for minor in range(45, 16, -1)]
            + [f"manylinux2014_{arch}", f"linux_{arch}"])


def describe() -> dict:
    """The operating system and machine, for reports."""
    return {"os": distro.name(pretty=True) or "unknown", "machine": host_machine()}
