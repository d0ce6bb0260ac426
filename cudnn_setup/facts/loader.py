"""The system's dynamic loader as the install sees it: where it looks (ld.so.conf and the
default dirs), which copies of a library it would consider, and keeping its cache current.

Reading the cache (`ldconfig -p`) and finding ldconfig itself are
facts/ldresolve/ldconfig.py's; this module runs ldconfig to change the cache and writes the
tool's ld.so.conf.d entry.
"""
from __future__ import annotations

import glob
import os
import shlex
from itertools import chain
from pathlib import Path
from typing import Iterable, Iterator, Mapping, Sequence

from cudnn_setup.durable import write_atomic
from cudnn_setup.child import Runner, Unanswered, run_command
from cudnn_setup.facts.cudnn import library_file_version
from cudnn_setup.facts.ldresolve.environment import Environment
from cudnn_setup.facts.ldresolve.ldconfig import CacheEntry, ldconfig_binary, read_cache
from cudnn_setup.facts.ldresolve.loader_facts import LoaderFacts, probe_loader
from cudnn_setup.facts.ldresolve.read_once import Objects
from cudnn_setup.untrusted import read_regular

# Where glibc's ld.so looks without being told (its "trusted" directories).
DEFAULT_DIRS = ("/lib", "/usr/lib", "/lib64", "/usr/lib64", "/lib/x86_64-linux-gnu",
                "/usr/lib/x86_64-linux-gnu")
CONF_NAME = "cudnn-setup.conf"
# How a copy found on LD_LIBRARY_PATH is named: the one search the loader makes before its cache
BEFORE_THE_CACHE = "LD_LIBRARY_PATH"
MAX_CONF_BYTES = 1 << 20  # of one ld.so.conf file: real ones are a few lines


def conf_dirs(conf: Path = Path("/etc/ld.so.conf")) -> list[str]:
    """Directories listed in ld.so.conf, following `include` lines like ldconfig does, however
    deep they go: the files being read are a stack, not nested calls (a call per include ran
    out of Python's recursion depth near a thousand, and lost the rest without a word)."""
    seen: set[str] = set()

    def lines(path: Path) -> Iterator[tuple[Path, str]]:
        if str(path) in seen or not path.is_file():
            return
        seen.add(str(path))
        try:
            text = read_regular(path, MAX_CONF_BYTES).decode(errors="replace")
        except OSError:  # ldconfig skips what it cannot read; so does the picture drawn from it
            return
        for raw in text.splitlines():
            line = raw.split("#", 1)[0].strip()
            if line:
                yield path, line

    out: list[str] = []
    reading = [lines(conf)]  # the files being read, the innermost include last
    while reading:
        step = next(reading[-1], None)
        if step is None:
            reading.pop()
            continue
        path, line = step
        if line.startswith("include "):
            pattern = line.split(None, 1)[1]
            if not os.path.isabs(pattern):
                pattern = str(path.parent / pattern)
            reading.append(chain.from_iterable(lines(Path(inc))
                                               for inc in sorted(glob.glob(pattern))))
        elif not line.startswith("hwcap "):
            out.append(line)
    return out


def search_dirs(conf: Path = Path("/etc/ld.so.conf")) -> list[str]:
    dirs = conf_dirs(conf) + list(DEFAULT_DIRS)
    return list(dict.fromkeys(os.path.realpath(d) for d in dirs))


def on_loader_path(lib_dir: Path, conf: Path = Path("/etc/ld.so.conf")) -> bool:
    return os.path.realpath(lib_dir) in search_dirs(conf)


def ld_library_path_line(lib_dir: Path) -> str:
    # quoted for a shell: the line is run as shown, and a root may have a space in its name
    return (f'export LD_LIBRARY_PATH={shlex.quote(str(lib_dir))}'
            '${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}')


def run_ldconfig(args: tuple[str, ...] = (), binary: str | None = None) -> tuple[bool, str]:
    """Run ldconfig: `binary`, else the system's (facts/ldresolve/ldconfig.py finds it); (it
    succeeded, what it said)."""
    binary = binary or ldconfig_binary()
    if binary is None:
        return False, "ldconfig not found"
    done = run_command([binary, *args], 120, env={})
    return done.ok, done.text()


