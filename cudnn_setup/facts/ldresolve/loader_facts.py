"""The running ld.so's own facts: how it expands $LIB and $PLATFORM, the directories it
searches by itself and the hwcaps subdirectories it tries in each, asked of ld.so itself."""
from __future__ import annotations

import re

from msgspec import Struct

from cudnn_setup.child import Runner, run_command
from cudnn_setup.facts.elf import interpreter as interpreter_of

# glibc's trusted directories when the loader cannot be asked (x86-64 Debian/Ubuntu, then
# Fedora/RHEL/SUSE); probe_loader() replaces them with what the running ld.so says.
FALLBACK_DEFAULT_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64",
                         "/usr/lib64", "/lib", "/usr/lib")


class LoaderFacts(Struct, frozen=True):
    """How this machine's ld.so expands names and which directories it searches by itself."""

    lib: str = "lib64"  # $LIB
    platform: str = "x86_64"  # $PLATFORM (AT_PLATFORM)
    default_dirs: tuple[str, ...] = FALLBACK_DEFAULT_DIRS
    subdirs: tuple[str, ...] = ("",)  # tried in each directory, in order; "" is the directory
    found_via: str = "built-in defaults"


def probe_loader(program: str = "/bin/true", interpreter: str | None = None,
                 timeout: float = 10.0, runner: Runner | None = None) -> LoaderFacts:
    """Ask the real ld.so: `ld.so --help` lists the default directories (glibc 2.33+), and one
    run of `program` under LD_DEBUG=libs shows how $LIB, $PLATFORM and the hwcaps
    subdirectories expand. Falls back to built-in defaults, saying so in `found_via`. `runner`:
    the command's, so that its end ends the children too."""
    facts = LoaderFacts()
    interp = interpreter or interpreter_of(program)
    dirs: list[str] = []
    if interp:
        out = run_command([interp, "--help"], timeout, env={}, runner=runner).out
        dirs = re.findall(r"^[ \t]+(/\S+) \(system search path\)$", out, re.M)
    marker = "/nonexistent-cudnn-setup-probe"
    err = run_command([program], timeout, env={"LD_LIBRARY_PATH": f"{marker}/$LIB/@/$PLATFORM/@",
                                               "LD_DEBUG": "libs"}, runner=runner).err
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
