"""What a change to where programs find libraries would make each framework load, before the
change is made or advised: a directory put first on LD_LIBRARY_PATH, or registered with
ldconfig.

A new LD_LIBRARY_PATH is tried for real: the framework probes run again with it. The loader's
documented order says RPATH comes before LD_LIBRARY_PATH, yet a framework can still end up with
the LD_LIBRARY_PATH copy (a library of it without that RPATH opens cuDNN first, as PyTorch did
on an H200 with an older cuDNN 9.14 first on the path); only running it shows that. Registering
a directory with ldconfig needs root and changes every program, so it is worked out from the
loader's order instead (checks/framework_loader.py): a framework whose cuDNN came through
LD_PRELOAD, RPATH, LD_LIBRARY_PATH, RUNPATH or a full-path dlopen keeps it; one whose copy came
from the cache or a default directory, or that found none, would take the directory's copy. A
framework that loads cuDNN only on a GPU (TensorFlow, JAX without one) is judged by where the
libraries that need libcudnn would find it.
"""
from __future__ import annotations

import os
from typing import Callable, Mapping, Sequence

from msgspec import Struct
import msgspec

from cudnn_setup.checks.framework_loader import BEFORE_CACHE, WHY_FULL_PATH, ChildLoader
from cudnn_setup.probing.framework_probe import library_version
from cudnn_setup.checks.framework_entry import FrameworkEntry, LoadedCopy
from cudnn_setup.checks.frameworks_check import file_version, framework_report, framework_reports
from cudnn_setup.child import Runner
from cudnn_setup.facts import framework_rules as rules
from cudnn_setup.facts.ldresolve.environment import Environment
from cudnn_setup.facts.ldresolve.ldconfig import CacheEntry, registered

LD_LIBRARY_PATH, LDCONFIG = "ld_library_path", "ldconfig"


class Change(Struct, frozen=True):
    """A change to where programs find libraries: `kind` is LD_LIBRARY_PATH or LDCONFIG."""

    kind: str
    directory: str

    def describe(self) -> str:
        if self.kind == LD_LIBRARY_PATH:
            return f"prepend {self.directory} to LD_LIBRARY_PATH"
        return f"register {self.directory} with ldconfig"


class WhatIf(Struct):
    """What one framework would load after a change (the JSON's `frameworks_what_if` item):
    `loads_now` {path, version} and `would_load` {path, dir, version, why} or None;
    `affected`, `breaks`: None when not known; `status` by the framework's rule;
    `safe_alternative` only when it breaks."""

    framework: str
    version: str | None
    change: str
    built_for: str | None
    loads_now: dict | None
    would_load: dict | None = None
    affected: bool | None = None
    breaks: bool | None = None
    status: str = rules.UNKNOWN
    rule: str = ""
    reason: str = ""
    safe_alternative: str | None = None

    def to_dict(self) -> dict:
        return msgspec.structs.asdict(self)


def prepend_to_ld_library_path(directory: str | os.PathLike) -> Change:
    return Change(LD_LIBRARY_PATH, os.path.abspath(directory))


def register_with_ldconfig(directory: str | os.PathLike) -> Change:
    return Change(LDCONFIG, os.path.abspath(directory))


def what_if(python: str, env: Mapping[str, str], change: Change,
            timeout: float | None = None, *, search: Callable[[], Environment] | None = None,
            current: list[FrameworkEntry] | None = None,
            runner: Runner | None = None) -> list[WhatIf]:
    """For each framework in `python`: the cuDNN it would load after `change`, and whether that
    breaks it by its own rule. `current` is a framework_report() of `python` under `env`, if one
    was made already; with no framework in it nothing more is run."""
    return looked_ahead(python, env, change, timeout, search=search, current=current,
                        runner=runner)[1]


