"""Where glibc's dynamic loader would find a library, worked out from the files alone.

The search follows ld.so(8), "Finding shared objects"
(https://man7.org/linux/man-pages/man8/ld.so.8.html), and the details it leaves out follow
glibc's elf/dl-load.c (_dl_map_object, open_path, open_verify):

  0. a name with a slash is a path, opened as it is (relative to the working directory);
     a name that an already loaded object answers to (the name it was asked for, its path or
     its DT_SONAME) is that object, wherever the file is;
  1. DT_RPATH of the object that asks, then of the object that loaded it, and so on up to the
     executable — only when the asking object has no DT_RUNPATH;
  2. LD_LIBRARY_PATH (':' or ';' separated; an empty entry is the working directory);
  3. DT_RUNPATH of the asking object itself (never inherited);
  4. the ld.so.cache (entries for this ABI);
  5. the trusted default directories, unless the asking object has DF_1_NODEFLIB.

In each directory the loader tries its glibc-hwcaps (and, before glibc 2.37, legacy hwcap)
subdirectories first. A candidate of the wrong ELF class or machine is passed over and the
search goes on; any other defect (not ELF, truncated, a directory) ends the search with an
error, as open_verify does. $ORIGIN, $LIB and $PLATFORM are expanded in RPATH, RUNPATH and
LD_LIBRARY_PATH; $ORIGIN is the directory of the path the object was opened by, symlinks not
resolved (dl-object.c), for the executable its real path.

Nothing here reads os.environ or runs the loader unless asked: the environment, the cache
entries and the loader's own facts are parameters, so tests control them.
"""
from __future__ import annotations

import os
import re
import threading
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Iterator, Sequence

from cudnn_setup.child import run_command
from cudnn_setup.facts.elf import (NOT_ELF, NOT_REGULAR, PARSE_ERRORS, UNOPENED, UNREAD, NotElf,
                                   interpreter as interpreter_of, read_elf, read_only_ranges)
from cudnn_setup.untrusted import open_regular
from cudnn_setup.facts.cudnn import OPENED_FIRST, V9, names_opened, so_base

# glibc's trusted directories when the loader cannot be asked (x86-64 Debian/Ubuntu, then
# Fedora/RHEL/SUSE); probe_loader() replaces them with what the running ld.so says.
FALLBACK_DEFAULT_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64",
                         "/usr/lib64", "/lib", "/usr/lib")
# Where ldconfig is installed (glibc puts it in /sbin; merged-/usr systems have both).
LDCONFIG_PATHS = ("/sbin/ldconfig", "/usr/sbin/ldconfig")

_DST = re.compile(r"\$(?:\{(ORIGIN|LIB|PLATFORM)\}|(ORIGIN|LIB|PLATFORM)(?=/|$))")
# `ldconfig -p`: "\tlibz.so.1 (libc6,x86-64, hwcap: "x86-64-v3") => /lib/x86_64-linux-gnu/libz.so.1"
_CACHE_LINE = re.compile(r"^\s*(?P<name>\S+)\s+\((?P<flags>[^)]*)\)\s+=>\s+(?P<path>\S(?:.*\S)?)\s*\Z")
# The ABI word ldconfig prints after "libc6," for each (e_machine, class); no word = the
# architecture's default 32-bit ABI (ldconfig.c print_entry).
_CACHE_ABI = {("EM_X86_64", 64): "x86-64", ("EM_X86_64", 32): "x32", ("EM_386", 32): "",
              ("EM_AARCH64", 64): "AArch64", ("EM_PPC64", 64): "64bit",
              ("EM_S390", 64): "64bit", ("EM_ARM", 32): "hard-float",
              ("EM_RISCV", 64): "double-float"}

# A soname as code names it for dlopen: "libz.so.1", "libcudnn_ops.so", and the templates
# cuDNN fills in itself ("libnvrtc.so.%d", "libnvrtc.so.%d.%d"). Whole NUL-terminated strings
# only, so error messages that mention a library are not taken for one.
_RUNTIME_NAME = re.compile(rb"(lib[A-Za-z0-9_+\-]{1,200}\.so(?:\.(?:\d{1,9}|%d)){0,4})\x00")
MAX_RUNTIME_NAMES = 256
_SCAN_CHUNK = 1 << 20
# Read-only data scanned per library at most: cuDNN 9's largest .rodata is far smaller; a file
# whose headers claim more (or a huge file named like a library) is not read past this.
MAX_SCAN_BYTES = 1 << 30
# Paths one emulated process may look at (a directory's existence or a candidate file) before
# it gives up: a real library needs a few hundred; an object with 300 DT_NEEDED names and
# 20,000 RUNPATH entries, each tried with 11 hwcaps subdirectories, would need 66 million.
SEARCH_BUDGET = 500_000


