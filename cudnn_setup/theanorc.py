"""Merge cuDNN settings into a user's .theanorc, keeping every other line, comment and key case.

configparser would lowercase `floatX` and drop comments; ConfigUpdater round-trips the file.
"""
from __future__ import annotations

import configparser
import difflib
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from configupdater import ConfigUpdater
from configupdater.parser import DuplicateOptionError, DuplicateSectionError, ParsingError

from cudnn_setup.atomic import write_atomic
from cudnn_setup.errors import SetupError

BACKUP_SUFFIX = ".cudnn-setup.bak"


class TheanorcRefused(SetupError):
    """The file cannot be merged safely; it was left untouched."""

    default_code = "theanorc-refused"


@dataclass
class TheanorcChange:
    path: Path  # the file written (a symlink's target)
    changed: bool
    diff: str
    backup: Path | None = None
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {"path": str(self.path), "changed": self.changed, "diff": self.diff,
                "backup": str(self.backup) if self.backup else None,
                "warnings": list(self.warnings)}


def config_files(env: Mapping[str, str], home: Path) -> list[Path]:
    """The files Theano reads, in order (later ones win): $THEANORC's entries, else ~/.theanorc.

    Theano splits $THEANORC on os.pathsep and expands `~` in each entry
    (theano/configparser.py, `config_files_from_theanorc`).
    """
    entries = [e for e in env.get("THEANORC", "").split(os.pathsep) if e]
    if not entries:
        return [home / ".theanorc"]
    return [home if e == "~" else home / e[2:] if e.startswith("~/") else Path(e) for e in entries]


def default_path(env: Mapping[str, str], home: Path) -> Path:
    """The file to write: the one read last, so its values win."""
    return config_files(env, home)[-1]


# The settings that decide whether Theano uses cuDNN, as "section.option".
RELEVANT_KEYS = ("global.device", "global.floatx", "global.optimizer_including",
                 "global.optimizer_excluding", "dnn.enabled", "dnn.include_path",
                 "dnn.library_path", "dnn.base_path", "cuda.root")


def effective_config(env: Mapping[str, str], home: Path) -> dict:
    """Theano's effective settings that matter for cuDNN: its files in order, then THEANO_FLAGS."""
    files = config_files(env, home)
    parser = configparser.RawConfigParser(strict=False)
    read = []
    for f in files:
        try:
            read += parser.read(f, encoding="utf-8")
        except (configparser.Error, UnicodeDecodeError) as exc:
            read.append(f"{f} (unreadable: {exc})")
    effective: dict[str, dict] = {}
    for key in RELEVANT_KEYS:
        section, option = key.split(".")
        if parser.has_option(section, option):
            effective[key] = {"value": parser.get(section, option), "from": "theanorc"}
    for item in [f for f in env.get("THEANO_FLAGS", "").split(",") if "=" in f]:
        name, value = item.split("=", 1)
        name = name.strip().lower()
        full = name if "." in name else f"global.{name}"
        if full in RELEVANT_KEYS:
            effective[full] = {"value": value, "from": "THEANO_FLAGS"}
    return {"files": [str(f) for f in files], "read": read,
            "flags": env.get("THEANO_FLAGS", ""), "effective": effective}


def settings(root: Path, lib_dir: Path) -> dict[str, dict[str, str]]:
    return {
        "dnn": {"base_path": str(root), "include_path": str(root / "include"),
                "library_path": str(lib_dir)},
        "cuda": {"root": str(root)},
    }


def merge(text: str, root: Path, lib_dir: Path, origin: str = ".theanorc") -> tuple[str, list[str]]:
    """Return the merged text and warnings; raise TheanorcRefused when the file is ambiguous."""
    updater = ConfigUpdater()
    try:
        updater.read_string(text, source=origin)
    except (DuplicateSectionError, DuplicateOptionError) as exc:
        raise TheanorcRefused(f"{origin} has a duplicate entry ({exc}); left untouched",
                              "remove the duplicate so it is clear which value Theano uses, "
                              "then run `cudnn-setup theanorc`") from None
    except ParsingError as exc:
        first = str(exc).splitlines()[0]
        raise TheanorcRefused(f"{origin} is not a valid config file ({first}); left untouched",
                              "fix the line it names, then run `cudnn-setup theanorc`") from None
    warnings: list[str] = []
    _add_to_list(updater, "global", "optimizer_including", "cudnn")
    if updater.has_section("global") and updater["global"].has_option("optimizer_excluding"):
        excluded = (updater["global"]["optimizer_excluding"].value or "").split(":")
        if "cudnn" in excluded:
            warnings.append("[global] optimizer_excluding lists cudnn: Theano will not use it")
    for section, values in settings(root, lib_dir).items():
        for key, value in values.items():
            _set(updater, section, key, value)
    return str(updater), warnings


def _section(updater: ConfigUpdater, name: str):
    if not updater.has_section(name):
        text = str(updater)
        if text and not text.endswith("\n\n"):
            last = updater.last_block
            if last is not None:
                last.add_after.space(1 if text.endswith("\n") else 2)
        updater.add_section(name)
    return updater[name]


def _set(updater: ConfigUpdater, section: str, key: str, value: str) -> None:
    sec = _section(updater, section)
    if sec.has_option(key):
        if sec[key].value != value:
            sec[key].value = value
        return
    options = list(sec.option_blocks())
    if options:
        options[-1].add_after.option(key, value)
    else:
        sec[key] = value


def _add_to_list(updater: ConfigUpdater, section: str, key: str, item: str) -> None:
    sec = _section(updater, section)
    if sec.has_option(key):
        current = [v for v in (sec[key].value or "").split(":") if v]
        if item not in current:
            sec[key].value = ":".join(current + [item])
        return
    _set(updater, section, key, item)


def configure(path: Path, root: Path, lib_dir: Path, dry_run: bool = False) -> TheanorcChange:
    target = Path(os.path.realpath(path))
    before = ""
    if target.exists():
        if not target.is_file():
            raise TheanorcRefused(f"{path} is not a regular file; left untouched",
                                  "pass --theanorc FILE naming a config file")
        raw = target.read_bytes()
        try:
            before = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TheanorcRefused(f"{path} is not UTF-8 text (byte {raw[exc.start]:#x} at offset "
                                  f"{exc.start}); left untouched",
                                  "save it as UTF-8, then run `cudnn-setup theanorc`") from None
    elif not target.parent.is_dir():
        raise TheanorcRefused(f"the directory of {path} does not exist",
                              "create it or pass --theanorc FILE")
    after, warnings = merge(before, root, lib_dir, str(path))
    diff = "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True),
                                        f"{path} (before)", f"{path} (after)"))
    change = TheanorcChange(target, before != after, diff, warnings=tuple(warnings))
    if dry_run or not change.changed:
        return change
    if target.exists():
        mode = stat.S_IMODE(target.stat().st_mode)
        if not mode & 0o222:
            raise TheanorcRefused(f"{path} is read-only; left untouched",
                                  "make it writable (chmod u+w) if cudnn-setup may change it")
        change.backup = target.with_name(target.name + BACKUP_SUFFIX)
        shutil.copy2(target, change.backup)
    else:
        mode = 0o644
    write_atomic(target, after.encode("utf-8"), mode)
    return change
