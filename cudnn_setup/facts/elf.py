"""What a library file is: ELF facts through pyelftools, and the magic of other formats."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

# e_machine → the name `uname -m` gives for that architecture.
_MACHINES = {
    "EM_X86_64": "x86_64",
    "EM_386": "i686",
    "EM_AARCH64": "aarch64",
    "EM_PPC64": "ppc64le",
    "EM_PPC": "ppc",
    "EM_ARM": "armv7l",
    "EM_S390": "s390x",
    "EM_RISCV": "riscv64",
}

_FOREIGN_MAGIC = (
    (b"\xcf\xfa\xed\xfe", "a Mach-O (macOS) binary"),
    (b"\xce\xfa\xed\xfe", "a Mach-O (macOS) binary"),
    (b"\xca\xfe\xba\xbe", "a Mach-O (macOS) universal binary"),
    (b"MZ", "a Windows PE binary"),
    (b"!<arch>\n", "a static archive"),
)


class NotElf(Exception):
    """The file is not an ELF object; the message says what it is instead, when known."""


@dataclass(frozen=True)
class ElfInfo:
    machine: str  # x86_64, ppc64le, aarch64, or the raw e_machine
    bits: int
    kind: str  # ET_DYN, ET_EXEC, ET_REL
    soname: str | None

    @property
    def is_shared_object(self) -> bool:
        return self.kind == "ET_DYN"

    def to_dict(self) -> dict:
        return {"machine": self.machine, "bits": self.bits, "type": self.kind,
                "soname": self.soname}


def describe_magic(head: bytes) -> str:
    if not head:
        return "an empty file"
    for magic, what in _FOREIGN_MAGIC:
        if head.startswith(magic):
            return what
    return "not an ELF file"


def read_elf(path: Path) -> ElfInfo:
    with open(path, "rb") as f:
        head = f.read(8)
        if not head.startswith(b"\x7fELF"):
            raise NotElf(describe_magic(head))
        f.seek(0)
        try:
            elf = ELFFile(f)
            machine = _MACHINES.get(elf.header["e_machine"], str(elf.header["e_machine"]))
            if machine == "ppc64le" and not elf.little_endian:
                machine = "ppc64"
            return ElfInfo(machine=machine, bits=elf.elfclass, kind=elf.header["e_type"],
                           soname=_soname(elf))
        except (ELFError, ValueError, KeyError, OSError, AssertionError) as exc:
            raise NotElf(f"a damaged ELF file ({exc})") from None


def _soname(elf: ELFFile) -> str | None:
    for section in elf.iter_sections():
        if isinstance(section, DynamicSection):
            for tag in section.iter_tags("DT_SONAME"):
                return tag.soname
    return None
