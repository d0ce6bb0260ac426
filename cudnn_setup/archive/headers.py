"""Tar headers read one block at a time, every size checked before a byte of it is read.

tarfile reads the data of a GNU long name or a PAX header whole, whatever size the header
claims (a 2 KB archive can claim 64 GiB), and follows a chain of such headers by recursion
(`_proc_gnulong` → `fromtarfile` → …), so 2000 chained headers exhaust the stack. Here the
chain is a loop with a length limit, long names and PAX records are capped before they are
read, and sparse members are marked for the rules to refuse. tarfile still parses each
512-byte block (`TarInfo.frombuf`), which reads nothing from the stream.

Names are decoded as UTF-8 whatever the locale; bytes that are not UTF-8 are kept as lone
surrogates (os.fsdecode's way), which the rest of the tool escapes when it prints them.
"""
from __future__ import annotations

import tarfile
from typing import Iterator, Protocol

from cudnn_setup.archive.problems import Problem
from cudnn_setup.archive.rules import Limits, Stop

BLOCK = tarfile.BLOCKSIZE
ENCODING, ERRORS = "utf-8", "surrogateescape"
_LONG = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK)
_PAX = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE)
# PAX keys that change how the next member is read; every other key is ignored (uid, mtime…)
_PAX_KEYS = ("path", "linkpath", "size")
_SIZE_DIGITS = 20  # a PAX size longer than this is no file size


class Stream(Protocol):
    """A forward-only stream that knows its position (the reader's ForwardStream)."""

    pos: int

    def read(self, n: int) -> bytes: ...

    def seek(self, pos: int) -> int: ...


