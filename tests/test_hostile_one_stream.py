"""Hostile and odd inputs for the one-stream read: rapidgzip's doubts, odd archive files, many
writer threads, a disk that fills, signals. Each outcome is the documented one: one JSON object,
the documented exit code, the root unchanged, no descriptor or child left behind, no hang.

This machine may have too few cores for rapidgzip or several writers to be chosen; the tests
ask for them by name.
"""
import gzip
import hashlib
import io
import os
import tarfile
from pathlib import Path

import pytest

from conftest import run_json, tree_state
from cudnn_setup.archive import decoders, reader, staging
from fixtures.generate import SPECS, compress, spec_entries, tar_bytes

NAME = "cudnn-linux-x86_64-9.3.0.99_cuda12-archive"
MB = decoders.CHUNK
HAS_RAPIDGZIP = pytest.mark.skipif(decoders.importlib.util.find_spec("rapidgzip") is None,
                                   reason="rapidgzip is not installed")


@pytest.fixture(scope="module")
def made(tmp_path_factory, compiler) -> dict:
    out = tmp_path_factory.mktemp("hostile")
    entries = spec_entries(SPECS[f"{NAME}.tar.xz"], compiler,
                           {"libcudnn_engines_precompiled": 5 * MB + 7, "libcudnn_adv": 2 * MB})
    raw = tar_bytes(entries)
    return {"raw": raw, "gz": compress(raw, ".tgz"), "dir": out,
            "files": {e.name: e.data for e in entries if e.type == tarfile.REGTYPE}}


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _tar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _read(path: Path, staging_dir: Path, gzip_decoder=decoders.RAPIDGZIP, **kw):
    staging_dir.mkdir()
    return reader.read(path, staging_dir, lambda m: True, gzip=gzip_decoder, **kw)


@HAS_RAPIDGZIP
@pytest.mark.parametrize("damage", ["trailer-cut", "no-trailer", "huge-isize"])
def test_rapidgzip_runtime_errors_are_settled_by_a_second_decoder(damage, made, tmp_path):
    """rapidgzip raises RuntimeError (not ValueError) for a gzip trailer cut short or one whose
    size field disagrees: that too is a doubt for ISA-L or zlib to settle, never a traceback."""
    data = made["gz"]
    data = {"trailer-cut": data[:-3], "no-trailer": data[:-8],
            "huge-isize": data[:-4] + (0xFFFFFFFF).to_bytes(4, "little")}[damage]
    path = tmp_path / f"{NAME}.tgz"
    path.write_bytes(data)
    before = _fds()
    by_rapidgzip = _read(path, tmp_path / "r")
    by_fallback = _read(path, tmp_path / "f", decoders.fallback_gzip())
    assert _fds() <= before
    assert [p.code for p in by_rapidgzip.problems] == ["corrupt"]
    assert [p.code for p in by_rapidgzip.problems] == [p.code for p in by_fallback.problems]
    assert by_rapidgzip.sha256 is None


@HAS_RAPIDGZIP
def test_install_of_a_cut_gzip_trailer_through_rapidgzip_is_refused(made, cuda_root, home,
                                                                    monkeypatch, tmp_path):
    monkeypatch.setattr(decoders, "gzip_decoder", lambda *a, **k: decoders.RAPIDGZIP)
    path = tmp_path / f"{NAME}.tgz"
    path.write_bytes(made["gz"][:-3])
    root = cuda_root("12.4")
    before = tree_state(root)
    done, out = run_json(["install", path, "--cuda-root", root, "--no-theanorc", "--no-verify"],
                         home)
    assert out["error"]["code"] == "archive-rejected", out
    assert done.returncode == out["error"]["exit_code"] == 3
    assert "Traceback" not in done.stderr
    assert tree_state(root) == before


def _slow_driver(tmp_path: Path, seconds: int) -> dict:
    """An nvidia-smi on PATH that answers nothing for `seconds`: the driver probe waits on it."""
    bin_dir = tmp_path / "slow-bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\nsleep {seconds}\n")
    smi.chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ.get('PATH', os.defpath)}"}


