"""Theano's config file as a step of install and theanorc: merge cuDNN's settings into it, and
what this Theano needs to import and run."""
from __future__ import annotations

import configparser
import os
import platform
from pathlib import Path
from typing import Callable, Mapping

from cudnn_setup.child import Unanswered
from cudnn_setup.checks.theano_check import (has_theano, theano_range_note, theano_supports,
                                             theanorc_for)
from cudnn_setup.facts.cudnn import split_version
from cudnn_setup.facts.theano import rule_for
from cudnn_setup.parallel import Later
from cudnn_setup.records import replace
from cudnn_setup.report import FAIL, PASS, WARN, Check, Result
from cudnn_setup.steps.context import Context
from cudnn_setup.text import show_path
from cudnn_setup.theano_blas import BlasFlags, NumpyBlas, find_blas, numpy_blas
from cudnn_setup.theanorc_merge import (KEPT_ACTIVE, TheanorcRefused, config_files, configure,
                                        default_path, flag_name, read_config, settings,
                                        theano_flags)


def theanorc_path(ctx: Context, explicit: Path | None) -> Path:
    return explicit or default_path(ctx.env, ctx.home)


def theanorc_step(result: Result, path: Path, root: Path, lib_dir: Path, dry_run: bool,
                  cudnn_version: str | None = None, *, ctx: Context | None = None,
                  python: str | None = None, cuda_version: str | None = None,
                  force_theano_cudnn: bool = False,
                  numpy_info: Callable[[], NumpyBlas | None] | None = None) -> Check:
    """Merge the cuDNN settings into Theano's config; a refusal is a failed check, not an error.

    optimizer_including=cudnn makes Theano stop where it cannot use cuDNN, so for a cuDNN this
    Theano cannot use it is written commented out, with the release that would serve, unless
    `force_theano_cudnn`. With `ctx`, the `[blas] ldflags` that `python`'s numpy leaves Theano
    without is written too (a file's own ldflags is kept); `numpy_info`: what numpy_blas said,
    when the caller asked it earlier."""
    usable = not cudnn_version or theano_supports(cudnn_version)
    parts = split_version(cudnn_version)
    cudnn = force_theano_cudnn or parts is None or rule_for(parts).ask_by_default
    about: dict = {"usable": usable, "optimizer_including_cudnn": cudnn}
    off_reason = ""
    if not usable:
        serving = _serving(cudnn_version, cuda_version, ctx)
        about.update(reason=theano_range_note(cudnn_version), serving_release=serving.version,
                     serving=serving.text)
        off_reason = (f"Theano 1.0.5 cannot use cuDNN {cudnn_version}; {serving.text}; "
                      "--force-theano-cudnn writes it anyway")
    blas = None
    if ctx is not None:
        blas, about["blas"] = blas_needed(ctx, python or ctx.python, path, numpy_info)
    try:
        change = configure(path, root, lib_dir, dry_run=dry_run, cudnn=cudnn,
                           cudnn_off_reason=off_reason, blas=blas)
    except TheanorcRefused as exc:  # also what an OSError became: the install still stands
        return Check("theanorc", FAIL, f"{exc.message} — {exc.hint}",
                     {"code": exc.code, "message": exc.message, "hint": exc.hint})
    if ctx is not None and about["blas"].get("unanswered"):  # a guess, or nothing: said
        change = replace(change, warnings=(*change.warnings, f"[blas] {about['blas']['why']}"))
    if ctx is not None:
        change = replace(change, warnings=(
            *change.warnings, *unread_or_overridden(ctx, path, root, lib_dir),
            *overridden_by_flags(ctx.env.get("THEANO_FLAGS", ""), root, lib_dir, cudnn)))
    active = any(w.startswith(KEPT_ACTIVE) for w in change.warnings)
    about["optimizer_including_cudnn"] = cudnn or active  # what the file holds now
    if not usable:
        done = ("written anyway (--force-theano-cudnn)" if force_theano_cudnn else
                "written, as for the Theano releases of its day" if cudnn else
                "kept active, as the file already had it: remove it from [global] "
                "optimizer_including to keep Theano running" if active else
                "not written (the line is there, commented out); --force-theano-cudnn writes it")
        change = replace(change, warnings=(
            *change.warnings, f"{about['reason']}: optimizer_including=cudnn {done}; "
                              f"{about['serving']}"))
    result.add("theanorc", {**change.to_dict(), "theano_cudnn": about})
    if dry_run and change.changed:
        result.lines += change.diff.rstrip("\n").splitlines()
    if change.changed and not dry_run:
        result.changed = True
    verb = ("would create" if dry_run else "created") if change.created else \
        ("would update" if dry_run else "updated") if change.changed else "already up to date:"
    detail = f"{verb} {change.path}" + (f" (backup {change.backup})" if change.backup else "")
    detail += "".join(f"; {w}" for w in change.warnings)
    return Check("theanorc", WARN if change.warnings else PASS, detail)


