"""install VERSION with the download overlapped: members staged while the archive still arrives,
from a real HTTP server on 127.0.0.1 that pauses mid-archive, serves wrong bytes, drops the
connection, ignores Range, or is killed; and the tool itself SIGKILLed mid-overlap. Nothing
outside the state dir changes before the whole archive matched its checksum."""
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import clean_env, run_json, tree_state
from cudnn_setup.fetch.arriving import ArrivalFailed, Arriving
from fixtures.generate import SUB9
from fixtures.mirror import STANDARD, build_mirror
from httpserver import ArchiveServer

X86_12 = STANDARD[0].name  # 9.1.7.99 for CUDA 12
X86_13 = STANDARD[1].name  # 9.1.7.99 for CUDA 13
NEWEST_13 = STANDARD[3].name  # 9.4.2.99, CUDA 13
ARCHIVE_12 = f"/redist/cudnn/linux-x86_64/{X86_12}"
ARCHIVE_13 = f"/redist/cudnn/linux-x86_64/{NEWEST_13}"


@pytest.fixture(scope="module")
def mirror(tmp_path_factory, compiler):
    """The standard mirror, its last library padded to 256 KiB of incompressible bytes: the
    members before it are whole well before the archive ends (xz reads its input 8 KiB at a
    time, so a few KiB held back would hold back its output too)."""
    return build_mirror(tmp_path_factory.mktemp("mirror"), cc=compiler,
                        pad={f"libcudnn_{SUB9[-1]}": 256 << 10})


def _serve(mirror, s: ArchiveServer) -> str:
    for path in mirror.root.rglob("*"):
        if path.is_file():
            s.files[f"/redist/{path.relative_to(mirror.root)}"] = path.read_bytes()
    s.files["/redist/"] = "".join(f'<a href="redistrib_{label}.json">x</a>\n'
                                  for label in mirror.manifests).encode()
    return f"{s.base}/redist/"


def _args(version, root, url):
    return ["install", version, "--cuda-root", str(root), "--no-theanorc", "--no-verify",
            "--mirror", url, "--json"]