def test_a_refused_archive_does_not_wait_for_the_driver_probe(cuda_root, home, tmp_path):
    """The driver is asked while the archive is read; when the read fails, the answer is of no
    use, and the refusal comes at once, not when a slow driver answers."""
    import time

    path = tmp_path / f"{NAME}.tgz"
    path.write_bytes(b"not an archive " * 100)
    root = cuda_root("12.4")
    started = time.monotonic()
    done, out = run_json(["install", path, "--cuda-root", root, "--no-theanorc", "--no-verify"],
                         home, env_extra=_slow_driver(tmp_path, 25))
    took = time.monotonic() - started
    assert out["error"]["code"] == "archive-rejected", out
    assert took < 10, f"the refusal waited {took:.0f} s for the driver probe"


def test_sigterm_while_the_driver_probe_runs_is_answered_at_once(archives, cuda_root, home,
                                                                 tmp_path):
    """SIGTERM while the install waits for a slow driver probe (in a session of its own, so a
    Ctrl-C at the terminal does not reach it): `interrupted` within seconds, root unchanged."""
    import json
    import signal
    import subprocess
    import sys
    import time

    from conftest import clean_env

    root = cuda_root("12.4")
    before = tree_state(root)
    env = clean_env(home, **_slow_driver(tmp_path, 25))
    proc = subprocess.Popen([sys.executable, "-m", "cudnn_setup", "install",
                             str(archives[f"{NAME}.tar.xz"]), "--cuda-root", str(root),
                             "--no-theanorc", "--no-verify", "--json"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(3)  # the archive is read by now; the install waits for the probe
    proc.send_signal(signal.SIGTERM)
    started = time.monotonic()
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    took = time.monotonic() - started
    result = json.loads(out)
    assert result["error"]["code"] == "interrupted", result
    assert proc.returncode == 5
    assert "Traceback" not in err
    assert tree_state(root) == before
    assert took < 10, f"SIGTERM was answered after {took:.0f} s"


def test_the_same_archive_installed_twice_at_once(archives, cuda_root, home, tmp_path):
    """Two installs of one archive into one root at the same time: both end with one JSON
    object; one installs, the other finds it installed (or waits on the lock and says so);
    no staging directory is left behind."""
    import json
    import subprocess
    import sys

    from conftest import clean_env

    root = cuda_root("12.4")
    args = [sys.executable, "-m", "cudnn_setup", "install", str(archives[f"{NAME}.tar.xz"]),
            "--cuda-root", str(root), "--no-theanorc", "--no-verify", "--json"]
    procs = [subprocess.Popen(args, env=clean_env(home), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert "Traceback" not in err
        results.append((proc.returncode, json.loads(out)))
    codes = sorted(rc for rc, _ in results)
    assert codes[0] == 0, results
    assert codes[1] == 0 or results[codes.index(codes[1])][1]["error"]["code"] == "lock-held"
    assert sum(r["changed"] for _, r in results) == 1, results
    leftovers = [p for p in root.rglob("*") if "staging" in p.name or "cudnn-setup-" in p.name]
    assert not leftovers, leftovers


def _children() -> set[str]:
    found = set()
    for task in os.listdir("/proc/self/task"):
        try:
            found |= set(Path(f"/proc/self/task/{task}/children").read_text().split())
        except OSError:
            pass
    return found


@HAS_RAPIDGZIP
@pytest.mark.parametrize("failure", ["no-child", "no-threads"])
def test_rapidgzip_that_cannot_start_leaves_the_read_to_the_second_decoder(failure, made, tmp_path,
                                                                          monkeypatch):
    """The feeding child cannot be started (EAGAIN: a pids limit), or rapidgzip cannot start its
    threads (it raises RuntimeError): ISA-L or zlib reads the archive; no descriptor, no child
    is left behind, and it is not said to be the archive's fault."""
    import errno
    import rapidgzip

    if failure == "no-child":
        def popen(*args, **kwargs):
            raise OSError(errno.EAGAIN, "Resource temporarily unavailable")
        monkeypatch.setattr(decoders.subprocess, "Popen", popen)
    else:
        def no_threads(*args, **kwargs):
            raise RuntimeError("Resource temporarily unavailable")
        monkeypatch.setattr(rapidgzip, "open", no_threads)
    path = tmp_path / f"{NAME}.tgz"
    path.write_bytes(made["gz"])
    fds, children = _fds(), _children()
    listing = _read(path, tmp_path / "s")
    assert not listing.problems, listing.problems
    assert listing.sha256 == hashlib.sha256(made["gz"]).hexdigest()
    for m in listing.files():
        assert m.staged.read_bytes() == made["files"][m.path], m.path
    assert _fds() <= fds
    assert _children() <= children


def test_many_large_headers_are_not_all_kept_in_memory(tmp_path, home):
    """Forty 16 MiB headers of zeros (a 2.9 MB .tgz): only so much header text is kept for
    version parsing, so `inspect` stays under the 200 MB bound (each was kept: 760 MB)."""
    import zlib

    from test_hostile_headers import PEAK_RSS_LIMIT, _peak_rss

    path = tmp_path / "headers.tgz"
    packer = zlib.compressobj(1, zlib.DEFLATED, 31)  # 640 MiB of zeros: the fastest level
    with open(path, "wb") as f:
        for i in range(40):
            info = tarfile.TarInfo(f"cudnn/include/cudnn_{i}.h")
            info.size, info.mode = staging.MAX_HEADER_BYTES, 0o644
            f.write(packer.compress(info.tobuf(format=tarfile.GNU_FORMAT)))
            f.write(packer.compress(bytes(staging.MAX_HEADER_BYTES)))
        f.write(packer.compress(bytes(10240)) + packer.flush())
    [(code, peak, out)] = _peak_rss([path], home)
    assert code == 3, out
    assert peak < PEAK_RSS_LIMIT, f"peak RSS {peak >> 20} MiB"


@pytest.mark.parametrize("decoder", [decoders.fallback_gzip(),
                                     pytest.param(decoders.RAPIDGZIP, marks=HAS_RAPIDGZIP)])
def test_a_staged_file_that_cannot_be_finished_is_the_machines_fault(decoder, made, cuda_root,
                                                                    home, tmp_path, monkeypatch):
    """A staged file is closed and made read-only by whichever thread comes last; for an empty
    member that is the reading thread. A quota met there (NFS says EDQUOT at close) is the
    staging disk's fault, exit 5 `disk-full`, not an archive that cannot be read (exit 3)."""
    import errno

    first = tarfile.TarInfo(f"{NAME}/include/cudnn_empty_first.h")  # an empty header first
    first.mode = 0o644
    raw = first.tobuf(format=tarfile.GNU_FORMAT) + made["raw"]
    path = tmp_path / f"{NAME}.tgz"
    path.write_bytes(gzip.compress(raw, mtime=0))
    real = os.chmod

    def chmod(target, mode, *args, **kwargs):
        if str(target).endswith("cudnn_empty_first.h"):
            raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT), str(target))
        return real(target, mode, *args, **kwargs)

    monkeypatch.setattr(staging.os, "chmod", chmod)
    monkeypatch.setattr(decoders, "gzip_decoder", lambda *a, **k: decoder)
    root = cuda_root("12.4")
    before = tree_state(root)
    done, out = run_json(["install", path, "--cuda-root", root, "--no-theanorc", "--no-verify"],
                         home)
    assert (out["error"]["code"], done.returncode) == ("disk-full", 5), out
    assert tree_state(root) == before


def test_a_member_claiming_more_than_any_cudnn_file_stops_the_read(tmp_path):
    """Skipping a refused member means decoding all it claims: a bomb stops the pass instead
    (before, a 4 MB .tgz claiming 100 GiB kept the decoder busy for minutes)."""
    import gzip as gz
    import tarfile as tf

    from cudnn_setup.archive import reader as rd

    info = tf.TarInfo("cuda/lib64/libcudnn.so.9.1.0")
    info.size = 5 << 30  # over Limits.member_bytes (4 GiB); the data that follows is short
    raw = info.tobuf(tf.GNU_FORMAT) + bytes(1 << 20)
    path = tmp_path / "cudnn-linux-x86_64-9.1.0.70_cuda12-archive.tar.gz"
    path.write_bytes(gz.compress(raw, mtime=0))
    (tmp_path / "s").mkdir()
    listing = rd.read(path, tmp_path / "s", lambda m: True)
    assert [p.code for p in listing.problems] == ["too-large"], listing.problems