def write_conf(conf_dir: Path, lib_dir: Path) -> Path:
    path = conf_dir / CONF_NAME
    text = f"# written by cudnn-setup: the CUDA root holding cuDNN\n{lib_dir}\n"
    write_atomic(path, os.fsencode(text), 0o644)
    return path


def remove_conf(conf_dir: Path, lib_dir: Path) -> bool:
    """Drop the file write_conf wrote, if it registers `lib_dir`; True when it did."""
    path = conf_dir / CONF_NAME
    try:
        lines = read_regular(path, MAX_CONF_BYTES).decode(errors="replace").splitlines()
    except FileNotFoundError:
        return False
    if str(lib_dir) not in [line.strip() for line in lines]:
        return False
    path.unlink()
    return True


def loader_environment(env: Mapping[str, str], cache: Sequence[CacheEntry] | None = None,
                       facts: LoaderFacts | None = None,
                       objects: Objects | None = None, runner: Runner | None = None
                       ) -> Environment:
    """What a program started from `env` has its loader work from. An empty LD_LIBRARY_PATH is
    no LD_LIBRARY_PATH for glibc (dl-load.c _dl_init_paths). The checks that share it read
    each library's ELF facts once (`objects`, else a memo of its own). `runner`: the
    command's, which runs the loader's children (ldconfig -p, ld.so), so that the command's end
    ends them and waits for what they leave."""
    llp = env.get("LD_LIBRARY_PATH") or None
    cache_error = None
    if cache is None:
        try:
            cache = read_cache(runner=runner)
        except Unanswered as why:  # searched without it, each "not found" saying so
            cache, cache_error = [], f"ldconfig -p: {why}"
    return Environment(ld_library_path=llp, cache=cache, cache_error=cache_error,
                       facts=probe_loader(runner=runner) if facts is None else facts,
                       objects=objects or Objects())


def cache_unread(why: str) -> tuple[str, str]:
    """What a judgement made without the loader cache says (`why`: how `ldconfig -p` failed,
    Environment.cache_error): a clause for its detail and its hint, one line each."""
    binary = ldconfig_binary() or "ldconfig"
    return (f"judged without the loader cache, which could not be read ({why})",
            f"run `{binary} -p` to see why it fails (as root, `{binary}` rebuilds a damaged "
            "/etc/ld.so.cache), then run this again")


def cache_entries(name_prefix: str = "libcudnn", cache_file: str | None = None) \
        -> list[tuple[str, str]]:
    """(soname, path) pairs of the loader cache for names with the prefix; none when ldconfig
    gave no answer (copies_of also looks in the directories the cache is made from)."""
    try:
        entries = read_cache(cache_file=cache_file)
    except Unanswered:
        return []
    return named(entries, name_prefix)


def named(entries: Iterable[CacheEntry], name_prefix: str = "libcudnn") -> list[tuple[str, str]]:
    """(soname, path) pairs of the cache `entries` whose names have the prefix."""
    return [(e.name, e.path) for e in entries if e.name.startswith(name_prefix)]


def found_before_the_cache(copy: dict) -> bool:
    """Whether `copy` (one of copies_of's) is loaded whatever the loader cache holds: only
    LD_LIBRARY_PATH is searched before it."""
    return copy["via"] == BEFORE_THE_CACHE


def _resolve_version(path: Path) -> str | None:
    return library_file_version(os.path.basename(os.path.realpath(path)))


def copies_of(name: str, env: Mapping[str, str], conf: Path = Path("/etc/ld.so.conf"),
              cache: list[tuple[str, str]] | None = None) -> list[dict]:
    """Every place the loader would consider for `name`, in its search order."""
    found: list[dict] = []
    seen: set[str] = set()

    def add(path: Path, via: str) -> None:
        real = os.path.realpath(path)
        if os.path.exists(path) and real not in seen:
            seen.add(real)
            found.append({"path": str(path), "real": real, "via": via,
                          "version": _resolve_version(path)})

    for d in [d for d in env.get("LD_LIBRARY_PATH", "").split(":") if d]:
        add(Path(d) / name, BEFORE_THE_CACHE)
    entries = cache if cache is not None else cache_entries("libcudnn")
    for soname, path in entries:
        if soname == name:
            add(Path(path), "ldconfig cache")
    for d in search_dirs(conf):
        add(Path(d) / name, "ld.so.conf / default dirs (not in cache)")
    return found
