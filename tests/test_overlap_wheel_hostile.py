"""A hostile index's wheels read as they download: local headers that lie (sizes, CRC, method,
name), overlap, hide or outnumber what the central directory names; names with `..`, NUL, 64 KiB
or invalid UTF-8; a second cudnn_version.h; zip64 sizes; bombs; data descriptors on some
members; trailing bytes; no central directory; thousands of members. Each is judged twice, once
read as it arrives (wheel_stream) and once read whole (wheel.read) from the very same bytes: the
two must give the same problems, the same members and the same staged bytes, and the overlapped
read stages nothing the central directory does not name. A sample also goes through the CLI
from a real HTTP server (`install URL` against `install FILE`), and the wire's own faults (a
stall mid-member, a drop mid-local-header, other bytes on a Range retry) through the download."""
import hashlib
import json
import os
import resource
import struct
import threading
import time
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import run_json, tree_state
from cudnn_setup.archive.package import wanted
from cudnn_setup.errors import ARCHIVE_REJECTED, DOWNLOAD_FAILED
from cudnn_setup.fetch.arriving import Arriving
from fixtures.wheels import IndexFile, project_json, wheel_files, wheel_name
from httpserver import ArchiveServer, IndexServer
from sandboxfs import require, run_cli_in, tree_listing
from test_overlap_download import _outside_state, _start, _wait_for
from test_overlap_wheel import _feed

VERSION = "9.1.7.99"
LIBS = "nvidia/cudnn/lib/"
VERSION_H = "nvidia/cudnn/include/cudnn_version.h"
NAME = wheel_name(VERSION, "12", "manylinux_2_27_x86_64")


# --- a zip written field by field, so that each field can lie ------------------------------


@dataclass
class Entry:
    name: bytes
    data: bytes
    method: int = zipfile.ZIP_DEFLATED
    flags: int = 0
    mode: int = 0o100644
    payload: bytes | None = None  # the bytes after the local header (default: data encoded)
    local: dict = field(default_factory=dict)  # fields of the local header said otherwise
    central: dict | None = field(default_factory=dict)  # …of its entry; None: not named there
    local_extra: bytes = b""
    descriptor: bool = False  # sizes and CRC after the bytes (flag bit 3), zero in the header
    no_local: bool = False  # named by the central directory only (`central` says where)

    def encoded(self) -> bytes:
        if self.payload is not None:
            return self.payload
        if self.method == zipfile.ZIP_DEFLATED:
            c = zlib.compressobj(6, zlib.DEFLATED, -15)
            return c.compress(self.data) + c.flush()
        return self.data


def zip_bytes(entries: list[Entry], prefix: bytes = b"", trailer: bytes = b"",
              central_at: int | None = None, no_central: bool = False) -> bytes:
    out = bytearray(prefix)
    central = bytearray()
    count = 0
    for e in entries:
        payload = e.encoded()
        crc, csize, usize = zlib.crc32(e.data), len(payload), len(e.data)
        flags = e.flags | (0x8 if e.descriptor else 0)
        f = dict(version=20, flags=flags, method=e.method, crc=crc, csize=csize, usize=usize,
                 name=e.name)
        if e.descriptor:
            f.update(crc=0, csize=0, usize=0)
        f.update(e.local)
        offset = len(out)
        if e.no_local:
            offset = -1
        else:
            out += struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", f["version"], f["flags"],
                               f["method"], 0, 0x21, f["crc"], f["csize"], f["usize"],
                               len(f["name"]), len(e.local_extra))
            out += f["name"] + e.local_extra + payload
            if e.descriptor:
                out += struct.pack("<4sIII", b"PK\x07\x08", crc, csize, usize)
        if e.central is None:
            continue
        c = dict(flags=flags, method=e.method, crc=crc, csize=csize, usize=usize,
                 name=e.name, offset=max(offset, 0))
        c.update(e.central)
        central += struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 20 | 3 << 8, 20,
                               c["flags"], c["method"], 0, 0x21, c["crc"], c["csize"],
                               c["usize"], len(c["name"]), 0, 0, 0, 0, e.mode << 16,
                               c["offset"])
        central += c["name"]
        count += 1
    if no_central:
        return bytes(out) + trailer
    at = len(out) if central_at is None else central_at
    out += central
    if count > 0xFFFF:  # zip64's end records: the count no longer fits 16 bits
        end64 = len(out)
        out += struct.pack("<4sQHHIIQQQQ", b"PK\x06\x06", 44, 45, 45, 0, 0, count, count,
                           len(central), at)
        out += struct.pack("<4sIQI", b"PK\x06\x07", 0, end64, 1)
        count = 0xFFFF
    out += struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, count, count, len(central), at, 0)
    return bytes(out) + trailer