class NotLoadable(Exception):
    """A file the loader cannot use; `fatal` when it ends the search (open_verify's `lose`)."""

    def __init__(self, message: str, fatal: bool):
        super().__init__(message)
        self.fatal = fatal


class SearchBudgetSpent(NotLoadable):
    """The emulation looked at SEARCH_BUDGET paths and stopped; its answers so far stand."""

    def __init__(self, budget: int):
        super().__init__(f"gave up after looking at {budget} paths (the objects' DT_NEEDED, "
                         "RPATH and RUNPATH lists are far longer than any real library's)",
                         fatal=True)


@dataclass(frozen=True)
class ElfObject:
    """What the loader reads from an object before and while mapping it."""

    path: str
    machine: str  # e_machine, as pyelftools names it: EM_X86_64, EM_386, EM_AARCH64 …
    bits: int
    little_endian: bool
    kind: str  # ET_DYN, ET_EXEC
    soname: str | None = None
    needed: tuple[str, ...] = ()
    rpath: tuple[str, ...] | None = None  # None: no DT_RPATH tag
    runpath: tuple[str, ...] | None = None
    nodeflib: bool = False

    @property
    def host(self) -> tuple[str, int, bool]:
        return self.machine, self.bits, self.little_endian


def _refusal(path: str, exc: NotElf) -> NotLoadable:
    """ld.so's words for where reading stopped; only a file it could not open lets the
    search go on."""
    if exc.stage == UNOPENED:
        return NotLoadable(f"{path}: cannot open shared object file: {exc.reason}", fatal=False)
    if exc.stage in (NOT_REGULAR, UNREAD):
        return NotLoadable(f"{path}: cannot read file data: {exc.reason}", fatal=True)
    if exc.stage == NOT_ELF:
        return NotLoadable(f"{path}: {exc.reason}", fatal=True)
    return NotLoadable(f"{path}: invalid ELF file ({exc.reason})", fatal=True)


def read_object(path: str | os.PathLike) -> ElfObject:
    """Read the loader's facts of one file; NotLoadable says why ld.so would refuse it.

    Only a regular file is opened, never blocking: a FIFO in a search directory would make
    ld.so itself wait, and the emulation must not; it ends the search as a directory does."""
    path = os.fspath(path)
    try:
        info = read_elf(path, as_loader=True)
    except NotElf as exc:
        raise _refusal(path, exc) from None
    if info.kind not in ("ET_DYN", "ET_EXEC"):
        raise NotLoadable(f"{path}: only ET_DYN and ET_EXEC can be loaded", fatal=True)
    return ElfObject(path=path, machine=info.e_machine, bits=info.bits,
                     little_endian=info.little_endian, kind=info.kind, soname=info.soname,
                     needed=info.needed,
                     rpath=None if info.rpath is None else _split_path(info.rpath),
                     runpath=None if info.runpath is None else _split_path(info.runpath),
                     nodeflib=info.nodeflib)


def _split_path(value: str, seps: str = ":") -> tuple[str, ...]:
    return tuple(re.split(f"[{re.escape(seps)}]", value))


# --- the loader's own facts and its cache ----------------------------------------------------

@dataclass(frozen=True)
class LoaderFacts:
    """How this machine's ld.so expands names and which directories it searches by itself."""

    lib: str = "lib64"  # $LIB
    platform: str = "x86_64"  # $PLATFORM (AT_PLATFORM)
    default_dirs: tuple[str, ...] = FALLBACK_DEFAULT_DIRS
    subdirs: tuple[str, ...] = ("",)  # tried in each directory, in order; "" is the directory
    found_via: str = "built-in defaults"


