"""The ld.so.cache as ldconfig knows it: `ldconfig -p` parsed, the system's ldconfig found,
and the entries ldconfig would add for a directory."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

from cudnn_setup.child import Runner, Unanswered, run_command
from cudnn_setup.facts.ldresolve.loadable import NotLoadable, read_object

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
    there is no cache); `runner`: the command's, so that its end ends the child too.
    Unanswered when ldconfig could not be started or did not finish: the cache is not known
    to be empty."""
    binary = ldconfig or ldconfig_binary()
    if binary is None:
        return []
    done = run_command([binary, "-p"] + (["-C", cache_file] if cache_file else []), timeout,
                       env={}, runner=runner)
    if not done.answered:
        raise Unanswered(done.unanswered())
    return parse_ldconfig_p(done.stdout.decode(errors="replace")) if done.ok else []
