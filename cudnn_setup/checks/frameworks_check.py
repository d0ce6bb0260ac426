"""Which cuDNN the deep-learning frameworks of an interpreter load, why that copy, and whether it
is right for them: the `frameworks` check and its JSON.

Each framework is imported in a child process of its own (probes/framework_loads.py, run by
probing/framework_probe.py), never here. The child reports what it could see from inside: the
framework's versions, the libcudnn files mapped into it and their cudnnGetVersion(), its loader
environment and every mapped shared object. Why the loader picked that copy is worked out here
with the loader's own search order (checks/framework_loader.py on facts/ldresolve/); what a
change to the loader's path would do is checks/framework_whatif.py.
"""
from __future__ import annotations

import os
import re
from functools import partial
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from cudnn_setup.probing.answer_values import Fields
from cudnn_setup.checks.framework_entry import FrameworkEntry, LoadedCopy, LoaderView
from cudnn_setup.checks.framework_loader import NO_SEARCH, ChildLoader, ElfFacts
from cudnn_setup.probing.framework_probe import Listed, Run, importable_frameworks, run
from cudnn_setup.child import Runner
from cudnn_setup.errors import SetupError
from cudnn_setup.facts import cudnn as gen
from cudnn_setup.facts import framework_rules as rules
from cudnn_setup.facts.ldresolve.environment import Environment
from cudnn_setup.facts.ldresolve.loadable import ElfObject
from cudnn_setup.installation.model import Installation
from cudnn_setup.parallel import at_once
from cudnn_setup.report import FAIL, PASS, SKIP, WARN, Check

if TYPE_CHECKING:
    from cudnn_setup.checks.check_facts import CheckFacts

NAME = "frameworks"
# The message XLA (TensorFlow, jaxlib) logs when its version check fails (cuda_dnn.cc).
XLA_MISMATCH = re.compile(r"Loaded runtime CuDNN library: (?P<loaded>\d+\.\d+\.\d+) but source "
                          r"was compiled with: (?P<built>\d+\.\d+\.\d+)")
def framework_report(python: str, env: Mapping[str, str], timeout: float | None = None, *,
                     search: Callable[[], Environment] | None = None,
                     runner: Runner | None = None) -> list[FrameworkEntry]:
    """One entry per framework importable in `python` (run with `env`): what it was built for,
    the cuDNN it loads, from where and why, and whether the pair is right by its own rule.
    Each framework runs in a child of its own, `timeout` seconds at most (None:
    framework_probe.DEFAULT_TIMEOUT). `search` waits for the
    loader's cache and facts (its default directories; facts/loader.loader_environment reads this
    machine's): it is called once the children have answered, so they start before the
    loader's own children are asked; without it, a copy found only
    through them is reported as opened by full path. Each entry's `loader` is for what_if();
    frameworks_json() gives the public form."""
    return framework_reports(python, [env], timeout, search=search, runner=runner)[0]


def framework_reports(python: str, envs: Sequence[Mapping[str, str]],
                      timeout: float | None = None, *,
                      search: Callable[[], Environment] | None = None,
                      runner: Runner | None = None) -> list[list[FrameworkEntry]]:
    """framework_report() of `python` under each of `envs`, every child of every environment
    started at once: each spends seconds importing its framework, and the environments differ
    only in where libraries are found, not in which frameworks are there (the list is made
    once, under the first, without importing any)."""
    elf = ElfFacts()
    listed = [f for f in importable_frameworks(python, envs[0], timeout, runner)
              if f.importable]
    runs = at_once([partial(run, python, [f.name], env, timeout, runner=runner)
                    for env in envs for f in listed])
    found = search() if search is not None else NO_SEARCH
    per_env = [runs[i * len(listed):(i + 1) * len(listed)] for i in range(len(envs))]
    return [[entry_of(f.name, f, got, found, elf) for f, got in zip(listed, got_env)]
            for got_env in per_env]


