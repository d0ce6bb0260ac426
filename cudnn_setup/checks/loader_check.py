"""The `loader` layer: which copy of libcudnn a program started without help would load."""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from cudnn_setup.installation.model import Installation
from cudnn_setup.facts import loader
from cudnn_setup.report import PASS, SKIP, WARN, Check

if TYPE_CHECKING:
    from cudnn_setup.checks.check_facts import CheckFacts


def check_loader(inst: Installation, facts: CheckFacts) -> Check:
    """Whether a program started from the command's environment loads this cuDNN, from the
    loader's cache the command's facts read; the fix is what the command advises (install:
    instead of LD_LIBRARY_PATH where that would break a framework)."""
    environment = facts.machine.loader()
    cache = loader.named(environment.cache)
    return without_cache(check_loader_with(inst, facts.env, facts.conf,
                                           fix=facts.loader_fix(), cache=cache),
                         environment.cache_error)


def without_cache(check: Check, why: str | None) -> Check:
    """The check as judged when the loader cache could not be read (`why`; None: it was):
    said in its detail and hint. Only ours found first on LD_LIBRARY_PATH, which the loader
    searches before its cache, still passes; any other pass is a warning, since a copy the
    cache lists may come first."""
    if why is None or check.status == SKIP:
        return check
    copies = check.data.get("copies") or []
    settled = check.status == PASS and loader.found_before_the_cache(copies[0])
    clause, hint = loader.cache_unread(why)
    detail = f"{check.detail}; {clause}" + ("" if settled else
                                             ", and a copy it lists may be loaded first")
    return Check(check.name, WARN if check.status == PASS and not settled else check.status,
                 detail, {**check.data, "cache_error": why, "hint": hint})


def check_loader_with(inst: Installation, env: Mapping[str, str],
                      conf: Path = Path("/etc/ld.so.conf"), fix: str | None = None,
                      cache: list[tuple[str, str]] | None = None) -> Check:
    """Whether a program started from `env` loads this cuDNN; `fix` replaces the advice to put
    its directory on LD_LIBRARY_PATH (install gives one when that would break a framework);
    `cache`: the loader cache's (soname, path) pairs, when the caller has read it."""
    ours = inst.soname_path()
    if ours is None:
        return Check("loader", SKIP, "no libcudnn installed")
    return judge_loader(ours, os.path.realpath(ours), inst.lib_dir,
                        loader.copies_of(ours.name, env, conf, cache),
                        fix or loader.ld_library_path_line(inst.lib_dir),
                        "" if fix else other_fix(inst))


def judge_loader(ours: Path, ours_real: str, lib_dir: Path, copies: list[dict], fix: str,
                 also: str = "") -> Check:
    """The `loader` check from what was seen, with no I/O: `copies` (facts/loader.copies_of)
    in the loader's order, each {path, real, version, via}; `ours` the installed libcudnn by
    its SONAME, `ours_real` the file it resolves to; `fix` the advice when programs would not
    load ours, and `also` (other_fix) the other way, said when none would find it."""
    data = {"name": ours.name, "ours": str(ours), "copies": copies}
    if not copies:
        return Check("loader", WARN, f"a program started without help would not find "
                     f"{ours.name}: {lib_dir} is not on the loader path; fix: {fix}{also}",
                     data)
    first = copies[0]
    others = [c for c in copies if c["real"] != ours_real]
    listing = "; ".join(f"{c['path']} ({c['version'] or '?'}, via {c['via']})" for c in others)
    if first["real"] != ours_real:
        return Check("loader", WARN, f"programs would load {first['path']} (cuDNN "
                     f"{first['version'] or '?'}, via {first['via']}), not ours in {lib_dir}; "
                     f"fix: {fix}" + (f"; other copies: {listing}" if listing else ""), data)
    detail = f"programs load ours ({first['path']}, via {first['via']})"
    if others:
        detail += f"; other copies on this machine: {listing}"
    return Check("loader", PASS, detail, data)


def other_fix(inst: Installation) -> str:
    """The loader fix besides LD_LIBRARY_PATH that applies to this cuDNN, if any.

    `install --ldconfig` registers a root's library dir; it does nothing for a cuDNN the tool
    does not place: a pip wheel's directory (it moves with every upgrade of the wheel, and is
    found by the frameworks through their own RPATH), or a directory given with --lib-dir."""
    if inst.origin is None:
        return " (or, as root, install with --ldconfig)"
    if inst.origin == "wheel":
        return (" (a wheel's directory is set per program, not registered with ldconfig: pip "
                "moves it with every upgrade)")
    return (f" (or, as root, list {inst.lib_dir} in a file under /etc/ld.so.conf.d/ and run "
            "ldconfig)")
