"""Every decoder path reads the same archive to the same bytes, and big files are staged intact.

Archives here (conftest's `padded`) carry libraries padded past the direct-I/O threshold (with a
short last chunk), so the O_DIRECT writes, their buffered tail, and the xz paths (several blocks
through `xz -T0`, one block through liblzma into our buffers, Python's lzma where liblzma cannot
be loaded) all run.
"""
import errno
import hashlib
import json
import lzma
import mmap
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import run_cli, tree_state
from cudnn_setup.archive import decoders, liblzma, reader, staging
from cudnn_setup.archive.listing import Listing
from cudnn_setup.facts.mounts import fs_type

XZ = shutil.which("xz")


def _read(path: Path, staging: Path, xz: str | None = XZ) -> Listing:
    staging.mkdir()
    return reader.read(path, staging, lambda m: True, xz=xz)


def _digest(listing: Listing) -> dict:
    return {m.path: (m.kind, m.size, m.sha256, m.target) for m in listing.members}


def _check_staged(listing: Listing, files: dict) -> None:
    for m in listing.files():
        expected = files[m.path]
        assert m.staged.read_bytes() == expected, m.path
        assert m.sha256 == hashlib.sha256(expected).hexdigest()
        assert m.staged.stat().st_mode & 0o444 == 0o444


def test_block_count_picks_the_decoder(padded):
    xz = XZ
    assert decoders._xz_blocks(xz, padded["single"]) == 1
    assert decoders._xz_blocks(xz, padded["multi"]) > 5
    assert decoders._xz_blocks(xz, padded["gz"]) is None
    one = decoders.Decoder(padded["single"], decoders.XZ, None, XZ)
    many = decoders.Decoder(padded["multi"], decoders.XZ, None, XZ)
    try:
        assert isinstance(one.stream, liblzma.XzReader) and one.proc is None
        if decoders._xz_decodes_in_parallel(xz):
            assert many.proc is not None and many.proc.args[1:3] == ["-dc", "-T0"]
            assert any(a.startswith("--memlimit-mt=") for a in many.proc.args)
        else:  # xz before 5.4: one thread either way
            assert many.proc is None
    finally:
        one.finish(False)
        many.finish(False)


@pytest.mark.parametrize("fallback", ["none", "python-lzma", "no-xz-binary"])
def test_every_decoder_stages_the_same_bytes(fallback, padded, tmp_path, monkeypatch):
    if fallback == "python-lzma":
        monkeypatch.setattr(liblzma, "load", lambda: None)  # a machine without liblzma.so.5
    xz = None if fallback == "no-xz-binary" else XZ
    listings = {key: _read(padded[key], tmp_path / key, xz) for key in ("single", "multi", "gz")}
    first = _digest(listings["single"])
    for key, listing in listings.items():
        assert not listing.problems, (key, listing.problems)
        assert _digest(listing) == first, key
        assert listing.sha256 == hashlib.sha256(padded[key].read_bytes()).hexdigest()
        assert listing.size == padded[key].stat().st_size
        _check_staged(listing, padded["files"])
    big = [m for m in listings["single"].files() if m.size >= staging.DIRECT_MIN_BYTES]
    assert len(big) == 2 and any(m.size % decoders.CHUNK for m in big)