def entry_of(name: str, listed: Listed, got: Run, search: Environment,
             elf: ElfFacts) -> FrameworkEntry:
    """One framework's entry from its child's answer (`got`), every field checked."""
    rule = rules.rule_for(name)
    entry = FrameworkEntry(name, listed.version, rule.describe())
    answer = Fields(got.data, f"the {name} probe's answer")
    if got.data is None or not isinstance(answer.raw("framework"), dict):
        failure = got.failure or answer.text("error") or "no answer"
        entry.reason = f"importing {name} in a child process {failure}"
        if "libcudnn" in got.output:
            entry.reason += _cudnn_line(got.output)
        return entry
    fw = answer.fields("framework")
    entry.version = fw.text("version", 100) or entry.version
    exe = answer.text("exe", 4096)
    child_env = answer.fields("env")
    loader = ChildLoader({k: child_env.text(k, 65536) for k in ("LD_LIBRARY_PATH", "LD_PRELOAD")},
                         exe if exe and exe.startswith("/") else None, search, elf)
    mapped = fw.paths("mapped")
    consumers = [c for c in fw.paths("consumers", 400) if _needs_cudnn(elf(c))]

    built, built_source = _built_for(fw, got.output, consumers, elf)
    entry.cudnn_built_for = rules.version_text(built)
    entry.cudnn_built_for_source = built_source

    libraries = [lib for lib in fw.items("cudnn_libraries")
                 if (path := lib.text("path", 1 << 20)) is not None and path in mapped]
    main = [lib for lib in libraries
            if gen.library_stem(lib.need_text("path", 1 << 20), unversioned=True,
                                path=True) == "libcudnn"]
    runtime = rules.parse_version(fw.fields("runtime").raw("value"))
    chosen = next((lib for lib in main if runtime and lib_version(lib) == runtime), None) or (
        main[0] if main else None)
    entry.loader = LoaderView(loader, tuple(mapped), tuple(consumers),
                              _needed_soname(consumers, elf, chosen))
    error = fw.text("error", 1000)
    own = fw.fields("own_check")

    if chosen is None:
        reason = (fw.text("skip_reason") or (error and f"it failed: {error}") or
                  fw.fields("gpu").text("reason") or "it did not load cuDNN")
        if error and "libcudnn" in error:
            entry.status, entry.reason = FAIL, f"it could not load cuDNN: {error}"
        elif error:
            entry.status, entry.reason = WARN, reason
        else:
            entry.status, entry.reason = SKIP, f"cuDNN not loaded: {reason}"
        return entry

    path = os.path.realpath(chosen.need_text("path", 1 << 20))
    loaded = lib_version(chosen) or runtime or file_version(path) or file_version(path, 1)
    why = loader.explain(path, mapped, consumers)
    entry.cudnn_loaded = LoadedCopy(path, os.path.dirname(path), rules.version_text(loaded),
                                    why["why"], why["detail"], why.get("via"))
    mismatch = XLA_MISMATCH.search(got.output)
    status, because = rules.judge(name, built, loaded)
    if mismatch:  # the framework's own check said so, whatever the versions seen here
        status = rules.INCOMPATIBLE
    if status == rules.UNKNOWN and own.raw("status") == "passed" and fw.fields("ran").raw("ok"):
        status = rules.COMPATIBLE
        because += "; its own check passed (a cuDNN convolution ran)"
    entry.compatible = {rules.COMPATIBLE: True, rules.INCOMPATIBLE: False}.get(status)
    where = f"loads {entry.cudnn_loaded.version or 'an unknown version'} from " \
            f"{entry.cudnn_loaded.dir} ({why['detail']})"
    built_text = f"built against cuDNN {entry.cudnn_built_for}" if built else \
        "the cuDNN it was built against is not exposed"
    entry.reason = f"{built_text}, {where}: {because}"
    entry.status = {rules.COMPATIBLE: PASS, rules.INCOMPATIBLE: FAIL}.get(status, WARN)
    problems = [f"it logged: {mismatch.group(0)}"] if mismatch else []
    if own.raw("status") == "raised":
        problems.append(f"its own check raised: {own.text('message', 500)}")
    if error:
        problems.append(f"it failed: {error}")
    mixed = sorted({os.path.dirname(os.path.realpath(lib.need_text("path", 1 << 20)))
                    for lib in libraries})
    if len(mixed) > 1:
        problems.append("cuDNN libraries from several directories are mapped: " + ", ".join(mixed))
    if problems:
        entry.reason += "; " + "; ".join(problems)
        if entry.status == PASS:
            entry.status = WARN
    return entry


