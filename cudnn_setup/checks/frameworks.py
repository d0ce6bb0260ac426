"""Which cuDNN the deep-learning frameworks of an interpreter load, why that copy, and whether it
is right for them; and what a change to the loader's path would make them load instead.

Each framework is imported in a child process of its own (probes/frameworks.py), never here. The
child reports what it could see from inside: the framework's versions, the libcudnn files mapped
into it and their cudnnGetVersion(), its loader environment and every mapped shared object. Why
the loader picked that copy is worked out here, from the ELF files (pyelftools) and the loader's
documented search order, see `_Loader`.
"""
from __future__ import annotations

import os
import platform
import re
import struct
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSegment
from elftools.elf.elffile import ELFFile

from cudnn_setup.checks.probe import probe_module, run_probe
from cudnn_setup.errors import SetupError, UsageError
from cudnn_setup.facts import frameworks as rules
from cudnn_setup.report import FAIL, PASS, SKIP, WARN, Check

DEFAULT_TIMEOUT = 180.0  # one framework: import, GPU start-up, one convolution
LIST_TIMEOUT = 60.0
LOG_TAIL = 256 * 1024  # bytes of a framework's own output kept for messages
MAX_OBJECTS = 4000  # mapped objects or consumers taken from one child
# Frameworks grab most of the GPU's memory at start unless told otherwise; the probe only needs
# a few kilobytes, and it must not starve the programs already running there.
_QUIET_GPU = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "TF_FORCE_GPU_ALLOW_GROWTH": "true"}

CUDNN_FILE = re.compile(r"^(?P<stem>libcudnn[a-z_]*)\.so(?P<ver>(?:\.\d+)*)$")
# The message XLA (TensorFlow, jaxlib) logs when its version check fails (cuda_dnn.cc).
_XLA_MISMATCH = re.compile(r"Loaded runtime CuDNN library: (?P<loaded>\d+\.\d+\.\d+) but source "
                           r"was compiled with: (?P<built>\d+\.\d+\.\d+)")

LD_LIBRARY_PATH, LDCONFIG = "ld_library_path", "ldconfig"
# Why a copy was loaded: the step of the loader's search that found it.
WHY_PRELOAD, WHY_RPATH, WHY_LD_PATH = "ld_preload", "rpath", "ld_library_path"
WHY_RUNPATH = "runpath"
WHY_CACHE, WHY_DEFAULT, WHY_FULL_PATH = "ld_cache", "default_dir", "full_path"
# Steps that come before the ldconfig cache: a copy found through them stays what a program
# loads whatever ldconfig registers.
_BEFORE_CACHE = (WHY_PRELOAD, WHY_RPATH, WHY_LD_PATH, WHY_RUNPATH, WHY_FULL_PATH)


@dataclass(frozen=True)
class LoaderSearch:
    """What the loader consults after LD_LIBRARY_PATH and RUNPATH: the ldconfig cache
    (soname → path, as `ldconfig -p` lists it, first entry winning) and its default
    directories. Passed in, so the caller decides how the cache is read."""

    cache: Mapping[str, str] = field(default_factory=dict)
    default_dirs: tuple[str, ...] = ()

    @classmethod
    def from_entries(cls, entries: Iterable[tuple[str, str]],
                     default_dirs: Sequence[str] = ()) -> "LoaderSearch":
        cache: dict[str, str] = {}
        for soname, path in entries:
            cache.setdefault(soname, path)
        return cls(cache, tuple(default_dirs))

    def with_directory(self, copies: Mapping[str, str]) -> "LoaderSearch":
        """The cache after registering a directory whose files provide `copies` (soname → path),
        read before any other directory holding the same names."""
        return LoaderSearch({**self.cache, **copies}, self.default_dirs)


@dataclass(frozen=True)
class Change:
    """A change to where programs find libraries: `kind` is LD_LIBRARY_PATH or LDCONFIG."""

    kind: str
    directory: str

    def describe(self) -> str:
        if self.kind == LD_LIBRARY_PATH:
            return f"prepend {self.directory} to LD_LIBRARY_PATH"
        return f"register {self.directory} with ldconfig"


def prepend_to_ld_library_path(directory: str | os.PathLike) -> Change:
    return Change(LD_LIBRARY_PATH, os.path.abspath(directory))


def register_with_ldconfig(directory: str | os.PathLike) -> Change:
    return Change(LDCONFIG, os.path.abspath(directory))


