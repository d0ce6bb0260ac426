"""A wheel installed as it downloads: its members decoded and staged from their local headers
while the rest is on the wire (a real HTTP server on 127.0.0.1 that holds the wheel part-way,
serves wrong bytes or drops the connection), the central directory deciding at the end. A
local header that disagrees with the central directory installs exactly what the whole-file
read would, or is refused as it would be; a wheel whose local headers cannot be followed
(data descriptors) installs all the same. Nothing outside the state dir changes before the
whole wheel matched its checksum."""
import hashlib
import io
import json
import os
import signal
import struct
import threading
import zipfile
from pathlib import Path

import pytest

from conftest import tree_state
from cudnn_setup.archive.package import wanted
from cudnn_setup.errors import ARCHIVE_REJECTED
from cudnn_setup.fetch.arriving import ArrivalFailed, Arriving
from fixtures.wheels import build_wheel, wheel_files
from httpserver import ArchiveServer
from test_overlap_download import (_install_held, _interrupted_at_once, _outside_state,
                                   _staged, _start, _terminated_once_staged, _wait_for)

VERSION = "9.1.7.99"
LIBS = "nvidia/cudnn/lib/"


@pytest.fixture(scope="module")
def good(tmp_path_factory, compiler) -> Path:
    """The fixture wheel, its last library padded with 512 KiB of incompressible bytes: the
    members before it are whole well before the wheel ends."""
    files = dict(wheel_files(VERSION, "12", compiler))
    last = [n for n in files if n.startswith(LIBS)][-1]
    files[last] += os.urandom(512 << 10)
    return build_wheel(tmp_path_factory.mktemp("wheel"), VERSION, "12", compiler, files)


