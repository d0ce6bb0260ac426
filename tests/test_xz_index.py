"""The decoded size a .xz records in its index, read from its end: what `xz --list` says for
files the real `xz` made (one block, many blocks, streams end to end with padding), and None,
never an exception or a huge read, for an end that does not add up."""
import lzma
import os
import shutil
import subprocess
import zlib
from pathlib import Path

import pytest

from cudnn_setup.archive import xz_index

XZ = shutil.which("xz")
DATA = os.urandom(300_000) + b"cudnn " * 400_000  # some of it compresses, some does not


def _size(path: Path):
    fd = os.open(path, os.O_RDONLY)
    try:
        return xz_index.decoded_size(fd)
    finally:
        os.close(fd)


def _listed(path: Path) -> int:
    """What xz itself says the file decodes to."""
    out = subprocess.run([XZ, "--robot", "--list", str(path)], capture_output=True, text=True,
                         check=True).stdout
    return int(next(line for line in out.splitlines() if line.startswith("totals")).split("\t")[4])


def _xz(args: list[str], data: bytes) -> bytes:
    return subprocess.run([XZ, *args, "-c"], input=data, capture_output=True, check=True).stdout


@pytest.mark.parametrize("args", [["-T1", "-0"], ["-T2", "-0", "--block-size=64KiB"],
                                  ["-T1", "-6", "--check=sha256"], ["-T1", "--check=none"]])
def test_the_size_is_what_xz_lists(tmp_path, args):
    path = tmp_path / "a.xz"
    path.write_bytes(_xz(args, DATA))
    assert _size(path) == _listed(path) == len(DATA)


def test_streams_end_to_end_with_padding_add_up(tmp_path):
    path = tmp_path / "cat.xz"
    path.write_bytes(_xz(["-T1", "-0"], DATA) + bytes(8) + _xz(["-T2", "--block-size=1MiB"], DATA)
                     + lzma.compress(b"") + bytes(4))
    assert _size(path) == _listed(path) == 2 * len(DATA)


def test_an_empty_stream_decodes_to_nothing(tmp_path):
    path = tmp_path / "empty.xz"
    path.write_bytes(lzma.compress(b""))
    assert _size(path) == 0


def _footer(backward: int, flags: bytes = b"\x00\x04") -> bytes:
    body = backward.to_bytes(4, "little") + flags
    return zlib.crc32(body).to_bytes(4, "little") + body + b"YZ"


@pytest.mark.parametrize("damage", [
    "cut", "no-magic", "footer-crc", "index-crc", "huge-index", "index-past-start",
    "flags-differ", "padding-not-zero", "not-xz", "odd-length", "empty-file"])
def test_an_end_that_does_not_add_up_is_none(tmp_path, damage):
    good = bytearray(_xz(["-T1", "-0"], DATA))
    backward = int.from_bytes(good[-8:-4], "little")
    index_at = len(good) - 12 - (backward + 1) * 4
    if damage == "cut":
        data = bytes(good[:-5])
    elif damage == "no-magic":
        data = bytes(good[:-2]) + b"ZY"
    elif damage == "footer-crc":
        good[-12] ^= 1
        data = bytes(good)
    elif damage == "index-crc":
        good[index_at + 2] ^= 0x01
        data = bytes(good)
    elif damage == "huge-index":  # says its index is 16 GiB: nothing that large is read
        data = bytes(good[:-12]) + _footer(2**32 - 1)
    elif damage == "index-past-start":
        data = bytes(good[:-12]) + _footer(len(good) // 4 + 10)
    elif damage == "flags-differ":  # the footer's check type is not the header's
        data = bytes(good[:-12]) + _footer(backward, b"\x00\x0a")
    elif damage == "padding-not-zero":
        data = bytes(good) + b"\x00\x00\x00\x01"
    elif damage == "not-xz":
        data = b"just some bytes, not xz" * 10
    elif damage == "odd-length":
        data = bytes(good) + b"\x00\x00"
    else:
        data = b""
    path = tmp_path / "bad.xz"
    path.write_bytes(data)
    assert _size(path) is None


def test_a_record_count_the_index_cannot_hold_is_none(tmp_path):
    """An index that claims a million records in 12 bytes is refused before any is read."""
    body = b"\x00" + bytes([0x80, 0x80, 0x40]) + b"\x00"  # indicator, count 2**20, padding
    body += b"\x00" * (-(len(body) + 4) % 4)
    index = body + zlib.crc32(body).to_bytes(4, "little")
    header = b"\xfd7zXZ\x00\x00\x04"
    header += zlib.crc32(header[6:8]).to_bytes(4, "little")
    path = tmp_path / "many.xz"
    path.write_bytes(header + index + _footer(len(index) // 4 - 1))
    assert _size(path) is None