# ---------------------------------------------------------------------------------------------
# ELF facts, read here and never in the child

@dataclass(frozen=True)
class Dynamic:
    soname: str | None
    needed: tuple[str, ...]
    rpath: tuple[str, ...]  # raw entries, $ORIGIN unexpanded
    runpath: tuple[str, ...]


class _ElfCache:
    """DT_SONAME, DT_NEEDED, DT_RPATH and DT_RUNPATH of shared objects, read once per file."""

    def __init__(self) -> None:
        self._seen: dict[str, Dynamic | None] = {}

    def __call__(self, path: str) -> Dynamic | None:
        if path not in self._seen:
            self._seen[path] = _read_dynamic(path)
        return self._seen[path]


def _read_dynamic(path: str) -> Dynamic | None:
    """None for anything that is not a readable ELF shared object for this word size."""
    try:
        with open(path, "rb") as f:
            if f.read(4) != b"\x7fELF":
                return None
            f.seek(0)
            elf = ELFFile(f)
            if elf.elfclass != struct.calcsize("P") * 8:
                return None  # the loader skips objects of the other word size
            soname, needed, rpath, runpath = None, [], [], []
            for segment in elf.iter_segments():
                if not isinstance(segment, DynamicSegment):
                    continue
                for tag in segment.iter_tags():
                    kind = tag.entry.d_tag
                    if kind == "DT_NEEDED":
                        needed.append(tag.needed)
                    elif kind == "DT_SONAME":
                        soname = tag.soname
                    elif kind == "DT_RPATH":
                        rpath += tag.rpath.split(":")
                    elif kind == "DT_RUNPATH":
                        runpath += tag.runpath.split(":")
            return Dynamic(soname, tuple(needed), tuple(rpath), tuple(runpath))
    # A damaged or hostile file can break pyelftools in many ways; all mean "not usable".
    except (OSError, ELFError, ValueError, KeyError, IndexError, AssertionError, struct.error,
            UnicodeDecodeError, RecursionError):
        return None
    except Exception as exc:  # construct's own errors, which pyelftools does not wrap
        if type(exc).__module__.startswith("elftools"):
            return None
        raise


# ---------------------------------------------------------------------------------------------
# The loader's search, as ld.so(8) documents it (https://man7.org/linux/man-pages/man8/ld.so.8.html,
# "Finding shared objects") for a dependency without a slash, DT_NEEDED or dlopen(3)ed by name:
#   1. DT_RPATH of the object that needs it, then of its loaders up to the executable, only if
#      that object has no DT_RUNPATH;
#   2. LD_LIBRARY_PATH (read once, at start-up);
#   3. DT_RUNPATH of that object (for its direct dependencies only);
#   4. the ldconfig cache /etc/ld.so.cache;
#   5. the default directories (/lib, /usr/lib and their 64-bit and multiarch variants).
# Objects in LD_PRELOAD come first of all. A name that a loaded object already has as its
# soname is not searched again, and a name with a slash (dlopen of a full path, what torch, JAX
# and onnxruntime's preloading do for NVIDIA's wheels) is opened as is (dlopen(3),
# https://man7.org/linux/man-pages/man3/dlopen.3.html). $ORIGIN is the directory of the object
# whose entry it is; this follows the mapped file's real path, which differs from glibc's only
# when the object was loaded through a symlink in another directory.

@dataclass(frozen=True)
class _Hit:
    path: str  # real path of the file the step finds
    why: str
    via: str | None  # the object whose RPATH/RUNPATH it is
    entry: str | None  # the raw entry or directory that matched

    def detail(self) -> str:
        via = os.path.basename(self.via) if self.via else None
        return {
            WHY_PRELOAD: "listed in LD_PRELOAD",
            WHY_RPATH: f"DT_RPATH {self.entry} of {via}",
            WHY_LD_PATH: f"LD_LIBRARY_PATH entry {self.entry}",
            WHY_RUNPATH: f"RUNPATH {self.entry} of {via}",
            WHY_CACHE: "the ldconfig cache (/etc/ld.so.cache)",
            WHY_DEFAULT: f"the loader's default directory {self.entry}",
        }.get(self.why, self.why)