@pytest.fixture(scope="module")
def files(compiler) -> dict[str, bytes]:
    """The fixture wheel's files, the version header first, as NVIDIA's wheels order them."""
    got = dict(wheel_files(VERSION, "12", compiler))
    dist = f"nvidia_cudnn_cu12-{VERSION}.dist-info"
    got[f"{dist}/METADATA"] = f"Metadata-Version: 2.1\nName: nvidia-cudnn-cu12\n" \
                              f"Version: {VERSION}\n".encode()
    got[f"{dist}/WHEEL"] = b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\n"
    order = [VERSION_H] + [n for n in got if n != VERSION_H]
    return {n: got[n] for n in order}


def _entries(files: dict[str, bytes]) -> list[Entry]:
    return [Entry(n.encode(), d) for n, d in files.items()]


def _libs(entries: list[Entry]) -> list[Entry]:
    return [e for e in entries if e.name.startswith(LIBS.encode())]


def _bomb(size: int) -> bytes:
    """Raw deflate of `size` zero bytes (whole MiB), built in no time: one MiB's blocks, ended
    by a full flush (byte-aligned, nothing referred to across it), repeated, then an empty
    final block."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    mib = c.compress(bytes(1 << 20)) + c.flush(zlib.Z_FULL_FLUSH)
    return mib * (size >> 20) + b"\x03\x00"


def _version_h(version: str) -> bytes:
    major, minor, patch = version.split(".")[:3]
    return (f"#define CUDNN_MAJOR {major}\n#define CUDNN_MINOR {minor}\n"
            f"#define CUDNN_PATCHLEVEL {patch}\n").encode()


# Each case: the wheel's files -> the hostile wheel's bytes.
def _case_honest(f):
    return zip_bytes(_entries(f))


def _lie(where: str, field_name: str, value):
    """The first library's `field_name` said otherwise in its "local" header or its "central"
    directory entry."""
    def build(f):
        es = _entries(f)
        lib = _libs(es)[0]
        getattr(lib, where)[field_name] = value(lib) if callable(value) else value
        return zip_bytes(es)
    return build


def _central_mode(mode: int):
    """The first library's mode and type in the central directory (a local header has none)."""
    def build(f):
        es = _entries(f)
        _libs(es)[0].mode = mode
        return zip_bytes(es)
    return build


def _crc(e):
    return zlib.crc32(e.data) ^ 0x5A5A


def _name_of_lib(raw: bytes):
    def build(f):
        es = _entries(f)
        _libs(es)[0].local["name"] = raw
        return zip_bytes(es)
    return build


def _both_names(raw: bytes, flags: int = 0):
    """A member of that name in both the local header and the central directory."""
    def build(f):
        es = _entries(f)
        es.insert(1, Entry(raw, b"x" * 100, flags=flags))
        return zip_bytes(es)
    return build


def _utf8_toggled(f):
    es = _entries(f)
    lib = _libs(es)[0]
    name = lib.name.replace(b"libcudnn", "libcüdnn".encode())
    lib.name = name
    lib.flags = 0x800
    lib.local["flags"] = 0  # the local header reads the same bytes as cp437
    return zip_bytes(es)