@pytest.mark.parametrize("key", ["single", "multi"])
@pytest.mark.parametrize("damage", ["truncated", "flipped", "trailing-garbage"])
def test_damaged_xz_is_corrupt_on_both_paths(key, damage, padded, tmp_path):
    data = padded[key].read_bytes()
    if damage == "truncated":
        data = data[: len(data) * 3 // 4]
    elif damage == "flipped":
        data = data[:len(data) // 2] + bytes(b ^ 0x5A for b in data[len(data) // 2:][:4096]) + \
            data[len(data) // 2 + 4096:]
    else:
        data += b"not xz at all"
    broken = tmp_path / damage / padded[key].name
    broken.parent.mkdir()
    broken.write_bytes(data)
    listing = _read(broken, tmp_path / "staging")
    assert [p.code for p in listing.problems] == ["corrupt"], listing.problems
    assert listing.sha256 is None


def test_liblzma_reads_concatenated_streams_and_padding(padded, tmp_path):
    raw = padded["raw"][:3 << 20]  # ten of the reader's buffers: what matters is the joins
    cut = len(raw) // 3 + 7  # mid-member, mid-block
    joined = lzma.compress(raw[:cut], preset=0) + bytes(8) + lzma.compress(raw[cut:], preset=0)
    lib = liblzma.load()
    assert lib is not None

    def decode(data: bytes) -> bytes:
        path = tmp_path / "joined.xz"
        path.write_bytes(data)
        reader = liblzma.XzReader(lib, open(path, "rb"))
        out = bytearray()
        buf = bytearray(300_000)  # not a divisor of anything in the stream
        try:
            while n := reader.readinto(buf):
                out += buf[:n]
        finally:
            reader.close()
        return bytes(out)

    assert decode(joined) == raw
    with pytest.raises(EOFError):
        decode(joined[:-20])
    with pytest.raises(lzma.LZMAError):
        decode(joined + b"\x01 and then something that is no xz stream")


def _skip_without_direct_io(path: Path) -> None:
    if fs_type(path) not in staging.DIRECT_IO_FILESYSTEMS:
        pytest.skip(f"{path} is not on a local disk filesystem, where O_DIRECT is used")


def test_staged_file_writes_directly_then_buffers_its_tail(tmp_path):
    _skip_without_direct_io(tmp_path)
    data = os.urandom(4 * decoders.CHUNK + 4097)
    out = staging.StagedFile(tmp_path / "lib.so", direct=True)
    assert out.direct  # this filesystem takes O_DIRECT
    buf = mmap.mmap(-1, decoders.CHUNK)  # page-aligned, like the writer's own buffers
    for i in range(0, len(data), decoders.CHUNK):
        piece = data[i:i + decoders.CHUNK]
        buf[:len(piece)] = piece
        out.write_at(memoryview(buf)[:len(piece)], i)
    assert out.direct and out.buffered_fd not in (None, out.fd)  # the tail: page cache
    out.close()
    assert (tmp_path / "lib.so").read_bytes() == data


def test_filesystem_without_direct_io_falls_back(padded, tmp_path, monkeypatch):
    _skip_without_direct_io(tmp_path)
    real_open, real_pwrite = os.open, os.pwrite
    refused = {"open": 0, "write": 0}

    def open_no_direct(path, flags, *a, **kw):
        if flags & os.O_DIRECT and "adv" in str(path):  # one fs refuses the flag outright…
            refused["open"] += 1
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, *a, **kw)

    def write_strict(fd, data, offset):
        import fcntl

        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:  # …another wants stricter alignment
            refused["write"] += 1
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "open", open_no_direct)
    monkeypatch.setattr(os, "pwrite", write_strict)
    listing = _read(padded["single"], tmp_path / "staging")
    assert not listing.problems
    _check_staged(listing, padded["files"])
    # writes in flight on several threads may each be refused before the file turns buffered
    assert refused["open"] == 1 and 1 <= refused["write"] <= staging.write_threads(os.cpu_count())


def test_full_disk_during_a_direct_write_exits_5(padded, cuda_root, home):
    import resource

    root = cuda_root("12.4")
    before = tree_state(root)

    def small_disk():
        resource.setrlimit(resource.RLIMIT_FSIZE, (3 * decoders.CHUNK, 3 * decoders.CHUNK))

    done = run_cli(["install", padded["single"], "--cuda-root", root, "--no-theanorc", "--json"],
                   home, preexec_fn=small_disk)
    assert done.returncode == 5, done.stderr
    assert "File too large" in json.loads(done.stdout)["error"]["message"]
    assert tree_state(root) == before


def test_xz_memory_limit_is_a_share_of_what_is_free():
    (arg,) = decoders._xz_memory_limit()
    limit = int(arg.split("=")[1])
    available = int(Path("/proc/meminfo").read_text().split("MemAvailable:")[1].split()[0]) * 1024
    assert 64 << 20 <= limit <= available // 4 + (256 << 20)


MOUNTINFO = """\
22 1 252:1 / / rw,relatime shared:1 - ext4 /dev/vda rw
40 22 0:36 / /mnt/cluster rw,relatime shared:20 - nfs4 server:/export rw,vers=4.2
41 40 252:2 / /mnt/cluster/local\\040disk rw shared:21 - xfs /dev/vdb rw
42 22 0:40 / /opt rw shared:22 - tmpfs tmpfs rw
43 22 0:41 / /opt rw shared:23 - overlay overlay rw,lowerdir=/l,upperdir=/u
"""


@pytest.mark.parametrize("path, expect", [
    ("/usr/local/cuda", "ext4"), ("/mnt/cluster/cuda-12/lib64", "nfs4"),
    ("/mnt/cluster/local disk/cuda", "xfs"), ("/mnt/clusterfoo", "ext4"), ("/opt/x", "overlay"),
])
def test_mount_type_of_a_path(path, expect):
    assert fs_type(Path(path), MOUNTINFO) == expect


def test_mount_type_agrees_with_findmnt(tmp_path):
    for path in (tmp_path, Path("/dev/shm"), Path("/proc/self")):
        found = subprocess.run(["findmnt", "-n", "-o", "FSTYPE", "-T", str(path)],
                               capture_output=True, text=True, check=True).stdout.split()
        assert fs_type(path) == found[-1], path  # of stacked mounts, the one on top


def test_no_direct_io_off_local_disks(padded, tmp_path, monkeypatch):
    """tmpfs (like NFS) gets buffered writes; the staged bytes are the same."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or fs_type(shm) != "tmpfs":
        pytest.skip("no tmpfs at /dev/shm")
    real_open = os.open
    direct_opens = []

    def spy(path, flags, *a, **kw):
        if flags & os.O_DIRECT:
            direct_opens.append(path)
        return real_open(path, flags, *a, **kw)

    monkeypatch.setattr(os, "open", spy)
    import tempfile

    with tempfile.TemporaryDirectory(dir=shm) as tmp:
        listing = _read(padded["single"], Path(tmp) / "staging")
        _check_staged(listing, padded["files"])
    assert direct_opens == []
    _read(padded["single"], tmp_path / "staging")
    on_disk = fs_type(tmp_path) in staging.DIRECT_IO_FILESYSTEMS
    assert len(direct_opens) == (2 if on_disk else 0)  # the two padded libraries


def test_an_xz_without_parallel_decoding_is_not_piped(padded, tmp_path, monkeypatch):
    """xz before 5.4 decodes on one thread and has no --memlimit-mt: liblzma decodes instead."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    old = bin_dir / "xz"
    old.write_text("#!/bin/sh\n"  # answers as xz 5.2.5 does, and is the real xz otherwise
                   'if [ "$1 $2" = "--robot --version" ]; then\n'
                   "  echo XZ_VERSION=50020052; echo LIBLZMA_VERSION=50020052; exit 0\nfi\n"
                   f'exec {shutil.which("xz")} "$@"\n')
    old.chmod(0o755)
    assert not decoders._xz_decodes_in_parallel(str(old))
    decoder = decoders.Decoder(padded["multi"], decoders.XZ, None, str(old))
    try:
        assert decoder.proc is None and isinstance(decoder.stream, liblzma.XzReader)
    finally:
        decoder.finish(False)
    listing = _read(padded["multi"], tmp_path / "staging", str(old))
    assert not listing.problems
    _check_staged(listing, padded["files"])