class _Loader:
    """What ld.so would do in one child: its LD_LIBRARY_PATH, LD_PRELOAD and executable."""

    def __init__(self, env: Mapping[str, str | None], exe: str | None, search: LoaderSearch,
                 elf: _ElfCache):
        self.exe, self.search, self.elf = exe, search, elf
        origin = os.path.dirname(exe) if exe else "/"
        self.ld_library_path = [d for d in (
            _expand(e, origin) for e in re.split(r"[:;]", env.get("LD_LIBRARY_PATH") or "") if e)
            if d]
        self.preload = {os.path.realpath(p) for p in re.split(r"[:\s]", env.get("LD_PRELOAD") or "")
                        if p.startswith("/")}

    def steps(self, requester: str | None) -> list[tuple[str, str, str | None, str]]:
        """(directory, why, via, raw entry) in search order for a name `requester` needs."""
        out: list[tuple[str, str, str | None, str]] = []
        dyn = self.elf(requester) if requester else None
        if not (dyn and dyn.runpath):
            for owner in dict.fromkeys(p for p in (requester, self.exe) if p):
                owner_dyn = self.elf(owner)
                if owner_dyn and not (owner != requester and owner_dyn.runpath):
                    out += [(d, WHY_RPATH, owner, e) for e, d in _entries(owner_dyn.rpath, owner)]
        out += [(d, WHY_LD_PATH, None, d) for d in self.ld_library_path]
        if dyn:
            out += [(d, WHY_RUNPATH, requester, e) for e, d in _entries(dyn.runpath, requester)]
        return out

    def first_hit(self, soname: str, requester: str | None,
                  search: LoaderSearch | None = None) -> _Hit | None:
        search = search or self.search
        for directory, why, via, entry in self.steps(requester):
            hit = self._file(os.path.join(directory, soname))
            if hit:
                return _Hit(hit, why, via, entry)
        cached = search.cache.get(soname)
        if cached and self._file(cached):
            return _Hit(self._file(cached), WHY_CACHE, None, cached)
        for directory in search.default_dirs:
            hit = self._file(os.path.join(directory, soname))
            if hit:
                return _Hit(hit, WHY_DEFAULT, None, directory)
        return None

    def _file(self, path: str) -> str | None:
        real = os.path.realpath(path)
        return real if os.path.isfile(real) and self.elf(real) is not None else None

    def explain(self, path: str, mapped: Sequence[str], extra: Sequence[str] = ()) -> dict:
        """Why the mapped file `path` is the copy this process got: {why, detail, via}."""
        real = os.path.realpath(path)
        if real in self.preload:
            return {"why": WHY_PRELOAD, "detail": "listed in LD_PRELOAD", "via": None}
        dyn = self.elf(real)
        soname = (dyn.soname if dyn and dyn.soname else os.path.basename(real))
        needing = [o for o in (*mapped, *extra) if soname in (self.elf(o) or _NONE).needed]
        openers = needing + [None] + [o for o in mapped if o not in needing and (
            self.elf(o) or _NONE).runpath + (self.elf(o) or _NONE).rpath]
        first_guess = None
        for requester in openers:
            hit = self.first_hit(soname, requester)
            if hit and hit.path == real:
                detail = hit.detail()
                if requester and requester not in needing:
                    detail += f" (it opens {soname} by name)"
                return {"why": hit.why, "detail": detail, "via": hit.via}
            if first_guess is None and hit and requester in needing + [None]:
                first_guess = hit
        detail = "opened by full path, as a framework preloading its wheel's copy does"
        if first_guess:
            detail += (f"; the loader's own search would have found {first_guess.path} "
                       f"through {first_guess.detail()}")
        return {"why": WHY_FULL_PATH, "detail": detail, "via": None}


_NONE = Dynamic(None, (), (), ())


def _expand(entry: str, origin: str) -> str | None:
    """An RPATH/RUNPATH/LD_LIBRARY_PATH entry as a directory; None when it cannot be resolved
    here ($LIB depends on the distribution, a relative entry on the process's directory)."""
    if "$LIB" in entry or "${LIB}" in entry:
        return None
    out = (entry.replace("${ORIGIN}", origin).replace("$ORIGIN", origin)
           .replace("${PLATFORM}", platform.machine()).replace("$PLATFORM", platform.machine()))
    return os.path.normpath(out) if os.path.isabs(out) else None


def _entries(raw: Sequence[str], owner: str) -> list[tuple[str, str]]:
    origin = os.path.dirname(os.path.realpath(owner))
    return [(e, d) for e, d in ((e, _expand(e, origin)) for e in raw if e) if d]