def probe_loader(program: str = "/bin/true", interpreter: str | None = None,
                 timeout: float = 10.0) -> LoaderFacts:
    """Ask the real ld.so: `ld.so --help` lists the default directories (glibc 2.33+), and one
    run of `program` under LD_DEBUG=libs shows how $LIB, $PLATFORM and the hwcaps
    subdirectories expand. Falls back to built-in defaults, saying so in `found_via`."""
    facts = LoaderFacts()
    interp = interpreter or interpreter_of(program)
    dirs: list[str] = []
    if interp:
        out = run_command([interp, "--help"], timeout, env={}).out
        dirs = re.findall(r"^[ \t]+(/\S+) \(system search path\)$", out, re.M)
    marker = "/nonexistent-cudnn-setup-probe"
    err = run_command([program], timeout, env={"LD_LIBRARY_PATH": f"{marker}/$LIB/@/$PLATFORM/@",
                                               "LD_DEBUG": "libs"}).err
    m = re.search(r"search path=(\S*)\s+\(LD_LIBRARY_PATH\)", err)
    if not m:
        if dirs:
            return LoaderFacts(default_dirs=tuple(dirs), found_via=f"{interp} --help")
        return facts
    entries = m.group(1).split(":")
    base = entries[-1]  # the directory itself comes last
    lib_platform = re.fullmatch(re.escape(marker) + r"/(.+)/@/(.+)/@", base)
    subdirs = tuple(e[len(base) + 1:] for e in entries[:-1] if e.startswith(base + "/")) + ("",)
    return LoaderFacts(lib=lib_platform.group(1) if lib_platform else facts.lib,
                       platform=lib_platform.group(2) if lib_platform else facts.platform,
                       default_dirs=tuple(dirs) or facts.default_dirs, subdirs=subdirs,
                       found_via=f"{interp} --help and LD_DEBUG=libs {program}")


@dataclass(frozen=True)
class CacheEntry:
    name: str
    path: str
    abi: str  # "x86-64", "" (32-bit default ABI), "AArch64" …
    hwcap: str | None = None  # glibc-hwcaps subdirectory the entry is for, if any


def parse_ldconfig_p(text: str) -> list[CacheEntry]:
    """Entries of `ldconfig -p` output; lines that do not parse are ignored."""
    out = []
    for line in text.splitlines():
        m = _CACHE_LINE.match(line)
        if not m:
            continue
        flags = [f.strip() for f in m["flags"].split(",")]
        if not flags or not flags[0].startswith("libc"):
            continue
        abi, hwcap, legacy = "", None, False
        for flag in flags[1:]:
            if flag.startswith("hwcap:"):
                value = flag.split(":", 1)[1].strip()
                if value.startswith('"'):
                    hwcap = value.strip('"')
                else:
                    legacy = True  # numeric legacy hwcap masks: glibc 2.37 dropped them
            elif flag.startswith("OS ABI:"):
                continue
            else:
                abi = flag
        if not legacy:
            out.append(CacheEntry(m["name"], m["path"], abi, hwcap))
    return out


def registered(directory: str | os.PathLike) -> list[CacheEntry]:
    """The cache entries `ldconfig` adds for a directory: one per shared object in it with a
    DT_SONAME, under that name, for the object's ABI, pointing at the soname link (which
    ldconfig creates when it is missing); files it cannot read as ELF are skipped
    (ldconfig.c search_dir)."""
    base = os.fspath(directory)
    out: dict[str, CacheEntry] = {}
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return []
    for name in names:
        path = os.path.join(base, name)
        if ".so" not in name or not os.path.isfile(path):
            continue
        try:
            obj = read_object(path)
        except NotLoadable:
            continue
        abi = _CACHE_ABI.get((obj.machine, obj.bits))
        if obj.soname and abi is not None and obj.soname not in out:
            link = os.path.join(base, obj.soname)
            out[obj.soname] = CacheEntry(obj.soname, link if os.path.exists(link) else path, abi)
    return list(out.values())


def ldconfig_binary() -> str | None:
    """The system's ldconfig, from the directories it is installed in; never looked up through
    anyone's PATH, which would let the caller's environment choose the program run as root."""
    return next((p for p in LDCONFIG_PATHS if os.access(p, os.X_OK)), None)


def read_cache(ldconfig: str | None = None, cache_file: str | None = None,
               timeout: float = 30.0) -> list[CacheEntry]:
    """The loader cache as `ldconfig -p` prints it ([] when ldconfig cannot be run)."""
    binary = ldconfig or ldconfig_binary()
    if binary is None:
        return []
    done = run_command([binary, "-p"] + (["-C", cache_file] if cache_file else []), timeout,
                       env={})
    return parse_ldconfig_p(done.stdout.decode(errors="replace")) if done.ok else []


# --- files read once per run -------------------------------------------------------------------

