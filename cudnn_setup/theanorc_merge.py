"""Merge cuDNN settings into a user's .theanorc, keeping every other line, comment and key case.

configparser would lowercase `floatX` and drop comments; ConfigUpdater round-trips the file.
What the file means is judged the way Theano 1.0.5 reads it (theano/configparser.py): Python's
ConfigParser, strict (a duplicate section or key in one file stops Theano at import), values
spread over indented continuation lines joined with newlines, and optimizer_including split
on ':' only. A merged file is read back that way before it is written.
"""
from __future__ import annotations

import configparser
import difflib
import os
import shlex
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from msgspec import Struct

from cudnn_setup.durable import write_atomic
from cudnn_setup.errors import SetupError, os_error
from cudnn_setup.text import escape, printable, show_path

if TYPE_CHECKING:  # imported by merge(), the one user: verify and doctor only read configs
    from configupdater import ConfigUpdater

    from cudnn_setup.theano_blas import BlasFlags

BACKUP_SUFFIX = ".cudnn-setup.bak"
MAX_BYTES = 1 << 20  # a Theano config is a few hundred bytes; /dev/zero is endless


class TheanorcRefused(SetupError):
    """The file cannot be merged safely, read, or written; the message says what became of it."""

    default_code = "theanorc-refused"


def read_config(path: Path, limit: int = MAX_BYTES) -> tuple[bytes, int] | None:
    """The bytes of a config file and its permission bits; None when there is none.

    A FIFO, a device or a directory is refused from its stat, never opened for reading (a FIFO
    would block the reader forever, /dev/zero would fill its memory); the open itself is
    non-blocking and checked again with fstat, in case the file was swapped in between.
    OSErrors are left to the caller, which knows what it was doing.
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        raise not_regular(path, st.st_mode)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise not_regular(path, st.st_mode)
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 16, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:
        raise TheanorcRefused(f"{show_path(path)} is larger than {limit} bytes; left untouched",
                              "a Theano config is a few lines; check that this is the right "
                              "file", code="theanorc-too-large")
    return b"".join(chunks), stat.S_IMODE(st.st_mode)


def unreadable_for_theano(path: Path | None) -> str | None:
    """Why Theano, started with THEANORC=path, would block or fail reading it; None if it can.

    Checked before a child runs Theano: a FIFO there would hold the child until its time limit.
    """
    if path is None:
        return None
    try:
        read_config(path)
    except TheanorcRefused as exc:
        return exc.message
    except OSError as exc:
        return os_error(exc, f"cannot read {show_path(path)}").message
    return None


def mentions(path: Path, text: str) -> bool:
    """Whether the config at `path` holds `text`; False when it cannot be read as a config."""
    try:
        found = read_config(path)
    except (TheanorcRefused, OSError):
        return False
    return found is not None and text in found[0].decode("utf-8", errors="replace")


def not_regular(path: Path, mode: int) -> TheanorcRefused:
    kind = ("a fifo" if stat.S_ISFIFO(mode) else "a directory" if stat.S_ISDIR(mode) else
            "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else
            "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
    return TheanorcRefused(f"{show_path(path)} is {kind}, not a config file; left untouched "
                           "(Theano would block or fail reading it)",
                           "point $THEANORC or --theanorc at a regular file",
                           code="theanorc-not-a-file")


class TheanorcChange(Struct):
    path: Path  # the file written (a symlink's target)
    changed: bool
    diff: str
    backup: Path | None = None
    warnings: tuple[str, ...] = ()
    created: bool = False  # there was no file: the change makes it (or would)

    def to_dict(self) -> dict:
        return {"path": str(self.path), "changed": self.changed, "created": self.created,
                "diff": self.diff,
                "backup": str(self.backup) if self.backup else None,
                "warnings": list(self.warnings)}


def config_files(env: Mapping[str, str], home: Path) -> list[Path]:
    """The files Theano reads, in order (later ones win): $THEANORC's entries, else ~/.theanorc.

    Theano splits $THEANORC on os.pathsep and expands `~` in each entry
    (theano/configparser.py, `config_files_from_theanorc`); ~/.theanorc is its default only
    where THEANORC is not set at all: set empty, it names no file, and Theano reads none.
    """
    if "THEANORC" not in env:
        return [home / ".theanorc"]
    entries = [e for e in env["THEANORC"].split(os.pathsep) if e]
    return [home if e == "~" else home / e[2:] if e.startswith("~/") else Path(e) for e in entries]


def default_path(env: Mapping[str, str], home: Path) -> Path:
    """The file to write: the one read last, so its values win (~/.theanorc where $THEANORC is
    set empty: Theano reads none, which the theanorc check says)."""
    files = config_files(env, home)
    return files[-1] if files else home / ".theanorc"


# The settings that decide whether Theano uses cuDNN, as "section.option".
RELEVANT_KEYS = ("global.device", "global.floatx", "global.optimizer_including",
                 "global.optimizer_excluding", "dnn.enabled", "dnn.include_path",
                 "dnn.library_path", "dnn.base_path", "cuda.root")


def effective_config(env: Mapping[str, str], home: Path) -> dict:
    """Theano's effective settings that matter for cuDNN: its files in order, then THEANO_FLAGS.

    Read as Theano reads them, with the difference that a file Theano would block on or stop
    at is reported in `errors` instead of hanging or raising.
    """
    files = config_files(env, home)
    parser = configparser.ConfigParser(interpolation=None)  # strict, like Theano's
    read: list[str] = []
    errors: list[str] = []
    for f in files:
        try:
            found = read_config(f)
            if found is None:
                continue
            text = found[0].decode("utf-8")
            # a file that fails half-way would leave half its values behind: check it first
            configparser.ConfigParser(interpolation=None).read_string(text, source=str(f))
            parser.read_string(text, source=str(f))
            read.append(str(f))
        except TheanorcRefused as exc:
            errors.append(exc.message)
        except UnicodeDecodeError as exc:
            errors.append(f"{show_path(f)} is not UTF-8 (byte {exc.object[exc.start]:#x} at "
                          f"offset {exc.start}): Theano stops at import reading it")
        except configparser.Error as exc:
            errors.append(f"{show_path(f)}: {escape(_first_line(exc))}: Theano stops at import "
                          "reading it (its ConfigParser is strict)")
        except OSError as exc:
            errors.append(os_error(exc, f"cannot read {show_path(f)}").message)
    effective: dict[str, dict] = {}
    for key in RELEVANT_KEYS:
        section, option = key.split(".")
        if parser.has_option(section, option):
            effective[key] = {"value": parser.get(section, option), "from": "theanorc"}
    flags = env.get("THEANO_FLAGS", "")
    try:
        for name, value in theano_flags(flags).items():
            full = flag_name(name)
            if full in RELEVANT_KEYS:
                effective[full] = {"value": value, "from": "THEANO_FLAGS"}
    except ValueError as exc:
        errors.append(f"THEANO_FLAGS cannot be parsed ({exc}): Theano stops at import")
    return {"files": [str(f) for f in files], "read": read, "errors": errors,
            "flags": flags, "effective": effective}


def theano_flags(flags: str) -> dict[str, str]:
    """THEANO_FLAGS as Theano splits it: shlex, comma-separated, the last value of a key wins."""
    splitter = shlex.shlex(flags, posix=True)
    splitter.whitespace, splitter.whitespace_split = ",", True
    out = {}
    for pair in splitter:
        key, eq, value = pair.strip().partition("=")
        if eq:
            out[key] = value
    return out


def flag_name(name: str) -> str:
    """A THEANO_FLAGS key as section.option, lower case ("floatX" is global.floatx)."""
    return name.lower() if "." in name else f"global.{name.lower()}"


def _first_line(exc: Exception) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]


def settings(root: Path, lib_dir: Path) -> dict[str, dict[str, str]]:
    return {
        "dnn": {"base_path": str(root), "include_path": str(root / "include"),
                "library_path": str(lib_dir)},
        "cuda": {"root": str(root)},
    }


# The line written in place of optimizer_including=cudnn where Theano cannot use the cuDNN:
# the setting is there to be seen, with its reason, but Theano does not read it. A merge
# replaces the one an earlier merge wrote (a user's own commented-out line is not this one).
CUDNN_OFF = "optimizer_including = cudnn  (not set by cudnn-setup:"
KEPT_ACTIVE = "[global] optimizer_including already lists cudnn"


def merge(text: str, root: Path, lib_dir: Path, origin: str = ".theanorc", *,
          cudnn: bool = True, cudnn_off_reason: str = "",
          blas: BlasFlags | None = None) -> tuple[str, list[str]]:
    """Return the merged text and warnings; raise TheanorcRefused when the file is ambiguous.

    `cudnn`: whether to ask Theano for cuDNN (optimizer_including=cudnn, which makes Theano stop
    where it cannot use it); when not, the line is written commented out with
    `cudnn_off_reason`. `blas`: the `[blas] ldflags` to write where the file has none (None:
    this Theano needs none), with its reason as a comment; a user's own ldflags is kept.
    """
    shown = escape(origin)
    wanted = settings(root, lib_dir)
    for values in wanted.values():
        for value in values.values():
            if value != printable(value):
                raise TheanorcRefused(
                    f"the path {escape(value)} cannot be written into {shown}: it holds a "
                    "newline, a control character or a byte that is not UTF-8, which "
                    "Theano's config file cannot carry; left untouched",
                    "use a CUDA root whose path is plain text, or set Theano's [dnn] paths "
                    "through THEANO_FLAGS", code="theanorc-unwritable-path")
    try:
        configparser.ConfigParser(interpolation=None).read_string(text, source=origin)
    except (configparser.DuplicateSectionError, configparser.DuplicateOptionError) as exc:
        raise TheanorcRefused(f"{shown} has a duplicate entry ({escape(_first_line(exc))}), "
                              "which stops Theano at import (its ConfigParser is strict); left "
                              "untouched", "remove the duplicate, then run `cudnn-setup "
                              "theanorc`", code="theanorc-ambiguous") from None
    except configparser.Error as exc:
        raise TheanorcRefused(f"{shown} is not a valid config file ({escape(_first_line(exc))}); "
                              "left untouched",
                              "fix the line it names, then run `cudnn-setup theanorc`") from None
    from configupdater import ConfigUpdater
    from configupdater.parser import DuplicateOptionError, DuplicateSectionError, ParsingError

    updater = ConfigUpdater()
    try:
        updater.read_string(text, source=origin)
    except (DuplicateSectionError, DuplicateOptionError, ParsingError) as exc:
        raise TheanorcRefused(f"{shown} cannot be merged without losing its layout "
                              f"({escape(_first_line(exc))}); left untouched",
                              "fix the line it names, then run `cudnn-setup theanorc`") from None
    warnings: list[str] = []
    _drop_comment(updater, "global", CUDNN_OFF)
    if cudnn:
        including = _add_to_list(updater, "global", "optimizer_including", "cudnn")
    else:
        sec = updater["global"] if updater.has_section("global") else None
        including = (sec["optimizer_including"].value or "") \
            if sec is not None and sec.has_option("optimizer_including") else ""
        if "cudnn" in including.split(":"):  # the file's own, active: said, not contradicted
            warnings.append(f"{KEPT_ACTIVE} (kept as it is), which makes Theano stop on a GPU "
                            f"here: {cudnn_off_reason}")
        else:
            _comment(updater, "global", f"{CUDNN_OFF} {printable(cudnn_off_reason)})")
    if "\n" in including:
        warnings.append(f"[global] optimizer_including spans several lines; Theano splits it on "
                        f"':' only, so it reads the tags {escape(repr(including.split(':')))}")
    if blas is not None and not (updater.has_section("blas")
                                 and updater["blas"].has_option("ldflags")):
        wanted["blas"] = {"ldflags": blas.ldflags}
        _set(updater, "blas", "ldflags", blas.ldflags)
        updater["blas"]["ldflags"].add_before.comment(
            f"ldflags set by cudnn-setup: {printable(blas.why)}")
    if updater.has_section("global") and updater["global"].has_option("optimizer_excluding"):
        excluded = (updater["global"]["optimizer_excluding"].value or "").split(":")
        if "cudnn" in excluded:
            warnings.append("[global] optimizer_excluding lists cudnn: Theano will not use it")
    for section, values in wanted.items():
        for key, value in values.items():
            _set(updater, section, key, value)
    merged = str(updater)
    _check_as_theano_reads_it(merged, wanted, shown, cudnn)
    return merged, warnings


def _check_as_theano_reads_it(text: str, wanted: dict[str, dict[str, str]], shown: str,
                              cudnn: bool = True) -> None:
    """The merged file, read back the way Theano reads it, says what was meant to be written."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
        asked = parser.get("global", "optimizer_including", fallback="").split(":")
        ok = (not cudnn or "cudnn" in asked) and all(
            parser.get(section, key) == value
            for section, values in wanted.items() for key, value in values.items())
    except configparser.Error:
        ok = False
    if not ok:
        raise TheanorcRefused(f"merging into {shown} would give a file Theano reads otherwise "
                              "than intended; left untouched",
                              "set optimizer_including and the [dnn] paths by hand, or move "
                              "the file aside and run `cudnn-setup theanorc`",
                              code="theanorc-ambiguous")


