"""The archive is read once: the bytes hashed are the bytes decoded, on every decoder path.

Also the gzip decoders: rapidgzip (chosen on many cores) stages the same bytes as ISA-L, and
whenever it finds fault with an archive, ISA-L or zlib reads it again and their verdict stands.
"""
import gzip
import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import run_json, tree_state
from cudnn_setup.archive import decoders, reader, staging
from fixtures import buildcache
from fixtures.generate import (SPECS, XZ_FAST, Entry, compress, spec_entries, tar_bytes,
                               xz_fast)

NAME = "cudnn-linux-x86_64-9.3.0.99_cuda12-archive"
XZ = shutil.which("xz")
HAS_RAPIDGZIP = pytest.mark.skipif(decoders.importlib.util.find_spec("rapidgzip") is None,
                                   reason="rapidgzip is not installed")


def _read(path: Path, staging_dir: Path, gzip_decoder: str | None = None, on_read=None):
    staging_dir.mkdir()
    return reader.read(path, staging_dir, lambda m: True, on_read=on_read, xz=XZ,
                       gzip=gzip_decoder)


def _other_archive(padded: dict, key: str) -> bytes:
    """The archive `key` with two MiB of its largest library swapped: same names, other bytes,
    compressed as conftest's `padded` compresses that form. Made once for the session, all
    workers together (fixtures/buildcache.py): the gz form is asked for by four tests."""
    raw = padded["raw"]
    lib = next(n for n in padded["files"] if "engines_precompiled" in n)
    start = raw.index(padded["files"][lib][:4096]) + (1 << 20)
    half = decoders.CHUNK
    swapped = raw[:start] + raw[start + half:start + 2 * half] + raw[start:start + half] + \
        raw[start + 2 * half:]
    assert swapped != raw
    forms = {
        "gz": lambda: compress(swapped, ".tgz"),
        "single": lambda: xz_fast(swapped),
        "multi": lambda: subprocess.run([XZ, "-T2", XZ_FAST, "--block-size=1MiB", "-c"],
                                        input=swapped, capture_output=True, check=True).stdout,
    }
    digest = hashlib.sha256(swapped).hexdigest()
    return buildcache.built(buildcache.key_of("padded-other", key, digest), forms[key])


def _check(listing, padded, path: Path) -> None:
    assert not listing.problems, listing.problems
    assert listing.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert listing.size == path.stat().st_size
    for m in listing.files():
        assert m.staged.read_bytes() == padded["files"][m.path], m.path
        assert m.sha256 == hashlib.sha256(padded["files"][m.path]).hexdigest(), m.path


@pytest.mark.parametrize("decoder", [decoders.ISAL, decoders.ZLIB,
                                     pytest.param(decoders.RAPIDGZIP, marks=HAS_RAPIDGZIP)])
def test_every_gzip_decoder_stages_the_same_bytes(decoder, padded, tmp_path):
    if decoder == decoders.ISAL and decoders.importlib.util.find_spec("isal") is None:
        pytest.skip("isal is not installed")
    seen = []
    listing = _read(padded["gz"], tmp_path / "s", decoder,
                    on_read=lambda done, total: seen.append((done, total)))
    _check(listing, padded, padded["gz"])
    size = padded["gz"].stat().st_size
    assert seen and seen[-1] == (size, size)  # progress reaches the whole file, of its size
    assert seen == sorted(seen)


@pytest.mark.parametrize("key,decoder", [
    ("multi", None), ("single", None), ("gz", decoders.ISAL), ("gz", decoders.ZLIB)])
