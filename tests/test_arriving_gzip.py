"""A .tar.gz still arriving, decoded by rapidgzip on its own threads: each reads at offsets of
the part file the download writes and waits for the bytes there. Real gzip streams, a real part
file written piece by piece by a thread as a download writes it, real signals."""
import gzip
import hashlib
import io
import os
import signal
import tarfile
import threading
import time
from pathlib import Path

import pytest

from cudnn_setup.archive import decoders, reader
from cudnn_setup.fetch.arriving import Arriving

HAS_RAPIDGZIP = pytest.mark.skipif(decoders.importlib.util.find_spec("rapidgzip") is None,
                                   reason="rapidgzip is not installed")
PIECE = 256 << 10


def _archive() -> bytes:
    """A .tar.gz of several MiB (rapidgzip splits it into chunks), half of it incompressible."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for i, data in enumerate([os.urandom(3 << 20), b"cudnn " * (600 << 10),
                                  os.urandom(2 << 20), b"tail" * 1000]):
            info = tarfile.TarInfo(f"cuda/lib64/part{i}.bin")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(buf.getvalue(), compresslevel=1, mtime=0)


@pytest.fixture(scope="module")
def archive() -> bytes:
    return _archive()


class Download:
    """A thread writing `data` into a part file piece by piece, as the downloader does: each
    piece flushed, then announced; it stops at `hold` bytes until `go` is set, and fails there
    instead when `fail` is; it pauses `pause` seconds after each piece."""

    def __init__(self, tmp: Path, data: bytes, announced: int | None, hold: int | None = None,
                 pause: float = 0.002):
        self.data, self.part, self.dest = data, tmp / "a.tar.gz.part", tmp / "a.tar.gz"
        self.arriving = Arriving()
        self.hold = hold
        self.go, self.fail, self.held = threading.Event(), threading.Event(), threading.Event()
        self.announced, self.pause = announced, pause
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with open(self.part, "w+b") as f:
            self.arriving.begin(self.part, 0, self.dest, f.fileno(), self.announced)
            for at in range(0, len(self.data), PIECE):
                if not self._carry_on(at):
                    return
                f.write(self.data[at:at + PIECE])
                f.flush()
                self.arriving.wrote(min(at + PIECE, len(self.data)))
                time.sleep(self.pause)
        if not self._carry_on(len(self.data)):
            return
        os.replace(self.part, self.dest)
        self.arriving.finish(self.dest, hashlib.sha256(self.data).hexdigest(), len(self.data))


    def _carry_on(self, at: int) -> bool:
        """At byte `at`: held there until `go` when it is the hold, then failed if `fail`."""
        if self.hold is not None and at >= self.hold and not self.go.is_set():
            self.held.set()
            self.go.wait()
            if self.fail.is_set():
                self.arriving.fail(ConnectionError("connection lost"))
                return False
        return True


def _decoders_in_use(monkeypatch) -> list:
    made, used = decoders.Decoder.__init__, []

    def init(self, *a, **k):
        made(self, *a, **k)
        used.append(self)

    monkeypatch.setattr(decoders.Decoder, "__init__", init)
    return used


def _read(tmp: Path, dl: Download, **kw):
    staging = tmp / "staging"
    staging.mkdir(exist_ok=True)
    return reader.read(dl.dest, staging, lambda m: True, source=dl.arriving.follow(), **kw)


def _reading(tmp: Path, dl: Download) -> tuple[threading.Thread, dict]:
    """rapidgzip reading `dl` on a thread of its own: the thread, and where its listing goes."""
    got: dict = {}
    reading = threading.Thread(target=lambda: got.update(
        listing=_read(tmp, dl, gzip=decoders.RAPIDGZIP)))
    reading.start()
    return reading, got


def _whole(listing, data: bytes) -> None:
    assert not listing.problems, listing.problems
    assert listing.sha256 == hashlib.sha256(data).hexdigest() and listing.size == len(data)
    members = {m.path: m for m in listing.files()}
    assert len(members) == 4
    for m in members.values():
        assert m.sha256 == hashlib.sha256(m.staged.read_bytes()).hexdigest(), m.path


def _tasks() -> set[str]:
    return set(os.listdir("/proc/self/task"))


def _threads_left(before: set[str]) -> set[str]:
    """The threads of this process begun since `before` and still there (rapidgzip's among
    them), after a moment for those ending."""
    for _ in range(50):
        left = _tasks() - before
        if not left:
            break
        time.sleep(0.02)
    return left


@HAS_RAPIDGZIP
def test_rapidgzip_decodes_and_stages_members_while_the_archive_still_arrives(
        archive, tmp_path, monkeypatch):
    """A download that takes a second or more: the first member is staged before it ends;
    then the pass ends whole, read once by rapidgzip, with the download's checksum and size.
    (Stalled, rapidgzip may stop altogether: its threads share one reader of the file, and the
    one waiting for bytes holds it.)"""
    used = _decoders_in_use(monkeypatch)
    dl = Download(tmp_path, archive, len(archive), pause=0.05)
    reading, got = _reading(tmp_path, dl)
    while not list((tmp_path / "staging").rglob("part0.bin")) and reading.is_alive():
        time.sleep(0.01)
    assert not dl.arriving.finished, "nothing was staged before the download ended"
    reading.join(60)
    assert [d.name for d in used] == [decoders.RAPIDGZIP]
    _whole(got["listing"], archive)


@HAS_RAPIDGZIP
@pytest.mark.parametrize("off", [-1000, 1000])
def test_a_size_announced_wrongly_is_read_again_as_one_stream(archive, tmp_path, monkeypatch,
                                                               off):
    """rapidgzip is told where the file ends before it ends; told wrong, the pass is not
    trusted and the arrived archive is read again from byte 0 by ISA-L or zlib."""
    used = _decoders_in_use(monkeypatch)
    dl = Download(tmp_path, archive, len(archive) + off)
    listing = _read(tmp_path, dl, gzip=decoders.RAPIDGZIP)
    assert [d.name for d in used] == [decoders.RAPIDGZIP, decoders.fallback_gzip()]
    _whole(listing, archive)


@HAS_RAPIDGZIP
def test_a_download_that_fails_ends_rapidgzips_pass_without_a_hang(archive, tmp_path):
    """Cut off half way while rapidgzip's threads wait for the rest: the pass ends at once
    with the download's own failure, not read again, and no thread of rapidgzip's is left."""
    before = _tasks()
    dl = Download(tmp_path, archive, len(archive), hold=len(archive) // 2 // PIECE * PIECE)
    reading, got = _reading(tmp_path, dl)
    assert dl.held.wait(30)
    time.sleep(0.5)  # rapidgzip's threads wait for bytes
    assert reading.is_alive()
    dl.fail.set()
    dl.go.set()
    reading.join(20)
    assert not reading.is_alive(), "the pass did not end when the download failed"
    listing = got["listing"]
    assert listing.problems and "connection lost" in listing.problems[-1].message
    assert listing.sha256 is None
    dl.thread.join(10)
    assert not _threads_left(before)


@HAS_RAPIDGZIP
def test_a_download_that_fails_at_its_end_is_said_and_not_read_again(archive, tmp_path,
                                                                     monkeypatch):
    """Every byte came, then the download failed (its checksum, say): rapidgzip's pass had
    decoded it all; its answer is the download's failure, and the archive is not read again."""
    used = _decoders_in_use(monkeypatch)
    dl = Download(tmp_path, archive, len(archive), hold=len(archive))
    reading, got = _reading(tmp_path, dl)
    assert dl.held.wait(30)
    dl.fail.set()
    dl.go.set()
    reading.join(20)
    assert not reading.is_alive()
    assert [d.name for d in used] == [decoders.RAPIDGZIP]
    assert "connection lost" in got["listing"].problems[-1].message
    assert got["listing"].sha256 is None


