"""Which filesystem holds a path (read from /proc/self/mountinfo), and whether programs may run
from it."""
from __future__ import annotations

import os
import re
from pathlib import Path

MOUNTINFO = Path("/proc/self/mountinfo")


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def fs_type(path: Path, mountinfo: str | None = None) -> str | None:
    """The type ("ext4", "nfs4"…) of the mount that `path` lies on; None when unknown."""
    if mountinfo is None:
        try:
            mountinfo = MOUNTINFO.read_text()
        except OSError:
            return None
    target = os.path.realpath(path)
    best, best_type = "", None
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields = left.split()
        if len(fields) < 5 or not right:
            continue
        point = _unescape(fields[4])
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):  # the last of equal mounts is the one on top
            best, best_type = point, right.split()[0]
    return best_type


def allows_exec(path: Path) -> bool:
    """Whether programs may run from files under `path`: False where its filesystem is mounted
    noexec (hardened machines mount /tmp so); True where that cannot be told, so that running
    says what goes wrong."""
    try:
        return not os.statvfs(path).f_flag & os.ST_NOEXEC
    except OSError:
        return True
