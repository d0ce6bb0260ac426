"""Settings a fleet sets once instead of on every command line: the mirror to fetch cuDNN from.

Precedence, first set wins: the command-line option, `$CUDNN_SETUP_MIRROR`, the user's file
(`$XDG_CONFIG_HOME/cudnn-setup/config.ini`, else `~/.config/cudnn-setup/config.ini`), the
system file (`/etc/cudnn-setup.conf`). Both files are INI:

    [cudnn-setup]
    mirror = http://mirror.internal/nvidia/cudnn/redist/

The caller hands in the environment, the home directory and both paths: nothing here reads
os.environ, `~` or /etc on its own, but for root's own home (user_cache_dir).
"""
from __future__ import annotations

import configparser
from pathlib import Path
from typing import Mapping

from msgspec import Struct

from cudnn_setup.errors import UsageError
from cudnn_setup.private_dirs import root_in_another_users
from cudnn_setup.text import escape, show_path
from cudnn_setup.untrusted import NotRegular, read_regular
from cudnn_setup.urls import scrub

SECTION = "cudnn-setup"
KEYS = ("mirror",)
ENV_MIRROR = "CUDNN_SETUP_MIRROR"
SYSTEM_CONFIG = Path("/etc/cudnn-setup.conf")
MAX_BYTES = 64 << 10  # a settings file, not a data file


class Setting(Struct, frozen=True):
    value: str
    origin: str  # where it was set, for messages: "--mirror", "$CUDNN_SETUP_MIRROR", a file


def user_config_path(env: Mapping[str, str], home: Path) -> Path:
    """The per-user file, following the XDG base directory spec (a relative
    $XDG_CONFIG_HOME is ignored, as the spec says)."""
    base = env.get("XDG_CONFIG_HOME", "")
    root = Path(base) if base and Path(base).is_absolute() else home / ".config"
    return root / "cudnn-setup" / "config.ini"


def user_cache_dir(env: Mapping[str, str], home: Path) -> Path:
    """The user's cache of the tool (downloads, the GPU check's compiled plans), following the
    XDG base directory spec like user_config_path (a relative $XDG_CACHE_HOME is ignored)."""
    base = env.get("XDG_CACHE_HOME", "")
    root = Path(base) if base and Path(base).is_absolute() else home / ".cache"
    return _not_another_users(root) / "cudnn-setup"


def _not_another_users(cache: Path) -> Path:
    """`cache`, unless root runs with another user's HOME (`sudo` keeps it on many systems)
    and `cache` lies in what that user owns: then root's own `~/.cache`. Else root made
    ~/.cache and ~/.cache/cudnn-setup there root's, and that user's own downloads (and any
    other program caching under ~/.cache) failed with permission denied."""
    if not root_in_another_users(cache):
        return cache
    try:
        import pwd

        own = pwd.getpwuid(0).pw_dir
    except KeyError:
        return cache
    return Path(own or "/root") / ".cache"


def read_config(path: Path) -> dict[str, str]:
    """The `[cudnn-setup]` keys of one file; {} when it does not exist. A file that cannot be
    read or parsed, or names a key this version does not know, is a usage error: a fleet's
    setting that silently does nothing is worse than a stop."""
    try:
        data = read_regular(path, MAX_BYTES + 1)  # a FIFO or device is refused, never opened
    except FileNotFoundError:
        return {}
    except NotRegular as exc:
        raise UsageError(f"config file {show_path(path)} is {exc.what}, not a file; not "
                         "read", "replace it with a plain file, or remove it") from None
    except OSError as exc:
        raise UsageError(f"cannot read the config file {show_path(path)}: "
                         f"{exc.strerror or exc}", "make it readable, or remove it") from None
    if len(data) > MAX_BYTES:
        raise UsageError(f"config file {show_path(path)} is larger than {MAX_BYTES} bytes",
                         "it should hold a few settings")
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(data.decode("utf-8"), source=str(path))
    except (UnicodeDecodeError, configparser.Error) as exc:
        first = str(exc).splitlines()[0][:200]
        raise UsageError(f"config file {show_path(path)} is not valid INI: {escape(scrub(first))}",
                         f"it takes a [{SECTION}] section with `key = value` lines") from None
    if not parser.has_section(SECTION):
        return {}
    values = dict(parser.items(SECTION))
    unknown = sorted(set(values) - set(KEYS))
    if unknown:
        raise UsageError(f"config file {show_path(path)}: unknown key {unknown[0][:60]!r} in "
                         f"[{SECTION}]",
                         f"known keys: {', '.join(KEYS)}")
    return values


def mirror_setting(option: str | None, env: Mapping[str, str], user_config: Path,
                   system_config: Path) -> Setting | None:
    """The mirror to use and where it was set, or None for NVIDIA's own tree. An empty value
    counts as unset, so `CUDNN_SETUP_MIRROR=` does not mean "the current directory"."""
    if option:
        return Setting(option, "--mirror")
    if env.get(ENV_MIRROR, "").strip():
        return Setting(env[ENV_MIRROR], f"${ENV_MIRROR}")
    for path in (user_config, system_config):
        value = read_config(path).get("mirror", "").strip()
        if value:
            return Setting(value, str(path))
    return None
