"""What a library file is: ELF facts through pyelftools, and the magic of other formats.

The one ELF reader of the package: the judge of an archive's libraries, the checks and the
loader's emulation (facts/ldresolve/) all read a file's ELF facts here."""
from __future__ import annotations

import os
import struct
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterator

from elftools.elf.constants import SH_FLAGS
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.segments import InterpSegment
from msgspec import Struct

from cudnn_setup.untrusted import NotRegular, open_regular

# pyelftools parses hostile bytes with whatever they make it meet: IndexError on a 4-byte file,
# construct's and struct's errors on a cut header, ValueError or OverflowError from a seek to an
# offset past 2**63, OSError (EINVAL) from one past the largest file offset. Any Exception it
# raises while reading a file means the file is damaged; the try blocks around it hold nothing
# but the parsing, so a bug of the tool's own is not taken for one.
PARSE_ERRORS = (Exception,)

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


# Where reading a file stopped (NotElf.stage), for a caller that words it as another program
# does: the loader's emulation says what ld.so says at each of them.
UNOPENED, NOT_REGULAR, UNREAD, NOT_ELF, DAMAGED = "unopened", "not_regular", "unread", \
    "not_elf", "damaged"
_DF_1_NODEFLIB = 0x800
# The dynamic tags whose string pyelftools puts on the tag, under these names
_STRING_TAGS = {"DT_NEEDED": "needed", "DT_SONAME": "soname", "DT_RPATH": "rpath",
                "DT_RUNPATH": "runpath"}
# ELF header size by EI_CLASS: what ld.so reads before it looks at anything else
_EHDR_SIZE = {1: 52, 2: 64}


class NotElf(Exception):
    """The file is not an ELF object; the message says what it is instead, when known.
    `stage` is one of the constants above; `reason` the system's or the parser's own words."""

    def __init__(self, message: str, stage: str = DAMAGED, reason: str = ""):
        super().__init__(message)
        self.stage = stage
        self.reason = reason


class ElfInfo(Struct, frozen=True):
    machine: str  # x86_64, ppc64le, aarch64, or the raw e_machine
    bits: int
    kind: str  # ET_DYN, ET_EXEC, ET_REL
    soname: str | None
    # what the dynamic loader reads besides (facts/ldresolve/)
    e_machine: str = ""  # as pyelftools names it: EM_X86_64, EM_386, EM_AARCH64 …
    little_endian: bool = True
    needed: tuple[str, ...] = ()  # DT_NEEDED, in order
    rpath: str | None = None  # DT_RPATH as written; None: no such tag
    runpath: str | None = None  # DT_RUNPATH as written
    nodeflib: bool = False  # DF_1_NODEFLIB

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


def _ident_problem(head: bytes) -> str | None:
    """What ld.so (open_verify) says of a file's first bytes before it parses anything."""
    if len(head) < 52:
        return "file too short"
    if not head.startswith(b"\x7fELF"):
        return "invalid ELF header"
    if head[4] not in _EHDR_SIZE or len(head) < _EHDR_SIZE[head[4]]:
        return "file too short" if len(head) < 64 else "invalid ELF header"
    return None


@contextmanager
def _opened(path: str | os.PathLike) -> Iterator[tuple[BinaryIO, bytes]]:
    """The regular file `path` open for reading, with its first 64 bytes; NotElf when it
    cannot be opened or read (a FIFO, a device or a directory is never opened)."""
    try:
        f = open_regular(path)
    except OSError as exc:
        raise NotElf(f"not readable ({exc.strerror or exc})",
                     NOT_REGULAR if isinstance(exc, NotRegular) else UNOPENED,
                     str(exc.strerror)) from None
    with f:
        try:
            head = f.read(64)
        except OSError as exc:
            raise NotElf(f"not readable ({exc.strerror or exc})", UNREAD,
                         str(exc.strerror)) from None
        yield f, head


def read_elf(path: str | os.PathLike, *, as_loader: bool = False) -> ElfInfo:
    """The ELF facts of `path`; NotElf says what it is instead (also for a FIFO, a device, a
    directory, an unreadable or damaged file), so a caller needs to handle nothing else.

    `as_loader`: judged as ld.so judges a file it maps: its identification bytes first
    (NotElf's reason in ld.so's words), and contents its headers place past the file's end
    are no reason to refuse it (ld.so maps what there is)."""
    with _opened(path) as (f, head):
        if as_loader:
            problem = _ident_problem(head)
            if problem:
                raise NotElf(describe_magic(head) if not head.startswith(b"\x7fELF") else
                             f"a damaged ELF file ({problem})", NOT_ELF, problem)
        elif not head.startswith(b"\x7fELF"):
            raise NotElf(describe_magic(head), NOT_ELF)
        try:
            f.seek(0)
            elf = ELFFile(f)
            header = elf.header
            machine = _MACHINES.get(header["e_machine"], str(header["e_machine"]))
            if machine == "ppc64le" and not elf.little_endian:
                machine = "ppc64"
            outside = None if as_loader else _outside(elf, os.fstat(f.fileno()).st_size)
            info = _info(elf, machine)
        except PARSE_ERRORS as exc:
            reason = f"{type(exc).__name__}: {str(exc)[:200]}"
            raise NotElf(f"a damaged ELF file ({reason})", DAMAGED, reason) from None
    if outside:
        raise NotElf(f"a damaged ELF file ({outside})", DAMAGED, outside)
    return info