def unread_or_overridden(ctx: Context, path: Path, root: Path, lib_dir: Path) -> list[str]:
    """Whether Theano, in this environment, reads the config written: `--theanorc` may name a
    file it never reads (only $THEANORC's files, else ~/.theanorc), and a file $THEANORC lists
    after it wins where it sets a dnn path or cuda.root of its own."""
    files = config_files(ctx.env, ctx.home)
    reals = [os.path.realpath(f) for f in files]
    mine = os.path.realpath(path)
    if not files:
        return [f"Theano reads no config file here: $THEANORC is set but names none, so it "
                f"does not read {show_path(path)}; unset THEANORC, or set "
                f"THEANORC={show_path(path)}"]
    if mine not in reals:
        return [f"Theano does not read {show_path(path)} here: it reads "
                f"{', '.join(show_path(f) for f in files)} ($THEANORC, else ~/.theanorc); set "
                f"THEANORC={show_path(path)} for the programs that should use it"]
    said = []
    for later in files[reals.index(mine) + 1:]:
        taken = _settings_in(later)
        if taken is None:
            continue
        said += [f"{show_path(later)}, which Theano reads after {show_path(path)}, sets "
                 f"{name}={theirs}: Theano takes that, not {value}"
                 for name, value, theirs in _overridden(taken, root, lib_dir)]
    return said


def _settings_in(path: Path) -> dict[str, str] | None:
    """One config file's settings as Theano reads them, "section.key": value; None where it is
    missing or cannot be read or parsed (what Theano makes of that is the theano check's, and
    doctor's, to say; merging into it says it too)."""
    try:
        found = read_config(path)
        if found is None:
            return None
        parser = configparser.ConfigParser(interpolation=None)
        parser.read_string(found[0].decode("utf-8"))
    except (OSError, ValueError, TheanorcRefused, configparser.Error):
        return None
    return {f"{s}.{k}": v for s in parser.sections() for k, v in parser.items(s)}


def _overridden(taken: Mapping[str, str], root: Path, lib_dir: Path
                ) -> list[tuple[str, str, str]]:
    """(section.key, the value written, the one `taken` has instead) for each setting of the
    written config that `taken` (section.key: value, as Theano reads it later) sets otherwise."""
    return [(f"{section}.{key}", value, taken[f"{section}.{key}"])
            for section, keys in settings(root, lib_dir).items() for key, value in keys.items()
            if f"{section}.{key}" in taken and taken[f"{section}.{key}"] != value]


def overridden_by_flags(flags: str, root: Path, lib_dir: Path, cudnn: bool) -> list[str]:
    """What of the written config THEANO_FLAGS overrides, in words. Theano reads its flags
    after every config file: a dnn path or cuda.root set there is the one Theano uses, and an
    optimizer_including there replaces the file's whole list, so a config that says the right
    thing is no config that is used."""
    try:
        given = {flag_name(k): v for k, v in theano_flags(flags).items()}
    except ValueError:  # Theano stops at import: the theano check says so
        return []
    said = [f"THEANO_FLAGS sets {name}={theirs}, which Theano takes over the config's "
            f"{value}: unset it, or set it to {value}"
            for name, value, theirs in _overridden(given, root, lib_dir)]
    if given.get("dnn.enabled", "").lower() == "false":
        said.append("THEANO_FLAGS sets dnn.enabled=False: Theano uses no cuDNN, whatever the "
                    "config says")
    if cudnn:
        including = given.get("global.optimizer_including")
        if including is not None and "cudnn" not in including.split(":"):
            said.append(f"THEANO_FLAGS sets optimizer_including={including}, which replaces the "
                        "config's list: cudnn is not in it; add it (…:cudnn), or unset it")
        if "cudnn" in given.get("global.optimizer_excluding", "").split(":"):
            said.append("THEANO_FLAGS sets optimizer_excluding with cudnn: Theano leaves cuDNN "
                        "out, whatever the config says")
    return said


