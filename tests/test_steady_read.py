"""Readers at offsets (rapidgzip's threads, a wheel's members) run only under the archive's read
lease (archive/whole_file.py): the kernel grants it while nobody has the file open for writing
or mapped writable, and breaks it when somebody asks to write. Without it a .tar.gz is read as
one stream and a wheel from a private copy. Whatever happens, the sha256 reported is that of
the bytes staged.

The writers here are real: another thread's open for writing (which the lease holds back until
it is let go), a shared writable mapping, another user.
"""
import hashlib
import mmap
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import run_json, tree_state
from cudnn_setup.archive import decoders, reader, wheel, whole_file
from test_one_stream import _other_archive
from test_state_trust import NOBODY, _python

HAS_RAPIDGZIP = pytest.mark.skipif(decoders.importlib.util.find_spec("rapidgzip") is None,
                                   reason="rapidgzip is not installed")


def _copy(padded, tmp_path: Path, key: str = "gz") -> Path:
    victim = tmp_path / "in" / padded[key].name
    victim.parent.mkdir(exist_ok=True)
    shutil.copy(padded[key], victim)
    return victim


def _writer(path: Path, data: bytes | None, steady: whole_file.Steady) -> threading.Thread:
    """A thread opening `path` to write, then writing `data` over it (nothing for None), started
    and returned once the kernel has begun to break `steady`: its open waits for the lease to be
    let go."""
    def write() -> None:
        with open(path, "r+b") as f:
            if data is not None:
                f.write(data)
                f.truncate()

    thread = threading.Thread(target=write)
    thread.start()
    deadline = time.monotonic() + 10
    while steady.kept() and time.monotonic() < deadline:
        time.sleep(0.005)
    assert not steady.kept(), "the writer's open did not break the lease"
    return thread


@HAS_RAPIDGZIP
@pytest.mark.parametrize("writer", [False, True])
def test_a_writer_opening_the_archive_during_the_read_ends_rapidgzips_pass(writer, padded,
                                                                          tmp_path):
    """The writer writes nothing, and waits: its open alone breaks the lease, so the pass is
    not taken. Let go at the end, the writer goes on; no lease is left on the file."""
    victim = _copy(padded, tmp_path)
    d = decoders.Decoder(victim, decoders.GZIP, None, gzip=decoders.RAPIDGZIP)
    assert d.name == decoders.RAPIDGZIP and d.steady is not None and d.steady.held
    thread = None
    try:
        assert d.stream.read(1 << 20)
        if writer:
            thread = _writer(victim, None, d.steady)
            assert thread.is_alive()  # held back while the lease is held
    finally:
        complaint = d.finish(True)
    if thread is not None:
        thread.join(timeout=10)
        assert not thread.is_alive()
        assert complaint == decoders.FILE_CHANGED
        return
    assert complaint is None
    assert d.sha256 == hashlib.sha256(victim.read_bytes()).hexdigest()
    assert d.size == victim.stat().st_size
    later = threading.Thread(target=lambda: open(victim, "r+b").close())
    later.start()
    later.join(timeout=10)
    assert not later.is_alive()  # the lease is gone with the read


@HAS_RAPIDGZIP
def test_an_archive_rewritten_during_rapidgzips_read_is_read_again_as_one_stream(padded,
                                                                                tmp_path,
                                                                                monkeypatch):
    """Rewritten with another valid archive once the first piece is decoded: the rewrite waits
    for the lease, the pass ends with FILE_CHANGED, and the one-stream reread (after the
    rewrite, here) stages and hashes the new archive."""
    victim = _copy(padded, tmp_path)
    new = _other_archive(padded, "gz")
    writers, complaints = [], []
    finish = decoders.Decoder._finish_beside

    def finish_beside(self, complete):
        complaints.append(finish(self, complete))
        for thread in writers:  # let go: the rewrite goes on, and is done before the reread
            thread.join(timeout=10)
        return complaints[-1]

    def on_read(done, total):
        if not writers and decoders_in_use:
            writers.append(_writer(victim, new, decoders_in_use[-1].steady))

    decoders_in_use = []
    made = decoders.Decoder.__init__

    def init(self, *a, **k):
        made(self, *a, **k)
        decoders_in_use.append(self)

    monkeypatch.setattr(decoders.Decoder, "__init__", init)
    monkeypatch.setattr(decoders.Decoder, "_finish_beside", finish_beside)
    staging_dir = tmp_path / "s"
    staging_dir.mkdir()
    listing = reader.read(victim, staging_dir, lambda m: True, on_read=on_read,
                          gzip=decoders.RAPIDGZIP)
    assert writers and complaints == [decoders.FILE_CHANGED]
    assert [d.name for d in decoders_in_use] == [decoders.RAPIDGZIP, decoders.fallback_gzip()]
    assert not listing.problems
    assert listing.sha256 == hashlib.sha256(new).hexdigest() and listing.size == len(new)
    for m in listing.files():
        assert m.sha256 == hashlib.sha256(m.staged.read_bytes()).hexdigest(), m.path