def _local_only_duplicate(f):
    es = _entries(f)
    lib = _libs(es)[0]
    twin = Entry(lib.name, b"not the library" * 10, central=None)
    es.insert(es.index(lib), twin)
    return zip_bytes(es)


def _local_only_extra(f):
    es = _entries(f)
    es.insert(2, Entry(f"{LIBS}libcudnn_evil.so.9".encode(), b"\x7fELF evil" * 50, central=None))
    return zip_bytes(es)


def _two_versions(first: str, named: str):
    """cudnn_version.h twice: `first` in a local header the central directory does not name,
    then `named`, the one it names."""
    def build(f):
        es = _entries(f)
        es[0].data = _version_h(named)
        es.insert(0, Entry(VERSION_H.encode(), _version_h(first), central=None))
        return zip_bytes(es)
    return build


def _version_late(f):
    es = _entries(f)
    return zip_bytes(es[1:] + es[:1])


def _version_says(version: str):
    def build(f):
        es = _entries(f)
        es[0].data = _version_h(version)
        return zip_bytes(es)
    return build


def _zip64_extra(f):
    es = _entries(f)
    lib = _libs(es)[0]
    lib.local.update(csize=0xFFFFFFFF, usize=0xFFFFFFFF)
    lib.local_extra = struct.pack("<HHQQ", 1, 16, 1 << 62, 1 << 62)
    return zip_bytes(es)


def _huge_csize_short_file(f):
    es = _entries(f)
    _libs(es)[-1].local["csize"] = 0xFFFFFFFE
    return zip_bytes(es)


def _bomb_small_declared(f):
    es = _entries(f)
    lib = _libs(es)[0]
    lib.payload = _bomb(64 << 20)
    return zip_bytes(es)


def _bomb_local_declares_big(f):
    """The local header declares the bomb's 64 MiB, the central directory the library's size."""
    es = _entries(f)
    lib = _libs(es)[0]
    lib.payload = _bomb(64 << 20)
    lib.local.update(usize=64 << 20, crc=zlib.crc32(bytes(64 << 20)))
    return zip_bytes(es)


def _local_only_bomb(size: int):
    """A member the central directory does not name, before the libraries: a deflate bomb
    whose local header declares all it inflates to (and a CRC-32 it does not have: found out,
    if at all, only once all of it is inflated)."""
    def build(f):
        es = _entries(f)
        bomb = Entry(f"{LIBS}libcudnn_bomb.so.9".encode(), b"", central=None,
                     payload=_bomb(size), local=dict(usize=size, crc=0))
        es.insert(1, bomb)
        return zip_bytes(es)
    return build


def _stored_wrong_size(where: str):
    def build(f):
        es = _entries(f)
        lib = _libs(es)[0]
        lib.method = zipfile.ZIP_STORED
        target = lib.local if where == "local" else lib.central
        target.update(usize=len(lib.data) - 10)
        if where == "both":
            lib.local.update(usize=len(lib.data) - 10)
        return zip_bytes(es)
    return build


def _some_descriptors(f):
    es = _entries(f)
    _libs(es)[1].descriptor = True
    return zip_bytes(es)


def _trailing(n: int):
    return lambda f: zip_bytes(_entries(f), trailer=os.urandom(n))


def _hidden_local(f):
    """The first library's real local header hidden inside a stored member's bytes, where the
    walk never looks; the visible one, which it follows, holds a decoy and is not named."""
    es = _entries(f)
    lib = _libs(es)[0]
    i = es.index(lib)
    inner = zip_bytes([Entry(lib.name, lib.data)], no_central=True)
    cover = Entry(b"nvidia/x/cover.bin", inner, method=zipfile.ZIP_STORED)
    decoy = Entry(lib.name, b"decoy bytes " * 20, central=None)
    named = Entry(lib.name, lib.data, no_local=True)
    es[i:i + 1] = [cover, decoy, named]
    data = zip_bytes(es)
    cover_at = data.index(b"nvidia/x/cover.bin") - 30
    named.central = {"offset": cover_at + 30 + len(cover.name)}
    return zip_bytes(es)


