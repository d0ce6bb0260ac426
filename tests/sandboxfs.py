"""Real small and read-only filesystems for tests: the CLI runs in a mount namespace of its own,
where it may mount them, and they vanish with it.

* tmpfs: in a user and mount namespace (`unshare -rm`), which needs no root on the host;
* ext4 on a loop device (a disk filesystem, where staging writes libraries with O_DIRECT): in a
  mount namespace (`unshare -m`), which needs root, a free loop device and mkfs.ext4.

Where neither can be mounted, the tests that need one skip, saying why.
"""
from __future__ import annotations

import functools
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import REPO, clean_env


def _usable() -> bool:
    if shutil.which("unshare") is None:
        return False
    done = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs tmpfs /mnt"],
                          capture_output=True)
    return done.returncode == 0


needs_namespaces = pytest.mark.skipif(not _usable(), reason="no user/mount namespaces here")


def full_tmpfs(mount: Path, files: dict[str, bytes]) -> str:
    """Shell lines: a 256 KiB tmpfs at `mount` holding `files`, then filled to the last byte."""
    lines = [f"mount -t tmpfs -o size=256k tmpfs {shlex.quote(str(mount))}"]
    for name, data in files.items():
        lines.append(f"printf %s {shlex.quote(data.decode())} > {shlex.quote(str(mount / name))}")
    lines.append(f"(dd if=/dev/zero of={shlex.quote(str(mount / 'filler'))} bs=4096 "
                 "2>/dev/null || true)")
    return " && ".join(lines)


def read_only_tmpfs(mount: Path, files: dict[str, bytes]) -> str:
    """Shell lines: a tmpfs at `mount` holding `files`, then remounted read-only."""
    lines = [f"mount -t tmpfs tmpfs {shlex.quote(str(mount))}"]
    for name, data in files.items():
        lines.append(f"printf %s {shlex.quote(data.decode())} > {shlex.quote(str(mount / name))}")
    lines.append(f"mount -o remount,ro {shlex.quote(str(mount))}")
    return " && ".join(lines)


def run_cli_in(setup: str, args: list, home: Path, after: str = "true",
               timeout: float = 300, user_namespace: bool = True) -> subprocess.CompletedProcess:
    """`setup` (mounts), the CLI, then `after` (e.g. cat the files to check), in one namespace
    (with `user_namespace` False, a mount namespace only: real root, as loop mounts need).

    stdout holds the CLI's output, then a line "--after--", then what `after` printed.
    """
    script = (f'{setup} && "$0" -m cudnn_setup "$@"; rc=$?; echo --after--; {after}; '
              'exit $rc')
    return subprocess.run(["unshare", "-rm" if user_namespace else "-m", "sh", "-c", script,
                           sys.executable, *[str(a) for a in args]], env=clean_env(home),
                          cwd=REPO, capture_output=True, text=True, timeout=timeout)


# --- a filesystem of a given size, nearly full ---------------------------------------------------

SMALL_FS = ("tmpfs", "ext4")


def _why_not(cmd: list[str]) -> str | None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    return None if done.returncode == 0 else (done.stderr.strip() or f"exit {done.returncode}")


@functools.lru_cache(maxsize=None)
def cannot_mount(kind: str) -> str | None:
    """Why a small filesystem of `kind` cannot be mounted here (tried for real); None if it can."""
    if shutil.which("unshare") is None:
        return "no unshare(1) here"
    if kind == "tmpfs":
        why = _why_not(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"])
        return f"cannot mount a tmpfs in a user and mount namespace here ({why})" if why else None
    if os.geteuid() != 0:
        return "an ext4 image is loop-mounted, which needs root"
    if shutil.which("mkfs.ext4") is None:
        return "no mkfs.ext4 here"
    with tempfile.TemporaryDirectory() as tmp:
        why = _why_not(["unshare", "-m", "sh", "-c", _ext4_lines(Path(tmp) / "img",
                                                               Path(tmp), 4096)])
    return f"cannot loop-mount an ext4 image here ({why})" if why else None


def require(kind: str) -> None:
    """Skip the calling test, saying why, where a `kind` filesystem cannot be mounted."""
    why = cannot_mount(kind)
    if why:
        pytest.skip(f"a real {kind} filesystem is needed: {why}")


def _ext4_lines(image: Path, mount: Path, size_kib: int) -> str:
    q = shlex.quote
    # -m 0: no blocks reserved for root, so what df calls free is all there is, even for root
    return (f"truncate -s {size_kib}k {q(str(image))} && "
            f"mkfs.ext4 -q -F -m 0 -b 4096 {q(str(image))} && "
            f"mount -o loop {q(str(image))} {q(str(mount))}")


def nearly_full(kind: str, mount: Path, size_kib: int, copy: Path, free_kib: int) -> str:
    """Shell lines: a `kind` filesystem of `size_kib` at `mount` holding a copy of `copy` (as
    `mount/<its name>`), then filled until only `free_kib` are left. An ext4 image lies beside
    `mount`."""
    q = shlex.quote
    if kind == "tmpfs":
        lines = [f"mount -t tmpfs -o size={size_kib}k tmpfs {q(str(mount))}"]
    else:
        lines = [_ext4_lines(mount.with_name(mount.name + ".img"), mount, size_kib)]
    lines.append(f"cp -a {q(str(copy))} {q(str(mount / copy.name))}")
    lines.append(f"avail=$(df -k --output=avail {q(str(mount))} | tail -n 1)")
    lines.append(f"dd if=/dev/zero of={q(str(mount / 'filler'))} bs=1k "
                 f"count=$((avail - {free_kib})) 2>/dev/null")
    return " && ".join(lines)


def tree_listing(path: Path) -> str:
    """Shell lines printing every entry under `path` (type, mode, name, link target) and every
    file's sha256, relative to it: equal output, equal trees."""
    q = shlex.quote(str(path))
    return (f"(cd {q} && find . -printf '%y %m %p %l\\n' | LC_ALL=C sort && "
            "find . -type f -exec sha256sum {} + | LC_ALL=C sort)")