class Objects:
    """read_object and runtime_names, each file read once while it stays as it was: a command
    that asks many questions about the same libraries (verify's files, coherence and deps
    checks each read cuDNN's ELF files or emulate the loader over them) shares one. A file is
    known by what stat says of it, links followed (device, inode, size, mtime, ctime), so a
    link and its target are read once, and a file replaced or rewritten since is read again.
    Checks run side by side on threads: one that asks for a file another is reading waits for
    that reading instead of doing it again."""

    def __init__(self) -> None:
        self._objects: dict[tuple, tuple[str, ElfObject | NotLoadable]] = {}
        self._names: dict[tuple, list[str]] = {}
        self._reading: dict[tuple, threading.Lock] = {}

    def _lock(self, key: tuple) -> threading.Lock:
        return self._reading.setdefault(key, threading.Lock())  # setdefault: one per key

    @staticmethod
    def _identity(path: str) -> tuple | None:
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            return None
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def read(self, path: str | os.PathLike) -> ElfObject:
        path = os.fspath(path)
        key = self._identity(path)
        if key is None:
            known = None
        else:
            with self._lock(("elf", *key)):
                known = self._objects.get(key)
                if known is None:
                    known = self._objects[key] = _read_as(path)
        read_as, got = known or _read_as(path)
        if isinstance(got, NotLoadable):  # raised anew (a raised one keeps its frames), for `path`
            message = str(got)
            if read_as != path and message.startswith(read_as + ":"):
                message = path + message[len(read_as):]
            raise NotLoadable(message, got.fatal)
        return got if read_as == path else replace(got, path=path)

    def runtime_names(self, path: str | os.PathLike) -> list[str]:
        path = os.fspath(path)
        key = self._identity(path)
        if key is None:
            return runtime_names(path)
        with self._lock(("names", *key)):
            if key not in self._names:
                self._names[key] = runtime_names(path)
        return list(self._names[key])


def _read_as(path: str) -> tuple[str, ElfObject | NotLoadable]:
    try:
        return path, read_object(path)
    except NotLoadable as exc:
        return path, exc


# --- one process's view -----------------------------------------------------------------------

@dataclass
class Environment:
    """What a process's loader works from: its variables, the cache, the loader's facts."""

    ld_library_path: str | None = None
    cache: Sequence[CacheEntry] = ()
    facts: LoaderFacts = field(default_factory=LoaderFacts)
    cwd: str = "/"
    executable: str | None = None  # its DT_RPATH counts last in the RPATH chain
    inhibit_cache: bool = False
    # the files read for this environment's questions, once each (None: read every time)
    objects: Objects | None = field(default=None, compare=False, repr=False)


@dataclass
class Loaded:
    """An object in the emulated process: how it was opened and who loaded it."""

    obj: ElfObject
    opened_as: str
    loader: "Loaded | None"
    names: set[str] = field(default_factory=set)

    @property
    def origin(self) -> str:
        return os.path.dirname(self.opened_as) or "."


# The step of the search that found an object (Resolution.step).
STEP_PATH, STEP_LOADED = "full_path", "already_loaded"
STEP_RPATH, STEP_LD_LIBRARY_PATH, STEP_RUNPATH = "rpath", "ld_library_path", "runpath"
STEP_CACHE, STEP_DEFAULT = "ld_cache", "default_dir"


@dataclass
class Resolution:
    name: str
    path: str | None = None  # as the loader opens it (search dir + name), symlinks kept
    via: str | None = None
    error: str | None = None  # the loader's message when it gives up
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (candidate, why passed over)
    step: str | None = None  # STEP_*: which step of the search found it
    entry: str | None = None  # the raw entry that matched: "$ORIGIN/../lib", a directory, a path
    owner: str | None = None  # the object whose DT_RPATH/DT_RUNPATH it is, as it was opened

    @property
    def found(self) -> bool:
        return self.path is not None

    def to_dict(self) -> dict:
        return {"name": self.name, "path": self.path, "via": self.via, "error": self.error,
                "skipped": [list(s) for s in self.skipped]}


