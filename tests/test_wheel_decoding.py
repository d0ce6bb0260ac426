"""A wheel's members inflated on every core the process may use, each member checked (CRC-32,
size) on the thread that decodes it: NVIDIA-shaped wheels of gcc-built libraries, read in
this process with the affinity narrowed or widened, and installed by the CLI."""
import hashlib
import json
import os
import struct
import threading
import zipfile
from pathlib import Path

import pytest

from conftest import run_json, tree_state
from cudnn_setup.archive import wheel as W
from cudnn_setup.archive.package import wanted
from cudnn_setup.errors import ARCHIVE_REJECTED
from fixtures.wheels import build_wheel

VERSION = "9.1.7.99"


@pytest.fixture(scope="module")
def good(tmp_path_factory, compiler) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"), VERSION, "12", compiler)


def libraries(path: Path) -> list[zipfile.ZipInfo]:
    with zipfile.ZipFile(path) as z:
        return [i for i in z.infolist() if i.filename.startswith("nvidia/cudnn/lib/")]


def with_bad_crc(good: Path, member: str, out: Path) -> Path:
    """The wheel with `member`'s CRC-32 changed in both its headers (its bytes intact)."""
    data = bytearray(good.read_bytes())
    with zipfile.ZipFile(good) as z:
        info = z.getinfo(member)
    local, crc = info.header_offset, info.CRC ^ 0x5A5A5A5A
    struct.pack_into("<I", data, local + 14, crc)
    central = [at for at in range(len(data) - 46) if data[at:at + 4] == b"PK\x01\x02"
               and struct.unpack_from("<I", data, at + 42)[0] == local]
    assert len(central) == 1
    struct.pack_into("<I", data, central[0] + 16, crc)
    out.mkdir(parents=True, exist_ok=True)
    bad = out / good.name
    bad.write_bytes(bytes(data))
    return bad


def read_on(cpus: int, wheel: Path, staging: Path, monkeypatch):
    """Read `wheel` with this thread's affinity narrowed to `cpus` CPUs; the threads that
    decoded members. Each decoding thread first waits (10 s at most) until `cpus` threads are
    decoding members at once: members taken one after another on one thread fail the read."""
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < cpus:
        pytest.skip(f"{cpus} CPUs are not allowed here")
    meet = threading.Barrier(cpus, timeout=10)
    idents: set[int] = set()
    real = W.decoded

    def decoded(*args, **kwargs):
        me = threading.get_ident()
        if me not in idents:
            idents.add(me)
            meet.wait()
        return real(*args, **kwargs)

    monkeypatch.setattr(W, "decoded", decoded)
    staging.mkdir()
    os.sched_setaffinity(0, allowed[:cpus])
    try:
        listing, _ = W.read(wheel, staging, wanted)
    finally:
        os.sched_setaffinity(0, allowed)
    return listing, idents


@pytest.mark.parametrize("cpus", [1, 2])
def test_members_are_decoded_on_as_many_threads_as_cores_allowed(good, tmp_path, monkeypatch,
                                                                 cpus):
    listing, idents = read_on(cpus, good, tmp_path / "staging", monkeypatch)
    assert listing.problems == []
    assert len(idents) == cpus
    assert listing.sha256 == hashlib.sha256(good.read_bytes()).hexdigest()
    with zipfile.ZipFile(good) as z:
        for info in libraries(good):
            soname = info.filename.rsplit("/", 1)[1]
            member = next(m for m in listing.members
                          if m.kind == "file" and m.name.startswith(soname + "."))
            assert member.staged.read_bytes() == z.read(info)
            assert member.sha256 == hashlib.sha256(z.read(info)).hexdigest()


@pytest.mark.parametrize("which", ["first", "largest", "last", "header"])
def test_a_bad_crc_in_any_member_refuses_the_whole_wheel_and_places_nothing(
        good, tmp_path, monkeypatch, cuda_root, home, which):
    libs = libraries(good)
    member = {"first": libs[0].filename,
              "largest": max(libs, key=lambda i: i.file_size).filename,
              "last": libs[-1].filename,
              "header": "nvidia/cudnn/include/cudnn_ops.h"}[which]
    bad = with_bad_crc(good, member, tmp_path / "bad")

    listing, idents = read_on(2, bad, tmp_path / "staging", monkeypatch)
    assert [p.code for p in listing.problems] == ["corrupt"]
    assert "bad CRC-32" in listing.problems[0].message
    assert member in listing.problems[0].message
    assert listing.sha256 is None
    assert len(idents) == 2  # the fault was found while members were decoded side by side

    root = cuda_root("12.4", "lib")
    before = tree_state(root)
    done, out = run_json(["install", str(bad), "--cuda-root", str(root), "--no-theanorc",
                          "--no-frameworks", "--no-verify"], home)
    assert done.returncode == ARCHIVE_REJECTED, out
    assert out["ok"] is False and "bad CRC-32" in json.dumps(out)
    assert tree_state(root) == before