def _only_local_headers(f):
    return zip_bytes(_entries(f), no_central=True)


def _overlaps_central(f):
    es = _entries(f)
    whole = zip_bytes(es)
    last = es[-1]
    at = whole.rindex(b"PK\x03\x04")
    last.local["csize"] = len(whole) - at - 30 - len(last.name) - 10  # into the directory
    return zip_bytes(es)


def _two_entries_one_header(f):
    """Two central entries for one local header, under one name."""
    es = _entries(f)
    lib = _libs(es)[0]
    data = zip_bytes(es)
    es.append(Entry(lib.name, lib.data, no_local=True,
                    central={"offset": data.index(lib.name) - 30}))
    return zip_bytes(es)


def _junk_prefix(f):
    return zip_bytes(_entries(f), prefix=os.urandom(1000))


def _shadow_prefix(f):
    """A first zip's local headers (other bytes under the same names) before the real zip,
    whose central directory's offsets count from its own start."""
    es = _entries(f)
    shadow = [Entry(e.name, e.data[::-1]) for e in es]
    pre = zip_bytes(shadow, no_central=True)
    body = zip_bytes(es)
    return pre + body  # zipfile finds the real one's start by the directory's size and place


def _encrypted_local(f):
    es = _entries(f)
    _libs(es)[0].local["flags"] = 0x1
    return zip_bytes(es)


def _bzip2_both(f):
    es = _entries(f)
    lib = _libs(es)[0]
    lib.local["method"] = 12
    lib.central["method"] = 12
    return zip_bytes(es)


def _many(n: int, under_cudnn: bool):
    def build(f):
        es = _entries(f)
        where = "nvidia/cudnn/include/m" if under_cudnn else "nvidia/x/m"
        es += [Entry(f"{where}{k}.h".encode(), b"", method=zipfile.ZIP_STORED)
               for k in range(n)]
        return zip_bytes(es)
    return build


CASES = {
    "honest": _case_honest,
    "local-crc": _lie("local", "crc", _crc),
    "local-usize": _lie("local", "usize", lambda e: len(e.data) + 7),
    "local-csize-more": _lie("local", "csize", lambda e: len(e.encoded()) + 100),
    "local-csize-less": _lie("local", "csize", lambda e: len(e.encoded()) - 100),
    "local-method-stored": _lie("local", "method", zipfile.ZIP_STORED),
    "local-method-99": _lie("local", "method", 99),
    "local-name-other-lib": _name_of_lib(f"{LIBS}libcudnn_zzz.so.9".encode()),
    "local-name-dotdot": _name_of_lib(b"nvidia/cudnn/lib/../../../../evil.so.9"),
    "local-name-absolute": _name_of_lib(b"/etc/evil"),
    "local-name-nul": _name_of_lib(f"{LIBS}libcudnn.so.9\0../x".encode()),
    "local-name-64k": _name_of_lib(LIBS.encode() + b"a" * (65535 - len(LIBS))),
    "local-name-bad-utf8": lambda f: _flagged_bad_name(f),
    "local-utf8-flag-toggled": _utf8_toggled,
    "central-crc": _lie("central", "crc", _crc),
    "central-usize": _lie("central", "usize", lambda e: len(e.data) + 7),
    "central-offset-wrong": _lie("central", "offset", 0),
    "central-mode-symlink": _central_mode(0o120777),
    "central-mode-setuid": _central_mode(0o104755),
    "central-mode-executable": _central_mode(0o100755),
    "both-name-dotdot": _both_names(b"nvidia/cudnn/../../evil"),
    "both-name-absolute": _both_names(b"nvidia/cudnn//abs"),
    "both-name-nul": _both_names(b"nvidia/cudnn/include/a.h\0.so"),
    "both-name-bad-utf8": _both_names(b"nvidia/cudnn/include/\xff\xfe.h", 0x800),
    "local-only-duplicate": _local_only_duplicate,
    "local-only-member": _local_only_extra,
    "version-twice-local-first-other": _two_versions("9.1.8", "9.1.7"),
    "version-twice-named-other": _two_versions("9.1.7", "9.1.8"),
    "version-late": _version_late,
    "version-wrong": _version_says("9.2.0"),
    "zip64-absurd": _zip64_extra,
    "local-4gib-csize-short-file": _huge_csize_short_file,
    "bomb-small-declared": _bomb_small_declared,
    "bomb-local-declares-big": _bomb_local_declares_big,
    "local-only-bomb": _local_only_bomb(16 << 20),
    "stored-wrong-size-local": _stored_wrong_size("local"),
    "stored-wrong-size-central": _stored_wrong_size("central"),
    "stored-wrong-size-both": _stored_wrong_size("both"),
    "descriptors-on-some": _some_descriptors,
    "trailing-garbage": _trailing(1000),
    "trailing-garbage-70k": _trailing(70 << 10),
    "central-points-at-hidden-header": _hidden_local,
    "only-local-headers": _only_local_headers,
    "local-overlaps-central": _overlaps_central,
    "two-entries-one-header": _two_entries_one_header,
    "junk-prefix": _junk_prefix,
    "shadow-zip-prefix": _shadow_prefix,
    "local-encrypted": _encrypted_local,
    "bzip2": _bzip2_both,
    "6000-members-outside": _many(6000, False),
    "6000-members-under-cudnn": _many(6000, True),
    "100000-members-outside": _many(100_000, False),
    "100000-members-under-cudnn": _many(100_000, True),
}
SLOW = {"100000-members-outside", "100000-members-under-cudnn"}


