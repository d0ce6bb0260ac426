"""The `elf` layer: each library's ELF header, read from the file only."""
from __future__ import annotations

from typing import TYPE_CHECKING

from cudnn_setup.installation.model import Installation
from cudnn_setup.facts import cudnn as gen
from cudnn_setup.facts.elf import NotElf, code_problem, read_elf
from cudnn_setup.facts.host import host_machine
from cudnn_setup.report import FAIL, PASS, SKIP, Check
from cudnn_setup.text import plural

if TYPE_CHECKING:
    from cudnn_setup.checks.check_facts import CheckFacts


def check_elf(inst: Installation, facts: CheckFacts) -> Check:
    """Each library an ELF shared object of this machine, whole, with the SONAME its name
    promises."""
    host = host_machine()
    if not inst.libraries:
        return Check("elf", SKIP, "no library to examine")
    problems = []
    for lib in inst.libraries:
        try:
            info = read_elf(lib)
        except NotElf as exc:
            cut = code_problem(lib)  # a truncated file says so, not pyelftools' complaint
            problems.append(f"{lib.name} {cut}" if cut and cut.startswith("is truncated")
                            else f"{lib.name} is {exc}")
            continue
        if info.machine != host:
            problems.append(f"{lib.name} is built for {info.machine}; this machine is {host}")
        if info.bits != 64 or not info.is_shared_object:
            problems.append(f"{lib.name} is a {info.bits}-bit {info.kind}, not a 64-bit shared object")
        else:
            useless = code_problem(lib)
            if useless:
                problems.append(f"{lib.name} {useless}")
        expected = gen.expected_soname(gen.library_stem(lib.name) or "",
                                       gen.library_file_version(lib.name), inst.generation)
        if info.soname != expected:
            problems.append(f"{lib.name} has SONAME {info.soname}, expected {expected}")
    if problems:
        return Check("elf", FAIL, "; ".join(problems))
    return Check("elf", PASS, f"{plural(len(inst.libraries), 'library')}: {host} ELF shared "
                 f"{'object' if len(inst.libraries) == 1 else 'objects'} with the expected "
                 f"{'SONAME' if len(inst.libraries) == 1 else 'SONAMEs'}, whole, exporting "
                 "symbols")
