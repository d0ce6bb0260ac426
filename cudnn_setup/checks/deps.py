"""The `deps` check: every library a cuDNN needs, found (or not) the way the dynamic loader finds it.

For every cuDNN library in the directory programs load it from, each DT_NEEDED entry
(recursively) and each library its code opens with dlopen() at run time (the sonames it keeps
as strings: libcublasLt.so.12, libnvrtc.so.%d, libz.so.1, libcuda.so.1, its own sub-libraries)
is resolved as glibc's ld.so would in the user's environment: LD_LIBRARY_PATH, the requesting
library's RUNPATH/RPATH with $ORIGIN, the ldconfig cache, the default directories
(facts/ldresolve/). Version templates ("libnvrtc.so.%d.%d") are filled with the CUDA version
cuDNN reports it was built for (cudnnGetCudartVersion), cuDNN's own names with its version.

How a missing dependency is rated, and why:

| missing | rating | why |
|---|---|---|
| any DT_NEEDED entry (libz.so.1, a sub-library, anything) | fail | ld.so refuses to load the library that lists it, so nothing in it can be called |
| libz.so.1 (either way) | fail | libcudnn_graph.so.9 / libcudnn_cnn_infer.so.8 list it as DT_NEEDED: cuDNN does not load |
| a cuDNN sub-library opened at run time | fail | cuDNN returns CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED, or aborts (8.9) |
| libcublasLt.so.N / libcublas.so.N | fail | the legacy convolution API (cudnnConvolutionForward, what Theano and most frameworks call), RNN and multi-head attention fail when cuDNN opens it |
| libnvrtc.so.N, libnvrtc-builtins.so | warn | only runtime-compiled (fusion) engines need it; precompiled engines still run |
| libcuda.so.1, with an NVIDIA driver present | fail | nothing runs on the GPU |
| libcuda.so.1, no NVIDIA driver on the machine | skip | nothing to run on; not something a cuDNN install can fix |
| libcask_profile_interface.so | skip | an optional profiling hook, loaded only when CASK_INJECTION64_PATH asks |
| a run-time name this tool does not know | warn | it may guard an optional feature; the name and who asks are reported |

The check fails when any dependency rated fail is missing, warns when only warn-rated ones
are, and passes otherwise (naming the skip-rated ones it could not find). Each missing one is
reported with the libraries that need it, what breaks, and fixes for this machine: a directory
on this machine that has it (to add to LD_LIBRARY_PATH or ld.so.conf), the package of this
distribution's manager for the CUDA major cuDNN was built for, and the pip wheel.
"""
from __future__ import annotations

import glob
import os
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

from msgspec import Struct, field
from msgspec.structs import asdict

from cudnn_setup.records import replace
from cudnn_setup.probing.driver import driver_present as machine_has_driver
from cudnn_setup.probing.load_answer import LoadAnswer
from cudnn_setup.child import Runner
from cudnn_setup.installation.model import Installation
from cudnn_setup.facts import cudnn as gen
from cudnn_setup.facts.composition import cudnn_stem
from cudnn_setup.facts import dependencies as D
from cudnn_setup.facts.ldresolve.closure import Dependency, closure
from cudnn_setup.facts.ldresolve.environment import Environment
from cudnn_setup.facts.ldresolve.runtime_names import Versions
from cudnn_setup.facts.loader import loader_environment
from cudnn_setup.parallel import at_once
from cudnn_setup.state.view import command_line
from cudnn_setup.installation.built_for import built_for
from cudnn_setup.report import FAIL, PASS, SKIP, WARN, Check
from cudnn_setup.text import plural

if TYPE_CHECKING:
    from cudnn_setup.checks.check_facts import CheckFacts

NAME = "deps"
_RANK = {FAIL: 2, WARN: 1, SKIP: 0}
MAX_SHOWN = 4  # missing dependencies named in the one-line detail; data lists them all


def versions_for(inst: Installation, load_data: LoadAnswer | None) -> Versions:
    """cuDNN's version and the CUDA it was built for: what the load probe asked the library
    (cudnnGetVersion), else the installation's version; the CUDA from `built_for`."""
    cudnn = load_data.cudnn if load_data is not None else None
    return Versions(cudnn=cudnn or inst.version, cuda=built_for(inst, load_data).version)