def _section(updater: ConfigUpdater, name: str):
    if not updater.has_section(name):
        text = str(updater)
        if text and not text.endswith("\n\n"):
            last = updater.last_block
            if last is not None:
                last.add_after.space(1 if text.endswith("\n") else 2)
        updater.add_section(name)
    return updater[name]


def _comment(updater: ConfigUpdater, section: str, text: str) -> None:
    """A comment line `# text` at the end of the section's options."""
    sec = _section(updater, section)
    options = list(sec.option_blocks())
    blocks = list(sec.iter_blocks())
    if options:
        options[-1].add_after.comment(text)
    elif blocks and type(blocks[-1]).__name__ == "Space":  # before the blank line ending it
        blocks[-1].add_before.comment(text)
    else:
        sec.add_comment(f"# {text}\n")


def _drop_comment(updater: ConfigUpdater, section: str, start: str) -> None:
    """Remove the section's comment lines that begin with `# start` (written by an earlier
    merge: the one written now says what holds now)."""
    if not updater.has_section(section):
        return
    for block in list(updater[section].iter_blocks()):
        if type(block).__name__ != "Comment":
            continue
        lines = block.lines  # the block's own list: a user's comment lines beside ours stay
        lines[:] = [line for line in lines if not line.lstrip("#; \t").startswith(start)]
        if not lines:
            block.detach()