class Process:
    """Loads objects into an emulated process the way ld.so does, without running them.

    `reader` reads one file's facts (default: the environment's Objects where it has them,
    else read_object; a caller asking many questions about the same files passes one that
    remembers them)."""

    def __init__(self, env: Environment, host: tuple[str, int, bool] | None = None,
                 reader: Callable[[str], ElfObject] | None = None, budget: int = SEARCH_BUDGET):
        self.env = env
        self.read = reader or (env.objects.read if env.objects is not None else read_object)
        self.budget = budget
        self.looked = 0  # paths looked at, against `budget`
        self.spent = False
        self._dir_exists: dict[str, bool] = {}
        self.loaded: list[Loaded] = []
        self._by_name: dict[str, Loaded] = {}
        self._by_file: dict[tuple[int, int], Loaded] = {}
        self.main: Loaded | None = None
        self.host = host
        if env.executable:
            exe = self.read(env.executable)
            self.main = Loaded(exe, os.path.realpath(env.executable), None)
            self.host = self.host or exe.host

    # DST expansion (dl-load.c _dl_dst_substitute)
    def _expand(self, entry: str, origin: str) -> str:
        facts = self.env.facts

        def sub(m: re.Match) -> str:
            key = m.group(1) or m.group(2)
            return {"ORIGIN": origin, "LIB": facts.lib, "PLATFORM": facts.platform}[key]

        expanded = _DST.sub(sub, entry)
        return expanded or self.env.cwd

    def _dirs(self, entries: Iterable[str], origin: str) -> Iterator[tuple[str, str]]:
        """(raw entry, directory to try) in search order."""
        for entry in entries:
            directory = self._expand(entry, origin)
            if not os.path.isabs(directory):
                directory = os.path.join(self.env.cwd, directory)
            for sub in self.env.facts.subdirs:
                yield entry, (os.path.join(directory, sub) if sub else directory)

    def _look(self) -> None:
        self.looked += 1
        if self.looked > self.budget:
            self.spent = True
            raise SearchBudgetSpent(self.budget)

    def _exists_dir(self, directory: str) -> bool:
        """Whether a search directory exists, asked once per process: ld.so marks a directory
        it found missing and skips it from then on (dl-load.c open_path, `nonexisting`)."""
        known = self._dir_exists.get(directory)
        if known is None:
            self._look()
            known = self._dir_exists[directory] = os.path.isdir(directory)
        return known

    def _candidate(self, path: str, res: Resolution) -> ElfObject | None:
        """open_verify: the object, None to go on searching, NotLoadable to stop."""
        self._look()
        if not os.path.lexists(path) or (os.path.islink(path) and not os.path.exists(path)):
            return None
        try:
            obj = self.read(path)
        except NotLoadable as exc:
            if exc.fatal:
                raise
            res.skipped.append((path, str(exc).split(": ", 1)[-1]))
            return None
        if self.host and obj.bits != self.host[1]:
            res.skipped.append((path, f"wrong ELF class: ELFCLASS{obj.bits}"))
            return None
        if self.host and (obj.machine != self.host[0] or obj.little_endian != self.host[2]):
            res.skipped.append((path, f"built for {obj.machine}, not {self.host[0]}"))
            return None
        return obj

    def _search(self, name: str, dirs: Iterable[tuple[str, str]],
                res: Resolution) -> ElfObject | None:
        for entry, directory in dirs:
            if not self._exists_dir(directory):
                continue
            obj = self._candidate(os.path.join(directory, name), res)
            if obj is not None:
                res.entry = entry
                return obj
        return None

    def _cache_lookup(self, name: str, res: Resolution) -> ElfObject | None:
        if self.env.inhibit_cache:
            return None
        abi = _CACHE_ABI.get((self.host[0], self.host[1])) if self.host else None
        matches = [e for e in self.env.cache if e.name == name and (abi is None or e.abi == abi)]
        order = {sub: i for i, sub in enumerate(self.env.facts.subdirs)}
        # glibc-hwcaps entries the CPU supports come before the plain one (dl-cache.c)
        matches.sort(key=lambda e: order.get(f"glibc-hwcaps/{e.hwcap}", -1) if e.hwcap else len(order))
        for entry in matches:
            if entry.hwcap and f"glibc-hwcaps/{entry.hwcap}" not in order:
                continue
            obj = self._candidate(entry.path, res)
            if obj is not None:
                res.entry = entry.path
                return obj
        return None

    def find(self, name: str, requester: Loaded | None) -> tuple[Resolution, Loaded | None]:
        """Resolve `name` as asked by `requester` (DT_NEEDED or its dlopen) and load it."""
        res = Resolution(name)
        if name in self._by_name:
            hit = self._by_name[name]
            res.path, res.via, res.step = hit.opened_as, "already loaded", STEP_LOADED
            return res, hit
        if self.host is None and requester is not None:
            self.host = requester.obj.host
        try:
            obj, via = self._locate(name, requester, res)
        except NotLoadable as exc:
            res.error = str(exc)
            return res, None
        if obj is None:
            res.step = res.entry = res.owner = None
            wrong_class = next((why for _, why in res.skipped if why.startswith("wrong ELF class")), None)
            res.error = f"{name}: {wrong_class}" if wrong_class else \
                f"{name}: cannot open shared object file: No such file or directory"
            return res, None
        res.path, res.via = obj.path, via
        return res, self._add(obj, name, requester)

    def _locate(self, name: str, req: Loaded | None, res: Resolution) -> tuple[ElfObject | None, str]:
        """The object the search finds and its `via`; res.step, entry and owner say the same
        for programs."""
        if "/" in name:
            path = name if os.path.isabs(name) else os.path.join(self.env.cwd, name)
            res.step, res.entry = STEP_PATH, name
            return self._candidate(path, res), "path"
        if req is None or req.obj.runpath is None:
            chain, seen_main = [], False
            node = req
            while node is not None:
                chain.append(node)
                seen_main |= node is self.main
                node = node.loader
            if self.main is not None and not seen_main:
                chain.append(self.main)
            for owner in chain:
                if owner.obj.rpath is not None:
                    hit = self._search(name, self._dirs(owner.obj.rpath, owner.origin), res)
                    if hit:
                        res.step, res.owner = STEP_RPATH, owner.opened_as
                        return hit, f"DT_RPATH of {owner.opened_as}"
        if self.env.ld_library_path is not None:
            origin = self.main.origin if self.main else self.env.cwd
            hit = self._search(name, self._dirs(_split_path(self.env.ld_library_path, ":;"), origin), res)
            if hit:
                res.step = STEP_LD_LIBRARY_PATH
                return hit, "LD_LIBRARY_PATH"
        if req is not None and req.obj.runpath is not None:
            hit = self._search(name, self._dirs(req.obj.runpath, req.origin), res)
            if hit:
                res.step, res.owner = STEP_RUNPATH, req.opened_as
                return hit, f"DT_RUNPATH of {req.opened_as}"
        hit = self._cache_lookup(name, res)
        if hit:
            res.step = STEP_CACHE
            return hit, "ld.so.cache"
        asker = req or self.main
        if not (asker and asker.obj.nodeflib):
            hit = self._search(name, ((d, os.path.join(d, s) if s else d)
                                      for d in self.env.facts.default_dirs
                                      for s in self.env.facts.subdirs), res)
            if hit:
                res.step = STEP_DEFAULT
                return hit, "default directories"
        res.entry = None
        return None, ""

    def _add(self, obj: ElfObject, name: str, requester: Loaded | None) -> Loaded:
        try:
            st = os.stat(obj.path)
            key = (st.st_dev, st.st_ino)
        except OSError:
            key = None
        if key and key in self._by_file:  # the same file under another name is not loaded twice
            hit = self._by_file[key]
            hit.names.add(name)
            self._by_name[name] = hit
            return hit
        item = Loaded(obj, obj.path, requester, {name, obj.path})
        if obj.soname:
            item.names.add(obj.soname)
        for n in item.names:
            self._by_name.setdefault(n, item)
        if key:
            self._by_file[key] = item
        self.loaded.append(item)
        return item

    def load_with_needed(self, name: str, requester: Loaded | None) \
            -> tuple[Resolution, Loaded | None, list[tuple[Loaded, Resolution]]]:
        """dlopen(): the object, then its DT_NEEDED entries breadth first (dl-deps.c).

        The first DT_NEEDED entry that cannot be found fails the whole load, as in ld.so: it is
        the last one in `needed`, the object comes back as None, and what this load brought in
        leaves the process again (ld.so unmaps it)."""
        before = len(self.loaded)
        res, item = self.find(name, requester)
        needed: list[tuple[Loaded, Resolution]] = []
        if item is None or res.via == "already loaded":
            return res, item, needed
        queue, seen = deque([item]), {id(item)}
        while queue:
            cur = queue.popleft()
            for dep in cur.obj.needed:
                dep_res, dep_item = self.find(dep, cur)
                needed.append((cur, dep_res))
                if dep_item is None:
                    self._unload(before)
                    return res, None, needed
                if id(dep_item) not in seen and dep_res.via != "already loaded":
                    seen.add(id(dep_item))
                    queue.append(dep_item)
        return res, item, needed

    def _unload(self, keep: int) -> None:
        """Take out every object loaded after the first `keep` (a load that failed)."""
        gone = self.loaded[keep:]
        if not gone:
            return
        del self.loaded[keep:]
        ids = {id(g) for g in gone}
        self._by_name = {n: v for n, v in self._by_name.items() if id(v) not in ids}
        self._by_file = {k: v for k, v in self._by_file.items() if id(v) not in ids}


