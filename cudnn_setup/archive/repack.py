"""An nvidia-cudnn-cuNN wheel repacked as an archive in NVIDIA's layout, for a mirror.

The members are the ones `archive/wheel.layout` gives an install (include/, lib/ under full
versions, the SONAME and development links), written as a gzip'd tar under a name that says it
is a repack (`cudnn-<platform>-<version>_cuda<N>-repack.tar.gz`), never NVIDIA's archive name.
The caller writes it under a temporary name and renames it once it has been read back.
"""
from __future__ import annotations

import gzip
import hashlib
import tarfile
import zipfile
import zlib
from pathlib import Path

from cudnn_setup.archive import wheel as W
from cudnn_setup.archive.problems import Problem
from cudnn_setup.archive.rules import Limits, MemberRules, Stop
from cudnn_setup.errors import ArchiveRejected
from cudnn_setup.text import escape

MTIME = 0  # reproducible: the same wheel gives the same bytes
# gzip level 1: on 48 MiB of 9.28's libcudnn_heuristic.so.9 (a loaded 2-core machine) level 1
# made 35.9% of the size in 3.6 s, level 6 32.2% in 17.4 s, level 9 31.2% in 120 s; a tenth
# more bytes on the mirror is worth a repack five times as fast
COMPRESSLEVEL = 1


def repack_name(platform: str, version: str, cuda_major: int) -> str:
    return f"cudnn-{platform}-{version}_cuda{cuda_major}-repack.tar.gz"


class _Hashing:
    """A file being written, hashed (sha256 and md5) on the way."""

    def __init__(self, f):
        self.f = f
        self.sha256 = hashlib.sha256()
        self.md5 = hashlib.md5()
        self.size = 0

    def write(self, data) -> int:
        self.sha256.update(data)
        self.md5.update(data)
        self.size += len(data)
        return self.f.write(data)

    def flush(self) -> None:
        self.f.flush()


def repack(wheel_path: Path, out: Path, limits: Limits | None = None) -> tuple[str, str, int]:
    """Write `out` (a new file) from the wheel; (sha256, md5, size) of what was written.
    A wheel that `layout` or `MemberRules` finds fault with is refused (exit 3)."""
    name = W.parse_name(wheel_path.name)
    if name is None:
        raise ArchiveRejected(f"{escape(wheel_path.name)} is not an nvidia-cudnn-cuNN wheel",
                              "repack NVIDIA's cuDNN wheels only")
    try:
        return _repack(wheel_path, name, out, MemberRules(limits or Limits()))
    except Stop as stop:
        raise ArchiveRejected(f"{escape(wheel_path.name)}: {stop.problem.message}",
                              stop.problem.hint) from None
    except (zipfile.BadZipFile, zlib.error, EOFError, tarfile.TarError, NotImplementedError,
            RuntimeError, UnicodeDecodeError) as exc:  # names not UTF-8 under the UTF-8 flag
        raise ArchiveRejected(f"{escape(wheel_path.name)} is damaged ({escape(str(exc)[:160])})",
                              "download it again") from None


def _repack(wheel_path: Path, name: W.WheelName, out: Path,
            rules: MemberRules) -> tuple[str, str, int]:
    with open(wheel_path, "rb") as f, open(out, "xb") as raw:
        sink = _Hashing(raw)
        z = W.open_zip(f, rules.limits)
        with gzip.GzipFile(filename="", mode="wb", fileobj=sink, mtime=MTIME,
                           compresslevel=COMPRESSLEVEL) as gz, \
                tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tar:
            for item in W.layout(z, name):
                if isinstance(item, Problem):
                    raise ArchiveRejected(f"{escape(wheel_path.name)}: {item.message}", item.hint)
                info, entry = item
                verdict = rules.admit(info)
                if isinstance(verdict, Problem):
                    raise ArchiveRejected(f"{escape(wheel_path.name)}: {verdict.message}",
                                          verdict.hint)
                info.mtime, info.uid, info.gid, info.uname, info.gname = MTIME, 0, 0, "root", "root"
                if entry is None:
                    tar.addfile(info)
                    continue
                with z.open(entry) as data:
                    tar.addfile(info, data)
                    W.read_to_end(data, entry.filename)
        raw.flush()
    return sink.sha256.hexdigest(), sink.md5.hexdigest(), sink.size