def blocks(size: int) -> int:
    """Bytes that `size` bytes of data take in the archive, padded to whole blocks."""
    return -(-size // BLOCK) * BLOCK


def members(stream: Stream, limits: Limits) -> Iterator[tarfile.TarInfo]:
    """Every member header of the tar stream, with long names and PAX records applied.

    Yields TarInfo objects with `offset_data` set; a caller may read up to `size` bytes of a
    regular file's data before asking for the next member, which starts after the padding.
    A structure that cannot be read further raises Stop (refused by a limit) or
    tarfile.ReadError (damaged).
    """
    global_pax: dict[str, str] = {}
    first = True
    while True:
        info = _next_member(stream, limits, global_pax, first)
        first = False
        if info is None:
            return
        yield info
        _skip(stream, info.offset_data + (blocks(info.size) if _has_data(info) else 0))


def _next_member(stream: Stream, limits: Limits, global_pax: dict[str, str],
                 first: bool) -> tarfile.TarInfo | None:
    """Read headers until one describes a member; None at the end of the archive."""
    overrides: dict[str, str] = dict(global_pax)
    sparse = False
    for _ in range(limits.extended_headers + 1):
        offset = stream.pos
        block = _read_exact(stream, BLOCK, allow_eof=True)
        if not block or block.count(0) == BLOCK:
            if first and not block:
                raise tarfile.ReadError("empty file")
            return None  # a zero block (or, leniently, the stream's end) ends the archive
        try:
            info = tarfile.TarInfo.frombuf(block, ENCODING, ERRORS)
        except tarfile.HeaderError as exc:
            raise tarfile.ReadError(f"invalid tar header at byte {offset} ({exc})") from None
        first = False
        info.offset, info.offset_data = offset, stream.pos
        if info.size < 0:
            raise tarfile.ReadError(f"tar header at byte {offset} has a negative size")
        if info.type in _LONG:
            overrides["linkpath" if info.type == tarfile.GNUTYPE_LONGLINK else "path"] = \
                _long_name(stream, info, limits)
            continue
        if info.type in _PAX:
            records = _pax_records(stream, info, limits)
            sparse = sparse or any(k.startswith("GNU.sparse.") for k in records)
            kept = {k: v for k, v in records.items() if k in _PAX_KEYS}
            if info.type == tarfile.XGLTYPE:
                global_pax.update(kept)
            overrides.update(kept)
            continue
        if info.type == tarfile.GNUTYPE_SPARSE:
            _skip_sparse_extensions(stream, block, limits)
            sparse = True
        return _apply(info, overrides, sparse)
    raise Stop(Problem("bad-header", f"more than {limits.extended_headers} extended tar headers "
                       f"in a row (at byte {stream.pos})",
                       "real cuDNN archives have at most one per member; the file is damaged "
                       "or hostile"))


def _apply(info: tarfile.TarInfo, overrides: dict[str, str], sparse: bool) -> tarfile.TarInfo:
    if "path" in overrides:
        info.name = overrides["path"]
    if "linkpath" in overrides:
        info.linkname = overrides["linkpath"]
    if "size" in overrides:
        info.size = _pax_size(overrides["size"], info.offset)
    if info.isdir():
        info.name = info.name.rstrip("/")
    info.sparse = [] if sparse else None  # the rules refuse what is marked here
    return info


def _has_data(info: tarfile.TarInfo) -> bool:
    """Whether data blocks follow the header: what tarfile skips is what is skipped here."""
    return info.isreg() or info.type not in tarfile.SUPPORTED_TYPES


def _long_name(stream: Stream, info: tarfile.TarInfo, limits: Limits) -> str:
    what = "link target" if info.type == tarfile.GNUTYPE_LONGLINK else "name"
    if info.size > limits.long_name_bytes:
        raise Stop(Problem("bad-header", f"a GNU long-{what} header at byte {info.offset} claims "
                           f"{info.size} bytes, more than {limits.long_name_bytes}",
                           "no real cuDNN member has such a name; the file is damaged or "
                           "hostile"))
    data = _read_exact(stream, blocks(info.size))[:info.size]
    return data.split(b"\0", 1)[0].decode(ENCODING, ERRORS)


def _pax_records(stream: Stream, info: tarfile.TarInfo, limits: Limits) -> dict[str, str]:
    """`"%d %s=%s\\n" % (length, key, value)` records (POSIX.1-2008, pax), each checked."""
    if info.size > limits.pax_bytes:
        raise Stop(Problem("bad-header", f"a PAX extended header at byte {info.offset} claims "
                           f"{info.size} bytes, more than {limits.pax_bytes}",
                           "real cuDNN archives have none this large; the file is damaged or "
                           "hostile"))
    buf = _read_exact(stream, blocks(info.size))[:info.size]
    records: dict[str, str] = {}
    pos = 0
    while pos < len(buf) and buf[pos] != 0:
        space = buf.find(b" ", pos, pos + _SIZE_DIGITS + 1)
        digits = buf[pos:space] if space > pos else b""
        if not digits.isdigit():
            raise _bad_pax(info, "a record without its length")
        end = pos + int(digits)
        if end <= space + 2 or end > len(buf) or buf[end - 1:end] != b"\n":
            raise _bad_pax(info, "a record whose length does not fit")
        key, eq, value = buf[space + 1:end - 1].partition(b"=")
        if not eq or not key:
            raise _bad_pax(info, "a record without key=value")
        records[key.decode(ENCODING, "replace")] = value.decode(ENCODING, ERRORS)
        pos = end
    return records


def _pax_size(value: str, offset: int) -> int:
    if not value.isascii() or not value.isdigit() or len(value) > _SIZE_DIGITS:
        raise tarfile.ReadError(f"the PAX size of the member at byte {offset} is not a number")
    return int(value)


def _bad_pax(info: tarfile.TarInfo, what: str) -> tarfile.ReadError:
    return tarfile.ReadError(f"the PAX header at byte {info.offset} holds {what}")


def _skip_sparse_extensions(stream: Stream, block: bytes, limits: Limits) -> None:
    """Old GNU sparse headers chain extension blocks; read them one by one, a bounded number."""
    extended = block[482]
    for _ in range(limits.extended_headers):
        if not extended:
            return
        extended = _read_exact(stream, BLOCK)[504]
    raise Stop(Problem("sparse", "a GNU sparse member with more than "
                       f"{limits.extended_headers} extension headers",
                       "cuDNN archives hold no sparse files; the file is damaged or hostile"))


def _read_exact(stream: Stream, n: int, allow_eof: bool = False) -> bytes:
    data = stream.read(n)
    if len(data) != n and not (allow_eof and not data):
        raise tarfile.ReadError(f"unexpected end of the tar stream at byte {stream.pos}")
    return data


def _skip(stream: Stream, pos: int) -> None:
    if stream.pos > pos:
        raise tarfile.ReadError("a member was read past its end")
    if stream.seek(pos) != pos:
        raise tarfile.ReadError(f"unexpected end of the tar stream at byte {stream.pos}")


__all__ = ["BLOCK", "blocks", "members"]