def _params(names, fast=()):
    """Every case, those in SLOW (and, with `fast`, all not in it) marked slow."""
    return [pytest.param(n, marks=pytest.mark.slow if n in SLOW or (fast and n not in fast)
                         else ()) for n in sorted(names)]


def _flagged_bad_name(f):
    es = _entries(f)
    lib = _libs(es)[0]
    lib.local["name"] = lib.name[:-3] + b"\xff\xfe\xfd"
    lib.local["flags"] = 0x800
    return zip_bytes(es)


# --- both readers over the same bytes -------------------------------------------------------


def _verdict(read):
    """(problems, members, staged bytes) of one reading, or the exception it raised."""
    try:
        listing, _ = read()
    except Exception as exc:  # noqa: BLE001 - compared between the two readers
        return ("raised", type(exc).__name__, str(exc))
    try:
        problems = [(p.code, p.message) for p in listing.problems]
        members = [(m.path, m.kind, m.mode, m.size, m.sha256, m.target)
                   for m in listing.members]
        staged = {m.path: hashlib.sha256(m.staged.read_bytes()).hexdigest()
                  for m in listing.members if m.staged is not None}
        return problems, members, staged
    finally:
        if listing.facts is not None:
            listing.facts.close()


def _files_under(d: Path) -> set[str]:
    return {str(p.relative_to(d)) for p in d.rglob("*") if p.is_file()}


