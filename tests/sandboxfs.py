"""Real small and read-only filesystems for tests, without root on the host: the CLI runs in a
user and mount namespace of its own (`unshare -rm`), where it may mount a tmpfs."""
from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
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
               timeout: float = 300) -> subprocess.CompletedProcess:
    """`setup` (mounts), the CLI, then `after` (e.g. cat the files to check), in one namespace.

    stdout holds the CLI's output, then a line "--after--", then what `after` printed.
    """
    script = (f'{setup} && "$0" -m cudnn_setup "$@"; rc=$?; echo --after--; {after}; '
              'exit $rc')
    return subprocess.run(["unshare", "-rm", "sh", "-c", script, sys.executable,
                           *[str(a) for a in args]], env=clean_env(home), cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)
