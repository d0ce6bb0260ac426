"""What ld.so reads from one file before and while mapping it, and why it refuses a file,
in its own words (open_verify in glibc's elf/dl-load.c). The reading is facts/elf.py's."""
from __future__ import annotations

import os

from msgspec import Struct

from cudnn_setup.facts.elf import NOT_ELF, NOT_REGULAR, UNOPENED, UNREAD, NotElf, read_elf
from cudnn_setup.facts.ldresolve.rpath import split_path


class NotLoadable(Exception):
    """A file the loader cannot use; `fatal` when it ends the search (open_verify's `lose`)."""

    def __init__(self, message: str, fatal: bool):
        super().__init__(message)
        self.fatal = fatal


class ElfObject(Struct, frozen=True):
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
                     rpath=None if info.rpath is None else split_path(info.rpath),
                     runpath=None if info.runpath is None else split_path(info.runpath),
                     nodeflib=info.nodeflib)