def _start(home, *args) -> subprocess.Popen:
    env = clean_env(home, XDG_CACHE_HOME=str(home / "cache"))
    return subprocess.Popen([sys.executable, "-m", "cudnn_setup", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _fd(path: Path) -> int:
    """A descriptor of `path` as the downloader holds its part: open for writing and reading."""
    return os.open(path, os.O_RDWR)


def _as(mirror, suffix: str) -> tuple[str, bytes]:
    """The standard 9.1.7 archive's tar as a .tar.gz, a multi-block .tar.xz or a plain .tar:
    its name and bytes."""
    import gzip
    import lzma
    tar = lzma.decompress(mirror.archives[X86_12].read_bytes())
    if suffix == ".tar.gz":
        data = gzip.compress(tar, compresslevel=1, mtime=0)
    elif suffix == ".tar.xz":
        data = subprocess.run(["xz", "-T2", "--block-size=65536", "-c"], input=tar,
                              capture_output=True, check=True).stdout
    else:
        data = tar
    return X86_12.replace(".tar.xz", suffix), data


def _install_held(home, s: ArchiveServer, name: str, data: bytes, root: Path) -> subprocess.Popen:
    """`install URL` of `data`, served by `s` up to 90% and then held."""
    s.files[f"/{name}"] = data
    _held(s, f"/{name}", 0.9)
    return _start(home, "install", f"{s.base}/{name}", "--sha256",
                  hashlib.sha256(data).hexdigest(), "--cuda-root", str(root),
                  "--no-theanorc", "--no-verify", "--json")


def _terminated_once_staged(proc: subprocess.Popen, s: ArchiveServer, root: Path,
                            settle: float = 0.0, sig: int = signal.SIGTERM
                            ) -> tuple[str, str, float]:
    """`sig` to `proc` once members are staged (and `settle` seconds more): its stdout,
    stderr and how long it took to end; the server released whatever happened."""
    try:
        assert _wait_for(lambda: _staged(root)), "nothing was staged before the signal"
        time.sleep(settle)
        proc.send_signal(sig)
        started = time.monotonic()
        stdout, stderr = proc.communicate(timeout=60)
        return stdout, stderr, time.monotonic() - started
    finally:
        proc.kill()
        s.released.set()


def _staged(root: Path) -> list[Path]:
    """The files staged so far in the root's state dir (a transaction's staging)."""
    state = root / ".cudnn-setup"
    return [p for p in state.rglob("*") if p.is_file() and "staging" in p.parts] \
        if state.exists() else []


def _outside_state(root: Path) -> dict:
    """The root but its state dir, which is not read: the command under test writes and
    removes its staging there meanwhile."""
    return tree_state(root, leave_out=".cudnn-setup")


def _wait_for(what, seconds=60.0):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        got = what()
        if got:
            return got
        time.sleep(0.02)
    return what()


def _held(s: ArchiveServer, path: str, fraction: float) -> int:
    """The server sends `fraction` of the archive at `path`, then holds the connection until
    released (then closes it: the client resumes with Range)."""
    at = int(len(s.files[path]) * fraction)
    s.hold_after[path] = at
    s.holds_left = 1
    return at


def test_members_are_staged_while_the_archive_is_still_arriving(mirror, cuda_root, home):
    root = cuda_root(version="12.4", layout="lib")
    before = _outside_state(root)
    with ArchiveServer() as s:
        url = _serve(mirror, s)
        at = _held(s, ARCHIVE_12, 0.9)
        proc = _start(home, *_args("9.1", root, url))
        try:
            staged = _wait_for(lambda: _staged(root))
            # the server has sent 90% and holds the rest: members are staged already, and
            # nothing outside the state dir has changed
            assert staged, "nothing was staged while the download was held"
            assert proc.poll() is None
            assert _outside_state(root) == before
            part = home / "cache" / "cudnn-setup" / (X86_12 + ".part")
            assert part.stat().st_size == at
        finally:
            s.released.set()
        stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    out = json.loads(stdout)
    assert out["ok"] and out["cudnn_version"] == "9.1.7"
    # the held connection was closed: the rest came with a Range request, the bytes the
    # first attempt wrote were kept and read once
    gets = s.file_requests(".tar.xz")
    assert [g["headers"].get("Range") for g in gets] == [None, f"bytes={at}-"]
    assert out["download"]["sha256"] == mirror.sha256(X86_12)
    assert out["provenance"]["sha256"] == mirror.sha256(X86_12)
    assert (root / "lib" / "libcudnn.so.9.1.7").is_file()


def test_wrong_bytes_leave_the_root_untouched_though_members_were_staged(
        mirror, cuda_root, home):
    root = cuda_root(version="12.4", layout="lib")
    before = tree_state(root)
    with ArchiveServer() as s:
        url = _serve(mirror, s)
        data = bytearray(s.files[ARCHIVE_12])
        data[-40] ^= 0xFF  # in the xz index, after every member: the tar decodes whole
        s.files[ARCHIVE_12] = bytes(data)
        _held(s, ARCHIVE_12, 0.9)
        proc = _start(home, *_args("9.1", root, url))
        try:
            assert _wait_for(lambda: _staged(root)), "nothing was staged before the end"
        finally:
            s.released.set()
        stdout, stderr = proc.communicate(timeout=300)
    out = json.loads(stdout)
    assert proc.returncode == 3, stderr
    assert out["error"]["code"] == "checksum-mismatch", out["error"]
    assert tree_state(root) == before  # not even the state dir is left
    cache = home / "cache" / "cudnn-setup"
    assert not [p for p in cache.iterdir() if p.name.startswith(X86_12)]


def test_a_dropped_connection_resumes_and_the_install_completes(mirror, cuda_root, home):
    root = cuda_root(version="12.4", layout="lib")
    with ArchiveServer() as s:
        url = _serve(mirror, s)
        # every body is cut after 100,000 bytes (the index and manifests are shorter): the
        # archive arrives in three attempts
        s.drop_after, s.drops_left = 100_000, 10
        done, out = run_json(_args("9.1", root, url)[:-1], home,
                             {"XDG_CACHE_HOME": str(home / "cache")}, process=True)
    assert done.returncode == 0, done.stderr
    ranges = [g["headers"].get("Range") for g in s.file_requests(".tar.xz")]
    assert ranges == [None, "bytes=100000-", "bytes=200000-"]
    assert out["download"]["resumed_from"] == 200_000  # where the last attempt began
    assert out["download"]["sha256"] == mirror.sha256(X86_12)
    assert (root / "lib" / "libcudnn.so.9.1.7").is_file()


def test_a_server_that_ignores_range_after_a_drop_is_read_again_whole(
        mirror, cuda_root, home):
    """Bytes already decoded would be written again by the second attempt: the overlapped
    staging is discarded and the archive read once complete, as without overlap."""
    root = cuda_root(version="12.4", layout="lib")
    with ArchiveServer() as s:
        url = _serve(mirror, s)
        at = _held(s, ARCHIVE_12, 0.9)
        s.ignore_range = True
        proc = _start(home, *_args("9.1", root, url))
        try:
            assert _wait_for(lambda: _staged(root))
        finally:
            s.released.set()
        stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    out = json.loads(stdout)
    assert [g["headers"].get("Range") for g in s.file_requests(".tar.xz")] == [
        None, f"bytes={at}-"]
    assert out["download"]["resumed_from"] == 0  # the server sent it all again
    assert out["cudnn_version"] == "9.1.7"


def test_a_killed_server_fails_the_download_and_changes_nothing(mirror, cuda_root, home):
    root = cuda_root(version="12.4", layout="lib")
    before = tree_state(root)
    s = ArchiveServer()
    s.__enter__()
    url = _serve(mirror, s)
    _held(s, ARCHIVE_12, 0.9)
    proc = _start(home, *_args("9.1", root, url), "--cache-dir", str(home / "c2"))
    try:
        assert _wait_for(lambda: _staged(root))
    finally:
        s.__exit__(None, None, None)  # shut down, its port closed: the retries are refused
    stdout, stderr = proc.communicate(timeout=300)
    out = json.loads(stdout)
    assert proc.returncode == 6, stderr
    assert out["error"]["code"] in ("download-failed", "connection-refused"), out["error"]
    assert tree_state(root) == before
    # the part is kept for the next run to resume
    assert (home / "c2" / (X86_12 + ".part")).is_file()


def test_sigkill_mid_overlap_leaves_the_old_install_and_the_next_run_completes(
        mirror, cuda_root, home):
    root = cuda_root(version="13.0", layout="lib")
    with ArchiveServer() as s:
        url = _serve(mirror, s)
        done, out = run_json(_args("9.1", root, url)[:-1], home,
                             {"XDG_CACHE_HOME": str(home / "cache")}, process=True)
        assert done.returncode == 0 and out["cudnn_version"] == "9.1.7", done.stderr
        old = _outside_state(root)
        _held(s, ARCHIVE_13, 0.9)
        proc = _start(home, *_args("9.4", root, url))
        _terminated_once_staged(proc, s, root, sig=signal.SIGKILL)
        assert _outside_state(root) == old  # old, not a mixture
        done, out = run_json(_args("9.4", root, url)[:-1], home,
                             {"XDG_CACHE_HOME": str(home / "cache")}, process=True)
    assert done.returncode == 0, done.stderr
    assert out["cudnn_version"] == "9.4.2"
    assert (root / "lib" / "libcudnn.so.9.4.2").is_file()
    assert not (root / "lib" / "libcudnn.so.9.1.7").exists()


# --- the arriving file itself -------------------------------------------------------------------

def test_a_follower_reads_the_kept_prefix_at_once_and_waits_for_the_rest(tmp_path):
    part = tmp_path / "a.tar.part"
    part.write_bytes(b"kept" * 10)
    arriving = Arriving()
    arriving.begin(part, 40, tmp_path / "a.tar", _fd(part))
    follower = arriving.follow()
    assert follower.peek(8) == b"keptkept"
    buf = bytearray(100)
    assert follower.readinto(buf) == 40  # the resumed prefix, without waiting

    def write_rest():
        time.sleep(0.2)
        with open(part, "ab") as f:
            f.write(b"new!")
        arriving.wrote(44)
        time.sleep(0.2)
        os.replace(part, tmp_path / "a.tar")
        arriving.finish(tmp_path / "a.tar", hashlib.sha256(b"kept" * 10 + b"new!").hexdigest(),
                        44)

    t = threading.Thread(target=write_rest)
    t.start()
    assert follower.readinto(buf) == 4 and bytes(buf[:4]) == b"new!"
    assert follower.readinto(buf) == 0  # the end: the download finished well
    t.join()
    assert follower.sha256 == hashlib.sha256(b"kept" * 10 + b"new!").hexdigest()


def test_a_follower_raises_when_the_download_fails_or_starts_over(tmp_path):
    part = tmp_path / "a.tar.part"
    part.write_bytes(b"x" * 10)
    arriving = Arriving()
    arriving.begin(part, 10, tmp_path / "a.tar", _fd(part))
    follower = arriving.follow()
    assert follower.readinto(bytearray(4)) == 4
    arriving.begin(part, 0, tmp_path / "a.tar", _fd(part))  # the server ignored Range
    with pytest.raises(ArrivalFailed, match="started over"):
        follower.readinto(bytearray(4))
    assert arriving.rewound

    arriving = Arriving()
    arriving.begin(part, 10, tmp_path / "a.tar", _fd(part))
    follower = arriving.follow()
    arriving.fail(RuntimeError("connection lost"))
    with pytest.raises(ArrivalFailed, match="connection lost"):
        follower.readinto(bytearray(4))


def test_a_url_installed_as_it_arrived_is_known_again_without_reading_it(
        mirror, cuda_root, home):
    """The manifest records the file the install read as it grew, once it was whole: the same
    URL again is answered from it."""
    root = cuda_root(version="12.4", layout="lib")
    with ArchiveServer() as s:
        _serve(mirror, s)
        s.throttle[ARCHIVE_12] = 1.0  # a second on the wire: the install reads it as it comes
        args = ["install", f"{s.base}{ARCHIVE_12}", "--sha256", mirror.sha256(X86_12),
                "--cuda-root", str(root), "--no-theanorc", "--no-verify"]
        env = {"XDG_CACHE_HOME": str(home / "cache")}
        done, out = run_json(args, home, env, process=True)
        assert done.returncode == 0 and out["changed"], done.stderr
        assert done.stderr.count("reading, checking") == 1  # one pass, as it arrived
        done, out = run_json(args, home, env, process=True)
    assert done.returncode == 0 and not out["changed"], done.stderr
    assert any("the archive was not read again: the file it was installed from, unchanged" in n
               for n in out["install"]["notes"]), out["install"]["notes"]


def test_an_arriving_xz_goes_to_the_decoder_its_first_block_allows():
    """xz decodes in parallel only blocks that say their sizes (its own multi-threaded
    encoder's); an archive still arriving has no index yet to count blocks in, so its first
    block header decides: one without sizes is decoded by liblzma in this process."""
    import lzma
    import shutil as sh

    from cudnn_setup.archive import decoders, liblzma

    xz = sh.which("xz")
    if xz is None or not decoders._xz_decodes_in_parallel(xz) or liblzma.load() is None:
        pytest.skip("needs xz 5.4 or later and liblzma")
    single = lzma.compress(b"x" * 100_000)
    multi = subprocess.run([xz, "-T2", "--block-size=20000", "-c"], input=b"y" * 100_000,
                           capture_output=True, check=True).stdout
    assert not decoders.first_block_sized(single[:decoders.XZ_HEAD])
    assert decoders.first_block_sized(multi[:decoders.XZ_HEAD])
    assert decoders.xz_decoder(xz, None, {}, single[:decoders.XZ_HEAD]) == decoders.LIBLZMA
    assert decoders.xz_decoder(xz, None, {}, multi[:decoders.XZ_HEAD]) == decoders.XZ_PARALLEL


@pytest.mark.parametrize("suffix", [".tar.gz", ".tar"])
def test_a_url_of_a_gzip_or_plain_tar_is_staged_as_it_arrives(mirror, cuda_root, home, suffix):
    """The other tar decoders read the arriving archive too: ISA-L (or zlib) on a thread of its
    own, and a plain tar straight from the follower."""
    name, data = _as(mirror, suffix)
    root = cuda_root(version="12.4", layout="lib")
    before = _outside_state(root)
    with ArchiveServer() as s:
        proc = _install_held(home, s, name, data, root)
        try:
            assert _wait_for(lambda: _staged(root)), "nothing was staged before the end"
            assert proc.poll() is None and _outside_state(root) == before
        finally:
            s.released.set()
        stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    out = json.loads(stdout)
    assert out["cudnn_version"] == "9.1.7" and out["provenance"]["source"] == "url"
    assert out["download"]["resumed_from"] == int(len(data) * 0.9)


def test_sigterm_mid_overlap_is_answered_at_once_and_changes_nothing(mirror, cuda_root, home):
    """SIGTERM while the install waits for bytes that do not come: `interrupted` (exit 5)
    within seconds, the download stopped, the root as it was."""
    root = cuda_root(version="12.4", layout="lib")
    before = tree_state(root)
    with ArchiveServer() as s:
        url = _serve(mirror, s)
        _held(s, ARCHIVE_12, 0.9)
        _interrupted_at_once(_start(home, *_args("9.1", root, url)), s, root, before)


def _interrupted_at_once(proc: subprocess.Popen, s: ArchiveServer, root: Path,
                         before: dict) -> None:
    """SIGTERM once members are staged is answered `interrupted` (exit 5) within seconds, the
    root's tree as it was `before`."""
    stdout, stderr, took = _terminated_once_staged(proc, s, root)
    out = json.loads(stdout)
    assert proc.returncode == 5 and out["error"]["code"] == "interrupted", out["error"]
    assert "Traceback" not in stderr
    assert took < 10, f"SIGTERM was answered after {took:.0f} s"
    assert tree_state(root) == before


def test_the_bytes_installed_are_the_bytes_hashed_whatever_the_cache_path_holds_later(
        mirror, cuda_root, home, tmp_path):
    """The install waits for the root's lock while the download completes and is renamed into
    the cache; another archive of the same size then takes its place there. The follower reads
    the download's own file, so what is installed is what matched the checksum."""
    import fcntl
    root = cuda_root(version="12.4", layout="lib")
    state = root / ".cudnn-setup"
    state.mkdir(mode=0o755)
    data = mirror.archives[X86_12].read_bytes()
    other = [p for p in mirror.archives.values() if p.name != X86_12][0].read_bytes()
    other = (other + bytes(len(data)))[:len(data)]  # same size, other bytes
    lock = os.open(state, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(lock, fcntl.LOCK_EX)  # another install holds the root
    try:
        with ArchiveServer() as s:
            s.files[f"/{X86_12}"] = data
            proc = _start(home, "install", f"{s.base}/{X86_12}", "--sha256",
                          hashlib.sha256(data).hexdigest(), "--cuda-root", str(root),
                          "--no-theanorc", "--no-verify", "--json")
            cached = home / "cache" / "cudnn-setup" / X86_12
            assert _wait_for(cached.exists)
            swap = cached.with_name("swap")
            swap.write_bytes(other)
            os.replace(swap, cached)
            fcntl.flock(lock, fcntl.LOCK_UN)
            stdout, stderr = proc.communicate(timeout=120)
    finally:
        os.close(lock)
    out = json.loads(stdout)
    assert proc.returncode == 0, stderr
    assert out["cudnn_version"] == "9.1.7", out["cudnn_version"]
    assert out["provenance"]["sha256"] == hashlib.sha256(data).hexdigest()


def test_an_archive_rejected_while_arriving_is_judged_by_its_checksum_first(
        mirror, cuda_root, home):
    """A server that first sends other bytes: the reader rejects them before the download
    ends; the answer is the checksum's (its part removed), and the next run succeeds."""
    root = cuda_root(version="12.4", layout="lib")
    data = mirror.archives[X86_12].read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    args = ["install", "URL", "--sha256", sha, "--cuda-root", str(root), "--no-theanorc",
            "--no-verify"]
    env = {"XDG_CACHE_HOME": str(home / "cache")}
    with ArchiveServer() as s:
        url = f"{s.base}/{X86_12}"
        args[1] = url
        s.files[f"/{X86_12}"] = b"<html>" + os.urandom(20000) + b"</html>"
        s.throttle[f"/{X86_12}"] = 1.0  # the reader judges the first bytes before the end
        done, out = run_json(args, home, env)
        assert done.returncode == 3 and out["error"]["code"] == "checksum-mismatch", out["error"]
        assert not list((home / "cache").rglob("*.part"))
        s.files[f"/{X86_12}"] = data
        s.throttle.pop(f"/{X86_12}")
        s.requests.clear()
        done, out = run_json(args, home, env)
        assert done.returncode == 0, out["error"]
        assert all(r["headers"].get("Range") is None for r in s.requests)


@pytest.mark.parametrize("suffix", [".tar.gz", ".tar.xz"])
def test_sigterm_while_the_wire_is_silent_is_answered_whatever_decodes(
        mirror, cuda_root, home, suffix):
    """A .tar.gz (read ahead on a thread) and a multi-block .tar.xz (fed to xz by a thread):
    the reader's threads wait for bytes that do not come; SIGTERM still ends the install."""
    name, data = _as(mirror, suffix)
    root = cuda_root(version="12.4", layout="lib")
    before = tree_state(root)
    with ArchiveServer() as s:
        proc = _install_held(home, s, name, data, root)
        stdout, stderr, took = _terminated_once_staged(proc, s, root, settle=0.5)
    assert proc.returncode == 5, stderr
    assert took < 10, f"SIGTERM was answered after {took:.0f} s"
    assert tree_state(root) == before