def roots_of(inst: Installation) -> list[Path]:
    """Each cuDNN library by the name programs load it by (its SONAME in lib_dir), else the file."""
    out = []
    for lib in inst.libraries:
        stem = gen.library_stem(lib.name)
        soname = gen.expected_soname(stem, gen.library_file_version(lib.name),
                                     inst.generation) if stem else None
        link = inst.lib_dir / soname if soname else None
        out.append(link if link is not None and link.exists() else lib)
    return out


def _load_order(inst: Installation, roots: list[Path]) -> tuple[list[Path], list[Path]]:
    """(opened first, opened after the run-time names): libcudnn opens its sub-libraries
    itself (8 and 9), so a program loads libcudnn and cuDNN loads the rest, in its order and
    by its names (facts/cudnn.names_opened); a library nothing names is opened by path last.
    Loading each sub-library by its .so.9 link on its own would fail where cuDNN does not."""
    main = [r for r in roots if gen.library_stem(r.name) == "libcudnn"]
    if not main or inst.generation not in (gen.V8_EARLY, gen.V8_LATE, gen.V9):
        return roots, []
    return main, [r for r in roots if r not in main]


def _own_dir_unsearched(deps: Sequence[Dependency], lib_dir: Path) -> bool:
    """Whether a cuDNN sub-library libcudnn opens at run time was found nowhere while a file of
    one of its names is in `lib_dir`."""
    for d in deps:
        if d.kind == "runtime" and not d.resolution.found and \
                (cudnn_stem(d.name) or "").startswith("libcudnn_") and \
                any((lib_dir / c).exists() for c in d.candidates or (d.name,)):
            return True
    return False