# --- names a library opens at run time --------------------------------------------------------

def runtime_names(path: str | os.PathLike, limit: int = MAX_RUNTIME_NAMES) -> list[str]:
    """Sonames a library keeps as whole strings in its read-only data, as code that dlopens
    them at run time does (cuDNN: "libcublasLt.so.12", "libz.so.1", "libnvrtc.so.%d",
    "libcudnn_ops.so"). Read in chunks, never past the file's end; at most `limit` distinct
    names, in file order; [] for a file that is not a readable ELF object."""
    path = os.fspath(path)
    found: dict[str, None] = {}
    try:
        f = open_regular(path)
    except OSError:
        return []
    with f:
        size = os.fstat(f.fileno()).st_size
        try:
            ranges = read_only_ranges(f, size)
        except PARSE_ERRORS:
            return []
        try:
            budget = MAX_SCAN_BYTES
            for offset, length in ranges:
                length = min(length, budget)
                _scan(f, offset, offset + length, found, limit)
                budget -= length
                if len(found) >= limit or budget <= 0:
                    break
        except OSError:
            pass  # a read error part way: the names found so far
    return list(found)[:limit]


def _scan(f, offset: int, end: int, found: dict[str, None], limit: int) -> None:
    f.seek(offset)
    carry = b""
    pos = offset
    while pos < end:
        chunk = f.read(min(_SCAN_CHUNK, end - pos))
        if not chunk:
            break
        pos += len(chunk)
        buf = carry + chunk
        last = buf.rfind(b"\x00")
        if last < 0:
            carry = buf[-256:] if len(buf) <= 256 else b"\xff"
            continue
        for m in _RUNTIME_NAME.finditer(buf, 0, last + 1):
            if m.start() and buf[m.start() - 1]:
                continue  # the tail of a longer string
            found.setdefault(m.group(1).decode("ascii"), None)
            if len(found) >= limit:
                return
        tail = buf[last + 1:]
        carry = tail if len(tail) <= 256 else b"\xff"  # too long to be a name