def _entry(data: bytes, name: str) -> tuple[zipfile.ZipInfo, int]:
    """The central directory's entry of `name` and where that entry lies."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        info = z.getinfo(name)
    central = [at for at in range(len(data) - 46) if data[at:at + 4] == b"PK\x01\x02"
               and struct.unpack_from("<I", data, at + 42)[0] == info.header_offset]
    assert len(central) == 1
    return info, central[0]


def _lying(good: Path, field: str, where: str) -> bytes:
    """The wheel with the first library's `field` (crc, size, name) changed in its local
    header ("local") or in its central directory entry ("central"), the rest intact."""
    data = bytearray(good.read_bytes())
    name = next(n for n in zipfile.ZipFile(good).namelist() if n.startswith(LIBS))
    info, central = _entry(bytes(data), name)
    at = info.header_offset if where == "local" else central
    if field == "crc":
        struct.pack_into("<I", data, at + (14 if where == "local" else 16), info.CRC ^ 0x5A5A)
    elif field == "size":  # the uncompressed size
        struct.pack_into("<I", data, at + (22 if where == "local" else 24), info.file_size + 7)
    else:  # the name, same length: another library's
        start = at + (30 if where == "local" else 46)
        assert data[start:start + len(name)] == name.encode()
        data[start + len(LIBS) + 3] ^= 0x20  # libcudnn… → liBcudnn…
    return bytes(data)


def _install(home, s: ArchiveServer, name: str, data: bytes, root: Path, sha256: str,
             hold: float | None = 0.9):
    """`install URL` of `data` (checked against `sha256`), served up to `hold` and held until
    members were staged (asserted): (exit code, the JSON, stderr)."""
    s.files[f"/{name}"] = data
    if hold is not None:
        s.hold_after[f"/{name}"] = int(len(data) * hold)
        s.holds_left = 1
    before = _outside_state(root)
    proc = _start(home, "install", f"{s.base}/{name}", "--sha256", sha256, "--cuda-root",
                  str(root), "--no-theanorc", "--no-verify", "--json")
    try:
        if hold is not None:
            assert _wait_for(lambda: _staged(root)), "nothing was staged before the end"
            assert proc.poll() is None and _outside_state(root) == before
    finally:
        s.released.set()
    stdout, stderr = proc.communicate(timeout=300)
    return proc.returncode, json.loads(stdout), stderr


def _installed(root: Path, good: Path) -> None:
    """Every library of `good` in the root, byte for byte."""
    with zipfile.ZipFile(good) as z:
        for info in z.infolist():
            if info.filename.startswith(LIBS):
                stem = info.filename.rsplit("/", 1)[1].split(".so")[0]
                assert (root / "lib" / f"{stem}.so.9.1.7").read_bytes() == z.read(info)


def test_members_are_staged_while_the_wheel_is_still_arriving(good, cuda_root, home):
    root = cuda_root(version="12.4", layout="lib")
    with ArchiveServer() as s:
        code, out, stderr = _install(home, s, good.name, good.read_bytes(), root,
                                     hashlib.sha256(good.read_bytes()).hexdigest())
    assert code == 0, stderr
    assert out["cudnn_version"] == "9.1.7" and out["provenance"]["source"] == "url"
    assert out["download"]["resumed_from"] == int(good.stat().st_size * 0.9)
    _installed(root, good)


def test_a_checksum_mismatch_leaves_the_root_untouched_though_members_were_staged(
        good, cuda_root, home):
    root = cuda_root(version="12.4", layout="lib")
    before = tree_state(root)
    data = bytearray(good.read_bytes())
    data[-30] ^= 0xFF  # in the end of central directory's comment length: zip reads on
    with ArchiveServer() as s:
        code, out, stderr = _install(home, s, good.name, bytes(data), root,
                                     hashlib.sha256(good.read_bytes()).hexdigest())
    assert code == ARCHIVE_REJECTED, stderr
    assert out["error"]["code"] == "checksum-mismatch", out["error"]
    assert tree_state(root) == before


@pytest.mark.parametrize("field,where,installs", [
    ("crc", "local", True), ("size", "local", True), ("name", "local", False),
    ("crc", "central", False), ("size", "central", False), ("name", "central", False)])
def test_a_local_header_that_disagrees_installs_only_what_the_whole_file_read_would(
        good, cuda_root, home, tmp_path, field, where, installs):
    """Where the local header lies, the whole-file read (from the central directory) installs
    the wheel or refuses it; the overlapped read does exactly the same, never installing what
    only the local header says."""
    data = _lying(good, field, where)
    whole = tmp_path / "whole" / good.name
    whole.parent.mkdir()
    whole.write_bytes(data)
    sha = hashlib.sha256(data).hexdigest()
    root = cuda_root(version="12.4", layout="lib")
    from conftest import run_json
    done, by_file = run_json(["install", str(whole), "--sha256", sha, "--cuda-root",
                              str(cuda_root(version="12.4", layout="lib")), "--no-theanorc",
                              "--no-verify"], home)
    assert (done.returncode == 0) == installs, by_file
    before = tree_state(root)
    with ArchiveServer() as s:
        code, out, stderr = _install(home, s, good.name, data, root, sha)
    assert code == done.returncode, stderr
    if installs:
        _installed(root, good)
        assert out["install"]["plan"] == by_file["install"]["plan"]
    else:  # the same first fault (how many follow depends on which decoding stopped first)
        assert out["error"]["message"].split(" (and ")[0] == \
            by_file["error"]["message"].split(" (and ")[0]
        assert tree_state(root) == before


def _with_data_descriptors(good: Path, out: Path) -> Path:
    """The same files written to a stream that cannot seek: every member's CRC and sizes
    follow its bytes (flag bit 3), its local header says zero."""
    class Unseekable(io.RawIOBase):
        def __init__(self, f):
            self.f = f

        def writable(self):
            return True

        def write(self, b):
            return self.f.write(b)

    out.mkdir(parents=True, exist_ok=True)
    path = out / good.name
    with open(path, "wb") as f, zipfile.ZipFile(good) as src, \
            zipfile.ZipFile(Unseekable(f), "w", zipfile.ZIP_DEFLATED) as z:
        for info in src.infolist():
            z.writestr(info, src.read(info))
    with zipfile.ZipFile(path) as z:
        assert all(i.flag_bits & 0x8 for i in z.infolist())
    return path


def test_a_wheel_with_data_descriptors_is_read_at_its_end_and_installs(good, cuda_root, home,
                                                                       tmp_path):
    described = _with_data_descriptors(good, tmp_path / "dd")
    root = cuda_root(version="12.4", layout="lib")
    with ArchiveServer() as s:
        code, out, stderr = _install(home, s, described.name, described.read_bytes(), root,
                                     hashlib.sha256(described.read_bytes()).hexdigest(),
                                     hold=None)
    assert code == 0, stderr
    _installed(root, good)


def test_a_dropped_connection_resumes_and_the_wheel_installs(good, cuda_root, home):
    root = cuda_root(version="12.4", layout="lib")
    data = good.read_bytes()
    with ArchiveServer() as s:
        s.drop_after, s.drops_left = 100_000, 3  # the wheel arrives in four attempts
        code, out, stderr = _install(home, s, good.name, data, root,
                                     hashlib.sha256(data).hexdigest(), hold=None)
    assert code == 0, stderr
    assert [g["headers"].get("Range") for g in s.file_requests(".whl")] == [
        None, "bytes=100000-", "bytes=200000-", "bytes=300000-"]
    _installed(root, good)


def test_a_server_that_ignores_range_has_the_wheel_read_again_whole(good, cuda_root, home):
    """The second attempt writes again bytes already decoded: what was staged from them is
    thrown away and the wheel read once complete."""
    root = cuda_root(version="12.4", layout="lib")
    data = good.read_bytes()
    with ArchiveServer() as s:
        s.ignore_range = True
        code, out, stderr = _install(home, s, good.name, data, root,
                                     hashlib.sha256(data).hexdigest())
    assert code == 0, stderr
    assert out["download"]["resumed_from"] == 0  # the server sent it all again
    _installed(root, good)


def test_sigkill_mid_overlap_leaves_the_old_install_and_the_next_run_completes(
        good, cuda_root, home, tmp_path, compiler):
    """Killed while members of a newer wheel are staged: the root holds the old release, not a
    mixture, and the next run installs the new one."""
    newer = build_wheel(tmp_path / "newer", "9.4.2.99", "12", compiler)
    root = cuda_root(version="12.4", layout="lib")
    with ArchiveServer() as s:
        data = good.read_bytes()
        code, out, stderr = _install(home, s, good.name, data, root,
                                     hashlib.sha256(data).hexdigest(), hold=None)
        assert code == 0, stderr
        old = _outside_state(root)
        s.released.clear()
        s.files[f"/{newer.name}"] = newer.read_bytes()
        s.hold_after[f"/{newer.name}"], s.holds_left = int(newer.stat().st_size * 0.9), 1
        args = ["install", f"{s.base}/{newer.name}", "--sha256",
                hashlib.sha256(newer.read_bytes()).hexdigest(), "--cuda-root", str(root),
                "--no-theanorc", "--no-verify", "--json"]
        _terminated_once_staged(_start(home, *args), s, root, sig=signal.SIGKILL)
        assert _outside_state(root) == old  # old, not a mixture
        again = _start(home, *args)
        stdout, stderr = again.communicate(timeout=300)
    assert again.returncode == 0, stderr
    assert json.loads(stdout)["cudnn_version"] == "9.4.2"
    assert (root / "lib" / "libcudnn.so.9.4.2").is_file()
    assert not (root / "lib" / "libcudnn.so.9.1.7").exists()


def test_sigterm_while_a_wheel_arrives_is_answered_at_once_and_changes_nothing(
        good, cuda_root, home):
    root = cuda_root(version="12.4", layout="lib")
    before = tree_state(root)
    with ArchiveServer() as s:
        proc = _install_held(home, s, good.name, good.read_bytes(), root)
        _interrupted_at_once(proc, s, root, before)


def _feed(arriving: Arriving, part: Path, data: bytes, pieces: list[int],
          gate: threading.Event, hold_at: int) -> threading.Thread:
    """A downloader writing `data` to `part` in `pieces`, waiting at `hold_at` for `gate`."""
    def run():
        fd = os.open(part, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            arriving.begin(part, 0, part.with_name(part.name[:-5]), fd)
            done = 0
            for n in pieces:
                if done >= hold_at:
                    gate.wait(30)
                piece = data[done:done + n]
                os.write(fd, piece)
                done += len(piece)
                arriving.wrote(done)
            arriving.finish(part, hashlib.sha256(data).hexdigest(), len(data))
        finally:
            os.close(fd)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_the_members_decoded_early_are_the_central_directorys(good, tmp_path):
    """In this process: while the wheel is held at 90%, every library before the held bytes
    is staged whole; at the end the listing is the whole-file read's, member for member."""
    from cudnn_setup.archive import wheel as W, wheel_stream

    data = good.read_bytes()
    part = tmp_path / (good.name + ".part")
    arriving, gate = Arriving(), threading.Event()
    hold = int(len(data) * 0.9)
    feeder = _feed(arriving, part, data, [4096] * (len(data) // 4096 + 1), gate, hold)
    staging = tmp_path / "staging"
    staging.mkdir()
    got: dict = {}
    reader = threading.Thread(target=lambda: got.update(
        zip(("listing", "name"), wheel_stream.read(part.with_name(good.name), staging, wanted,
                                                   arriving.follow()))))
    reader.start()
    with zipfile.ZipFile(good) as z:
        before_hold = [i for i in z.infolist() if i.filename.startswith(LIBS)
                       and i.header_offset + 200 + i.compress_size < hold]
    assert before_hold
    assert _wait_for(lambda: len([p for p in staging.rglob("libcudnn*") if p.is_file()])
                     >= len(before_hold), 30)
    assert reader.is_alive()  # the reading waits for the rest
    gate.set()
    reader.join(60)
    feeder.join(10)
    listing = got["listing"]
    assert listing.problems == []
    assert listing.sha256 == hashlib.sha256(data).hexdigest()
    whole_dir = tmp_path / "whole"
    whole_dir.mkdir()
    whole, _ = W.read(good, whole_dir, wanted)
    try:
        assert [(m.path, m.kind, m.mode, m.size, m.sha256, m.target) for m in listing.members] \
            == [(m.path, m.kind, m.mode, m.size, m.sha256, m.target) for m in whole.members]
        for m in listing.members:
            if m.staged is not None:
                assert m.staged.read_bytes() == (whole_dir / m.path).read_bytes()
                assert m.staged.stat().st_mode == (whole_dir / m.path).stat().st_mode
    finally:
        whole.facts.close()
        listing.facts.close()


def test_a_follower_reads_at_offsets_once_the_bytes_are_there(tmp_path):
    data = os.urandom(100_000)
    part = tmp_path / "w.whl.part"
    arriving, gate = Arriving(), threading.Event()
    feeder = _feed(arriving, part, data, [10_000] * 10, gate, 50_000)
    follower = arriving.follow()
    assert follower.pread(100, 1000) == data[1000:1100]
    assert follower.reach(30_000) >= 30_000
    waiting = threading.Thread(target=lambda: follower.pread(10, 90_000))
    waiting.start()
    waiting.join(0.5)
    assert waiting.is_alive()  # the bytes are held back
    gate.set()
    waiting.join(10)
    assert follower.reach(1 << 40) == len(data)  # the good end: no more than there is
    assert follower.pread(100, len(data) - 50) == data[-50:]
    feeder.join(10)
    follower.close()


def test_a_follower_at_offsets_fails_when_the_download_starts_over(tmp_path):
    part = tmp_path / "w.whl.part"
    arriving = Arriving()
    fd = os.open(part, os.O_RDWR | os.O_CREAT, 0o600)
    arriving.begin(part, 0, tmp_path / "w.whl", fd)
    os.write(fd, b"x" * 1000)
    arriving.wrote(1000)
    follower = arriving.follow()
    assert follower.pread(10, 500) == b"x" * 10
    fd2 = os.open(part, os.O_RDWR, 0o600)
    arriving.begin(part, 0, tmp_path / "w.whl", fd2)  # a server that ignored Range
    os.write(fd2, b"y" * 2000)
    arriving.wrote(2000)
    with pytest.raises(ArrivalFailed):
        follower.pread(10, 1500)
    assert arriving.rewound
    for f in (fd, fd2):
        os.close(f)
    follower.close()
    arriving.close()


def test_a_wheel_changed_between_its_download_and_its_last_member_is_refused(
        good, tmp_path, monkeypatch):
    """The download's checksum vouches for the bytes it wrote: a file touched after that (here
    its mtime moved while the central directory is read) is refused as changed, as a whole
    file changed during its read is."""
    from cudnn_setup.archive import wheel as W, wheel_stream

    data = good.read_bytes()
    part = tmp_path / (good.name + ".part")
    arriving = Arriving()
    _feed(arriving, part, data, [len(data)], threading.Event(), len(data)).join(10)
    real = W.admitted

    def touched(*args):
        st = part.stat()
        os.utime(part, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        return real(*args)

    monkeypatch.setattr(W, "admitted", touched)
    staging = tmp_path / "staging"
    staging.mkdir()
    listing, _ = wheel_stream.read(part.with_name(good.name), staging, wanted, arriving.follow())
    assert [p.message for p in listing.problems] == [
        "the archive is truncated or corrupt (the file changed while it was read)"]
    assert listing.sha256 is None