# ---------------------------------------------------------------------------------------------
# Running the probe

@dataclass
class _Run:
    data: dict | None
    failure: str | None  # how the child failed, one line, when it gave no answer
    output: str  # the tail of what the framework printed, decoded


def _child_env(env: Mapping[str, str]) -> dict[str, str]:
    out = dict(env)
    for key, value in _QUIET_GPU.items():
        out.setdefault(key, value)
    return out


def _run(python: str, args: list[str], env: Mapping[str, str], timeout: float,
         log: Path | None) -> _Run:
    argv = probe_module("frameworks") + args + (["--log", str(log)] if log else [])
    try:
        result = run_probe(argv, timeout, _child_env(env), python=python)
    except (UnicodeDecodeError, ValueError) as exc:  # output that could not be read back
        return _Run(None, f"its output could not be read ({exc})", _tail(log))
    output = _tail(log) + (result.stderr or "")[-LOG_TAIL:]
    data = result.data if isinstance(result.data, dict) else None
    if data is not None and data.get("probe") == "frameworks":
        return _Run(data, None, output)
    error = getattr(result, "error", None)
    if error is None and result.returncode is None and not result.timed_out:
        error = _last_line(result.stderr or "") or "unknown reason"  # it never ran
    if result.timed_out:
        how = f"did not finish in {timeout:.0f} s"
    elif error:
        how = f"could not be started: {error}"
    elif result.crashed:
        how = f"died of {result.crashed}"
    else:
        how = f"exited with status {result.returncode} without an answer"
    last = _last_line(output)
    return _Run(None, how + (f" (last output: {last})" if last else ""), output)


def _tail(log: Path | None) -> str:
    if log is None:
        return ""
    try:
        with open(log, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - LOG_TAIL))
            return f.read(LOG_TAIL).decode("utf-8", errors="replace")
    except OSError:
        return ""


def _last_line(output: str, limit: int = 300) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[-1][:limit] if lines else ""


def _strings(value: object, limit: int = MAX_OBJECTS) -> list[str]:
    """A list of absolute paths from a child's answer; anything else dropped."""
    if not isinstance(value, list):
        return []
    return [v for v in value[:limit] if isinstance(v, str) and v.startswith("/") and
            len(v) < 4096 and "\0" not in v]


def _str(value: object, limit: int = 300) -> str | None:
    return value[:limit] if isinstance(value, str) else None


def _dict(value: object) -> dict:
    return value if isinstance(value, dict) else {}


# ---------------------------------------------------------------------------------------------
# The report

def importable_frameworks(python: str, env: Mapping[str, str],
                          timeout: float = LIST_TIMEOUT) -> list[dict]:
    """[{name, importable, version, ...}] for the frameworks `python` could import; nothing is
    imported. Raises UsageError when `python` cannot be run, SetupError when it gives no list."""
    run = _run(python, ["--list"], env, min(timeout, LIST_TIMEOUT), None)
    if run.data is None:
        if run.failure and run.failure.startswith("could not be started"):
            raise UsageError(f"{python} {run.failure}", "give --python an interpreter that runs")
        raise SetupError(f"{python} could not list its frameworks: {run.failure}")
    listed = run.data.get("frameworks")
    if not isinstance(listed, list):
        raise SetupError(f"{python} gave no list of frameworks: {_str(run.data.get('error'))}")
    return [e for e in listed if isinstance(e, dict) and isinstance(e.get("name"), str)]


def framework_report(python: str, env: Mapping[str, str], timeout: float = DEFAULT_TIMEOUT, *,
                     search: LoaderSearch | None = None) -> list[dict]:
    """One entry per framework importable in `python` (run with `env`): what it was built for,
    the cuDNN it loads, from where and why, and whether the pair is right by its own rule.
    Each framework runs in a child of its own, `timeout` seconds at most. `search` is the
    loader's cache and default directories (see LoaderSearch); without it, a copy found only
    through them is reported as opened by full path. Entries carry private keys starting with
    "_" for what_if(); frameworks_json() gives the public form."""
    search = search or LoaderSearch()
    elf = _ElfCache()
    entries = []
    with tempfile.TemporaryDirectory(prefix="cudnn-setup-frameworks-") as tmp:
        for listed in importable_frameworks(python, env, timeout):
            if not listed.get("importable"):
                continue
            name = listed["name"]
            log = Path(tmp) / f"{name}.log"
            log.touch(mode=0o600)
            run = _run(python, [name], env, timeout, log)
            entries.append(_entry(name, listed, run, search, elf))
    return entries