def test_each_library_is_read_for_the_judge_once_while_the_rest_decodes(good, tmp_path,
                                                                        monkeypatch):
    """The judge's facts of a wheel's libraries (ELF header, symbols, run-time names) are read
    as each staged file completes, beside the decoding, and never a second time by the judge."""
    from cudnn_setup.archive import library_facts
    from cudnn_setup.archive.package import judge

    reads: list[str] = []
    real = library_facts.read_facts

    def counted(path):
        reads.append(Path(path).name)
        return real(path)

    monkeypatch.setattr(library_facts, "read_facts", counted)
    staging = tmp_path / "staging"
    staging.mkdir()
    listing, name = W.read(good, staging, wanted)
    try:
        assert listing.facts is not None
        early = sorted(Path(p).name for p in listing.facts.futures)
        names = sorted(f"{i.filename.rsplit('/', 1)[1].split('.so')[0]}.so.{VERSION[:5]}"
                       for i in libraries(good))
        assert early == names
        assert sorted(reads) == names  # read while decoding, before the judge asked
        pkg = judge(listing, good.name, "x86_64", name.name_facts())
    finally:
        listing.facts.close()
    assert pkg.installable, pkg.problems
    assert sorted(reads) == names  # the judge asked twice about each; nothing was read again


def test_a_member_longer_than_a_cores_share_is_hashed_beside_its_decoding(tmp_path, compiler,
                                                                          monkeypatch):
    """On many cores the largest member's thread is the critical path: its hash runs on one of
    the writer's lanes while the thread decodes on; the other members are hashed as they are
    decoded. Four cores are asked for (this machine may have fewer: the split is the same)."""
    from cudnn_setup.archive import staging
    from fixtures.wheels import wheel_files

    files = dict(wheel_files(VERSION, "12", compiler))
    ops = next(n for n in files if n.endswith("/libcudnn_ops.so.9"))
    files[ops] += os.urandom(4 << 20)  # a library as big as all the others together, and more
    good = build_wheel(tmp_path / "w", VERSION, "12", compiler, files)

    monkeypatch.setattr(W, "usable_cores", lambda: 4)
    decoding: dict[str, int] = {}
    hashing: dict[str, set[int]] = {}
    real_decoded, real_hash = W.decoded, staging.Sink.hash

    def decoded(fd, info, *args):
        decoding[info.filename.rsplit("/", 1)[1].split(".so")[0]] = threading.get_ident()
        return real_decoded(fd, info, *args)

    def spied_hash(sink, chunk):
        hashing.setdefault(sink.member.name.split(".so")[0], set()).add(threading.get_ident())
        return real_hash(sink, chunk)

    monkeypatch.setattr(W, "decoded", decoded)
    monkeypatch.setattr(staging.Sink, "hash", spied_hash)
    staging_dir = tmp_path / "staging"
    staging_dir.mkdir()
    listing, _ = W.read(good, staging_dir, wanted)
    assert listing.problems == []
    libs = libraries(good)
    share = sum(i.file_size for i in zipfile.ZipFile(good).infolist()
                if i.filename.startswith("nvidia/cudnn/")) // 4
    big = [i for i in libs if i.file_size > share]
    assert big, "the wheel has no member bigger than a core's share"
    with zipfile.ZipFile(good) as z:
        for info in libs:
            stem = info.filename.rsplit("/", 1)[1].split(".so")[0]
            beside = hashing[stem] - {decoding[stem]}
            if info in big:
                assert beside and decoding[stem] not in hashing[stem], stem
            else:
                assert hashing[stem] == {decoding[stem]}, stem
            member = next(m for m in listing.members
                          if m.kind == "file" and m.name.startswith(stem + ".so"))
            assert member.sha256 == hashlib.sha256(z.read(info)).hexdigest()