def _outside(elf: ELFFile, size: int) -> str | None:
    """What of the file's contents its headers place past its end (a cut or forged file)."""
    for seg in elf.iter_segments():
        if seg["p_filesz"] and seg["p_offset"] + seg["p_filesz"] > size:
            return (f"a {seg['p_type']} segment at offset {seg['p_offset']} runs past the "
                    f"file's end ({size} bytes)")
    for section in elf.iter_sections():
        if section["sh_type"] not in ("SHT_NOBITS", "SHT_NULL") and section["sh_size"] and \
                section["sh_offset"] + section["sh_size"] > size:
            return (f"section {section.name or '?'} at offset {section['sh_offset']} runs past "
                    f"the file's end ({size} bytes)")
    return None


def _info(elf: ELFFile, machine: str) -> ElfInfo:
    """The header's facts and the tags of the first dynamic section that say how the object
    is loaded."""
    strings: dict[str, str | None] = {"soname": None, "rpath": None, "runpath": None}
    needed: list[str] = []
    nodeflib = False
    for section in elf.iter_sections():
        if not isinstance(section, DynamicSection):
            continue
        for tag in section.iter_tags():
            kind = tag.entry.d_tag
            if kind in _STRING_TAGS:
                value = getattr(tag, _STRING_TAGS[kind])
                if kind == "DT_NEEDED":
                    needed.append(value)
                else:
                    strings[_STRING_TAGS[kind]] = value
            elif kind == "DT_FLAGS_1":
                nodeflib = bool(tag.entry.d_val & _DF_1_NODEFLIB)
        break
    soname = strings["soname"]
    return ElfInfo(machine=machine, bits=elf.elfclass, kind=str(elf.header["e_type"]),
                   soname=soname if isinstance(soname, str) else None,
                   e_machine=str(elf.header["e_machine"]), little_endian=elf.little_endian,
                   needed=tuple(needed), rpath=strings["rpath"], runpath=strings["runpath"],
                   nodeflib=nodeflib)


def interpreter(path: str | os.PathLike) -> str | None:
    """The program interpreter (PT_INTERP) a program names; None when it names none or the
    file cannot be read as ELF."""
    try:
        with open_regular(path) as f:
            elf = ELFFile(f)
            for seg in elf.iter_segments():
                if isinstance(seg, InterpSegment):
                    return str(seg.get_interp_name())
    except PARSE_ERRORS:
        return None
    return None


def read_only_ranges(f: BinaryIO, size: int) -> list[tuple[int, int]]:
    """(offset, length) of the file ranges holding read-only data: .rodata* sections, else
    read-only PT_LOAD segments; each cut to the file's `size` (a header may claim any offset
    and size). Parse errors are the caller's (PARSE_ERRORS)."""
    elf = ELFFile(f)
    ranges = []
    for section in elf.iter_sections():
        flags = section["sh_flags"]
        if (section.name.startswith(".rodata") and section["sh_type"] == "SHT_PROGBITS"
                and flags & SH_FLAGS.SHF_ALLOC
                and not flags & (SH_FLAGS.SHF_WRITE | SH_FLAGS.SHF_EXECINSTR)):
            ranges.append((section["sh_offset"], section["sh_size"]))
    if not ranges and elf.num_sections() == 0:
        for seg in elf.iter_segments():
            if seg["p_type"] == "PT_LOAD" and seg["p_flags"] == 4:  # PF_R only
                ranges.append((seg["p_offset"], seg["p_filesz"]))
    return [(offset, min(length, size - offset)) for offset, length in ranges
            if isinstance(offset, int) and isinstance(length, int) and 0 <= offset < size
            and length > 0]


# Symbols every shared object may define without holding any code of its own.
_TRIVIAL_SYMBOLS = {"_init", "_fini", "_edata", "_end", "__bss_start"}


