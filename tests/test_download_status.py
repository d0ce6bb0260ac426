"""What a log hears while a download looks for the checksum published beside the archive."""
import threading

from conftest import run_json
from httpserver import ArchiveServer

V7 = "cudnn-10.0-linux-x64-v7.4.2.24.tgz"


def test_a_checksum_lookup_that_waits_is_said_and_beaten_in_a_log(archives, home, tmp_path):
    """A server that holds the `.sha256` request (up to the command's 60 s): the lookup is a
    step with its line and its beat, not a silence before "downloading"."""
    with ArchiveServer() as server:
        server.files[f"/m/{V7}"] = archives[V7].read_bytes()
        server.hang.add(f"/m/{V7}.sha256")
        timer = threading.Timer(6, server.released.set)
        timer.start()
        try:
            done, out = run_json(["download", f"{server.base}/m/{V7}", "--cache-dir",
                                  tmp_path / "cache"], home)
        finally:
            timer.cancel()
            server.released.set()
    assert done.returncode == 0 and out["ok"], done.stderr
    lines = done.stderr.splitlines()
    before = lines[:next(i for i, line in enumerate(lines) if "downloading" in line)]
    assert any(f"{V7}.sha256" in line for line in before), done.stderr
    assert any("still going after 5 s" in line for line in before), done.stderr