def _set(updater: ConfigUpdater, section: str, key: str, value: str) -> None:
    sec = _section(updater, section)
    if sec.has_option(key):
        if sec[key].value != value:
            sec[key].value = value
        return
    options = list(sec.option_blocks())
    blocks = list(sec.iter_blocks())
    if options:
        options[-1].add_after.option(key, value)
    elif blocks and type(blocks[-1]).__name__ == "Space":  # before the blank line ending it
        blocks[-1].add_before.option(key, value)
    else:
        sec[key] = value


def _add_to_list(updater: ConfigUpdater, section: str, key: str, item: str) -> str:
    """Add `item` to a ':'-separated list the way Theano splits it; return the value as read.

    A value over several lines is one string with newlines to Theano; its lines are kept as
    they are (ConfigUpdater refuses a multi-line assignment) and the item goes on the last.
    """
    sec = _section(updater, section)
    if not sec.has_option(key):
        _set(updater, section, key, item)
        return item
    option = sec[key]
    value = option.value or ""
    if item in value.split(":"):
        return value
    lines = value.split("\n")
    lines[-1] = f"{lines[-1]}:{item}" if lines[-1] else item
    raw = getattr(option, "lines", [])  # the file's own lines: keep their indentation
    indent = raw[1][:len(raw[1]) - len(raw[1].lstrip())] if len(raw) > 1 else None
    if len(lines) == 1:
        option.value = lines[0]
    elif lines[0]:
        option.set_values(lines, indent=indent, prepend_newline=False)
    else:
        option.set_values(lines[1:], indent=indent)
    return "\n".join(lines)


