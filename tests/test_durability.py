"""Durable commit, watched with strace: every staged file and its directory is fsynced before
the manifest (the commit point) is renamed into place, so a power cut after "installed" cannot
leave an empty library."""
import json
import re
import shutil
import subprocess
import sys

import pytest

from conftest import clean_env
from fixtures.generate import GENERATION_SAMPLES

V9 = GENERATION_SAMPLES["9.x"]
STRACE = shutil.which("strace")
FD_PATH = r"\d+<(?P<path>[^>]*)>"
CREATE = re.compile(r"openat\(.*O_CREAT.*\) = " + FD_PATH)
FSYNC = re.compile(r"\bfsync\(" + FD_PATH)
# renameat(2) relative to directory descriptors: strace -y shows their paths
RENAME = re.compile(r'\brename(?:at2?)?\((?:(?:AT_FDCWD|\d+<(?P<srcdir>[^>]*)>), )?"(?P<src>[^"]*)", '
                    r'(?:(?:AT_FDCWD|\d+<(?P<dstdir>[^>]*)>), )?"(?P<dst>[^"]*)"')


def _renamed(m) -> tuple[str, str]:
    """(source, destination) of a rename line, as full paths."""
    def full(directory, name):
        return name if directory is None or name.startswith("/") else f"{directory}/{name}"
    return full(m["srcdir"], m["src"]), full(m["dstdir"], m["dst"])


def _strace_works() -> bool:
    if STRACE is None:
        return False
    done = subprocess.run([STRACE, "-f", "-qq", "-e", "trace=none", "true"], capture_output=True)
    return done.returncode == 0


def _joined(lines):
    """strace -f splits a call that another thread interrupts into "<unfinished ...>" and
    "<... call resumed>" lines: put each call back on one line."""
    pending = {}
    for line in lines:
        pid, _, rest = line.partition(" ")
        rest = rest.lstrip()  # strace pads the pid column: "5415  fsync(…"
        if rest.endswith("<unfinished ...>"):
            pending[pid] = rest[: -len("<unfinished ...>")]
            continue
        m = re.match(r"<\.\.\. \w+ resumed>(.*)", rest)
        if m and pid in pending:
            rest = pending.pop(pid) + m.group(1)
        yield f"{pid} {rest}"