def code_problem(path: Path) -> str | None:
    """What makes a library that the loader accepts useless as the library it is named for:
    truncated (its headers describe more bytes than the file has: the loader may still map
    it, and the first call into the missing part crashes) or exporting no symbols at all (a
    library with the right SONAME and no code: dlopen succeeds, every lookup fails). Every
    NVIDIA cuDNN library exports at least one symbol (libcudnn_heuristic.so.9 has
    dummyHeuristicSymbol). The answer completes "NAME …"; None when neither (a file that is not
    ELF at all is read_elf's to judge)."""
    try:
        f = open_regular(path)
    except OSError as exc:
        return f"is not readable ({exc.strerror or exc})"
    with f:
        size = os.fstat(f.fileno()).st_size
        try:
            head = f.read(64)
        except OSError as exc:
            return f"is not readable ({exc.strerror or exc})"
        shown = _section_table_end(head)
        if shown is not None and shown > size:
            return (f"is truncated: its ELF header places its section table up to byte "
                    f"{shown}, the file has {size}")
        try:
            f.seek(0)
            elf = ELFFile(f)
            outside = _outside(elf, size)
            if outside:
                return f"is truncated or damaged ({outside})"
            dynsym = elf.get_section_by_name(".dynsym")
            if dynsym is None or not hasattr(dynsym, "iter_symbols"):
                return "exports no symbols (no dynamic symbol table): it holds no code to call"
            if _exports_code(elf, dynsym):
                return None
        except PARSE_ERRORS as exc:
            return f"is a damaged ELF file ({type(exc).__name__}: {str(exc)[:200]})"
    return "exports no symbols: a library with this name but no code to call"


# Symbol table entries: (st_name, st_info, st_shndx) at these offsets, by ELF class.
_SYMBOL_LAYOUT = {64: (24, 0, 4, 6), 32: (16, 0, 12, 14)}  # entry size, name, info, shndx
_EXPORTED_BINDS = {1, 2}  # STB_GLOBAL, STB_WEAK
_CODE_TYPES = {1, 2, 10}  # STT_OBJECT, STT_FUNC, STT_GNU_IFUNC


def _exports_code(elf: ELFFile, dynsym) -> bool:
    """Whether the dynamic symbol table defines a global or weak function or object other
    than the trivial ones.

    The table is read in one piece and its entries unpacked here: iterating it through
    pyelftools reads each entry and its name with a seek and a read of their own, which for a
    library of 40 000 imported C++ symbols is 150 000 small reads, each from the disk when the
    file was just written with O_DIRECT. A table whose entry size is not the standard one is
    left to pyelftools, which reads it as before."""
    entry, name_at, info_at, shndx_at = _SYMBOL_LAYOUT.get(elf.elfclass, (0, 0, 0, 0))
    if not entry or dynsym["sh_entsize"] != entry:
        return any(sym["st_shndx"] != "SHN_UNDEF" and sym.name and
                   sym.name not in _TRIVIAL_SYMBOLS and
                   sym["st_info"]["bind"] in ("STB_GLOBAL", "STB_WEAK") and
                   sym["st_info"]["type"] in ("STT_FUNC", "STT_OBJECT", "STT_GNU_IFUNC")
                   for sym in dynsym.iter_symbols())
    order = "<" if elf.little_endian else ">"
    name_of, shndx_of = struct.Struct(order + "I"), struct.Struct(order + "H")
    # The bytes as they are in the file, as pyelftools' iteration reads them (data() would
    # decompress a table flagged SHF_COMPRESSED, which no loader does); at most the file's size.
    stream = dynsym.stream
    end = stream.seek(0, 2)  # a size past the file's end is read as far as the file goes
    stream.seek(dynsym["sh_offset"])
    table = stream.read(max(0, min(dynsym["sh_size"], end - dynsym["sh_offset"])))
    for at in range(0, dynsym.num_symbols() * entry, entry):
        if len(table) < at + entry:
            break  # cut short: pyelftools' iteration would have failed here (see below)
        info = table[at + info_at]
        if info >> 4 not in _EXPORTED_BINDS or info & 0xF not in _CODE_TYPES or \
                shndx_of.unpack_from(table, at + shndx_at)[0] == 0:  # SHN_UNDEF
            continue
        name = dynsym.stringtable.get_string(name_of.unpack_from(table, at + name_at)[0])
        if name and name not in _TRIVIAL_SYMBOLS:
            return True
    if len(table) < dynsym.num_symbols() * entry:
        raise EOFError("the dynamic symbol table is cut short")
    return False


def _section_table_end(head: bytes) -> int | None:
    """Where an ELF header says its section header table ends (e_shoff + e_shnum ×
    e_shentsize), read before pyelftools, which fails on a file cut short."""
    if len(head) < 64 or not head.startswith(b"\x7fELF") or head[4] not in (1, 2) or \
            head[5] not in (1, 2):
        return None
    order = "<" if head[5] == 1 else ">"
    if head[4] == 2:
        shoff, = struct.unpack_from(order + "Q", head, 0x28)
        entsize, num = struct.unpack_from(order + "HH", head, 0x3A)
    else:
        shoff, = struct.unpack_from(order + "I", head, 0x20)
        entsize, num = struct.unpack_from(order + "HH", head, 0x2E)
    return shoff + entsize * num if shoff else None