def _needs_cudnn(obj: ElfObject | None) -> bool:
    return obj is not None and any(n.startswith("libcudnn.so") for n in obj.needed)


def _needed_soname(consumers: Sequence[str], elf: ElfFacts,
                   chosen: Fields | None) -> str | None:
    if chosen is not None:
        obj = elf(os.path.realpath(chosen.need_text("path", 1 << 20)))
        if obj and obj.soname:
            return obj.soname
    for c in consumers:
        for n in _needed(elf, c):
            if n.startswith("libcudnn.so"):
                return n
    return None


def _needed(elf: ElfFacts, path: str) -> tuple[str, ...]:
    obj = elf(path)
    return obj.needed if obj else ()


def _built_for(fw: Fields, output: str, consumers: Sequence[str],
               elf: ElfFacts) -> tuple[rules.Version | None, str | None]:
    reported = fw.fields("built_for")
    built = rules.parse_version(reported.raw("value"))
    if built and len(built) >= 2:
        return built, reported.text("source")
    mismatch = XLA_MISMATCH.search(output)
    if mismatch:
        return rules.parse_version(mismatch["built"]), "its log: " + mismatch.group(0)[:200]
    if built:
        return built, reported.text("source")
    for c in consumers:
        for n in _needed(elf, c):
            version = gen.library_file_version(n)
            if version and gen.library_stem(n) == "libcudnn":
                return rules.parse_version(version.split(".")[0]), \
                    f"DT_NEEDED {n} of {os.path.basename(c)}"
    return None, None


def lib_version(lib: Fields) -> rules.Version | None:
    value = lib.raw("get_version")
    return rules.parse_version(value) if isinstance(value, int) else None


def file_version(path: str, parts: int = 2) -> rules.Version | None:
    """The version a file name carries (libcudnn.so.9.14.0), if it has at least `parts`."""
    number = gen.library_file_version(os.path.basename(path))
    version = rules.parse_version(number) if number else None
    return version if version and len(version) >= parts else None


def _cudnn_line(output: str) -> str:
    for line in reversed(output.splitlines()):
        if "libcudnn" in line:
            return f"; it said: {line.strip()[:300]}"
    return ""


def frameworks_json(entries: Sequence[FrameworkEntry]) -> list[dict]:
    """The `frameworks` list of the JSON output: JSON_FIELDS of each entry; cudnn_loaded is
    {path, dir, version, why, detail} or null."""
    return [e.to_dict() for e in entries]


def frameworks_check(entries: Sequence[FrameworkEntry], python: str | None = None) -> Check:
    """The `frameworks` check: fail if a framework loads a cuDNN its rule refuses, warn if one
    could not be judged, pass if every one that loads cuDNN is fine, skip if none does."""
    if not entries:
        where = f" in {python}" if python else ""
        return Check(NAME, SKIP, f"no deep-learning framework importable{where}")
    order = (FAIL, WARN, PASS, SKIP)
    status = min((e.status for e in entries), key=order.index)
    return Check(NAME, status, " | ".join(one_line(e) for e in entries),
                 {"python": python, "frameworks": frameworks_json(entries)})


def one_line(entry: FrameworkEntry) -> str:
    return f"{entry.name} {entry.version or ''}".rstrip() + f": {entry.reason}"


def check_frameworks(inst: Installation, facts: CheckFacts) -> Check:
    """The frameworks of the interpreter under test, from the command's facts (whose children
    may have answered a look-ahead already): which cuDNN each loads, and whether it is right."""
    if not facts.frameworks:
        return Check(NAME, SKIP, "--no-frameworks")
    return facts.machine.frameworks(facts.python).check


def frameworks_of(python: str, env: Mapping[str, str], timeout: float | None = None, *,
                  search: Callable[[], Environment] | None = None,
                  runner: Runner | None = None) -> tuple[Check, list[FrameworkEntry]]:
    """framework_report() as a check; an interpreter that cannot say what it has is a warn."""
    try:
        entries = framework_report(python, env, timeout, search=search, runner=runner)
    except SetupError as exc:
        return Check(NAME, WARN, exc.message), []
    return frameworks_check(entries, python), entries