@pytest.mark.skipif(not _strace_works(), reason="strace is missing or may not ptrace here")
def test_every_staged_file_is_fsynced_before_the_manifest_rename(archives, cuda_root, home,
                                                                  tmp_path):
    root = cuda_root("12.4")
    log = tmp_path / "strace.log"
    cmd = [STRACE, "-f", "-qq", "-y", "-o", str(log), "-e",
           "trace=openat,fsync,rename,renameat,renameat2", sys.executable, "-m", "cudnn_setup",
           "install", str(archives[V9]), "--cuda-root", str(root), "--no-theanorc", "--no-verify"]
    done = subprocess.run(cmd, env=clean_env(home), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    staged, synced, commit = [], set(), None
    for number, line in enumerate(_joined(log.read_text().splitlines())):
        # Staged files are all created before the commit, but strace may print a reading
        # thread's open after another thread's later calls: they are counted from every line.
        m = CREATE.search(line)
        if m and "/staging/" in m["path"]:
            staged.append(m["path"])
        m = FSYNC.search(line)
        if m and commit is None:  # fsync and the commit's rename run on one thread, in order
            synced.add(m["path"])
        m = RENAME.search(line)
        if m and m["dst"] == str(root / ".cudnn-setup" / "manifest.json"):
            commit = number
    assert commit is not None, "the manifest was never renamed into place"
    assert len(staged) >= 25  # 9.x: 8 libraries, 8 static libraries, headers (a few opens may
    # be lost when strace interleaves threads: the count that matters is the fsyncs, below)
    assert [p for p in staged if p not in synced] == [], "staged but not fsynced before the commit"
    manifest = json.loads((root / ".cudnn-setup" / "manifest.json").read_text())
    files = [f for f in manifest["files"] if f["type"] == "file"]
    synced_staged = {p for p in synced if "/staging/" in p and p not in
                     {q.rsplit("/", 1)[0] for q in synced}}
    assert len(files) >= 30 and len(synced_staged) >= len(files), (len(files), len(synced_staged))
    staging_dirs = {p.rsplit("/", 1)[0] for p in staged}
    assert staging_dirs <= synced, "staging directories not fsynced"
    assert {str(root / "include"), str(root / "lib64")} <= synced


@pytest.mark.skipif(not _strace_works(), reason="strace is missing or may not ptrace here")
def test_a_mirrors_archives_are_fsynced_before_their_rename_and_the_manifest(tmp_path, home,
                                                                           compiler):
    """A mirror's manifest vouches for its archives' sha256: each archive is on disk whole
    (fsynced under its temporary name) before it takes its final name, and before the
    manifest that names it is written."""
    from fixtures.mirror import build_mirror

    source = build_mirror(tmp_path / "nvidia-copy", cc=compiler)
    out = tmp_path / "fleet"
    log = tmp_path / "strace.log"
    cmd = [STRACE, "-f", "-qq", "-y", "-o", str(log), "-e",
           "trace=openat,fsync,rename,renameat,renameat2", sys.executable, "-m", "cudnn_setup",
           "mirror", str(out), "9.1", "--cuda", "12", "--cuda", "13", "--from", source.url]
    done = subprocess.run(cmd, env=clean_env(home), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    synced: set[str] = set()
    placed, manifest_at = {}, None
    for number, line in enumerate(_joined(log.read_text().splitlines())):
        m = FSYNC.search(line)
        if m:
            synced.add(m["path"])
        m = RENAME.search(line)
        src, dst = _renamed(m) if m else (None, "")
        if m and dst.startswith(str(out / "cudnn")):
            assert src in synced, f"{src} renamed to {dst} before an fsync"
            placed[dst] = number
        if m and dst == str(out / "redistrib_9.1.7.json"):
            manifest_at = number
            assert {str(out / "cudnn" / "linux-x86_64")} <= synced
    assert len(placed) == 2, placed  # the CUDA 12 and 13 builds for this machine's platform
    assert manifest_at is not None and all(n < manifest_at for n in placed.values())


def test_staged_files_are_fsynced_side_by_side_then_their_directories(tmp_path, monkeypatch):
    """make_durable issues the files' fsyncs together (the filesystem commits them in a few
    journal commits, not one each), every one of them, before any directory's."""
    import threading
    from pathlib import Path

    from cudnn_setup import durable

    top = tmp_path / "tx"
    files = []
    for d in ("include", "lib"):
        (top / d).mkdir(parents=True)
        for i in range(6):
            f = top / d / f"f{i}"
            f.write_bytes(b"x" * 5000)
            files.append(f)
    (top / "lib" / "link").symlink_to("f0")
    meet = threading.Barrier(2, timeout=5)  # two fsyncs in flight at once, or it fails
    done: list[Path] = []
    order: list[str] = []
    lock = threading.Lock()
    real_file, real_sync_dirs = durable.fsync_file, durable.sync_dirs

    calls = iter(range(len(files)))

    def fsync_file(path, dir_fd=None):
        with lock:
            first_two = next(calls) < 2
        if first_two:
            meet.wait()
        real_file(path, dir_fd)
        with lock:
            done.append(Path(path))
            order.append("file")

    def sync_dirs(dirs):
        order.append("dirs")
        real_sync_dirs(dirs)

    monkeypatch.setattr(durable, "fsync_file", fsync_file)
    monkeypatch.setattr(durable, "sync_dirs", sync_dirs)
    durable.make_durable(files + [top / "lib" / "link"], top)
    assert sorted(done) == sorted(files)
    assert order == ["file"] * len(files) + ["dirs"]
