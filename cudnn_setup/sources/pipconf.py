"""The package index pip would use, found the way pip finds it.

pip's order (https://pip.pypa.io/en/stable/topics/configuration/): the configuration files,
later ones winning (global: each `$XDG_CONFIG_DIRS` dir's `pip/pip.conf`, then `/etc/pip.conf`;
user: `~/.pip/pip.conf`, then `$XDG_CONFIG_HOME/pip/pip.conf`; site: `$VIRTUAL_ENV/pip.conf`;
then `$PIP_CONFIG_FILE`, whose presence skips the user files and which `os.devnull` turns
off), in each file `[global]` then `[install]`; then `PIP_INDEX_URL` / `PIP_EXTRA_INDEX_URL`;
then `--index-url`. Nothing is read from this process's environment or home: both are handed
in, and so are the system's directories (`system_dirs`), so a test never reads the real ones.
"""
from __future__ import annotations

import configparser
import os
import stat
from pathlib import Path
from typing import Mapping

from msgspec import Struct, field

from cudnn_setup.errors import UsageError
from cudnn_setup.text import escape
from cudnn_setup.urls import BadUrl, check, redact

PYPI = "https://pypi.org/simple"
MAX_CONFIG_BYTES = 1 << 20
SYSTEM_DIRS = (Path("/etc/xdg"), Path("/etc"))  # XDG_CONFIG_DIRS' default, and pip's /etc


class IndexConfig(Struct, frozen=True):
    """The index URLs to ask, in order (the first is pip's index-url), with where each was set."""

    urls: tuple[str, ...]
    origins: tuple[str, ...]
    cert: str | None = None  # pip's `cert`: the CA bundle for the index
    files: tuple[str, ...] = field(default=())  # configuration files read

    def shown(self) -> list[dict]:
        return [{"url": redact(u), "set_by": o} for u, o in zip(self.urls, self.origins)]


def config_files(env: Mapping[str, str], home: Path,
                 system_dirs: tuple[Path, ...] = SYSTEM_DIRS) -> list[Path]:
    """pip's configuration files in the order they are loaded (later wins)."""
    xdg_dirs = [Path(d) for d in env.get("XDG_CONFIG_DIRS", "").split(os.pathsep) if d]
    if system_dirs == SYSTEM_DIRS:
        globals_ = [d / "pip" / "pip.conf" for d in (xdg_dirs or [Path("/etc/xdg")])]
        globals_.append(Path("/etc/pip.conf"))
    else:  # the caller's stand-in for /etc (tests): <dir>/xdg/pip/pip.conf, <dir>/pip.conf
        globals_ = [d / "xdg" / "pip" / "pip.conf" for d in system_dirs]
        globals_ += [d / "pip.conf" for d in system_dirs]
    chosen = env.get("PIP_CONFIG_FILE")
    files = list(globals_)
    if not (chosen and os.path.exists(chosen)):
        config_home = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") \
            else home / ".config"
        files += [home / ".pip" / "pip.conf", config_home / "pip" / "pip.conf"]
    if env.get("VIRTUAL_ENV"):
        files.append(Path(env["VIRTUAL_ENV"]) / "pip.conf")
    if chosen and chosen != os.devnull:
        files.append(Path(chosen))
    return files


def _read(path: Path) -> configparser.RawConfigParser | None:
    """One configuration file, or None when it is not there. A FIFO or device is never opened."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise UsageError(f"cannot read pip's configuration file {escape(str(path))}: "
                         f"{exc.strerror}", "fix its permissions, or set PIP_CONFIG_FILE") from None
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"pip's configuration file {escape(str(path))} is not a regular file",
                         "remove it, or set PIP_CONFIG_FILE to the file to use")
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"cannot read pip's configuration file {escape(str(path))}: "
                         f"{exc.strerror}", "fix its permissions, or set PIP_CONFIG_FILE") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise UsageError(f"pip's configuration file {escape(str(path))} is larger than "
                         f"{MAX_CONFIG_BYTES} bytes", "this is not a pip configuration file")
    parser = configparser.RawConfigParser(strict=False, interpolation=None)
    try:
        parser.read_string(data.decode("utf-8"), source=str(path))
    except (configparser.Error, UnicodeDecodeError) as exc:
        raise UsageError(f"pip's configuration file {escape(str(path))} cannot be parsed "
                         f"({escape(str(exc).splitlines()[0][:160])})",
                         "pip refuses it too; fix it or set PIP_CONFIG_FILE") from None
    return parser


def _split(value: str) -> list[str]:
    return [u for u in value.split() if u]


def index_config(env: Mapping[str, str], home: Path, index_url: str | None = None,
                 system_dirs: tuple[Path, ...] = SYSTEM_DIRS) -> IndexConfig:
    """The indexes pip would ask for a project, first its index-url, then its extra ones."""
    index, index_from = PYPI, "pip's default"
    extra: list[tuple[str, str]] = []
    cert = None
    read: list[str] = []
    for path in config_files(env, home, system_dirs):
        parser = _read(path)
        if parser is None:
            continue
        read.append(str(path))
        for section in ("global", "install"):
            if not parser.has_section(section):
                continue
            values = {k.replace("_", "-"): v for k, v in parser.items(section)}
            if "index-url" in values:
                index, index_from = values["index-url"].strip(), f"index-url in {path}"
            if "extra-index-url" in values:  # a later file's list replaces an earlier one's
                extra = [(u, f"extra-index-url in {path}") for u in _split(values["extra-index-url"])]
            if "cert" in values:
                cert = values["cert"].strip()
    if env.get("PIP_INDEX_URL"):
        index, index_from = env["PIP_INDEX_URL"].strip(), "PIP_INDEX_URL"
    if env.get("PIP_EXTRA_INDEX_URL"):
        extra = [(u, "PIP_EXTRA_INDEX_URL") for u in _split(env["PIP_EXTRA_INDEX_URL"])]
    if env.get("PIP_CERT"):
        cert = env["PIP_CERT"]
    if index_url is not None:
        index, index_from = index_url.strip(), "--index-url"
    urls, origins = [], []
    for url, origin in [(index, index_from), *extra]:
        url = url.rstrip("/") + "/"
        if not url.lower().startswith(("http://", "https://", "file://")):
            raise UsageError(f"the package index {redact(url)} "
                             f"({origin}) is not an http(s) or file:// URL",
                             "give the index's simple/ URL, e.g. https://pypi.org/simple")
        try:  # a host, a port in range, nothing that would make the request itself fail
            check(url, ("http", "https", "file"))
        except BadUrl as exc:
            raise UsageError(f"the package index {redact(url)} ({origin}) cannot be used: {exc}",
                             "give the index's simple/ URL, e.g. https://pypi.org/simple") from None
        if url not in urls:
            urls.append(url)
            origins.append(origin)
    return IndexConfig(tuple(urls), tuple(origins), cert, tuple(read))
