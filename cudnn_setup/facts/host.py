"""The machine this runs on: its name in cuDNN archives, whether it is a Jetson, the cores and
memory this process may use, and the xz program's version."""
from __future__ import annotations

import os
import platform
import stat
from pathlib import Path
from typing import Mapping

from cudnn_setup.child import run_command
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
    """The start of a regular file, or None: absent, unreadable, a directory, or a FIFO or
    device put in its place (opened without blocking, and never read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, _READ_LIMIT)
    except OSError:
        return None
    finally:
        os.close(fd)


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
    import distro  # with the logging it sets up, for reports only (doctor), not every command

    return {"os": distro.name(pretty=True) or "unknown", "machine": host_machine()}


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, which containers narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


MEMINFO = Path("/proc/meminfo")
CGROUP = Path("/sys/fs/cgroup")  # cgroup v2: memory.max and memory.current of this process's


def available_memory(meminfo: Path = MEMINFO, cgroup: Path = CGROUP) -> int | None:
    """Bytes this process may still use: MemAvailable, or less under a cgroup limit; None when
    neither can be read."""
    free = []
    try:
        text = meminfo.read_text()
        free.append(int(text.split("MemAvailable:")[1].split()[0]) * 1024)
    except (OSError, IndexError, ValueError):
        pass
    try:
        limit = (cgroup / "memory.max").read_text().strip()
        if limit != "max":
            free.append(int(limit) - int((cgroup / "memory.current").read_text()))
    except (OSError, ValueError):
        pass
    return min(free) if free else None


# Variables through which xz takes options of its own (XZ_DEFAULTS, XZ_OPT could, say, lower
# its thread count or memory limit): never passed on to an xz the tool runs.
XZ_OPTION_VARIABLES = ("XZ_DEFAULTS", "XZ_OPT")
XZ_TIMEOUT = 60.0


def xz_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment for `xz`: the command's, without the variables that add options."""
    return {k: v for k, v in env.items() if k not in XZ_OPTION_VARIABLES}


def xz_version(xz: str, env: Mapping[str, str]) -> int | None:
    """XZ_VERSION of an xz program (50040002 for 5.4.0), as `xz --robot --version` says it in
    the command's environment; None when it cannot be run or says nothing readable."""
    done = run_command([xz, "--robot", "--version"], XZ_TIMEOUT, xz_env(env))
    if done.returncode is None or done.timed_out:
        return None
    for line in done.out.splitlines():
        key, _, value = line.partition("=")
        if key == "XZ_VERSION" and value.isdigit() and len(value) <= 12:
            return int(value)
    return None