def configure(path: Path, root: Path, lib_dir: Path, dry_run: bool = False, *,
              cudnn: bool = True, cudnn_off_reason: str = "",
              blas: BlasFlags | None = None) -> TheanorcChange:
    """Merge the cuDNN settings into the config at `path` (through a symlink to its target).

    The previous version is kept beside it as a backup, written to a temporary file and renamed
    like the config itself, so a full disk never leaves either half-written. Any failure is a
    TheanorcRefused saying whether the file was left as it was.
    """
    target = Path(os.path.realpath(path))
    found: tuple[bytes, int] | None = None
    try:
        found = read_config(target)
        return _configure(path, target, found, root, lib_dir, dry_run,
                          dict(cudnn=cudnn, cudnn_off_reason=cudnn_off_reason, blas=blas))
    except OSError as exc:
        try:
            untouched = read_config(target) == found
        except (OSError, TheanorcRefused):
            untouched = False
        raise os_error(exc, f"cannot update {show_path(path)}", kind=TheanorcRefused,
                       outcome="left untouched" if untouched else "") from None


def _configure(path: Path, target: Path, found: tuple[bytes, int] | None, root: Path,
               lib_dir: Path, dry_run: bool, choices: dict) -> TheanorcChange:
    before = ""
    if found is not None:
        try:
            before = found[0].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TheanorcRefused(f"{show_path(path)} is not UTF-8 text (byte "
                                  f"{found[0][exc.start]:#x} at offset {exc.start}); left "
                                  "untouched",
                                  "save it as UTF-8, then run `cudnn-setup theanorc`") from None
    elif not target.parent.is_dir():
        raise TheanorcRefused(f"the directory of {show_path(path)} does not exist",
                              "create it or pass --theanorc FILE", code="theanorc-no-directory")
    after, warnings = merge(before, root, lib_dir, str(path), **choices)
    diff = "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True),
                                        f"{path} (before)", f"{path} (after)"))
    change = TheanorcChange(target, before != after, diff, warnings=tuple(warnings),
                            created=found is None and before != after)
    if dry_run or not change.changed:
        return change
    mode = 0o644
    owner = _owner_to_keep(target, found is not None)
    if found is not None:
        raw, mode = found
        if not mode & 0o222:
            raise TheanorcRefused(f"{show_path(path)} is read-only; left untouched",
                                  "make it writable (chmod u+w) if cudnn-setup may change it",
                                  code="theanorc-read-only")
        change.backup = target.with_name(target.name + BACKUP_SUFFIX)
        write_atomic(change.backup, raw, mode, owner=owner)
    write_atomic(target, after.encode("utf-8"), mode, owner=owner)
    return change


def _owner_to_keep(target: Path, exists: bool) -> tuple[int, int] | None:
    """Whose the written config (and its backup) must be: root run with a user's HOME (`sudo`
    keeps it on many systems) writes a file that user owns, as the one it replaces (or, for a
    new one, the directory it goes in), else the user could no longer read or edit their own
    config (a 0600 one came back root's, and Theano run as them read none). None: the writer's
    own, for any other user, who cannot give files away."""
    if os.geteuid() != 0:
        return None
    st = os.lstat(target if exists else target.parent)
    return (st.st_uid, st.st_gid) if (st.st_uid, st.st_gid) != (0, 0) else None