def looked_ahead(python: str, env: Mapping[str, str], change: Change,
                 timeout: float | None = None, *,
                 search: Callable[[], Environment] | None = None,
                 current: list[FrameworkEntry] | None = None,
                 runner: Runner | None = None) -> tuple[list[FrameworkEntry], list[WhatIf]]:
    """What the frameworks of `python` load now (`current`, or a framework_report() made here)
    and what_if() of `change`. A new LD_LIBRARY_PATH is tried in children started together with
    those of the report of now: neither waits for the other, so the two cost the time of one
    import of each framework (a framework whose import hangs costs one time limit)."""
    changed = _changed_env(env, change)
    if current is None and changed is not None:
        now, after_all = framework_reports(python, [env, changed], timeout, search=search,
                                           runner=runner)
        return now, _after_path_change(change, now, after_all, python, env, timeout)
    now = current if current is not None else framework_report(python, env, timeout,
                                                               search=search, runner=runner)
    if not now:
        return now, []
    if change.kind == LD_LIBRARY_PATH:
        after = now if changed is None else framework_report(python, changed, timeout,
                                                              search=search, runner=runner)
        return now, _after_path_change(change, now, after, python, env, timeout)
    if change.kind == LDCONFIG:
        entries = registered(change.directory)
        return now, [_deduced(change, e, entries, python, env, timeout) for e in now]
    raise ValueError(f"unknown change {change.kind!r}")


def _changed_env(env: Mapping[str, str], change: Change) -> dict[str, str] | None:
    """The environment with `change` made, for a change that is tried by running the
    frameworks; None for one that is worked out (ldconfig) or changes nothing: a directory
    already first on LD_LIBRARY_PATH gives the loader the same directories in the same order,
    so every framework loads what it loads now (a re-install, once the advice was taken)."""
    if change.kind != LD_LIBRARY_PATH:
        return None
    old = env.get("LD_LIBRARY_PATH")
    if already_first(old, change.directory):
        return None
    return {**env, "LD_LIBRARY_PATH": change.directory + (f":{old}" if old else "")}


def _after_path_change(change: Change, now: list[FrameworkEntry], after: list[FrameworkEntry],
                       python: str, env: Mapping[str, str],
                       timeout: float | None) -> list[WhatIf]:
    by_name = {e.name: e for e in after}
    return [_tried(change, e, by_name.get(e.name), python, env, timeout) for e in now]


def already_first(ld_library_path: str | None, directory: str) -> bool:
    """Whether `directory` is already the first entry of LD_LIBRARY_PATH (the same directory,
    links resolved; an entry the loader expands, such as $ORIGIN, or the empty one, which is
    the working directory, is not taken for it)."""
    if not ld_library_path:
        return False
    first = ld_library_path.replace(";", ":").split(":", 1)[0]
    if not first or "$" in first or not os.path.isabs(first):
        return False
    return first == directory or os.path.realpath(first) == os.path.realpath(directory)


def _tried(change: Change, now: FrameworkEntry, after: FrameworkEntry | None, python: str,
           env: Mapping[str, str], timeout: float | None) -> WhatIf:
    out = _base(change, now)
    if after is None:
        out.reason = "it is not importable with that change"
        return out
    if after.loader is None:  # the probe died or hung with the change
        if now.loader is None:
            out.reason = f"its cuDNN use is not known: {after.reason}"
            return out
        out.affected = True
        out.breaks = True
        out.reason = f"with that change: {after.reason}"
        return _advise(out, now, change)
    loaded = after.cudnn_loaded
    if loaded is None:
        return _predicted(change, out, now, after, after.loader.loader, None, python, env,
                          timeout)
    out.would_load = _public(loaded)
    before = now.cudnn_loaded.version if now.cudnn_loaded else None
    moved = _path(now) != loaded.path
    # Same libcudnn.so.N, other version: the loader still finds the shim through the framework's
    # RPATH, but the sub-libraries the shim opens come from the new directory first.
    mixed = not moved and before is not None and before != loaded.version
    out.affected = moved or mixed
    status, because = rules.judge(now.name, now.cudnn_built_for, loaded.version)
    if after.compatible is False:
        status = rules.INCOMPATIBLE
    out.status = status
    out.breaks = status == rules.INCOMPATIBLE
    what = f"cuDNN {loaded.version} from {loaded.dir} ({loaded.detail})"
    if mixed:
        out.reason = (f"libcudnn comes from {loaded.dir} as before ({loaded.detail}), "
                         f"but cuDNN would report {loaded.version} instead of {before}: its "
                         f"sub-libraries would be found in {change.directory} first: {because}")
    else:
        out.reason = (f"would load {what}: {because}" if moved else
                         f"unchanged: it still loads {what}")
    return _advise(out, now, change)