def _entry(name: str, listed: dict, run: _Run, search: LoaderSearch, elf: _ElfCache) -> dict:
    rule = rules.rule_for(name)
    entry = {"name": name, "version": _str(listed.get("version"), 100), "importable": True,
             "cudnn_built_for": None, "cudnn_built_for_source": None, "cudnn_loaded": None,
             "compatible": None,
             "rule": rule.describe(), "status": WARN, "reason": ""}
    if run.data is None or not isinstance(run.data.get("framework"), dict):
        failure = run.failure or _str(run.data.get("error") if run.data else None) or "no answer"
        entry["reason"] = f"importing {name} in a child process {failure}"
        if "libcudnn" in run.output:
            entry["reason"] += _cudnn_line(run.output)
        return entry
    fw = run.data["framework"]
    entry["version"] = _str(fw.get("version"), 100) or entry["version"]
    exe = _str(run.data.get("exe"), 4096)
    child_env = _dict(run.data.get("env"))
    loader = _Loader({k: _str(child_env.get(k), 65536) for k in ("LD_LIBRARY_PATH", "LD_PRELOAD")},
                     exe if exe and exe.startswith("/") else None, search, elf)
    mapped = _strings(fw.get("mapped"))
    consumers = [c for c in _strings(fw.get("consumers"), 400) if _needs_cudnn(elf(c))]

    built, built_source = _built_for(fw, run.output, consumers, elf)
    entry["cudnn_built_for"] = rules.version_text(built)
    entry["cudnn_built_for_source"] = built_source

    libraries = [lib for lib in (_dict(x) for x in fw.get("cudnn_libraries") or [])
                 if isinstance(lib.get("path"), str) and lib["path"] in mapped]
    main = [lib for lib in libraries if _stem(lib["path"]) == "libcudnn"]
    runtime = rules.parse_version(_dict(fw.get("runtime")).get("value"))
    chosen = next((lib for lib in main if runtime and _lib_version(lib) == runtime), None) or (
        main[0] if main else None)
    entry["_loader"] = {"loader": loader, "mapped": mapped, "consumers": consumers,
                        "soname": _needed_soname(consumers, elf, chosen)}
    error = _str(fw.get("error"), 1000)
    own = _dict(fw.get("own_check"))

    if chosen is None:
        reason = (_str(fw.get("skip_reason")) or (error and f"it failed: {error}") or
                  _str(_dict(fw.get("gpu")).get("reason")) or "it did not load cuDNN")
        if error and "libcudnn" in error:
            entry.update(status=FAIL, reason=f"it could not load cuDNN: {error}")
        elif error:
            entry.update(status=WARN, reason=reason)
        else:
            entry.update(status=SKIP, reason=f"cuDNN not loaded: {reason}")
        return entry

    path = os.path.realpath(chosen["path"])
    loaded = _lib_version(chosen) or runtime or _file_version(path) or _file_version(path, 1)
    why = loader.explain(path, mapped, consumers)
    entry["cudnn_loaded"] = {"path": path, "dir": os.path.dirname(path),
                             "version": rules.version_text(loaded), **why}
    mismatch = _XLA_MISMATCH.search(run.output)
    status, because = rules.judge(name, built, loaded)
    if mismatch:  # the framework's own check said so, whatever the versions seen here
        status = rules.INCOMPATIBLE
    if status == rules.UNKNOWN and own.get("status") == "passed" and _dict(fw.get("ran")).get("ok"):
        status = rules.COMPATIBLE
        because += "; its own check passed (a cuDNN convolution ran)"
    entry["compatible"] = {rules.COMPATIBLE: True, rules.INCOMPATIBLE: False}.get(status)
    where = f"loads {entry['cudnn_loaded']['version'] or 'an unknown version'} from " \
            f"{entry['cudnn_loaded']['dir']} ({why['detail']})"
    built_text = f"built against cuDNN {entry['cudnn_built_for']}" if built else \
        "the cuDNN it was built against is not exposed"
    entry["reason"] = f"{built_text}, {where}: {because}"
    entry["status"] = {rules.COMPATIBLE: PASS, rules.INCOMPATIBLE: FAIL}.get(status, WARN)
    problems = [f"it logged: {mismatch.group(0)}"] if mismatch else []
    if own.get("status") == "raised":
        problems.append(f"its own check raised: {_str(own.get('message'), 500)}")
    if error:
        problems.append(f"it failed: {error}")
    mixed = sorted({os.path.dirname(os.path.realpath(lib["path"])) for lib in libraries})
    if len(mixed) > 1:
        problems.append("cuDNN libraries from several directories are mapped: " + ", ".join(mixed))
    if problems:
        entry["reason"] += "; " + "; ".join(problems)
        if entry["status"] == PASS:
            entry["status"] = WARN
    return entry