def _mapped(path: Path) -> mmap.mmap:
    """A shared writable mapping of `path`, every page dirty, its descriptor closed: stores
    through it move no timestamp, and it keeps the file open for writing."""
    fd = os.open(path, os.O_RDWR)
    try:
        mapped = mmap.mmap(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)
    mapped[:] = mapped[:]
    return mapped


@HAS_RAPIDGZIP
def test_an_archive_mapped_writable_is_read_as_one_stream(padded, cuda_root, home, tmp_path,
                                                         monkeypatch):
    """No lease while a writable mapping exists: rapidgzip does not read it at offsets. The
    mapping stores another archive once the first piece is read; given the old --sha256, the
    install refuses (the bytes decoded are the bytes hashed), and the root is unchanged."""
    victim = _copy(padded, tmp_path)
    old = victim.read_bytes()
    new = _other_archive(padded, "gz")[:len(old)].ljust(len(old), b"\0")  # a mapping keeps the size
    mapped = _mapped(victim)
    names = []
    made = decoders.Decoder.__init__

    def init(self, *a, **k):
        made(self, *a, **k)
        names.append(self.name)

    original = decoders.ArchiveFile.readinto

    def readinto(self, buffer):
        n = original(self, buffer)
        if self.count == n and n:  # the first piece is read: the rest changes
            mapped[:] = new
        return n

    monkeypatch.setattr(decoders.Decoder, "__init__", init)
    monkeypatch.setattr(decoders.ArchiveFile, "readinto", readinto)
    monkeypatch.setattr(decoders, "gzip_decoder", lambda *a, **k: decoders.RAPIDGZIP)
    root = cuda_root("12.4")
    before = tree_state(root)
    try:
        done, out = run_json(["install", victim, "--cuda-root", root, "--sha256",
                              hashlib.sha256(old).hexdigest(), "--no-theanorc", "--no-verify"],
                             home)
    finally:
        mapped.close()
    assert names == [decoders.fallback_gzip()]  # asked for rapidgzip, read as one stream
    assert done.returncode == 3, out
    assert out["error"]["code"] in ("checksum-mismatch", "archive-rejected"), out["error"]
    assert tree_state(root) == before


def test_a_wheel_that_cannot_be_leased_is_read_from_a_private_copy(tmp_path, monkeypatch,
                                                                  compiler):
    """A wheel mapped writable: its members are read from a copy no other process can open.
    The mapping stores other bytes once the copy is made; what is staged and hashed is the
    copy's, the wheel as it was."""
    from fixtures.wheels import build_wheel

    path = build_wheel(tmp_path / "w", "9.3.0.75", "12", compiler)
    old = path.read_bytes()
    mapped = _mapped(path)
    copies = []
    copy = wheel.private_copy

    def private_copy(f, directory):
        copies.append(copy(f, directory))
        mapped[:] = bytes(len(old))  # the original is now zeros
        return copies[-1]

    monkeypatch.setattr(wheel, "private_copy", private_copy)
    staging_dir = tmp_path / "s"
    try:
        listing, _ = wheel.read(path, staging_dir, lambda m: True)
    finally:
        mapped.close()
    assert copies and copies[0].closed  # used, then closed with the read
    assert not listing.problems, listing.problems
    assert listing.sha256 == hashlib.sha256(old).hexdigest() and listing.size == len(old)
    assert path.read_bytes() == bytes(len(old))
    for m in listing.files():
        assert m.sha256 == hashlib.sha256(m.staged.read_bytes()).hexdigest(), m.path
    assert [p.name for p in staging_dir.iterdir() if p.name.startswith(".")] == []