@dataclass(frozen=True)
class Versions:
    """Numbers the library fills into the names it builds: cuDNN's own and its CUDA's."""

    cudnn: str | None = None  # "9.1.0"
    cuda: str | None = None  # "12.4"


def runtime_requests(names: Sequence[str], requester_soname: str | None,
                     versions: Versions = Versions()) -> list[tuple[str, tuple[str, ...]]]:
    """Group embedded names by library into (label, candidates tried in order).

    cuDNN 9 builds a sub-library's name from its base ("libcudnn_ops.so") and its own
    version, trying .M.m.p, .M.m, .M and the bare name (facts/cudnn.names_opened);
    other templates ("libnvrtc.so.%d") take the CUDA version it was built for, then the
    bare name is the fallback."""
    own = requester_soname or ""
    groups: dict[str, list[str]] = {}
    for name in names:
        if name == own:
            continue
        groups.setdefault(so_base(name), []).append(name)
    own_version = None
    if versions.cudnn:
        own_version = versions.cudnn
    elif re.fullmatch(r"libcudnn\w*\.so\.\d+(?:\.\d+)*", own):
        own_version = own.split(".so.", 1)[1]
    out = []
    for stem, members in groups.items():
        candidates: list[str] = []
        for name in members:
            if "%d" in name:
                filled = _fill(name, versions.cuda)
                if filled:
                    candidates.append(filled)
            elif name != stem:
                candidates.append(name)
        if stem in members:
            if stem.startswith("libcudnn") and own_version:
                candidates += names_opened(stem[:-len(".so")], own_version, V9)
            candidates.append(stem)
        candidates = list(dict.fromkeys(candidates))
        if candidates:
            out.append((candidates[0], tuple(candidates)))
    # cuDNN opens graph, then ops, before the parts that list them as DT_NEEDED, whatever
    # order the names sit in its binary (9.24: ops, graph, cnn, adv)
    first = [f"{stem}.so" for stem in OPENED_FIRST[V9]]
    out.sort(key=lambda r: first.index(so_base(r[0])) if so_base(r[0]) in first else len(first))
    return out


def _fill(template: str, version: str | None) -> str | None:
    if not version:
        return None
    parts = version.split(".")
    count = template.count("%d")
    if count > len(parts):
        return None
    for p in parts[:count]:
        template = template.replace("%d", p, 1)
    return template


# --- the closure ------------------------------------------------------------------------------

@dataclass
class Dependency:
    requester: str  # path of the library that needs it
    name: str  # the name asked for (first candidate for run-time names)
    kind: str  # "root" (opened by path), "needed" (DT_NEEDED), "runtime" (dlopen by an embedded name)
    resolution: Resolution
    candidates: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        res = self.resolution.to_dict()
        return {"requester": self.requester, "name": self.name, "kind": self.kind,
                "candidates": list(self.candidates or (self.name,)), "tried_last": res.pop("name"),
                **res}