def _deduced(change: Change, now: FrameworkEntry, entries: Sequence[CacheEntry], python: str,
             env: Mapping[str, str], timeout: float | None) -> WhatIf:
    out = _base(change, now)
    current = now.cudnn_loaded
    if now.loader is None:
        out.reason = "its cuDNN use is not known (the probe gave no answer)"
        return out
    if current and current.why in BEFORE_CACHE:
        out.would_load = _public(current)
        out.affected = False
        out.breaks = False
        out.status = rules.COMPATIBLE if now.compatible else rules.UNKNOWN
        out.reason = ("unchanged: its cuDNN is opened by full path, which no search path "
                         "changes" if current.why == WHY_FULL_PATH else
                         f"unchanged: its cuDNN is found through {current.detail}, which the "
                         "loader reads before the ldconfig cache")
        return out
    facts = now.loader
    soname = facts.soname
    entry = next((e for e in entries if e.name == soname), None) if soname else None
    if entry is None:
        out.affected = False
        out.breaks = False
        out.reason = f"unchanged: {change.directory} holds no {soname or 'libcudnn'}"
        return out
    registered = facts.loader.with_cache_first([entry])
    return _predicted(change, out, now, now, registered, os.path.realpath(entry.path), python,
                      env, timeout)


def _predicted(change: Change, out: WhatIf, now: FrameworkEntry, entry: FrameworkEntry,
               loader: ChildLoader, target: str | None, python: str, env: Mapping[str, str],
               timeout: float | None) -> WhatIf:
    """The copy `loader` would give the libraries of `entry`'s child that need libcudnn;
    `target`, when given, is the copy the change brings in."""
    facts = entry.loader
    soname = facts.soname if facts else None
    if facts is None or not soname:
        out.affected = False
        out.breaks = False
        out.reason = f"unchanged: {entry.reason}"
        return out
    requesters: list[str | None] = [o for o in (*facts.mapped, *facts.consumers)
                                    if loader.needs(o, soname)] or [None]
    hits = [h for h in (loader.first_hit(soname, r) for r in requesters) if h]
    hit = next((h for h in hits if h.path == target), None) if target else (
        hits[0] if hits else None)
    if hit is None or (target is None and hit.path == _path(now)):
        found = hits[0] if hits else None
        out.affected = False
        out.breaks = False
        out.reason = "unchanged: it finds " + (
            f"{found.path} ({found.detail()}) first" if found else f"no {soname} either way")
        return out
    version = file_version(hit.path) or rules.parse_version(
        library_version(python, hit.path, env, timeout))
    out.would_load = {"path": hit.path, "dir": os.path.dirname(hit.path),
                      "version": rules.version_text(version), "why": hit.why}
    status, because = rules.judge(now.name, now.cudnn_built_for, version)
    when = "" if now.cudnn_loaded else " once it loads cuDNN (it has not here)"
    out.affected = True
    out.status = status
    out.breaks = status == rules.INCOMPATIBLE
    out.reason = (f"would load cuDNN {rules.version_text(version) or '(version unknown)'} "
                  f"from {os.path.dirname(hit.path)} through {hit.detail()}{when}: {because}")
    return _advise(out, now, change)


def _base(change: Change, now: FrameworkEntry) -> WhatIf:
    current = now.cudnn_loaded
    return WhatIf(now.name, now.version, change.describe(), now.cudnn_built_for,
                  {"path": current.path, "version": current.version} if current else None,
                  rule=now.rule)


def _advise(out: WhatIf, now: FrameworkEntry, change: Change) -> WhatIf:
    if out.breaks:
        out.safe_alternative = rules.safe_alternative(now.cudnn_built_for, change.directory)
    return out


def _path(entry: FrameworkEntry) -> str | None:
    return entry.cudnn_loaded.path if entry.cudnn_loaded else None


def _public(loaded: LoadedCopy) -> dict:
    return {"path": loaded.path, "dir": loaded.dir, "version": loaded.version, "why": loaded.why}


def what_if_warnings(entries: Sequence[WhatIf]) -> list[str]:
    """One line per framework that a change would break, to print next to the advice."""
    return [f"{e.framework} {e.version or ''}".rstrip() +
            f" would break: {e.reason}. Instead: {e.safe_alternative}"
            for e in entries if e.breaks]
