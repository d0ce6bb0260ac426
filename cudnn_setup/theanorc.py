"""Merge cuDNN settings into a user's .theanorc, keeping every other line, comment and key case.

configparser would lowercase `floatX` and drop comments; ConfigUpdater round-trips the file.
"""
from __future__ import annotations

import difflib
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from configupdater import ConfigUpdater
from configupdater.parser import DuplicateOptionError, DuplicateSectionError, ParsingError

from cudnn_setup.errors import SetupError

BACKUP_SUFFIX = ".cudnn-setup.bak"


class TheanorcRefused(SetupError):
    """The file cannot be merged safely; it was left untouched."""


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


def default_path(env: Mapping[str, str], home: Path) -> Path:
    """Theano reads every file of $THEANORC (later ones win), else ~/.theanorc: write the last."""
    entries = [e for e in env.get("THEANORC", "").split(os.pathsep) if e]
    return Path(os.path.expanduser(entries[-1])) if entries else home / ".theanorc"


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
    _write_atomic(target, after, mode)
    return change


def _write_atomic(path: Path, text: str, mode: int) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