def _stem(path: str) -> str | None:
    m = CUDNN_FILE.match(os.path.basename(path))
    return m["stem"] if m else None


def _needs_cudnn(dyn: Dynamic | None) -> bool:
    return bool(dyn) and any(n.startswith("libcudnn.so") for n in dyn.needed)


def _needed_soname(consumers: Sequence[str], elf: _ElfCache, chosen: dict | None) -> str | None:
    if chosen is not None:
        dyn = elf(os.path.realpath(chosen["path"]))
        if dyn and dyn.soname:
            return dyn.soname
    for c in consumers:
        for n in (elf(c) or _NONE).needed:
            if n.startswith("libcudnn.so"):
                return n
    return None


def _built_for(fw: dict, output: str, consumers: Sequence[str],
               elf: _ElfCache) -> tuple[rules.Version | None, str | None]:
    reported = _dict(fw.get("built_for"))
    built = rules.parse_version(reported.get("value"))
    if built and len(built) >= 2:
        return built, _str(reported.get("source"))
    mismatch = _XLA_MISMATCH.search(output)
    if mismatch:
        return rules.parse_version(mismatch["built"]), "its log: " + mismatch.group(0)[:200]
    if built:
        return built, _str(reported.get("source"))
    for c in consumers:
        for n in (elf(c) or _NONE).needed:
            m = CUDNN_FILE.match(n)
            if m and m["stem"] == "libcudnn" and m["ver"]:
                return rules.parse_version(m["ver"][1:].split(".")[0]), \
                    f"DT_NEEDED {n} of {os.path.basename(c)}"
    return None, None


def _lib_version(lib: dict) -> rules.Version | None:
    value = lib.get("get_version")
    return rules.parse_version(value) if isinstance(value, int) else None


def _file_version(path: str, parts: int = 2) -> rules.Version | None:
    """The version a file name carries (libcudnn.so.9.14.0), if it has at least `parts`."""
    m = CUDNN_FILE.match(os.path.basename(path))
    version = rules.parse_version(m["ver"][1:]) if m and m["ver"] else None
    return version if version and len(version) >= parts else None


def _cudnn_line(output: str) -> str:
    for line in reversed(output.splitlines()):
        if "libcudnn" in line:
            return f"; it said: {line.strip()[:300]}"
    return ""


# ---------------------------------------------------------------------------------------------
# What-if

def what_if(python: str, env: Mapping[str, str], change: Change,
            timeout: float = DEFAULT_TIMEOUT, *, search: LoaderSearch | None = None,
            current: list[dict] | None = None) -> list[dict]:
    """For each framework in `python`: the cuDNN it would load after `change`, and whether that
    breaks it by its own rule.

    A new LD_LIBRARY_PATH is tried for real: the probe runs again with it. Registering a
    directory with ldconfig needs root and changes every program, so it is deduced from the
    loader's order (see _Loader): a framework whose cuDNN came through LD_PRELOAD, RPATH,
    LD_LIBRARY_PATH, RUNPATH or a full-path dlopen keeps it; one whose copy came from the cache
    or a default directory, or that found none, would take the directory's copy. A framework
    that loads cuDNN only on a GPU (TensorFlow, JAX without one) is judged by where the
    libraries that need libcudnn would find it. `current` is a framework_report() of `python`
    under `env`, if one was made already."""
    search = search or LoaderSearch()
    now = current if current is not None else framework_report(python, env, timeout, search=search)
    if change.kind == LD_LIBRARY_PATH:
        changed = dict(env)
        old = changed.get("LD_LIBRARY_PATH")
        changed["LD_LIBRARY_PATH"] = change.directory + (f":{old}" if old else "")
        after = {e["name"]: e for e in framework_report(python, changed, timeout, search=search)}
        return [_tried(change, e, after.get(e["name"]), search, python, env, timeout)
                for e in now]
    if change.kind == LDCONFIG:
        copies = directory_copies(change.directory)
        return [_deduced(change, e, copies, search, python, env, timeout) for e in now]
    raise ValueError(f"unknown change {change.kind!r}")