def both(data: bytes, tmp: Path, piece: int = 4096):
    """The whole-file reading and the arriving one of `data`: (whole, arriving, files left in
    the arriving read's staging)."""
    from cudnn_setup.archive import wheel, wheel_stream

    whole_file = tmp / "whole" / NAME
    whole_file.parent.mkdir()
    whole_file.write_bytes(data)
    (tmp / "ws").mkdir()
    whole = _verdict(lambda: wheel.read(whole_file, tmp / "ws", wanted))
    part = tmp / "arr" / (NAME + ".part")
    part.parent.mkdir()
    staging = tmp / "as"
    staging.mkdir()
    arriving = Arriving()
    feeder = _feed(arriving, part, data, [piece] * (len(data) // piece + 1), threading.Event(),
                   len(data) + 1)
    try:
        got = _verdict(lambda: wheel_stream.read(part.with_name(NAME), staging, wanted,
                                                 arriving.follow()))
    finally:
        feeder.join(30)
        arriving.close()
    return whole, got, _files_under(staging)


def _judged_alike(whole, got, left: set[str]) -> None:
    """The same verdict: a refusal with the same problems over the same members (which members
    were decoded before the first fault stopped the rest depends on the threads, as it does
    between two whole-file reads); an admission member for member, byte for byte, with nothing
    staged that the central directory does not name."""
    if isinstance(whole[0], str) or isinstance(got[0], str):
        assert got == whole
        return
    assert got[0] == whole[0]
    assert [m[:4] for m in got[1]] == [m[:4] for m in whole[1]]
    if not whole[0]:
        assert got == whole
        assert left == set(got[2])


@pytest.mark.parametrize("case", _params(CASES))
def test_an_arriving_hostile_wheel_is_judged_as_the_whole_file_is(case, files, tmp_path):
    before = _cpu()
    whole, got, left = both(CASES[case](files), tmp_path)
    _judged_alike(whole, got, left)
    assert _cpu() - before < 10  # 100,000 members: about 2 s both ways


# --- through the CLI, served by a real HTTP server ------------------------------------------


def _by_file(home, cuda_root, data: bytes, tmp: Path):
    """`install FILE` of `data`: (exit code, the JSON, the root outside the state dir)."""
    path = tmp / "file" / NAME
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    root = cuda_root(version="12.4", layout="lib")
    done, out = run_json(["install", str(path), "--sha256", hashlib.sha256(data).hexdigest(),
                          "--cuda-root", str(root), "--no-theanorc", "--no-verify"], home)
    return done.returncode, out, _outside_state(root)


def _by_url(home, cuda_root, data: bytes, s: ArchiveServer, seconds: float = 0.5,
            resumed_at: int = 0):
    """`install URL` of `data`, its body spread over `seconds` so that members are decoded as
    it arrives: (exit code, the JSON, the root outside the state dir), asserting that nothing
    outside the state dir changed while the download was under way (the last attempt sends
    from `resumed_at`)."""
    root = cuda_root(version="12.4", layout="lib")
    before = _outside_state(root)
    s.files[f"/{NAME}"] = data
    s.throttle[f"/{NAME}"] = seconds
    s.sent.pop(f"/{NAME}", None)
    proc = _start(home, "install", f"{s.base}/{NAME}", "--sha256",
                  hashlib.sha256(data).hexdigest(), "--cuda-root", str(root), "--no-theanorc",
                  "--no-verify", "--json")
    while proc.poll() is None and s.sent.get(f"/{NAME}", 0) < len(data) - resumed_at:
        assert _outside_state(root) == before
        time.sleep(0.01)
    stdout, stderr = proc.communicate(timeout=120)
    lines = stdout.strip().splitlines()
    assert len(lines) == 1, stderr
    return proc.returncode, json.loads(lines[0]), _outside_state(root)


def _same_outcome(by_file, by_url) -> None:
    (code, out, tree), (url_code, url_out, url_tree) = by_file, by_url
    assert url_code == code != 70, url_out
    if code == 0:
        assert url_tree == tree
        assert url_out["install"]["plan"] == out["install"]["plan"]
    else:
        assert url_out["error"]["code"] == out["error"]["code"]
        assert url_out["error"]["message"].split(" (and ")[0] == \
            out["error"]["message"].split(" (and ")[0]


# the default run's sample: lies the central directory overrules, and ones it refuses
CLI_SAMPLE = ["local-only-duplicate", "version-twice-named-other"]


@pytest.mark.parametrize("case", _params(CASES, fast=CLI_SAMPLE))
def test_install_url_of_a_hostile_wheel_ends_as_install_file_does(case, files, cuda_root, home,
                                                                  tmp_path):
    data = CASES[case](files)
    by_file = _by_file(home, cuda_root, data, tmp_path)
    with ArchiveServer() as s:
        _same_outcome(by_file, _by_url(home, cuda_root, data, s))


def _local_header_starts(data: bytes) -> list[int]:
    with zipfile.ZipFile(__import__("io").BytesIO(data)) as z:
        return sorted(i.header_offset for i in z.infolist())


def test_a_drop_mid_local_header_resumes_and_installs_what_install_file_does(
        files, cuda_root, home, tmp_path):
    data = CASES["honest"](files)
    at = _local_header_starts(data)[3] + 17  # inside the fourth member's local header
    by_file = _by_file(home, cuda_root, data, tmp_path)
    with ArchiveServer() as s:
        s.drop_after, s.drops_left = at, 1
        by_url = _by_url(home, cuda_root, data, s, resumed_at=at)
        assert [r["headers"].get("Range") for r in s.file_requests(".whl")] == [
            None, f"bytes={at}-"]
    _same_outcome(by_file, by_url)


def test_other_bytes_on_a_range_retry_fail_the_checksum_and_change_nothing(
        files, cuda_root, home, tmp_path):
    """The first attempt serves the published wheel's start, the retry another wheel's rest:
    whatever was decoded from the mixture, the checksum refuses it and the root is as it was."""
    data = CASES["honest"](files)
    at = _local_header_starts(data)[5] + 40
    other = bytearray(data)
    other[at + 200] ^= 0x10  # in a later member's bytes
    root = cuda_root(version="12.4", layout="lib")
    before = tree_state(root)

    with ArchiveServer() as s:
        s.files[f"/{NAME}"] = data
        s.drop_after, s.drops_left = at, 1
        s.ignore_range = False
        original = s.file_requests

        def swap_when_dropped():
            _wait_for(lambda: len(original(".whl")) >= 1, 30)
            s.files[f"/{NAME}"] = bytes(other)

        swapper = threading.Thread(target=swap_when_dropped)
        swapper.start()
        done, out = run_json(["install", f"{s.base}/{NAME}", "--sha256",
                              hashlib.sha256(data).hexdigest(), "--cuda-root", str(root),
                              "--no-theanorc", "--no-verify"], home)
        swapper.join(30)
    assert done.returncode == ARCHIVE_REJECTED, out
    assert out["error"]["code"] == "checksum-mismatch", out["error"]
    assert tree_state(root) == before


@pytest.mark.parametrize("trailer", [
    b"", pytest.param(os.urandom(70 << 10), marks=pytest.mark.slow)], ids=["installs", "not-a-zip"])
def test_a_bomb_the_central_directory_does_not_name_cannot_fill_the_disk_and_fail_the_install(
        files, cuda_root, home, tmp_path, trailer):
    """Staged early on the word of its local header alone, a member the central directory
    does not name fills a small filesystem: the install must still end as the whole-file read
    of the same bytes does on the same filesystem (installed; refused as no zip at all), not
    fail as a full disk."""
    require("tmpfs")
    data = _local_only_bomb(64 << 20)(files) + trailer
    path = tmp_path / "file" / NAME
    path.parent.mkdir()
    path.write_bytes(data)
    root = cuda_root(version="12.4", layout="lib")
    outcomes = []
    with ArchiveServer() as s:
        s.files[f"/{NAME}"] = data
        s.throttle[f"/{NAME}"] = 0.5
        for source in (path, f"{s.base}/{NAME}"):
            mnt = tmp_path / f"small{len(outcomes)}"
            mnt.mkdir()
            setup = f"mount -t tmpfs -o size=16m tmpfs {mnt} && cp -a {root} {mnt}/"
            done = run_cli_in(setup, ["install", source, "--sha256",
                                      hashlib.sha256(data).hexdigest(), "--cuda-root",
                                      mnt / root.name, "--no-theanorc", "--no-verify",
                                      "--json"], home, after=tree_listing(mnt / root.name))
            answer, _, after = done.stdout.partition("--after--\n")
            outcomes.append((done.returncode, (json.loads(answer).get("error") or {}).get("code"),
                             [ln for ln in after.splitlines() if "cudnn-setup" not in ln]))
    assert outcomes[1] == outcomes[0]
    code, _, tree = outcomes[0]
    assert (code == 0) == (not trailer)
    assert not trailer or code == ARCHIVE_REJECTED


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def test_decoding_the_central_directory_disowns_stops_once_the_download_ends(files, tmp_path):
    """A 1 MB wheel whose unnamed member declares 2 GiB in its local header: the pass must not
    wait for those 2 GiB to be inflated, hashed and written before the central directory's
    verdict (it took 3 s of CPU and 2 GiB of staging), but end about as the whole-file read."""
    data = _local_only_bomb(2 << 30)(files)
    assert len(data) < 4 << 20
    before = _cpu()
    whole, got, left = both(data, tmp_path, piece=64 << 10)
    assert _cpu() - before < 1.5
    _judged_alike(whole, got, left)
    assert not whole[0]  # installed


@pytest.mark.parametrize("case", _params(["local-only-duplicate", "local-name-dotdot"],
                                         fast=["local-only-duplicate"]))
def test_install_version_from_an_index_of_a_hostile_wheel_ends_as_install_file_does(
        case, files, cuda_root, home, tmp_path):
    """The index publishes the hostile wheel's own sha256 (PEP 691 JSON) and serves it slowly
    from a real server: `install VERSION --from pypi` ends as `install FILE` of those bytes."""
    data = CASES[case](files)
    by_file = _by_file(home, cuda_root, data, tmp_path)
    root = cuda_root(version="12.4", layout="lib")
    before = _outside_state(root)
    with ArchiveServer() as s, IndexServer() as index:
        s.files[f"/{NAME}"] = data
        s.throttle[f"/{NAME}"] = 0.5
        index.routes["/simple/nvidia-cudnn-cu12/"] = (
            "application/vnd.pypi.simple.v1+json", project_json("nvidia-cudnn-cu12", [
                IndexFile(NAME, f"{s.base}/{NAME}", hashlib.sha256(data).hexdigest())]))
        proc = _start(home, "install", "9.1.7", "--from", "pypi", "--index-url",
                      f"{index.base}/simple/", "--cuda-root", str(root), "--no-theanorc",
                      "--no-verify", "--json")
        while proc.poll() is None and s.sent.get(f"/{NAME}", 0) < len(data):
            assert _outside_state(root) == before
            time.sleep(0.01)
        stdout, stderr = proc.communicate(timeout=120)
        assert s.file_requests(".whl"), stderr
    _same_outcome(by_file, (proc.returncode, json.loads(stdout), _outside_state(root)))


@pytest.mark.slow
def test_a_server_that_stalls_mid_member_ends_the_install_within_its_waiting_budget(
        files, cuda_root, home):
    """Every attempt stalls halfway through a library's bytes, its members before staged: the
    command ends once its one waiting budget is spent, as a failed download, the root as it
    was and nothing left staged."""
    data = CASES["honest"](files)
    root = cuda_root(version="12.4", layout="lib")
    before = tree_state(root)
    with ArchiveServer() as s:
        s.files[f"/{NAME}"] = data
        s.hold_after[f"/{NAME}"], s.holds_left = int(len(data) * 0.6), 1000
        started = time.monotonic()
        proc = _start(home, "install", f"{s.base}/{NAME}", "--sha256",
                      hashlib.sha256(data).hexdigest(), "--cuda-root", str(root),
                      "--no-theanorc", "--no-verify", "--json")
        stdout, stderr = proc.communicate(timeout=240)
        took = time.monotonic() - started
    out = json.loads(stdout)
    assert proc.returncode == DOWNLOAD_FAILED, stderr
    assert out["error"]["code"] == "timed-out", out
    assert took < 150, took
    assert tree_state(root) == before
