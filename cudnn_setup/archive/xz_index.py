""".xz's own record of how many bytes it decodes to, read from its end without decoding.

Each .xz stream ends with an index (one record per block: its compressed and its decoded size)
and a 12-byte footer that says how long the index is; streams may be concatenated, with zero
padding between them. Summing the records gives the decoded size before a byte is decoded, so
progress can count decoded bytes, which come at an even pace, instead of compressed bytes,
which a decoder takes in big gulps (a block, or a megabyte that decodes to fifty).

What is read here only sizes a progress bar: the file is untrusted, so every length is bounded
and checked (the index's CRC32, its padding, the footer's magic), and anything that does not
add up gives None (then progress counts compressed bytes, as for other archives). The decoder
checks the index against the blocks for itself.
"""
from __future__ import annotations

import os
import struct
import zlib

HEADER_MAGIC = b"\xfd7zXZ\x00"
FOOTER_MAGIC = b"YZ"
FOOTER = 12  # CRC32, backward size, stream flags, magic
HEADER = 12
MAX_INDEX = 16 << 20  # bytes of one stream's index: ~1.4 million blocks, far past any archive
MAX_STREAMS = 4096


def decoded_size(fd: int) -> int | None:
    """The sum of the decoded sizes every stream's index records for the .xz open on `fd`,
    read with pread (the file offset is left alone); None when the file's end is not a
    well-formed chain of xz streams."""
    try:
        end = os.fstat(fd).st_size
        total = 0
        for _ in range(MAX_STREAMS):
            end = _skip_padding(fd, end)
            if end is None:
                return None
            stream = _stream(fd, end)
            if stream is None:
                return None
            start, decoded = stream
            total += decoded
            if start == 0:
                return total
            end = start
    except OSError:
        return None
    return None


def _skip_padding(fd: int, end: int) -> int | None:
    """Where the last stream ends before `end`: stream padding is zeros in 4-byte units."""
    while end >= FOOTER:
        tail = os.pread(fd, 4, end - 4)
        if len(tail) != 4:
            return None
        if tail != b"\0\0\0\0":
            return end
        end -= 4
    return None


def _stream(fd: int, end: int) -> tuple[int, int] | None:
    """(where the stream ending at `end` starts, what its blocks decode to)."""
    if end < HEADER + FOOTER or end % 4:
        return None
    footer = os.pread(fd, FOOTER, end - FOOTER)
    if len(footer) != FOOTER or footer[10:] != FOOTER_MAGIC:
        return None
    crc, backward, flags = struct.unpack("<II2s", footer[:10])
    if zlib.crc32(footer[4:10]) != crc:
        return None
    index_size = (backward + 1) * 4
    index_at = end - FOOTER - index_size
    if index_size > MAX_INDEX or index_at < HEADER:
        return None
    index = os.pread(fd, index_size, index_at)
    records = _records(index)
    if records is None:
        return None
    blocks = sum((unpadded + 3) & ~3 for unpadded, _ in records)
    start = index_at - blocks - HEADER
    if start < 0:
        return None
    header = os.pread(fd, HEADER, start)
    if header[:6] != HEADER_MAGIC or header[6:8] != flags:
        return None
    return start, sum(decoded for _, decoded in records)


def _records(index: bytes) -> list[tuple[int, int]] | None:
    """The (unpadded size, decoded size) of each block, from a whole index field."""
    if len(index) < 8 or index[0] != 0 or zlib.crc32(index[:-4]) != \
            int.from_bytes(index[-4:], "little"):
        return None
    at = 1
    count, at = _number(index, at)
    if count is None or count > len(index) // 2:  # a record takes two bytes at least
        return None
    records = []
    for _ in range(count):
        unpadded, at = _number(index, at)
        decoded, at = _number(index, at)
        if unpadded is None or decoded is None or unpadded < 5:
            return None
        records.append((unpadded, decoded))
    padding = index[at:-4]
    if len(padding) > 3 or any(padding):
        return None
    return records


def _number(data: bytes, at: int) -> tuple[int | None, int]:
    """An xz variable-length integer (7 bits a byte, at most 9 bytes) at `at`."""
    value = 0
    for i in range(9):
        if at + i >= len(data) - 4:  # the CRC32 is not part of the records
            return None, at
        byte = data[at + i]
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            if byte == 0 and i:  # not the shortest encoding: liblzma refuses it
                return None, at
            return value, at + i + 1
    return None, at