def test_a_file_rewritten_during_the_read_is_hashed_as_decoded(key, decoder, padded, tmp_path):
    """Rewritten in place once the read has begun: the hash is of the bytes that were decoded.
    (rapidgzip reads at offsets, under a lease: tests/test_steady_read.py.)

    The rewrite swaps two MiBs of a large library's payload, so the new file decodes to a valid
    tar with other bytes: every staged file must hash to its recorded sha256, and the archive's
    sha256 must be that of the bytes read (old up to the rewrite, new after it), never that of
    the old file, which a second read of the file from its start might have seen.
    """
    victim = tmp_path / "in" / padded[key].name
    victim.parent.mkdir()
    shutil.copy(padded[key], victim)
    old = victim.read_bytes()
    new = _other_archive(padded, key)
    rewritten = []

    def rewrite(count: int, total: int | None) -> None:
        if not rewritten:  # after the first piece is read, the rest of the file changes
            with open(victim, "r+b") as f:
                f.write(new)
                f.truncate()
            rewritten.append(count)

    listing = _read(victim, tmp_path / "s", decoder, on_read=rewrite)
    assert rewritten
    if listing.problems:  # a mix of old and new bytes that does not decode
        assert listing.sha256 is None
        return
    for m in listing.files():
        assert m.sha256 == hashlib.sha256(m.staged.read_bytes()).hexdigest(), m.path
    # What was decoded: the old bytes up to where the file had been read when it changed (the
    # count the hook saw), the new ones after.
    k = rewritten[0]
    assert listing.sha256 == hashlib.sha256(old[:k] + new[k:]).hexdigest()
    if old[k:] != new[k:]:
        assert listing.sha256 != hashlib.sha256(old).hexdigest()


def test_install_refuses_a_file_rewritten_after_its_checksum_was_taken(padded, cuda_root, home,
                                                                       monkeypatch, tmp_path):
    """--sha256 of the original; the file changes under the install: refused, root unchanged."""
    victim = tmp_path / padded["gz"].name
    shutil.copy(padded["gz"], victim)
    good = hashlib.sha256(victim.read_bytes()).hexdigest()
    other = _other_archive(padded, "gz")  # a valid archive, other bytes
    original = decoders.ArchiveFile.readinto

    def readinto(self, buffer):
        n = original(self, buffer)
        if self.count == n and n:  # the first piece has been read: rewrite the file in place
            with open(victim, "r+b") as f:
                f.write(other)
                f.truncate()
        return n

    monkeypatch.setattr(decoders.ArchiveFile, "readinto", readinto)
    monkeypatch.setattr(decoders, "gzip_decoder", lambda *a, **k: decoders.fallback_gzip())
    root = cuda_root("12.4")
    before = tree_state(root)
    done, out = run_json(["install", victim, "--cuda-root", root, "--sha256", good,
                          "--no-theanorc", "--no-verify"], home)
    assert done.returncode != 0 and out["error"]["code"] in ("checksum-mismatch", "archive-invalid"), out
    assert tree_state(root) == before


