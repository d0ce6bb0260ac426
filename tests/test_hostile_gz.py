"""Hostile inputs and events on the .tar.gz path where rapidgzip reads the archive itself:
nothing staged before it gives up, a Ctrl-C at its very end. (A process limit on it:
tests/test_process_limit.py.)"""
import os
import shutil

import pytest

from cudnn_setup.archive import decoders

HAS_RAPIDGZIP = pytest.mark.skipif(decoders.importlib.util.find_spec("rapidgzip") is None,
                                   reason="rapidgzip is not installed")


@HAS_RAPIDGZIP
@pytest.mark.parametrize("damage", ["three-bytes", "first-block-flipped"])
def test_rapidgzip_failing_before_anything_is_staged_is_reread_not_an_os_error(
        damage, padded, cuda_root, home, monkeypatch, tmp_path):
    """rapidgzip gives up before the first member is staged: the staging directory was never
    made, and emptying it for the ISA-L reread must not fail (it said "install failed: No such
    file or directory: .../staging", exit 5). ISA-L's verdict stands: a damaged archive,
    exit 3."""
    from conftest import run_json, tree_state

    data = padded["gz"].read_bytes()
    if damage == "three-bytes":
        data = data[:3]
    else:  # the deflate stream's first bytes, right after the gzip header and the name
        start = data.index(b"\x00", 10) + 1
        data = data[:start] + bytes(b ^ 0xFF for b in data[start:start + 64]) + \
            data[start + 64:]
    victim = tmp_path / "in" / padded["gz"].name
    victim.parent.mkdir()
    victim.write_bytes(data)
    monkeypatch.setattr(decoders, "gzip_decoder", lambda *a, **k: decoders.RAPIDGZIP)
    root = cuda_root("12.4")
    before = tree_state(root)
    done, out = run_json(["install", victim, "--cuda-root", root, "--no-theanorc",
                          "--no-verify"], home)
    assert done.returncode == 3 and out["error"]["code"] == "archive-rejected", out["error"]
    assert tree_state(root) == before


_LATE_CTRL_C = """
import os, signal, sys, threading
from pathlib import Path
from cudnn_setup.archive import decoders, reader
path, staging = Path(sys.argv[1]), Path(sys.argv[2])
staging.mkdir()
finishing = []
finish = decoders.Decoder._finish_beside
def finish_beside(self, complete):
    finishing.append(complete)
    return finish(self, complete)
decoders.Decoder._finish_beside = finish_beside
readinto = decoders._Progress.readinto
def read_padding(self, buffer):
    if finishing == [True]:  # the tar is walked; the padding after its end is being drained
        finishing.append("signalled")
        os.kill(os.getpid(), signal.SIGINT)
    return readinto(self, buffer)
decoders._Progress.readinto = read_padding
def archive_fds():
    found = []
    for n in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{n}") == str(path):
                found.append(n)
        except OSError:
            pass
    return found
try:
    reader.read(path, staging, lambda m: True, gzip=decoders.RAPIDGZIP)
    print("not interrupted", finishing)
except KeyboardInterrupt:
    print("fds", archive_fds(), "threads", len(threading.enumerate()) - 1)
"""


@HAS_RAPIDGZIP
def test_ctrl_c_while_the_padding_is_drained_closes_the_archive_before_it_propagates(
        padded, tmp_path):
    """A real SIGINT once the tar is walked, while _finish_beside drains the padding: the
    KeyboardInterrupt skips the block whose `finally` closes the archive, so its descriptor
    stays open for as long as the exception (its traceback holds the Decoder) is handled,
    the rollback included. The ISA-L path closes it in the same `finally` as the stream."""
    import subprocess
    import sys

    victim = tmp_path / "in" / padded["gz"].name
    victim.parent.mkdir()
    shutil.copy(padded["gz"], victim)
    done = subprocess.run([sys.executable, "-c", _LATE_CTRL_C, str(victim), str(tmp_path / "s")],
                          env={**os.environ, "PYTHONPATH": os.getcwd()}, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["fds", "[]", "threads", "0"], done.stdout
