"""Downloads against a real HTTP server on 127.0.0.1: resume, checksums, errors, cache."""
import hashlib
import json

import pytest

from conftest import run_json
from cudnn_setup.fetch.checksums import Expected
from cudnn_setup.fetch.download import Downloader
from cudnn_setup.errors import ArchiveRejected, DownloadFailed
from httpserver import ArchiveServer

V7 = "cudnn-10.0-linux-x64-v7.4.2.24.tgz"


@pytest.fixture
def server(archives):
    with ArchiveServer() as s:
        s.files[f"/mirror/{V7}"] = archives[V7].read_bytes()
        yield s


def _sha(data):
    return hashlib.sha256(data).hexdigest()


def test_full_download_then_cache_hit_without_request(server, tmp_path):
    url = f"{server.base}/mirror/{V7}"
    data = server.files[f"/mirror/{V7}"]
    d = Downloader(tmp_path, retries=0)
    got = d.fetch(url, Expected("sha256", _sha(data), "test"))
    assert got.path.read_bytes() == data and not got.from_cache
    count = len(server.requests)
    again = Downloader(tmp_path).fetch(url, Expected("sha256", _sha(data), "test"))
    assert again.from_cache and len(server.requests) == count


def test_dropped_connection_is_resumed_with_range(server, tmp_path):
    data = server.files[f"/mirror/{V7}"]
    server.drop_after, server.drops_left = 1000, 1
    got = Downloader(tmp_path, backoff=0.01).fetch(f"{server.base}/mirror/{V7}")
    assert got.path.read_bytes() == data
    ranges = [r["headers"].get("Range") for r in server.requests if r["path"].endswith(".tgz")]
    assert ranges == [None, "bytes=1000-"]


def test_interrupted_run_resumes_next_time(server, tmp_path):
    data = server.files[f"/mirror/{V7}"]
    (tmp_path / f"{V7}.part").write_bytes(data[:1500])
    got = Downloader(tmp_path).fetch(f"{server.base}/mirror/{V7}", use_sidecar=False)
    assert got.resumed_from == 1500 and got.path.read_bytes() == data
    assert server.requests[-1]["headers"]["Range"] == "bytes=1500-"


def test_server_ignoring_range_starts_over(server, tmp_path):
    data = server.files[f"/mirror/{V7}"]
    server.ignore_range = True
    (tmp_path / f"{V7}.part").write_bytes(b"garbage" * 100)
    got = Downloader(tmp_path).fetch(f"{server.base}/mirror/{V7}", use_sidecar=False)
    assert got.path.read_bytes() == data


def test_complete_part_gets_416_and_is_kept(server, tmp_path):
    data = server.files[f"/mirror/{V7}"]
    (tmp_path / f"{V7}.part").write_bytes(data)
    got = Downloader(tmp_path).fetch(f"{server.base}/mirror/{V7}", use_sidecar=False)
    assert got.path.read_bytes() == data


def test_5xx_is_retried(server, tmp_path):
    server.fail_5xx = 2
    got = Downloader(tmp_path, backoff=0.01).fetch(f"{server.base}/mirror/{V7}", use_sidecar=False)
    assert got.size == len(server.files[f"/mirror/{V7}"])


def test_wrong_checksum_is_refused_and_not_kept(server, tmp_path):
    with pytest.raises(ArchiveRejected) as info:
        Downloader(tmp_path).fetch(f"{server.base}/mirror/{V7}", Expected("sha256", "0" * 64, "--sha256"))
    assert "0" * 64 in info.value.message and _sha(server.files[f"/mirror/{V7}"]) in info.value.message
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("suffix,algo", [(".sha256", "sha256"), (".md5", "md5")])
def test_sidecar_checksum(server, tmp_path, suffix, algo):
    data = server.files[f"/mirror/{V7}"]
    digest = hashlib.new(algo, data).hexdigest()
    server.files[f"/mirror/{V7}{suffix}"] = f"{digest}  {V7}\n".encode()
    got = Downloader(tmp_path).fetch(f"{server.base}/mirror/{V7}")
    assert got.expected.algorithm == algo and "sidecar" in got.expected.source
    server.files[f"/mirror/{V7}{suffix}"] = f"{'1' * len(digest)}  {V7}\n".encode()
    with pytest.raises(ArchiveRejected):
        Downloader(tmp_path / "other").fetch(f"{server.base}/mirror/{V7}")


