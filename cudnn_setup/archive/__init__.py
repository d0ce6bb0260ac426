"""Reading cuDNN archives: member rules, decoders, staging, and judging the whole package.

`read_package` is the one pass an install or an inspection makes over an archive.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Mapping

from cudnn_setup.archive import reader, wheel
from cudnn_setup.archive.listing import Progress
from cudnn_setup.archive.package import Package, judge, wanted
from cudnn_setup.digest import SHA256
from cudnn_setup.errors import UsageError
from cudnn_setup.facts import cudnn as gen
from cudnn_setup.facts.host import host_machine
from cudnn_setup.text import show_path


def check_readable(path: Path) -> None:
    if not path.exists():
        raise UsageError(f"{show_path(path)} does not exist", "give the path of a cuDNN archive (.tgz, .tar.xz)")
    if not path.is_file():
        raise UsageError(f"{show_path(path)} is not a file", "give the path of a cuDNN archive (.tgz, .tar.xz)")


def read_package(path: Path, staging: Path, machine: str | None = None,
                 on_read: Progress | None = None, xz: str | None = None,
                 env: Mapping[str, str] = {}, expected_sha256: str | None = None,
                 content_hash: str = SHA256, source: reader.Growing | None = None) -> Package:
    """One streaming pass over `path`, staging headers and libraries under `staging`; `xz`
    runs in `env`, the command's environment. An nvidia-cudnn-cuNN wheel is read as the
    archive NVIDIA made of the same files (archive/wheel.py); `expected_sha256` lets a wheel
    that does not match stop before it is placed. `content_hash`: what each member is hashed
    with (digest.content_hash for an install; sha256, which `inspect` shows, by default).
    `source`: the archive as it arrives, read instead of the file at `path`, which is not
    there yet (a wheel's members as their bytes come: archive/wheel_stream.py)."""
    if source is None:
        check_readable(path)
    if wheel.is_wheel(path) and source is not None:
        from cudnn_setup.archive import wheel_stream

        listing, name = wheel_stream.read(path, staging, wanted, source,
                                          content_hash=content_hash)
        name_facts: gen.NameFacts | None = name.name_facts()
    elif wheel.is_wheel(path):
        listing, name = wheel.read(path, staging, wanted, on_read=on_read,
                                   expected_sha256=expected_sha256, content_hash=content_hash)
        name_facts = name.name_facts()
    else:
        listing = reader.read(path, staging, wanted, on_read=on_read, xz=xz, env=env,
                              content_hash=content_hash, source=source)
        name_facts = None
    try:
        return judge(listing, path.name, machine or host_machine(), name_facts)
    finally:
        if listing.facts is not None:
            listing.facts.close()


def inspect_archive(path: Path, work_dir: Path | None = None, machine: str | None = None,
                    xz: str | None = None, env: Mapping[str, str] = {}) -> Package:
    """Read and judge `path` (an archive or an nvidia-cudnn-cuNN wheel) in a temporary dir."""
    with tempfile.TemporaryDirectory(prefix="cudnn-setup-inspect-", dir=work_dir) as tmp:
        return read_package(path, Path(tmp), machine, xz=xz, env=env)