def directory_copies(directory: str) -> dict[str, str]:
    """soname → path of the libcudnn files in `directory`: the names ldconfig would register."""
    out: dict[str, str] = {}
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return out
    for name in names:
        path = os.path.join(directory, name)
        if not CUDNN_FILE.match(name) or not os.path.isfile(path):
            continue
        dyn = _read_dynamic(os.path.realpath(path))
        if dyn and dyn.soname:
            out.setdefault(dyn.soname, os.path.join(directory, dyn.soname))
    return out


def _tried(change: Change, now: dict, after: dict | None, search: LoaderSearch, python: str,
           env: Mapping[str, str], timeout: float) -> dict:
    out = _what_if_base(change, now)
    if after is None:
        out["reason"] = "it is not importable with that change"
        return out
    if "_loader" not in after:  # the probe died or hung with the change
        if "_loader" not in now:
            out["reason"] = f"its cuDNN use is not known: {after['reason']}"
            return out
        out.update(affected=True, breaks=True, reason=f"with that change: {after['reason']}")
        return _advise(out, now, change)
    loaded = after.get("cudnn_loaded")
    if loaded is None:
        return _predicted(change, out, now, after, search, None, python, env, timeout)
    out["would_load"] = _public_loaded(loaded)
    out["affected"] = _path(now) != loaded["path"]
    status, because = rules.judge(now["name"], now.get("cudnn_built_for"), loaded["version"])
    if after.get("compatible") is False:
        status = rules.INCOMPATIBLE
    out.update(status=status, breaks=status == rules.INCOMPATIBLE)
    what = f"cuDNN {loaded['version']} from {loaded['dir']} ({loaded['detail']})"
    out["reason"] = (f"would load {what}: {because}" if out["affected"] else
                     f"unchanged: it still loads {what}")
    return _advise(out, now, change)


def _deduced(change: Change, now: dict, copies: Mapping[str, str], search: LoaderSearch,
             python: str, env: Mapping[str, str], timeout: float) -> dict:
    out = _what_if_base(change, now)
    current = now.get("cudnn_loaded")
    if "_loader" not in now:
        out["reason"] = "its cuDNN use is not known (the probe gave no answer)"
        return out
    if current and current["why"] in _BEFORE_CACHE:
        out.update(would_load=_public_loaded(current), affected=False, breaks=False,
                   status=rules.COMPATIBLE if now.get("compatible") else rules.UNKNOWN)
        out["reason"] = ("unchanged: its cuDNN is opened by full path, which no search path "
                         "changes" if current["why"] == WHY_FULL_PATH else
                         f"unchanged: its cuDNN is found through {current['detail']}, which the "
                         "loader reads before the ldconfig cache")
        return out
    soname = now["_loader"]["soname"]
    if not soname or soname not in copies:
        out.update(affected=False, breaks=False,
                   reason=f"unchanged: {change.directory} holds no {soname or 'libcudnn'}")
        return out
    registered = search.with_directory({soname: copies[soname]})
    return _predicted(change, out, now, now, registered, os.path.realpath(copies[soname]),
                      python, env, timeout)


def _predicted(change: Change, out: dict, now: dict, entry: dict, search: LoaderSearch,
               target: str | None, python: str, env: Mapping[str, str], timeout: float) -> dict:
    """The copy the loader would give `entry`'s libraries that need libcudnn, searching with
    its environment and `search`; `target`, when given, is the copy the change brings in."""
    facts = entry["_loader"]
    soname, loader = facts["soname"], facts["loader"]
    if not soname:
        out.update(affected=False, breaks=False, reason=f"unchanged: {entry['reason']}")
        return out
    requesters = [o for o in (*facts["mapped"], *facts["consumers"])
                  if soname in (loader.elf(o) or _NONE).needed] or [None]
    hits = [h for h in (loader.first_hit(soname, r, search) for r in requesters) if h]
    hit = next((h for h in hits if h.path == target), None) if target else (
        hits[0] if hits else None)
    if hit is None or (target is None and hit.path == _path(now)):
        found = hits[0] if hits else None
        out.update(affected=False, breaks=False, reason="unchanged: it finds " + (
            f"{found.path} ({found.detail()}) first" if found else f"no {soname} either way"))
        return out
    version = _file_version(hit.path) or _library_version(python, hit.path, env, timeout)
    out["would_load"] = {"path": hit.path, "dir": os.path.dirname(hit.path),
                         "version": rules.version_text(version), "why": hit.why}
    status, because = rules.judge(now["name"], now.get("cudnn_built_for"), version)
    when = "" if now.get("cudnn_loaded") else " once it loads cuDNN (it has not here)"
    out.update(affected=True, status=status, breaks=status == rules.INCOMPATIBLE,
               reason=(f"would load cuDNN {rules.version_text(version) or '(version unknown)'} "
                       f"from {os.path.dirname(hit.path)} through {hit.detail()}{when}: "
                       f"{because}"))
    return _advise(out, now, change)


