"""The system's dynamic loader: where it looks, what its cache holds, and keeping it current."""
from __future__ import annotations

import glob
import os
import re
import shutil
from pathlib import Path
from typing import Mapping

from cudnn_setup.atomic import write_atomic
from cudnn_setup.child import run_command
from cudnn_setup.facts.cudnn import library_file_version

# Where glibc's ld.so looks without being told (its "trusted" directories).
DEFAULT_DIRS = ("/lib", "/usr/lib", "/lib64", "/usr/lib64", "/lib/x86_64-linux-gnu",
                "/usr/lib/x86_64-linux-gnu")
CONF_NAME = "cudnn-setup.conf"
_CACHE_LINE = re.compile(r"^\s*(?P<name>\S+)\s+\((?P<flags>[^)]*)\)\s+=>\s+(?P<path>\S+)\s*$")


def conf_dirs(conf: Path = Path("/etc/ld.so.conf"), _seen: set | None = None) -> list[str]:
    """Directories listed in ld.so.conf, following `include` lines like ldconfig does."""
    seen = _seen if _seen is not None else set()
    if str(conf) in seen or not conf.is_file():
        return []
    seen.add(str(conf))
    out: list[str] = []
    try:
        text = conf.read_text(errors="replace")
    except OSError:  # ldconfig skips what it cannot read; so does the picture drawn from it
        return []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("include "):
            pattern = line.split(None, 1)[1]
            if not os.path.isabs(pattern):
                pattern = str(conf.parent / pattern)
            for inc in sorted(glob.glob(pattern)):
                out += conf_dirs(Path(inc), seen)
        elif not line.startswith("hwcap "):
            out.append(line)
    return out


def search_dirs(conf: Path = Path("/etc/ld.so.conf")) -> list[str]:
    dirs = conf_dirs(conf) + list(DEFAULT_DIRS)
    return list(dict.fromkeys(os.path.realpath(d) for d in dirs))


def on_loader_path(lib_dir: Path, conf: Path = Path("/etc/ld.so.conf")) -> bool:
    return os.path.realpath(lib_dir) in search_dirs(conf)


def ld_library_path_line(lib_dir: Path) -> str:
    return f'export LD_LIBRARY_PATH={lib_dir}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}'


def ldconfig_binary() -> str | None:
    return shutil.which("ldconfig") or next(
        (p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.access(p, os.X_OK)), None)


def run_ldconfig(args: tuple[str, ...] = ()) -> tuple[bool, str]:
    binary = ldconfig_binary()
    if binary is None:
        return False, "ldconfig not found"
    done = run_command([binary, *args], 120)
    return done.ok, done.text()


def write_conf(conf_dir: Path, lib_dir: Path) -> Path:
    path = conf_dir / CONF_NAME
    text = f"# written by cudnn-setup: the CUDA root holding cuDNN\n{lib_dir}\n"
    write_atomic(path, os.fsencode(text), 0o644)
    return path


def remove_conf(conf_dir: Path, lib_dir: Path) -> bool:
    """Drop the file write_conf wrote, if it registers `lib_dir`; True when it did."""
    path = conf_dir / CONF_NAME
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return False
    if str(lib_dir) not in [line.strip() for line in lines]:
        return False
    path.unlink()
    return True


def cache_entries(name_prefix: str = "libcudnn", ldconfig_args: tuple[str, ...] = ("-p",)) \
        -> list[tuple[str, str]]:
    """(soname, path) pairs from the loader cache (`ldconfig -p`) for names with the prefix."""
    ok, out = run_ldconfig(ldconfig_args)
    if not ok:
        return []
    entries = []
    for line in out.splitlines():
        m = _CACHE_LINE.match(line)
        if m and m["name"].startswith(name_prefix):
            entries.append((m["name"], m["path"]))
    return entries


def _resolve_version(path: Path) -> str | None:
    return library_file_version(os.path.basename(os.path.realpath(path)))


def copies_of(name: str, env: Mapping[str, str], conf: Path = Path("/etc/ld.so.conf"),
              cache: list[tuple[str, str]] | None = None) -> list[dict]:
    """Every place the loader would consider for `name`, in its search order."""
    found: list[dict] = []
    seen: set[str] = set()

    def add(path: Path, via: str) -> None:
        real = os.path.realpath(path)
        if os.path.exists(path) and real not in seen:
            seen.add(real)
            found.append({"path": str(path), "real": real, "via": via,
                          "version": _resolve_version(path)})

    for d in [d for d in env.get("LD_LIBRARY_PATH", "").split(":") if d]:
        add(Path(d) / name, "LD_LIBRARY_PATH")
    entries = cache if cache is not None else cache_entries("libcudnn")
    for soname, path in entries:
        if soname == name:
            add(Path(path), "ldconfig cache")
    for d in search_dirs(conf):
        add(Path(d) / name, "ld.so.conf / default dirs (not in cache)")
    return found
