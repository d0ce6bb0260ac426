"""Reading cuDNN archives: member rules, decoders, staging, and judging the whole package.

`read_package` is the one pass an install or an inspection makes over an archive.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Callable, Mapping

from cudnn_setup.archive import reader
from cudnn_setup.archive.package import Package, judge, wanted
from cudnn_setup.errors import UsageError
from cudnn_setup.facts.host import host_machine


def check_readable(path: Path) -> None:
    if not path.exists():
        raise UsageError(f"{path} does not exist", "give the path of a cuDNN archive (.tgz, .tar.xz)")
    if not path.is_file():
        raise UsageError(f"{path} is not a file", "give the path of a cuDNN archive (.tgz, .tar.xz)")


def read_package(path: Path, staging: Path, machine: str | None = None,
                 on_read: Callable[[int], None] | None = None, xz: str | None = None,
                 env: Mapping[str, str] = {}) -> Package:
    """One streaming pass over `path`, staging headers and libraries under `staging`; `xz`
    runs in `env`, the command's environment."""
    check_readable(path)
    listing = reader.read(path, staging, wanted, on_read=on_read, xz=xz, env=env)
    return judge(listing, path.name, machine or host_machine())


def inspect_archive(path: Path, work_dir: Path | None = None, machine: str | None = None,
                    xz: str | None = None, env: Mapping[str, str] = {}) -> Package:
    with tempfile.TemporaryDirectory(prefix="cudnn-setup-inspect-", dir=work_dir) as tmp:
        return read_package(path, Path(tmp), machine, xz=xz, env=env)