def likely_dirs(inst: Installation, env: Mapping[str, str]) -> list[Path]:
    """Directories where a missing CUDA library often is without the loader knowing: CUDA roots
    ($CUDA_HOME, $CUDA_PATH, $CUDA_ROOT, /usr/local/cuda*, /opt/cuda), and for a pip wheel the
    other nvidia/*/lib directories of its site-packages."""
    bases = [env.get(k) for k in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT")]
    bases += [str(inst.root.path)] + sorted(glob.glob("/usr/local/cuda*")) + ["/opt/cuda"]
    dirs: list[str] = []
    for base in filter(None, bases):
        dirs += [os.path.join(base, "lib64"), os.path.join(base, "lib")]
        dirs += sorted(glob.glob(os.path.join(glob.escape(base), "targets", "*", "lib")))
    if inst.origin == "wheel":
        dirs += sorted(glob.glob(os.path.join(glob.escape(str(inst.lib_dir.parent.parent)), "*", "lib")))
    return [Path(d) for d in dict.fromkeys(dirs) if os.path.isdir(d)]


def rate(kind: str, name: str, driver_present: bool) -> str:
    """fail, warn or skip for a dependency of this kind that is missing (see the table above)."""
    if kind in ("needed", "root"):
        if gen.so_base(name) == "libcuda.so" and not driver_present:
            return SKIP
        return FAIL
    return D.severity(name, driver_present)


class Entry(Struct):
    """One dependency by name: who needs it, how, and whether the loader finds it."""

    name: str
    kind: str  # needed | runtime | root
    candidates: tuple[str, ...]
    needed_by: list[str] = field(default_factory=list)
    missing_for: list[str] = field(default_factory=list)
    path: str | None = None
    via: str | None = None
    error: str | None = None
    severity: str | None = None
    what_breaks: str | None = None
    fixes: list[dict] = field(default_factory=list)

    @property
    def found(self) -> bool:
        return not self.missing_for

    def to_dict(self) -> dict:
        need = D.classify(self.name)
        return {"name": self.name, "needed_by": self.needed_by, "kind": self.kind,
                "found": self.found, "path": self.path, "via": self.via,
                "candidates": list(self.candidates), "component": need.component if need else None,
                "needed_for": need.needed_for if need else None, "severity": self.severity,
                "missing_for": self.missing_for, "error": self.error,
                "what_breaks": self.what_breaks, "fixes": self.fixes}


def group(deps: Iterable[Dependency]) -> list[Entry]:
    """One Entry per library name, in the order the loader first asked for it."""
    out: dict[str, Entry] = {}
    for d in deps:
        if d.kind == "root" and d.resolution.found:
            continue
        entry = out.get(d.name)
        if entry is None:
            entry = out[d.name] = Entry(d.name, d.kind, d.candidates or (d.name,))
        elif d.kind == "needed":
            entry.kind = "needed"  # needed at load time by someone: the stronger need
        who = d.requester or d.name
        if who not in entry.needed_by:
            entry.needed_by.append(who)
        if d.resolution.found:
            entry.path = entry.path or d.resolution.path
            entry.via = entry.via or d.resolution.via
        else:
            entry.missing_for.append(who)
            entry.error = entry.error or d.resolution.error
    return list(out.values())


def what_breaks(entry: Entry, lib_dir: Path) -> str:
    need = D.classify(entry.name)
    who = ", ".join(sorted({os.path.basename(p) for p in entry.missing_for}))
    if entry.kind == "root":
        return f"{who} itself cannot be loaded ({entry.error})"
    if entry.kind == "needed":
        text = f"ld.so refuses to load {who}, so nothing in it can be called"
        return text + (f"; {entry.name} is needed for {need.needed_for}" if need else "")
    if need is None:
        return (f"whatever {who} opens it for at run time ({entry.name} is not a library this "
                "tool knows)")
    return f"{need.needed_for}: {need.why}"


def fixes_for(entry: Entry, cuda_version: str | None, manager: str | None,
              search: Sequence[Path], lib_dir: Path, available: D.Availability | None = None,
              wheel_cudnn: bool = False, with_deps: str | None = None,
              repair: str | None = None) -> list[D.Fix]:
    """Ways to provide the missing library; `with_deps`: the install command that would place
    it with cuDNN from the package index (a root this tool manages), offered first after a
    directory that has it, for the libraries a wheel provides; `repair`: the command that puts
    a managed install's own files back (offered for a missing cuDNN library instead of a
    reinstall)."""
    found_in = D.find_elsewhere(entry.candidates, search)
    out = D.fixes(entry.name, cuda_version, manager, found_in, available, wheel_cudnn)
    need = D.classify(entry.name)
    if with_deps and need is not None and need.wheel:
        at = sum(1 for f in out if f.how == "directory")
        out.insert(at, D.Fix("with-deps", with_deps, f"places {need.component} from the "
                             "package index into the root, in one transaction with cuDNN"))
    if entry.name.startswith("libcudnn") and not found_in and repair:
        out.append(D.Fix("repair", repair, f"{entry.name} is not in {lib_dir}: repair puts "
                         "back what cudnn-setup installed, from the same bytes"))
    elif entry.name.startswith("libcudnn") and not found_in:
        out.append(D.Fix("reinstall", f"reinstall this cuDNN: {entry.name} is not in {lib_dir}",
                         "`cudnn-setup install ARCHIVE` puts every sub-library in place"))
    return out


def check_deps(inst: Installation, facts: CheckFacts) -> Check:
    """Every library cuDNN needs resolved as the loader would, from the command's
    environment; the package manager it may ask for fixes is a child that runs beside
    coherence's."""
    machine = facts.machine
    return check_deps_with(inst, facts.env, load_data=machine.load(inst).answer,
                           loader=machine.loader(),
                           driver_present=machine_has_driver(machine.driver()),
                           runner=facts.runner)


def check_deps_with(inst: Installation, env: Mapping[str, str], *,
                    load_data: LoadAnswer | None = None, driver_present: bool | None = None,
                    loader: Environment | None = None,
                    distro_id: tuple[str, str] | None = None,
                    search_dirs: Sequence[Path] | None = None,
                    packages: D.Availability | None = None, runner: Runner | None = None) -> Check:
    """The `deps` check of `inst` for a program started from `env`.

    `load_data`: the load probe's answer (cudnnGetVersion, cudnnGetCudartVersion) when it ran;
    `driver_present`: whether this machine has an NVIDIA driver (default: the kernel module's
    /proc entry); `loader`: the loader's environment (default: from `env`, the real ldconfig
    cache and ld.so); `distro_id`: (ID, ID_LIKE) of os-release (default: read by `distro`);
    `search_dirs`: where to look for a missing library (default: likely_dirs); `packages`:
    which package names this machine's repositories have (default: its package manager asked
    from its cache, a child found on `env`'s PATH, with a time limit, through `runner`)."""
    if not inst.libraries:
        return Check(NAME, SKIP, f"no cuDNN library in {inst.lib_dir}: nothing to resolve")
    if driver_present is None:
        driver_present = machine_has_driver()
    loader = loader or loader_environment(env)
    versions = versions_for(inst, load_data)
    roots = roots_of(inst)
    first, after = _load_order(inst, roots)
    deps = closure(first, loader, versions, after=after)
    if after and _own_dir_unsearched(deps, inst.lib_dir):
        # libcudnn does not find its own directory here (no RUNPATH $ORIGIN, not on the path):
        # the loader check says so and how to fix it; judged as a program given that fix.
        loader = replace(loader, ld_library_path=":".join(
            p for p in (loader.ld_library_path, str(inst.lib_dir)) if p))
        deps = closure(first, loader, versions, after=after)
    entries = group(deps)
    missing = [e for e in entries if not e.found]
    manager = _manager(distro_id) if missing else None
    search = list(search_dirs) if search_dirs is not None else (likely_dirs(inst, env) if missing else [])
    internal = [e for e in missing if _driver_internal(e)]
    comp = inst.composition() if inst.generation else None
    not_in_flavour = comp.optional if comp else {}
    available = _asked_once(packages or (lambda m, names: D.query_packages(m, names, env,
                                                                          runner=runner)))
    if manager is not None:
        available = _ask_together(available, missing, versions.cuda, manager, search, inst)
    # a root this tool manages: the same release again, its libraries from the package index
    with_deps = (command_line(f"install {inst.version} --from pypi --with-deps", inst.root.path)
                 if inst.manifest is not None and inst.version else None)
    repair = command_line("repair", inst.root.path) if inst.manifest is not None else None
    for e in missing:
        e.severity = SKIP if e in internal or _outside_flavour(e, not_in_flavour) \
            else rate(e.kind, e.name, driver_present)
        e.what_breaks = what_breaks(e, inst.lib_dir)
        e.fixes = [asdict(f) for f in fixes_for(e, versions.cuda, manager, search, inst.lib_dir,
                                              available, inst.origin == "wheel", with_deps,
                                              repair)]
    data = {"lib_dir": str(inst.lib_dir), "libraries": [str(r) for r in roots],
            "cudnn_version": versions.cudnn, "cuda_version": versions.cuda,
            "driver_present": driver_present, "ld_library_path": loader.ld_library_path,
            "package_manager": manager, "dependencies": [e.to_dict() for e in entries],
            "composition": comp.to_dict() if comp else None}
    worst = max((e.severity or SKIP for e in missing), key=lambda s: _RANK[s], default=SKIP)
    shown = sorted((e for e in missing if e.severity != SKIP),
                   key=lambda e: -_RANK[e.severity or SKIP])
    if worst in (FAIL, WARN):
        parts = [_line(e) for e in shown[:MAX_SHOWN]]
        if len(shown) > MAX_SHOWN:
            parts.append(f"{len(shown) - MAX_SHOWN} more in data.dependencies")
        fixable = next((e for e in shown if e.fixes), None)
        if fixable is not None:
            data["hint"] = f"{fixable.name}: {fixable.fixes[0]['text']}"
        return Check(NAME, worst, "; ".join(parts), data)
    found = [e for e in entries if e.found]
    detail = _found_sentence(len(found), len(roots), inst.lib_dir)
    skipped = [e for e in missing if e.severity == SKIP and e not in internal]
    if skipped:
        detail += "; not found, and not needed here: " + "; ".join(
            f"{e.name} ({_skip_reason(e, driver_present, not_in_flavour)})" for e in skipped)
    if internal:  # a real driver names dozens (EGL, X11, Vulkan, Tegra): counted, listed in data
        who = sorted({os.path.basename(p) for e in internal for p in e.needed_by})
        detail += (f"; {len(internal)} more not found that only {', '.join(who[:3])}"
                   f"{' and others' if len(who) > 3 else ''} open at run time, for features "
                   f"cuDNN does not use (e.g. {internal[0].name}; all in data.dependencies)")
    return Check(NAME, PASS, detail, data)


def _found_sentence(found: int, roots: int, lib_dir: Path) -> str:
    """What was found, in words whose number agrees with the counts."""
    who = f"{plural(roots, 'cuDNN library', 'cuDNN libraries')} in {lib_dir}"
    verb = "needs" if roots == 1 else "need"
    if found == 0:
        return f"the {who} {verb} no other library at load or run time"
    what = "the one library" if found == 1 else f"all {found} libraries"
    return f"found {what} that the {who} {verb} at load and run time"


def _line(e: Entry) -> str:
    who = ", ".join(sorted({os.path.basename(p) for p in e.missing_for}))
    how = "DT_NEEDED" if e.kind == "needed" else "opened at run time" if e.kind == "runtime" else "root"
    fix = "; " + fix_text(e.fixes) if e.fixes else ""
    need = D.classify(e.name)
    what = f"{need.component}: {need.why}" if need else e.what_breaks
    return f"{e.name} not found ({how} by {who}) [{e.severity}] — {what}{fix}"


def fix_text(fixes: list[dict]) -> str:
    """Every fix of a dependency, in order, with what the JSON says of each: the human output
    gives the same fixes as `data.dependencies[].fixes`."""
    def one(f: dict) -> str:
        return f["text"] + (f" ({f['detail']})" if f.get("detail") else "")
    if len(fixes) == 1:
        return "fix: " + one(fixes[0])
    return "fixes, in order: " + "; ".join(f"{i}) {one(f)}" for i, f in enumerate(fixes, 1))


def _ask_together(available: D.Availability, missing: list[Entry], cuda: str | None,
                  manager: str, search: Sequence[Path], inst: Installation) -> D.Availability:
    """The package manager asked once for every name the missing libraries' fixes ask about
    (each question is a child that loads the manager's cache: most of a second with apt,
    whatever the number of names), and each fix answered from that one reply. The names are
    learnt by working the fixes out once with no answers; more than one query's worth
    (D.MAX_ASKED) are asked in several, side by side."""
    wanted: dict[str, None] = {}

    def note(m: str, names) -> None:
        wanted.update(dict.fromkeys(names))
        return None

    for e in missing:
        fixes_for(e, cuda, manager, search, inst.lib_dir, note, inst.origin == "wheel")
    names = list(wanted)
    chunks = [tuple(names[i:i + D.MAX_ASKED]) for i in range(0, len(names), D.MAX_ASKED)]
    replies = at_once([partial(available, manager, c) for c in chunks])
    reply_of = {n: reply for chunk, reply in zip(chunks, replies) for n in chunk}

    def answer(m: str, asked) -> dict[str, bool] | None:
        if m != manager or any(n not in reply_of for n in asked):
            return available(m, asked)  # not among the names learnt: asked as it comes
        got: dict[str, bool] = {}
        for n in asked:
            reply = reply_of[n]
            if reply is None:  # its query could not be made: nothing is known of it
                return None
            if n in reply:
                got[n] = reply[n]
        return got

    return answer


def _asked_once(available: D.Availability) -> D.Availability:
    """The package manager asked at most once per set of names in one check."""
    memo: dict = {}

    def ask(manager: str, names):
        key = (manager, tuple(names))
        if key not in memo:
            memo[key] = available(manager, names)
        return memo[key]

    return ask


def _driver_internal(e: Entry) -> bool:
    """A name that only libraries outside cuDNN open at run time, and that this tool does not
    know: the driver's own optional pieces (libcuda.so.1 names EGL, Tegra and NvSci libraries
    it opens for graphics and embedded features), nothing cuDNN asks for."""
    return (e.kind == "runtime" and D.classify(e.name) is None
            and not any(os.path.basename(p).startswith("libcudnn") for p in e.needed_by))


def _outside_flavour(e: Entry, not_in_flavour) -> bool:
    """A cuDNN sub-library opened at run time that this release's flavour does without (the
    JIT flavour's libcudnn still names the legacy API's sub-libraries)."""
    return e.kind == "runtime" and cudnn_stem(e.name) in not_in_flavour


def _skip_reason(e: Entry, driver_present: bool, not_in_flavour=None) -> str:
    stem = cudnn_stem(e.name)
    if not_in_flavour and e.kind == "runtime" and stem in not_in_flavour:
        return f"not part of this cuDNN's JIT flavour: {not_in_flavour[stem]}"
    if gen.so_base(e.name) == "libcuda.so" and not driver_present:
        return "no NVIDIA driver on this machine"
    need = D.classify(e.name)
    return need.why if need else "optional"


def _manager(distro_id: tuple[str, str] | None) -> str | None:
    if distro_id is None:
        try:
            distro_id = D.this_distro()
        except (ImportError, OSError):
            return None
    return D.package_manager(*distro_id)
