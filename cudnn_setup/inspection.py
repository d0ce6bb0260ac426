"""`inspect`: read an archive once and judge it, installing nothing."""
from __future__ import annotations

import platform
import tempfile
from pathlib import Path
from typing import Callable

from cudnn_setup import archive
from cudnn_setup.errors import UsageError
from cudnn_setup.package import Package, judge, wanted


def host_machine() -> str:
    machine = platform.machine()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine.lower(), machine)


def check_readable(path: Path) -> None:
    if not path.exists():
        raise UsageError(f"{path} does not exist", "give the path of a cuDNN archive (.tgz, .tar.xz)")
    if not path.is_file():
        raise UsageError(f"{path} is not a file", "give the path of a cuDNN archive (.tgz, .tar.xz)")


def read_package(path: Path, staging: Path, machine: str | None = None,
                 on_read: Callable[[int], None] | None = None) -> Package:
    """One streaming pass over `path`, staging headers and libraries under `staging`."""
    check_readable(path)
    listing = archive.read(path, staging, wanted, on_read=on_read)
    return judge(listing, path.name, machine or host_machine())


def inspect_archive(path: Path, work_dir: Path | None = None, machine: str | None = None) -> Package:
    with tempfile.TemporaryDirectory(prefix="cudnn-setup-inspect-", dir=work_dir) as tmp:
        return read_package(path, Path(tmp), machine)