def closure(roots: Sequence[str | os.PathLike], env: Environment, versions: Versions = Versions(),
            runtime: bool = True,
            scanned_if: Callable[[ElfObject], bool] | None = None,
            after: Sequence[str | os.PathLike] = ()) -> list[Dependency]:
    """Load each root as dlopen(path) would, with every DT_NEEDED entry recursively; then each
    name the roots (and what those names bring in) open at run time, from the library that
    embeds it; then each of `after` (libraries that nothing named, opened by path once the
    rest is loaded). One Dependency per request, in load order. `scanned_if`: only the objects
    it accepts are read for run-time names (a caller that asks only about cuDNN's own libraries
    need not search for every name the driver opens).

    Run-time names are opened in dependency order: one whose file is found but whose DT_NEEDED
    entry is not is tried again once the other names are loaded, as a library that opens its
    parts loads the one the others need first (cuDNN 9 opens libcudnn_graph before
    libcudnn_ops, which lists libcudnn_graph.so.9: with that link gone, ld.so matches the entry
    to the graph library already loaded by its full file name, by its SONAME)."""
    deps: list[Dependency] = []
    proc = Process(env)
    names_of = env.objects.runtime_names if env.objects is not None else runtime_names
    scan: deque[Loaded] = deque()

    def opened(item: Loaded | None) -> None:
        if runtime and item is not None and item not in scan and (
                scanned_if is None or scanned_if(item.obj)):
            scan.append(item)

    for root in roots:
        if proc.spent:
            break
        root_path = os.fspath(root)
        res, item, needed = proc.load_with_needed(root_path, proc.main)
        deps.append(Dependency(env.executable or "", root_path, "root", res))
        deps += [Dependency(who.opened_as, r.name, "needed", r) for who, r in needed]
        opened(item)
    scanned: set[int] = set()
    waiting: list[tuple[Loaded, str, tuple[str, ...]]] = []  # found, with a DT_NEEDED not yet there

    def request(item: Loaded, label: str, candidates: tuple[str, ...], last: bool) -> bool:
        """Open one run-time name; False when it waits for another to be loaded first."""
        res, got, needed = _first_of(proc, candidates, item, defer=not last)
        if got is None and res is None:
            waiting.append((item, label, candidates))
            return False
        deps.append(Dependency(item.opened_as, label, "runtime", res, candidates))
        deps.extend(Dependency(who.opened_as, r.name, "needed", r) for who, r in needed)
        if got is not None and res.via != "already loaded":
            opened(got)
            return True
        return False

    def settle() -> None:
        """Retry the waiting names each time one loads, before the names after it: cuDNN opens
        ops once graph is there, before cnn and adv, which would bring ops in by its link."""
        nonlocal waiting
        while waiting:
            retry, waiting = waiting, []
            if not any([request(*w, last=False) for w in retry]):
                break

    def drain() -> None:
        nonlocal waiting
        while (scan or waiting) and not proc.spent:
            if not scan:
                retry, waiting = waiting, []
                if not any([request(*w, last=False) for w in retry]):
                    for w in waiting:  # nothing more can come first: each as the loader ends it
                        request(*w, last=True)
                    waiting = []
                continue
            item = scan.popleft()
            if id(item) in scanned:
                continue
            scanned.add(id(item))
            for label, candidates in runtime_requests(names_of(item.opened_as), item.obj.soname,
                                                      versions):
                if request(item, label, candidates, last=False):
                    settle()
        for w in waiting:  # the loader's budget ran out first
            request(*w, last=True)
        waiting = []

    drain()
    for late in after:
        if proc.spent:
            break
        late_path = os.fspath(late)
        res, item, needed = proc.load_with_needed(late_path, proc.main)
        if item is not None and id(item) in scanned:
            continue
        deps.append(Dependency(env.executable or "", late_path, "root", res))
        deps += [Dependency(who.opened_as, r.name, "needed", r) for who, r in needed]
        opened(item)
        drain()
    return deps


def _first_of(proc: Process, candidates: tuple[str, ...], requester: Loaded,
              defer: bool = False):
    """The first candidate that loads; else the most telling failure: a file found whose
    DT_NEEDED is missing (with that entry), a wrong ELF class, else the first name's.
    `defer`: (None, None, []) instead, as soon as a candidate is found whose DT_NEEDED entry is
    missing (it may load once another library is there)."""
    first, first_needed = None, []
    for name in candidates:
        res, item, needed = proc.load_with_needed(name, requester)
        if item is not None:
            return res, item, needed
        if defer and res.found and needed and not needed[-1][1].found:
            return None, None, []
        if first is None or (not first.found and res.found) or (
                not first.found and first.error and "wrong ELF class" not in first.error
                and res.error and "wrong ELF class" in res.error):
            first, first_needed = res, needed
        if proc.spent:
            break
    return first, None, first_needed


def missing(deps: Iterable[Dependency]) -> list[Dependency]:
    return [d for d in deps if not d.resolution.found]