def test_a_wheel_nobody_else_can_write_is_read_in_place(tmp_path, monkeypatch, compiler):
    from fixtures.wheels import build_wheel

    path = build_wheel(tmp_path / "w", "9.3.0.75", "12", compiler)
    monkeypatch.setattr(wheel, "private_copy", lambda *a: pytest.fail("copied a leased wheel"))
    listing, _ = wheel.read(path, tmp_path / "s", lambda m: True)
    assert not listing.problems and listing.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


_LEASE_AS_NOBODY = """
import sys
from pathlib import Path
from cudnn_setup.archive import decoders
d = decoders.Decoder(Path(sys.argv[1]), decoders.GZIP, None, gzip=decoders.RAPIDGZIP)
try:
    print(d.name, d.steady is not None)
finally:
    d.finish(False)
"""


@HAS_RAPIDGZIP
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root and setpriv to be a second user")
def test_another_users_archive_is_read_as_one_stream(padded):
    """A second user may not lease root's archive (only its owner may): it reads it as one
    stream, and never at offsets."""
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="cudnn-setup-lease-"))
    try:
        base.chmod(0o755)
        archive = base / padded["gz"].name
        shutil.copy(padded["gz"], archive)
        archive.chmod(0o644)
        python, path = _python()
        done = subprocess.run([*NOBODY, python, "-c", _LEASE_AS_NOBODY, str(archive)],
                              env={"PYTHONPATH": path, "PATH": "/usr/bin:/bin"},
                              capture_output=True, text=True, timeout=120)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [decoders.fallback_gzip(), "False"]


_OPEN_TO_WRITE = """
import sys
with open(sys.argv[1], "r+b") as f:  # held back by the reader's lease until it is let go
    if sys.argv[2] == "zeros":
        size = len(f.read())
        f.seek(0)
        f.write(bytes(size))
print("written")
"""


def _breaking(path: Path) -> bool:
    """Whether the kernel is breaking a lease on `path` (/proc/locks: a writer's open waits)."""
    st = path.stat()
    ident = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino} "
    return any("LEASE" in line and "BREAKING" in line and ident in line
               for line in Path("/proc/locks").read_text().splitlines())


@pytest.mark.parametrize("writes", ["nothing", "zeros"])
def test_a_wheel_opened_for_writing_mid_read_is_read_again_from_a_copy(writes, tmp_path,
                                                                       compiler):
    """Another process opens the wheel for writing while its members are read: the open breaks
    the lease, and the kernel holds it back. The pass proves nothing, so the wheel is copied
    (before that writer goes on) and read again from the copy: the wheel as it was passes, with
    its own sha256 and the expected one, whether the writer then wrote nothing or zeros over
    it. Nothing but the staging dir changed, and it holds only the second pass's files."""
    import sys

    from fixtures.wheels import build_wheel

    path = build_wheel(tmp_path / "w", "9.3.0.75", "12", compiler)
    old = path.read_bytes()
    children: list[subprocess.Popen] = []

    def on_read(done, total):
        if children:
            return
        children.append(subprocess.Popen([sys.executable, "-c", _OPEN_TO_WRITE, str(path),
                                          writes], stdout=subprocess.PIPE, text=True))
        deadline = time.monotonic() + 10
        while not _breaking(path) and time.monotonic() < deadline:
            time.sleep(0.005)
        assert children[0].poll() is None, "the writer was not held back by the lease"

    staging_dir = tmp_path / "s"
    outside = sorted(p for p in tmp_path.rglob("*") if staging_dir not in p.parents)
    try:
        listing, _ = wheel.read(path, staging_dir, lambda m: True, on_read=on_read,
                                expected_sha256=hashlib.sha256(old).hexdigest())
    finally:
        for child in children:
            out, _ = child.communicate(timeout=60)
    assert children and children[0].returncode == 0 and out.strip() == "written"
    assert not listing.problems, listing.problems
    assert listing.sha256 == hashlib.sha256(old).hexdigest() and listing.size == len(old)
    assert path.read_bytes() == (old if writes == "nothing" else bytes(len(old)))
    files = list(listing.files())
    assert files
    for m in files:
        assert m.sha256 == hashlib.sha256(m.staged.read_bytes()).hexdigest(), m.path
    staged = {p for p in staging_dir.rglob("*") if p.is_file() and not p.is_symlink()}
    assert staged == {m.staged for m in files}  # the first pass left nothing behind
    assert sorted(p for p in tmp_path.rglob("*") if staging_dir not in p.parents
                  and p != staging_dir) == [p for p in outside if p != staging_dir]