def _library_version(python: str, path: str, env: Mapping[str, str],
                     timeout: float) -> rules.Version | None:
    run = _run(python, ["--library", path], env, min(timeout, LIST_TIMEOUT), None)
    lib = _dict(run.data.get("library")) if run.data else {}
    return _lib_version(lib)


def _what_if_base(change: Change, now: dict) -> dict:
    current = now.get("cudnn_loaded")
    return {"framework": now["name"], "version": now.get("version"), "change": change.describe(),
            "built_for": now.get("cudnn_built_for"),
            "loads_now": current and {"path": current["path"], "version": current["version"]},
            "would_load": None, "affected": None, "breaks": None, "status": rules.UNKNOWN,
            "rule": now.get("rule"), "reason": "", "safe_alternative": None}


def _advise(out: dict, now: dict, change: Change) -> dict:
    if out["breaks"]:
        out["safe_alternative"] = rules.safe_alternative(now.get("cudnn_built_for"),
                                                         change.directory)
    return out


def _path(entry: dict) -> str | None:
    loaded = entry.get("cudnn_loaded")
    return loaded["path"] if loaded else None


def _public_loaded(loaded: dict) -> dict:
    return {k: loaded[k] for k in ("path", "dir", "version", "why")}


def what_if_warnings(entries: Sequence[dict]) -> list[str]:
    """One line per framework that a change would break, to print next to the advice."""
    return [f"{e['framework']} {e.get('version') or ''}".rstrip() +
            f" would break: {e['reason']}. Instead: {e['safe_alternative']}"
            for e in entries if e.get("breaks")]


# ---------------------------------------------------------------------------------------------
# Rendering

JSON_FIELDS = ("name", "version", "importable", "cudnn_built_for", "cudnn_built_for_source",
               "cudnn_loaded", "compatible", "rule", "status", "reason")


def frameworks_json(entries: Sequence[dict]) -> list[dict]:
    """The `frameworks` list of the JSON output: JSON_FIELDS of each entry; cudnn_loaded is
    {path, dir, version, why, detail} or null."""
    out = []
    for e in entries:
        item = {k: e.get(k) for k in JSON_FIELDS}
        if item["cudnn_loaded"]:
            item["cudnn_loaded"] = {k: e["cudnn_loaded"].get(k) for k in
                                    ("path", "dir", "version", "why", "detail")}
        out.append(item)
    return out


def frameworks_check(entries: Sequence[dict], python: str | None = None) -> Check:
    """The `frameworks` check: fail if a framework loads a cuDNN its rule refuses, warn if one
    could not be judged, pass if every one that loads cuDNN is fine, skip if none does."""
    if not entries:
        where = f" in {python}" if python else ""
        return Check("frameworks", SKIP, f"no deep-learning framework importable{where}")
    order = (FAIL, WARN, PASS, SKIP)
    status = min((e["status"] for e in entries), key=order.index)
    lines = [f"{e['name']} {e.get('version') or ''}".rstrip() + f": {e['reason']}" for e in entries]
    return Check("frameworks", status, "\n".join(lines))


def check_frameworks(python: str, env: Mapping[str, str], timeout: float = DEFAULT_TIMEOUT, *,
                     search: LoaderSearch | None = None) -> tuple[Check, list[dict]]:
    """framework_report() as a check; an interpreter that cannot say what it has is a warn."""
    try:
        entries = framework_report(python, env, timeout, search=search)
    except SetupError as exc:
        return Check("frameworks", WARN, exc.message), []
    return frameworks_check(entries, python), entries