def _serving(cudnn_version: str | None, cuda_version: str | None, ctx: Context | None):
    from cudnn_setup.facts.theano import serving_release
    from cudnn_setup.fetch.known_releases import releases
    from cudnn_setup.fetch.redist import platform_key

    machine = (ctx.machine if ctx is not None else None) or platform.machine()
    return serving_release(releases(), cuda_version, platform_key(machine))


def blas_needed(ctx: Context, python: str, path: Path,
                numpy_info: Callable[[], NumpyBlas | None] | None = None
                ) -> tuple[BlasFlags | None, dict]:
    """The `[blas] ldflags` to write, and what was found: only where `python`'s numpy has no
    blas_opt_info (Theano 1.0.5 reads it at import unless ldflags is set) and none of the
    config files Theano reads, nor `path`, sets ldflags already."""
    if (rc := ldflags_set_in(ctx, path)) is not None:
        return None, {"needed": False, "why": f"{rc} sets [blas] ldflags already"}
    try:
        info = numpy_info() if numpy_info else numpy_blas(python, ctx.env, ctx.runner)
    except Unanswered as why:  # nothing written: Theano's own import says what it misses
        return None, {"needed": None, "unanswered": True,
                      "why": f"could not ask {python}'s numpy for its BLAS: {why}"}
    if info is None:  # no Theano 1.0.5 runs there: the Theano the config serves is elsewhere
        return None, {"needed": None, "unanswered": True,
                      "why": f"not judged: numpy.distutils cannot be imported by {python}, so "
                             "no Theano 1.0.5 runs there; where Theano runs under another "
                             "interpreter with numpy 1.22 or later, it needs [blas] ldflags to "
                             "import (`cudnn-setup theanorc --python THAT` writes it)"}
    if info.has_blas_opt_info:
        return None, {"needed": False, "why": f"numpy {info.numpy} has blas_opt_info"}
    found = find_blas(ctx.env, ctx.runner)
    flags = BlasFlags(found.ldflags, f"numpy {info.numpy} has no blas_opt_info, which Theano "
                                     f"1.0.5 reads at import unless ldflags is set; {found.why}")
    return flags, {"needed": True, "ldflags": flags.ldflags, "why": flags.why,
                   **({"unanswered": True} if found.unanswered else {})}


def numpy_asked_early(ctx: Context, python: str, explicit: Path | None
                      ) -> Later[NumpyBlas | None] | None:
    """numpy_blas started on a thread now, for a command that writes Theano's config later;
    None where a config Theano reads sets [blas] ldflags already (nothing to ask)."""
    if ldflags_set_in(ctx, theanorc_path(ctx, explicit)) is not None:
        return None
    return Later(numpy_blas, python, ctx.env, ctx.runner)


def theano_import_blocked(ctx: Context, python: str) -> dict | None:
    """doctor's finding where `python`'s Theano 1.0.5 stops at import under the user's config
    files and THEANO_FLAGS: its numpy has no blas_opt_info and nothing sets [blas] ldflags
    (what the theano check sees by running Theano, told from two short questions)."""
    try:
        if "blas.ldflags" in map(flag_name, theano_flags(ctx.env.get("THEANO_FLAGS", ""))):
            return None
    except ValueError:  # doctor lists flags that cannot be parsed as a problem of their own
        return None
    if any(_sets_ldflags(rc) for rc in config_files(ctx.env, ctx.home)):
        return None
    try:
        if not has_theano(python, ctx.env, ctx.runner):
            return None
        info = numpy_blas(python, ctx.env, ctx.runner)
    except Unanswered:
        return None  # not known: nothing is claimed
    if info is None or info.has_blas_opt_info:
        return None
    return {"severity": WARN, "check": "theano-config",
            "message": f"`import theano` fails in {python}: its numpy {info.numpy} has no "
                       "blas_opt_info, which Theano 1.0.5 reads unless [blas] ldflags is set, "
                       "and no config it reads (nor THEANO_FLAGS) sets it",
            "fix": f"run `{theanorc_for(python)}`"}


def ldflags_set_in(ctx: Context, path: Path) -> Path | None:
    """The first of Theano's config files (and `path`, the one to write) that sets ldflags."""
    return next((rc for rc in (*config_files(ctx.env, ctx.home), path) if _sets_ldflags(rc)),
                None)


def _sets_ldflags(path: Path) -> bool:
    return "blas.ldflags" in (_settings_in(path) or {})