@HAS_RAPIDGZIP
@pytest.mark.parametrize("damage", ["truncated", "flipped", "zeros-after-end", "two-members"])
def test_rapidgzip_doubts_are_settled_by_a_second_decoder(damage, padded, tmp_path):
    raw = padded["raw"]
    data = padded["gz"].read_bytes()
    if damage == "truncated":  # rapidgzip alone would take this for the whole stream
        data = data[: len(data) * 3 // 4]
    elif damage == "flipped":
        mid = len(data) // 2
        data = data[:mid] + bytes(b ^ 0x5A for b in data[mid:mid + 4096]) + data[mid + 4096:]
    elif damage == "zeros-after-end":  # gzip and ISA-L read this; rapidgzip refuses it
        data += bytes(4096)
    else:  # two gzip members, as `cat a.gz b.gz` makes: the trailer holds the last one's size
        cut = len(raw) // 3
        data = gzip.compress(raw[:cut], mtime=0) + gzip.compress(raw[cut:], mtime=0)
    path = tmp_path / "in" / padded["gz"].name
    path.parent.mkdir()
    path.write_bytes(data)
    by_rapidgzip = _read(path, tmp_path / "r", decoders.RAPIDGZIP)
    by_isal = _read(path, tmp_path / "i", decoders.fallback_gzip())
    assert [p.code for p in by_rapidgzip.problems] == [p.code for p in by_isal.problems]
    assert by_rapidgzip.sha256 == by_isal.sha256
    if damage in ("zeros-after-end", "two-members"):
        _check(by_rapidgzip, padded, path)
    else:
        assert [p.code for p in by_rapidgzip.problems] == ["corrupt"]
        assert not [m for m in by_rapidgzip.files() if m.staged and not m.staged.exists()]


def test_the_gzip_decoder_follows_the_cores(monkeypatch):
    found = {"rapidgzip": True, "isal": True}
    monkeypatch.setattr(decoders.importlib.util, "find_spec",
                        lambda name: object() if found.get(name) else None)
    lots = 64 << 30
    assert decoders.gzip_decoder(decoders.RAPIDGZIP_MIN_CORES, 700 << 20, lots) == decoders.RAPIDGZIP
    assert decoders.gzip_decoder(decoders.RAPIDGZIP_MIN_CORES - 1, 1, lots) == decoders.ISAL
    # rapidgzip keeps much of what it reads from a pipe: not where a quarter of the memory
    # available would not hold it (a container with 2 GiB left, a 700 MB archive)
    assert decoders.gzip_decoder(16, 700 << 20, 2 << 30) == decoders.ISAL
    assert decoders.gzip_decoder(16, 100 << 20, 4 << 30) == decoders.RAPIDGZIP
    found["rapidgzip"] = False
    assert decoders.gzip_decoder(64, 1, lots) == decoders.ISAL
    found["isal"] = False
    assert decoders.gzip_decoder(64, 1, lots) == decoders.ZLIB


@pytest.mark.parametrize("lanes", [1, 3])
def test_files_hashed_on_several_lanes_keep_their_own_digests(lanes, padded, tmp_path, monkeypatch):
    monkeypatch.setattr(staging, "hash_lanes", lambda cores: lanes)
    made_lanes = []
    original = staging.Writer.__init__

    def init(self, direct=False, lanes=1, writers=1, **kw):
        made_lanes.append(lanes)
        original(self, direct, lanes, writers=3, **kw)  # several writers, whatever this machine has

    monkeypatch.setattr(staging.Writer, "__init__", init)
    listing = _read(padded["single"], tmp_path / "s")
    assert made_lanes == [lanes]
    _check(listing, padded, padded["single"])


def test_hash_lanes_and_writers_grow_with_cores_and_stop_at_four():
    assert [staging.hash_lanes(c) for c in (1, 2, 4, 8, 16, 128)] == [1, 1, 1, 2, 4, 4]
    assert [staging.write_threads(c) for c in (1, 2, 4, 8, 16, 128)] == [1, 1, 2, 4, 4, 4]



@pytest.mark.parametrize("blocks", ["one", "many"])
def test_a_tar_xz_counts_decoded_bytes_of_what_its_index_records(blocks, compiler, tmp_path):
    """48 MiB of zeros compress to a few KiB: counted in compressed bytes the read would jump
    from nothing to done in one piece and then stay there while the zeros are decoded and
    staged. Counted in decoded bytes, of the total the index records, it moves at most a few
    MiB at a time and ends at that total."""
    entries = spec_entries(SPECS[f"{NAME}.tar.xz"], compiler)
    entries.append(Entry(f"{NAME}/lib/zeros.bin", bytes(48 << 20)))
    raw = tar_bytes(entries)
    # preset 0 for both: zeros come to the same 7 KiB at -6, in a third of the CPU
    args = ["-T1", "-0"] if blocks == "one" else ["-T2", "-0", "--block-size=4MiB"]
    path = tmp_path / "in" / f"{NAME}.tar.xz"
    path.parent.mkdir()
    with open(path, "wb") as f:
        subprocess.run([XZ, *args, "-c"], input=raw, stdout=f, check=True)
    assert path.stat().st_size < len(raw) // 10
    seen = []
    listing = _read(path, tmp_path / "s", on_read=lambda done, total: seen.append((done, total)))
    assert not listing.problems, listing.problems
    assert seen[-1] == (len(raw), len(raw))
    assert {total for _, total in seen} == {len(raw)}
    done = [0] + [d for d, _ in seen]
    assert done == sorted(done)
    assert max(b - a for a, b in zip(done, done[1:])) <= 4 << 20, "a jump, then a long stay"