def test_404_and_refused_exit_6(server, tmp_path):
    with pytest.raises(DownloadFailed) as info:
        Downloader(tmp_path).fetch(f"{server.base}/mirror/nope.tgz")
    assert "404" in info.value.message and info.value.exit_code == 6
    with pytest.raises(DownloadFailed, match="refused"):
        Downloader(tmp_path).fetch("http://127.0.0.1:9/x.tgz")


def test_auth_header_is_sent_and_never_shown(server, archives, cuda_root, home):
    server.token = "s3cret-token"
    root = cuda_root()
    url = f"{server.base}/mirror/{V7}"
    done, out = run_json(["install", url, "--cuda-root", root, "--no-theanorc", "--no-verify",
                          "--cache-dir", home / "cache"], home)
    assert done.returncode == 6 and "401" in out["error"]["message"]
    assert "netrc" in out["error"]["hint"]
    done, out = run_json(["install", url, "--cuda-root", root, "--no-theanorc", "--no-verify",
                          "--cache-dir", home / "cache", "--header", "Authorization: Bearer s3cret-token"],
                         home)
    assert done.returncode == 0, done.stderr
    assert out["download"]["size"] == len(server.files[f"/mirror/{V7}"])
    assert (root / "lib64" / "libcudnn.so.7.4.2").is_file()
    assert "s3cret" not in done.stdout + done.stderr
    assert server.requests[-1]["headers"]["Authorization"] == "Bearer s3cret-token"


def test_netrc_credentials(server, tmp_path, home, cuda_root):
    server.token = None
    (home / ".netrc").write_text("machine 127.0.0.1 login alice password wonderland\n")
    (home / ".netrc").chmod(0o600)
    # requests reads ~/.netrc through the process's $HOME: a process of its own
    done, out = run_json(["download", f"{server.base}/mirror/{V7}", "-o", tmp_path / "dl"], home,
                         process=True)
    assert done.returncode == 0, done.stderr
    assert server.requests[-1]["headers"]["Authorization"].startswith("Basic ")
    assert (tmp_path / "dl" / V7).exists() and "wonderland" not in done.stdout + done.stderr


def test_cli_cache_hit_makes_no_request(server, home, tmp_path):
    data = server.files[f"/mirror/{V7}"]
    args = ["download", f"{server.base}/mirror/{V7}", "--cache-dir", tmp_path / "c", "--sha256", _sha(data)]
    run_json(args, home)
    count = len(server.requests)
    done, out = run_json(args, home)
    assert out["download"]["from_cache"] is True and len(server.requests) == count


def test_known_release_table_checks_local_files(archives, tmp_path, cuda_root, home):
    fake = tmp_path / "cudnn-10.2-linux-x64-v7.6.5.32.tgz"  # a published name, other bytes
    fake.write_bytes(archives[V7].read_bytes())
    root = cuda_root()
    done, out = run_json(["install", fake, "--cuda-root", root, "--no-theanorc"], home)
    assert done.returncode == 3
    assert "600267f2caaed2fd58eb214ba669d8ea35f396a7d19b94822e6b36f9f7088c20" in out["error"]["message"]
    assert "known releases table" in out["error"]["message"]
    assert not (root / "include" / "cudnn.h").exists()


def test_full_disk_while_downloading_exits_6_and_keeps_the_part(server, home, tmp_path):
    import resource

    from conftest import run_cli

    def small_disk():
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))

    done = run_cli(["download", f"{server.base}/mirror/{V7}", "--cache-dir", tmp_path / "c", "--json"],
                   home, preexec_fn=small_disk)
    assert done.returncode == 6, done.stderr
    out = json.loads(done.stdout)
    assert "free some space" in out["error"]["hint"]
    assert (tmp_path / "c" / f"{V7}.part").exists() and not (tmp_path / "c" / V7).exists()
