"""The `coherence` check: every sub-library that loading libcudnn.so.N pulls in comes from the
same directory and is the same version as libcudnn itself.

cuDNN 8 and 9 are a front library and sub-libraries (ops, cnn, adv, graph, …) that it and
they load by SONAME. The loader finds each by the usual search (LD_LIBRARY_PATH before the
library's RUNPATH $ORIGIN, then the ldconfig cache), so with a second cuDNN on the machine a
sub-library can come from the other copy: cuDNN then reports
CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH, "version libcudnn_ops_infer.so.8 not defined", or
aborts. This check works in the USER's environment, as given (nothing is prepended to
LD_LIBRARY_PATH: that would hide exactly this problem):

1. where each sub-library would come from, by emulating the loader for a process that opens
   libcudnn.so.N from the installation's directory (facts/ldresolve/);
2. the real loader, in a child process (probes/sublibs.py): libcudnn is loaded, then each
   sub-library is dlopened with RTLD_NOW in a forked child of its own, so one that aborts or
   hangs costs only its own entry; what mapped, its version and dlerror() come back, with the
   result of cuDNN's own cudnn<Sub>VersionCheck() where libcudnn exports one (those load the
   sub-library the way cuDNN does; 2001/2002 are SUBLIBRARY_LOADING_FAILED and
   SUBLIBRARY_VERSION_MISMATCH).

cuDNN 9 opens a sub-library by its full file name first (facts/cudnn.names_opened) and graph
and ops before the rest, whose DT_NEEDED entries ld.so then matches to them by SONAME: the
probe calls cuDNN's own graph and ops checks first (--first), and each entry says the name it
was opened under (`opened_as`), so a missing .so.9 link fails here only where it fails cuDNN.
A version is only ever reported with the file it was read from. For the JIT flavour, the
sub-libraries it does without that the loader would find in another copy are named too: cuDNN
opens them when a client calls that API, and mixes the copies.

Fails when a sub-library is taken from another directory or is another version (naming both
paths and versions), cannot be found, cannot be loaded (its dlerror), kills the child that
loads it (the signal), or cuDNN's own check says so. Whatever the child prints or does becomes
data: the report never breaks.

Which sub-libraries there are comes from the release itself (Installation.composition). On a
machine without an NVIDIA driver (checks/driver.driver_present, the rule deps uses too), a
sub-library that lists libcuda.so.1 as DT_NEEDED (libcudnn_engines_runtime_compiled.so.9 of
9.28) cannot be loaded by anyone: it is not opened, and is judged on everything else: where
the loader takes it from, the version its file carries, and every other DT_NEEDED entry of it
found as the loader would; the missing driver is a skip in its entry, named in the detail.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from cudnn_setup.probing.answer_values import shown
from cudnn_setup.checks.deps import versions_for
from cudnn_setup.probing.driver import driver_present as machine_has_driver
from cudnn_setup.probing.load_answer import LoadAnswer
from cudnn_setup.installation.model import Installation
from cudnn_setup.probing.sublib_answer import SublibsAnswer, SubLibraryAnswer
from cudnn_setup.probing.probe import loads_key, run_probe, stdlib_probe
from cudnn_setup.child import Runner
from cudnn_setup.facts import cudnn as gen
from cudnn_setup.facts.ldresolve.closure import closure
from cudnn_setup.facts.ldresolve.environment import Environment
from cudnn_setup.facts.ldresolve.loadable import ElfObject
from cudnn_setup.facts.ldresolve.process import Process
from cudnn_setup.facts.ldresolve.runtime_names import Versions
from cudnn_setup.facts.ldresolve.search import Resolution
from cudnn_setup.facts.loader import loader_environment
from cudnn_setup.state.view import command_line
from cudnn_setup.report import FAIL, PASS, SKIP, Check
from cudnn_setup.text import plural

if TYPE_CHECKING:
    from cudnn_setup.checks.check_facts import CheckFacts

NAME = "coherence"
TIMEOUT = 600.0  # every sub-library in a child of its own, each limited to 60 s by the probe
STATUS = {0: "CUDNN_STATUS_SUCCESS", 2001: "CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED",
          2002: "CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH"}
# Problems of one sub-library often cause others' (a sub-library from another copy leaves the
# ones that need it with undefined symbols): the detail names causes first.
RANK = {"other-copy": 0, "other-version": 1, "missing": 2, "crashed": 3, "unloadable": 4,
        "unreported": 5, "version-check": 6}


def sub_sonames(inst: Installation) -> list[str]:
    """The SONAMEs of the sub-libraries this cuDNN loads, as its own libraries name them
    (none before 8.0)."""
    if not inst.generation or inst.major is None:
        return []
    return [s for s in (gen.expected_soname(stem, str(inst.major), inst.generation)
                        for stem in inst.composition().sub_libraries) if s]


DRIVER = "libcuda.so.1"


def needs_absent_driver(res: Resolution,
                        loader: Environment) -> list[tuple[str, str, str]] | None:
    """For a sub-library the loader finds: None when it does not need libcuda.so.1 (itself or
    through its DT_NEEDED entries) or libcuda.so.1 is found; else its other DT_NEEDED entries,
    each resolved as the loader would, that are not found: (name, who lists it, the loader's
    error). ld.so stops at the first entry it cannot find, so each entry is tried on its own."""
    if res.path is None:  # not found
        return None
    proc = Process(loader)
    _, item = proc.find(res.path, None)
    if item is None:
        return None
    needs_driver, missing = False, []
    for name in item.obj.needed:
        got, _, needed = proc.load_with_needed(name, item)
        for who, r in [(item, got)] + list(needed):
            if r.found:
                continue
            if r.name == DRIVER:
                needs_driver = True
            else:
                missing.append((r.name, who.opened_as, r.error or "not found"))
    return missing if needs_driver else None


def judge_unloaded(soname: str, res: Resolution, missing: list[tuple[str, str, str]],
                   main_dir: str | None, main_version: str | None, main_name: str) -> dict:
    """A sub-library that needs the absent driver, judged from its files: where it comes from,
    the version its file name carries, its other DT_NEEDED entries."""
    assert res.path is not None  # needs_absent_driver answered for it: the loader finds it
    real = os.path.realpath(res.path)
    version = gen.library_file_version(os.path.basename(real)) or \
        gen.library_file_version(os.path.basename(res.path))
    sub: dict[str, Any] = {
           "soname": soname, "path": res.path, "via": res.via, "mapped": None,
           "directory": _real_dir(res.path), "version": version, "version_from": "file name",
           "loaded": None, "dlerror": None, "error": None, "status": SKIP,
           "skip": f"not loaded: it lists {DRIVER} as DT_NEEDED and this machine has no NVIDIA "
                   "driver; judged from its file", "problems": []}
    problems: list[str] = sub["problems"]
    rank: list[int] = []
    for name, who, error in missing:
        rank.append(RANK["unloadable"])
        problems.append(f"{soname} ({res.path}) cannot be loaded even with a driver: "
                        f"{name}, which {os.path.basename(who)} lists as DT_NEEDED, "
                        f"is not found ({shown(error)})")
    if sub["directory"] and main_dir and sub["directory"] != main_dir:
        rank.append(RANK["other-copy"])
        problems.append(f"{soname} comes from another copy: {res.path} (via {res.via}) while "
                        f"{main_name} is in {main_dir}")
    elif version and main_version and not gen.same_release(version, main_version):
        rank.append(RANK["other-version"])
        problems.append(f"{soname} is cuDNN {version} ({res.path}) but {main_name} is cuDNN "
                        f"{main_version} ({main_dir})")
    sub["rank"] = min(rank) if rank else None
    return sub


def outside_flavour(inst: Installation) -> list[str]:
    """The SONAMEs of sub-libraries this release's libcudnn opens at run time that its flavour
    does without (the JIT flavour's legacy API: ops, cnn, adv): absent by design, but a copy
    the loader finds elsewhere is loaded beside this one when a client calls that API."""
    if not inst.generation or inst.major is None:
        return []
    return [s for s in (gen.expected_soname(stem, str(inst.major), inst.generation)
                        for stem in inst.composition().optional) if s]


def judge_outside(soname: str, res: Resolution, main_dir: str | None,
                  main_version: str | None) -> dict | None:
    """A sub-library outside the flavour that the loader would find: from another copy (or of
    another version), that copy is mixed with this one. Judged from its file, not loaded; the
    version named is the one its own file name carries."""
    if res.path is None:  # not found
        return None
    real = os.path.realpath(res.path)
    version = gen.library_file_version(os.path.basename(real))
    where = _real_dir(res.path)
    if where == main_dir and (not version or not main_version
                              or gen.same_release(version, main_version)):
        return None
    return {"soname": soname, "path": res.path, "via": res.via, "mapped": None,
            "opened_as": res.name, "directory": where, "version": version,
            "version_from": "file name", "loaded": None, "not_in_flavour": True,
            "problems": [], "rank": RANK["other-copy"]}


def would_load(target: Path, sonames: list[str], loader: Environment,
               versions: Versions) -> dict[str, Resolution]:
    """Where each sub-library comes from in a process that dlopens `target`: the first request
    for it in load order (DT_NEEDED of another sub-library, or a run-time name), else a dlopen
    of the SONAME by libcudnn itself."""
    # Only cuDNN's own libraries open its sub-libraries: the names the driver or cuBLAS open
    # at run time (dozens, for graphics and embedded features) are not searched for.
    deps = closure([target], loader, versions, scanned_if=_cudnn_own)
    out: dict[str, Resolution] = {}
    for soname in sonames:
        stem = gen.so_base(soname)
        hit = next((d for d in deps if d.kind != "root"
                    and any(c.startswith(stem) and c[len(stem):len(stem) + 1] in ("", ".")
                            for c in (d.candidates or (d.name,)))), None)
        if hit is not None:
            out[soname] = hit.resolution
    missing = [s for s in sonames if s not in out]
    if missing:
        proc = Process(loader)
        _, main, _ = proc.load_with_needed(str(target), None)
        for soname in missing:
            out[soname] = proc.find(soname, main)[0]
    return out


def _cudnn_own(obj: ElfObject) -> bool:
    return (obj.soname or os.path.basename(obj.path)).startswith("libcudnn")


def version_of(value) -> str | None:
    """A version as the probe reports it (cudnnGetVersion's integer, or digits of a file name)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and 0 < value < 10**7:
        return gen.version_text(value)
    if isinstance(value, str) and value.replace(".", "").isdigit():
        return value
    return None


def _real_dir(path: str | None) -> str | None:
    return os.path.dirname(os.path.realpath(path)) if isinstance(path, str) and path else None


def check_coherence(inst: Installation, facts: CheckFacts) -> Check:
    """Each sub-library loaded in a child beside libcudnn, from the command's environment."""
    machine = facts.machine
    return check_coherence_with(inst, facts.env, loader=machine.loader(),
                                load_data=machine.load(inst).answer, runner=facts.runner,
                                driver_present=machine_has_driver(machine.driver()))


def check_coherence_with(inst: Installation, env: Mapping[str, str], *,
                         loader: Environment | None = None, load_data: LoadAnswer | None = None,
                         python: str | None = None, timeout: float = TIMEOUT,
                         runner: Runner | None = None, driver_present: bool | None = None) -> Check:
    """The `coherence` check of `inst` for a program started from `env` (the user's, as is).

    `loader`: the loader's environment for the emulation (default: from `env`, the real
    ldconfig cache and ld.so); `load_data`: the load probe's answer, for cuDNN's version;
    `python`: the interpreter that runs the probe (default: this one); `driver_present`:
    whether this machine has an NVIDIA driver (default: probing/driver.driver_present)."""
    target = inst.soname_path()
    if target is None:
        return Check(NAME, SKIP, f"no libcudnn in {inst.lib_dir}: nothing to load")
    sonames = sub_sonames(inst)
    if not sonames:
        return Check(NAME, SKIP, f"cuDNN {inst.version or '?'} is one library: sub-libraries "
                     "came with cuDNN 8.0")
    loader = loader or loader_environment(env)
    versions = versions_for(inst, load_data)
    outside = outside_flavour(inst)
    resolved = would_load(target, sonames + outside, loader, versions)
    if driver_present is None:
        driver_present = machine_has_driver()
    unloadable = {} if driver_present else {
        s: deps for s in sonames
        if (deps := needs_absent_driver(resolved[s], loader)) is not None}
    probed = [s for s in sonames if s not in unloadable]
    args = [resolved[s].path or s for s in probed]  # the path found, else the name
    # What a client's first call loads before the rest (cuDNN 9: graph, then ops), loaded
    # the same way first, so that the others find them by SONAME as they do in the client.
    present, first = set(inst.composition().present), []
    for stem in gen.OPENED_FIRST.get(inst.generation or "", ()):
        function = gen.version_check_function(stem)
        if function and stem in present and not any(_stem(s) == stem for s in unloadable):
            first += ["--first", function]
    # The runner skips it when loading libcudnn hung earlier; its own 60 s per sub-library
    # are the probe's, not a hang of libcudnn's.
    key = loads_key(target)
    result = run_probe(stdlib_probe("sublibs") + [*first, str(target), *args], timeout, dict(env),
                       python, runner=runner, key=key, remember=False)
    data: dict = {"library": {"path": str(target), "directory": _real_dir(str(target))},
                  "ld_library_path": loader.ld_library_path, "sublibraries": []}
    if result.data is None:
        return Check(NAME, FAIL, f"the sub-library probe {shown(result.failure())}", data)
    probe = SublibsAnswer.read(result.data)
    # Libraries that load their sub-libraries by a path of their own making (not by SONAME
    # through the loader's search) show where they took them when asked their version: open
    # those files, not a SONAME the loader cannot find.
    by_cudnn = mapped_by_stem(probe.cudnn_mapped)
    retry = [i for i, s in enumerate(probed) if not resolved[s].found and _stem(s) in by_cudnn]
    if retry:
        for i in retry:
            args[i] = by_cudnn[_stem(probed[i])]
        again = run_probe(stdlib_probe("sublibs") + [*first, str(target), *args], timeout,
                          dict(env), python, runner=runner, key=key, remember=False)
        if again.data is not None:
            probe = SublibsAnswer.read(again.data)
    main_dir = _real_dir(probe.mapped or probe.path or str(target))
    main_version = version_of(probe.version) or versions.cudnn or inst.version
    data["library"].update(version=main_version, mapped=probe.mapped, loaded=probe.loaded)
    if not probe.loaded:
        return Check(NAME, FAIL, f"{target.name} itself cannot be loaded: "
                     f"{shown(probe.dlerror or probe.error or 'no reason given')}", data)
    entries = probe.sublibraries
    if probe.opened_first:
        data["opened_first"] = [c.to_dict() for c in probe.opened_first]
    # what cuDNN opened while the probe called its graph and ops checks first: those parts are
    # already loaded when their own entries are probed
    first_opened = {_stem(n): os.path.basename(n) for c in probe.opened_first for n in c.opened}
    problems: list[str] = []
    checked = 0
    got_by = {s: entries[i] for i, s in enumerate(probed) if i < len(entries)}
    for soname in sonames:
        if soname in unloadable:
            sub = judge_unloaded(soname, resolved[soname], unloadable[soname], main_dir,
                                 main_version, target.name)
        else:
            sub = judge(soname, resolved[soname], got_by.get(soname, SubLibraryAnswer()), main_dir,
                        main_version, target.name, by_cudnn.get(_stem(soname)),
                        first_opened.get(_stem(soname)))
        data["sublibraries"].append(sub)
        problems += sub["problems"]
        checked += sub.get("version_check", {}).get("status") == 0
    strays = [stray for soname in outside if (stray := judge_outside(
        soname, resolved[soname], main_dir, main_version)) is not None]
    groups: dict[tuple, list[dict]] = {}
    for sub in strays:
        groups.setdefault((sub["directory"], sub["version"], sub["via"]), []).append(sub)
    for (where, version, via), subs in groups.items():
        listed = ", ".join(sub["soname"] for sub in subs)
        one = len(subs) == 1
        subs[0]["problems"].append(
            f"{listed} {'is' if one else 'are'} not part of this JIT release, but cuDNN opens "
            f"{'it' if one else 'them'} for the calls that flavour does without (the legacy "
            f"API, the precompiled engines) and the loader finds {'it' if one else 'them'} in "
            f"another copy: {where} (cuDNN {version or '?'} by the file "
            f"name{'' if one else 's'}, via {via}); a client making those calls gets "
            f"CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH (cuDNN {main_version or '?'} is in "
            f"{main_dir})")
        problems += subs[0]["problems"]
    data["sublibraries"] += strays
    if problems:
        ordered = sorted((s for s in data["sublibraries"] if s["problems"]), key=lambda s: s["rank"])
        problems = list(dict.fromkeys(p for s in ordered for p in s["problems"]))
        hint = hint_for(ordered, main_dir, loader.ld_library_path,
                        command_line("repair", inst.root.path) if inst.manifest else None)
        if hint:
            data["hint"] = hint
        return Check(NAME, FAIL, "; ".join(problems), data)
    detail = (f"{target.name} (cuDNN {main_version or '?'}) and its "
              f"{plural(len(sonames), 'sub-library', 'sub-libraries')} load from {main_dir}, "
              f"all the same version")
    names = [s["opened_as"] for s in data["sublibraries"] if s.get("opened_as")]
    if names and not gen.opens_by_soname(inst.generation):
        other = [n for n in names if gen.library_file_version(n) != main_version]
        if not other:
            detail += (f"; cuDNN opens them by their full file names ({names[0]}, …), not the "
                       f".so.{inst.major} links")
        else:  # a wheel's files carry no full version: cuDNN falls back to the .so.N names
            shown_names = ", ".join(other[:3]) + (", …" if len(other) > 3 else "")
            detail += (f"; cuDNN opens {len(other)} of them by a name without their full "
                       f"version ({shown_names})")
    if checked:
        detail += f"; cuDNN's own version checks pass ({checked})"
    if unloadable:
        detail += (f"; not loaded, as this machine has no NVIDIA driver and "
                   f"{', '.join(unloadable)} list{'s' if len(unloadable) == 1 else ''} {DRIVER} "
                   "as DT_NEEDED (skip): judged from the files (same directory and version, "
                   "every other dependency found)")
    return Check(NAME, PASS, detail, data)


def _stem(name: str) -> str:
    return gen.so_base(os.path.basename(name))


def mapped_by_stem(paths) -> dict[str, str]:
    """{library stem: file} of the libcudnn* files a probe saw cuDNN map."""
    if not isinstance(paths, list):
        return {}
    return {_stem(p): p for p in paths if isinstance(p, str) and p.startswith("/")}


def judge(soname: str, res: Resolution, answer: SubLibraryAnswer | Mapping,
          main_dir: str | None, main_version: str | None, main_name: str,
          by_cudnn: str | None = None, first_opened: str | None = None) -> dict:
    """One sub-library: where it comes from (cuDNN's own loading where it showed it, else the
    loader's search), what the real loader did with that file, what is wrong. `answer`: the
    probe's entry for it (its JSON object is read into a SubLibraryAnswer); `first_opened`: the
    name cuDNN opened it under when the probe called its checks first (graph, ops)."""
    got = SubLibraryAnswer.read(answer)
    check = got.version_check
    own = mapped_by_stem(check.mapped if check else None).get(_stem(soname)) or by_cudnn
    path = own or got.mapped or res.path
    version, version_from = version_of(got.version), got.version_from
    if own and got.mapped and os.path.realpath(own) != os.path.realpath(got.mapped):
        # The version was read from another file than the one cuDNN opened: only the name of
        # the file cuDNN opened is known to describe it.
        version = gen.library_file_version(os.path.basename(os.path.realpath(own)))
        version_from = "file name"
    via = res.via  # how the loader's search reaches it; cuDNN's own loading, where it differs
    if own and not (res.path and _real_dir(res.path) == _real_dir(own)):
        via = "loaded by cuDNN itself"
    opened = [n for n in (check.opened if check else []) if _stem(n) == _stem(soname)]
    opened_as = os.path.basename(opened[0]) if opened else first_opened or (
        res.name if res.found and not own else None)
    sub: dict[str, Any] = {"soname": soname, "path": res.path, "via": via, "mapped": path,
           "opened_as": opened_as, "directory": _real_dir(path), "version": version,
           "version_from": version_from, "loaded": got.loaded, "dlerror": got.dlerror,
           "error": got.error, "problems": []}
    problems: list[str] = sub["problems"]
    rank: list[int] = []  # what kind of problem comes first: the cause before what it causes
    if not res.found and not own:
        rank.append(RANK["missing"])
        problems.append(f"{soname} cannot be found where {main_name} looks for it "
                        f"({shown(res.error or 'not found')})"
                        + (f"; the real loader: {shown(got.dlerror)}" if got.dlerror else ""))
    elif got.error:
        rank.append(RANK["crashed"])
        problems.append(f"loading {soname} ({path}) {shown(got.error)}")
    elif got.loaded is False:
        rank.append(RANK["unloadable"])
        problems.append(f"{soname} ({path}) cannot be loaded: {shown(got.dlerror or '?')}")
    elif not got.reported:
        rank.append(RANK["unreported"])
        problems.append(f"{soname}: the probe did not report on it")
    else:
        where = sub["directory"]
        if where and main_dir and where != main_dir:
            rank.append(RANK["other-copy"])
            problems.append(f"{soname} comes from another copy: {path} (cuDNN {version or '?'}, "
                            f"via {via}) while {main_name} is in {main_dir} (cuDNN "
                            f"{main_version or '?'})")
        elif version and main_version and not gen.same_release(version, main_version):
            if check is not None and check.passed and sub["version_from"] != "cudnnGetVersion":
                # cuDNN 9.19's sub-libraries still carry cudnn_adv_infer_version and
                # cudnn_ops_infer_version constants of 9.13.0, while cuDNN's own version check
                # (the one behind SUBLIBRARY_VERSION_MISMATCH) accepts them: its word stands.
                sub["note"] = (f"its {sub['version_from']} constant says {version}; cuDNN's own "
                               f"{check.function}() accepts it with {main_name}")
            else:
                rank.append(RANK["other-version"])
                # a version constant can be stale (9.19's say 9.13.0): the detail says it is one
                source = "" if version_from in ("cudnnGetVersion", "file name", None) else \
                    f", by its {version_from} constant"
                problems.append(f"{soname} is cuDNN {version} ({path}{source}) but {main_name} is "
                                f"cuDNN {main_version} ({main_dir})")
    if check is not None:
        sub["version_check"] = check.to_dict()
        status = check.status
        function = shown(str(check.function), 80)
        elsewhere = [m for m in check.mapped if main_dir and _real_dir(m) != main_dir]
        if check.error:
            problems.append(f"cuDNN's own {function}() {shown(check.error)}")
        elif status not in (0, None):
            problems.append(f"cuDNN's own {function}() returned "
                            f"{STATUS.get(status, status)}")
        if elsewhere:
            rank.append(RANK["other-copy"])
            problems.append(f"cuDNN's own {function}() loaded "
                            f"{', '.join(elsewhere)}, outside {main_dir}")
    sub["problems"] = list(dict.fromkeys(problems))
    sub["rank"] = min(rank, default=RANK["version-check"]) if problems else None
    return sub


def hint_for(subs: list[dict], main_dir: str | None, ld_library_path: str | None,
             repair: str | None = None) -> str:
    """What to do about the first sub-library with a problem (subs: causes first); `repair`:
    the command that puts a managed install's own files back, for one missing or broken in
    its directory."""
    for sub in subs:
        if not sub["problems"]:
            continue
        other, via = sub.get("directory"), sub.get("via") or ""
        if other and main_dir and other != main_dir:
            if via == "LD_LIBRARY_PATH":
                entry = os.path.dirname(sub.get("path") or "") or other
                return (f"LD_LIBRARY_PATH ({ld_library_path}) puts another cuDNN ({entry}) first: "
                        f"put {main_dir} before it, or take {entry} out")
            return (f"{sub['soname']} is not taken from {main_dir} ({via or 'found elsewhere'}): "
                    "reinstall this cuDNN so that every sub-library is beside libcudnn")
        fix = f"run `{repair}`" if repair else "reinstall this cuDNN"
        if sub.get("path") is None:
            return f"{sub['soname']} is missing: " + (fix if repair else f"{fix} into {main_dir}")
        return f"{sub['soname']} in {main_dir} is broken or of another release: {fix}"
    return ""
