"""The ld.so.cache as ldconfig knows it: `ldconfig -p` parsed, the system's ldconfig found,
and the entries ldconfig would add for a directory."""
from __future__ import annotations

import os
import re
import signal

from msgspec import Struct

from cudnn_setup.child import Runner, Unanswered, run_command
from cudnn_setup.facts.ldresolve.loadable import NotLoadable, read_object
from cudnn_setup.text import escape

# Where ldconfig is installed (glibc puts it in /sbin; merged-/usr systems have both).
LDCONFIG_PATHS = ("/sbin/ldconfig", "/usr/sbin/ldconfig")

# `ldconfig -p`: "\tlibz.so.1 (libc6,x86-64, hwcap: "x86-64-v3") => /lib/x86_64-linux-gnu/libz.so.1"
_CACHE_LINE = re.compile(r"^\s*(?P<name>\S+)\s+\((?P<flags>[^)]*)\)\s+=>\s+(?P<path>\S(?:.*\S)?)\s*\Z")
# The ABI word ldconfig prints after "libc6," for each (e_machine, class); no word = the
# architecture's default 32-bit ABI (ldconfig.c print_entry).
CACHE_ABI = {("EM_X86_64", 64): "x86-64", ("EM_X86_64", 32): "x32", ("EM_386", 32): "",
             ("EM_AARCH64", 64): "AArch64", ("EM_PPC64", 64): "64bit",
             ("EM_S390", 64): "64bit", ("EM_ARM", 32): "hard-float",
             ("EM_RISCV", 64): "double-float"}


class CacheEntry(Struct, frozen=True):
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
        abi = CACHE_ABI.get((obj.machine, obj.bits))
        if obj.soname and abi is not None and obj.soname not in out:
            link = os.path.join(base, obj.soname)
            out[obj.soname] = CacheEntry(obj.soname, link if os.path.exists(link) else path, abi)
    return list(out.values())


def ldconfig_binary() -> str | None:
    """The system's ldconfig, from the directories it is installed in; never looked up through
    anyone's PATH, which would let the caller's environment choose the program run as root."""
    return next((p for p in LDCONFIG_PATHS if os.access(p, os.X_OK)), None)


def read_cache(ldconfig: str | None = None, cache_file: str | None = None,
               timeout: float = 30.0, runner: Runner | None = None) -> list[CacheEntry]:
    """The loader cache as `ldconfig -p` prints it ([] when there is no ldconfig, or it says
    there is no cache file); `runner`: the command's, so that its end ends the child too.
    Unanswered when ldconfig could not be started, did not finish, failed otherwise (a crash,
    an unreadable cache) or printed something other than a cache listing: the cache is then
    not known to be empty."""
    binary = ldconfig or ldconfig_binary()
    if binary is None:
        return []
    done = run_command([binary, "-p"] + (["-C", cache_file] if cache_file else []), timeout,
                       env={}, runner=runner)
    if not done.answered:
        raise Unanswered(done.unanswered())
    if done.returncode != 0:
        if _NO_CACHE in done.err and "No such file or directory" in done.err:
            return []  # no cache file: the loader has none either
        if done.returncode is not None and done.returncode < 0:
            raise Unanswered(f"it was killed by {_signal_name(-done.returncode)}")
        raise Unanswered(done.unanswered())
    return _listing(done.stdout.decode(errors="replace"))


_NO_CACHE = "Can't open cache file"  # ldconfig's words (the C locale: its env is empty)
# The first line of `ldconfig -p`: "539 libs found in cache `/etc/ld.so.cache'"
_HEADER = re.compile(r"^(\d{1,9}) libs? found in cache\b")


def _listing(text: str) -> list[CacheEntry]:
    """The entries of `ldconfig -p`'s output, which must be what it prints: its count of
    entries first, then that many entry lines. Unanswered for anything else (a program that
    printed other words, a listing cut short), which would otherwise pass for a cache that
    holds nothing."""
    lines = text.splitlines()
    first = next((line.strip() for line in lines if line.strip()), "")
    m = _HEADER.match(first)
    if m is None:
        shown = escape(first[:120]) if first else "nothing"
        raise Unanswered(f"it printed no cache listing (its first line: {shown})"
                         if first else "it printed nothing")
    listed = sum(1 for line in lines if _CACHE_LINE.match(line))
    if listed != int(m[1]):
        raise Unanswered(f"it announced {m[1]} entries and listed {listed}")
    return parse_ldconfig_p(text)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