@HAS_RAPIDGZIP
def test_a_signal_while_the_wire_is_silent_ends_the_read_at_once(archive, tmp_path):
    """The download stalls; a signal's handler raises in this thread, which waits in Python
    while rapidgzip's threads wait for bytes: the read ends within a second or two and no
    thread of rapidgzip's is left."""
    class Stop(Exception):
        pass

    def handler(signum, frame):
        raise Stop()

    before = _tasks()
    dl = Download(tmp_path, archive, len(archive), hold=len(archive) // 2 // PIECE * PIECE)
    old = signal.signal(signal.SIGALRM, handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, 1.0)
        started = time.monotonic()
        with pytest.raises(Stop):
            _read(tmp_path, dl, gzip=decoders.RAPIDGZIP)
        assert time.monotonic() - started < 5
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        dl.fail.set()
        dl.go.set()
    assert dl.held.is_set()
    dl.thread.join(10)
    assert not _threads_left(before)


def test_without_a_size_announced_an_arriving_gzip_is_one_stream(archive, tmp_path,
                                                                monkeypatch):
    """No Content-Length and no manifest size: rapidgzip cannot be told where the file ends,
    so ISA-L or zlib reads it as one stream, whatever this machine would choose."""
    monkeypatch.setattr(decoders, "gzip_decoder", lambda *a, **k: decoders.RAPIDGZIP)
    used = _decoders_in_use(monkeypatch)
    dl = Download(tmp_path, archive, None)
    _whole(_read(tmp_path, dl), archive)
    assert [d.name for d in used] == [decoders.fallback_gzip()]


@HAS_RAPIDGZIP
def test_with_a_size_announced_an_arriving_gzip_goes_to_this_machines_decoder(
        archive, tmp_path, monkeypatch):
    monkeypatch.setattr(decoders, "gzip_decoder", lambda *a, **k: decoders.RAPIDGZIP)
    used = _decoders_in_use(monkeypatch)
    dl = Download(tmp_path, archive, len(archive))
    _whole(_read(tmp_path, dl), archive)
    assert [d.name for d in used] == [decoders.RAPIDGZIP]


@HAS_RAPIDGZIP
def test_a_download_that_starts_over_ends_rapidgzips_pass_for_a_whole_reread(
        archive, tmp_path, monkeypatch):
    """A second attempt writes from byte 0 again (a server that ignored Range) over bytes
    rapidgzip had read: the pass ends saying so, marks the download rewound (the install then
    reads the archive once whole), is not read again here, and leaves no thread behind."""
    before = _tasks()
    used = _decoders_in_use(monkeypatch)
    dl = Download(tmp_path, archive, len(archive), hold=len(archive) // 2 // PIECE * PIECE)
    reading, got = _reading(tmp_path, dl)
    assert dl.held.wait(30)
    time.sleep(0.5)
    with open(dl.part, "r+b") as f:  # the server ignored Range: a new attempt from byte 0
        dl.arriving.begin(dl.part, 0, dl.dest, f.fileno(), len(archive))
    reading.join(20)
    assert not reading.is_alive()
    assert dl.arriving.rewound
    assert [d.name for d in used] == [decoders.RAPIDGZIP]
    assert "started over" in got["listing"].problems[-1].message
    dl.fail.set()
    dl.go.set()
    dl.thread.join(10)
    assert not _threads_left(before)


@pytest.mark.parametrize("kept", [0, 5000])
def test_the_downloader_announces_the_whole_size_to_a_follower(archive, tmp_path, kept):
    """What rapidgzip is told the file's size from: the server's Content-Length, or for a
    resumed part Content-Range's total, before the first byte of the body is written."""
    from cudnn_setup.fetch.downloader import Downloader
    from httpserver import ArchiveServer

    announced = []

    class Watching(Arriving):
        def begin(self, part, start, dest, fd, total=None):
            announced.append((start, total))
            super().begin(part, start, dest, fd, total)

    from cudnn_setup.fetch.checksums import Expected

    # a part found on disk, vouched for by nothing: resumed only where a checksum judges it
    expected = Expected("sha256", hashlib.sha256(archive).hexdigest(), "test") if kept else None
    if kept:
        (tmp_path / "a.tar.gz.part").write_bytes(archive[:kept])
    with ArchiveServer() as s:
        s.files["/a.tar.gz"] = archive
        got = Downloader(tmp_path, retries=0).fetch(f"{s.base}/a.tar.gz", expected,
                                                    use_sidecar=False, arriving=Watching())
    assert got.path.read_bytes() == archive
    assert announced == [(kept, len(archive))]
