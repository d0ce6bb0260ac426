"""Hostile servers, mirrors, URLs and config files, by class: secrets never shown and never sent
on, every wait bounded per command, every body bounded by what it was promised, nothing opened
that could block, every malformed URL a usage error or a download failure (never exit 70),
`download -o` never replacing a user's file, concurrent fetches of one archive all succeeding.
Real HTTP servers on 127.0.0.1 (tests/httpserver.py), real FIFOs, real processes."""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import clean_env, run_cli, run_json, tree_state
from cudnn_setup.steps.context import Context
from cudnn_setup.commands.download import download
from cudnn_setup.errors import ArchiveRejected, DownloadFailed
from cudnn_setup.fetch import redist
from cudnn_setup.fetch.checksums import Expected
from cudnn_setup.fetch.downloader import Downloader
from cudnn_setup.fetch.http import Budget, Client, leaves_origin
from cudnn_setup.fetch.redistrib_json import parse_redistrib
from cudnn_setup.fetch.remote import Reader
from cudnn_setup.urls import redact, scrub
from fixtures.mirror import STANDARD, build_mirror
from httpserver import ArchiveServer

V7 = "cudnn-10.0-linux-x64-v7.4.2.24.tgz"
X86_12 = STANDARD[0].name
PASSWORD, TOKEN = "s3cretPW", "t0kenXYZ"
SECRET_HEADERS = {"Authorization": "Bearer hdrsecret1", "X-Api-Key": "hdrsecret2",
                  "X-Auth-Token": "hdrsecret3", "Private-Token": "hdrsecret4",
                  "Cookie": "session=hdrsecret5", "Proxy-Authorization": "Basic hdrsecret6",
                  "X-Trace": "plain7"}


def _header_args(headers=SECRET_HEADERS):
    return [a for k, v in headers.items() for a in ("--header", f"{k}: {v}")]


@pytest.fixture(scope="session")
def mirror(tmp_path_factory, compiler):
    return build_mirror(tmp_path_factory.mktemp("mirror"), cc=compiler)


@pytest.fixture
def server(archives):
    with ArchiveServer() as s:
        s.files[f"/mirror/{V7}"] = archives[V7].read_bytes()
        yield s


def _mirror_server(mirror, s: ArchiveServer, prefix="/redist"):
    """The mirror's files served by `s` below `prefix`, with an index page of its manifests."""
    for path in mirror.root.rglob("*"):
        if path.is_file():
            s.files[f"{prefix}/{path.relative_to(mirror.root)}"] = path.read_bytes()
    links = "".join(f'<a href="redistrib_{label}.json">x</a>\n' for label in mirror.manifests)
    s.files[f"{prefix}/"] = links.encode()


def _no_secret(done, *secrets):
    text = done.stdout + done.stderr
    for secret in secrets or (PASSWORD, TOKEN):
        assert secret not in text, text
    assert "Traceback" not in text and done.returncode != 70, text


# --- one redaction, every surface ------------------------------------------------------------

@pytest.mark.parametrize("url,shown", [
    (f"http://admin:{PASSWORD}@127.0.0.1:9/x?token={TOKEN}", "http://127.0.0.1:9/x?…"),
    (f"https://u:{PASSWORD}@[::1/", "https://[::1/"),  # does not parse: redacted all the same
    (f"https://mirror.lan/redist/#{TOKEN}", "https://mirror.lan/redist/#…"),
    (f"http://{PASSWORD}@host/a?b={TOKEN}#c", "http://host/a?…#…"),
    (f"http://u:{PASSWORD}@host:99999/x.tgz", "http://host:99999/x.tgz"),
    ("/plain/path", "/plain/path"),
])
def test_redact_removes_userinfo_query_and_fragment_parsed_or_not(url, shown):
    assert redact(url) == shown


def test_scrub_takes_urls_and_their_secrets_out_of_free_text():
    url = f"http://admin:{PASSWORD}@127.0.0.1:9/x.tgz?token={TOKEN}"
    text = (f"HTTPConnectionPool(host='127.0.0.1', port=9): Max retries exceeded with url: "
            f"/x.tgz?token={TOKEN} (Caused by {url})")
    out = scrub(text, url)
    assert PASSWORD not in out and TOKEN not in out and "/x.tgz" in out


def test_download_url_secrets_never_shown(server, tmp_path, home):
    for url in (f"http://admin:{PASSWORD}@127.0.0.1:99999/x.tgz?token={TOKEN}",  # bad port
                f"http://admin:{PASSWORD}@127.0.0.1:{server.port}/none.tgz?token={TOKEN}",  # 404
                f"http://admin:{PASSWORD}@[::1/x.tgz?token={TOKEN}"):  # does not parse
        done, out = run_json(["download", url, "--cache-dir", tmp_path], home)
        assert done.returncode == 6, done.stderr
        _no_secret(done)
    # options that do not go with a URL: the refusal names it redacted
    url = f"http://admin:{PASSWORD}@127.0.0.1:{server.port}/none.tgz?token={TOKEN}"
    for args in (["download", url, "--mirror", "/x"], ["install", url, "--cuda", "12"]):
        done, out = run_json(args, home)
        assert done.returncode == 2, done.stderr
        _no_secret(done)


def test_redirect_target_secrets_never_shown(server, tmp_path, home):
    server.redirects[f"/mirror/{V7}"] = (f"http://u:{PASSWORD}@localhost:{server.port}/gone.tgz"
                                         f"?token={TOKEN}")
    done, out = run_json(["download", f"{server.base}/mirror/{V7}", "--cache-dir", tmp_path], home)
    assert done.returncode == 6 and out["error"]["code"] == "not-found"
    _no_secret(done)


@pytest.mark.parametrize("how", ["option", "env", "config"])
def test_mirror_setting_secrets_never_shown(mirror, how, tmp_path, home, cuda_root):
    root = cuda_root(version="12.4", layout="lib")
    urls = [f"http://admin:{PASSWORD}@127.0.0.1:9/x?token={TOKEN}",  # a query: refused
            f"https://u:{PASSWORD}@[::1/",  # does not parse
            f"http://u:{PASSWORD}@127.0.0.1:99999/redist/",  # bad port
            f"http://u:{PASSWORD}@127.0.0.1:9/redist/"]  # nothing listening
    for url in urls:
        args, env = ["list", "--cuda-root", root], {}
        if how == "option":
            args += ["--mirror", url]
        elif how == "env":
            env = {"CUDNN_SETUP_MIRROR": url}
        else:
            config = home / ".config" / "cudnn-setup" / "config.ini"
            config.parent.mkdir(parents=True, exist_ok=True)
            config.write_text(f"[cudnn-setup]\nmirror = {url}\n")
        done, out = run_json(args, home, env)
        assert done.returncode in (2, 6), (url, done.stderr)
        _no_secret(done)


def test_install_version_from_a_mirror_with_credentials_shows_none(mirror, cuda_root, home):
    root = cuda_root(version="12.4", layout="lib")
    with ArchiveServer() as s:
        _mirror_server(mirror, s)
        url = f"http://u:{PASSWORD}@127.0.0.1:{s.port}/redist/"
        done, out = run_json(["install", "9", "--cuda-root", root, "--no-theanorc", "--no-verify",
                              "--mirror", url], home, {"XDG_CACHE_HOME": str(home / "cache")})
        assert done.returncode == 0, done.stderr
        _no_secret(done)
        # a manifest the mirror does not have: the error shows the mirror, redacted
        done, out = run_json(["install", "9.7.1", "--cuda-root", root, "--no-theanorc",
                              "--mirror", url], home)
        assert done.returncode in (2, 6)
        _no_secret(done)


# --- one redirect policy, every command that talks HTTP -----------------------------------------

def _hops_to_other_host(s: ArchiveServer):
    return [r for r in s.requests if (r["host"] or "").startswith("localhost")]


def test_list_leaves_every_secret_header_behind_on_a_redirect(mirror, cuda_root, home):
    """`list` used requests' own redirect following: X-Api-Key, X-Auth-Token and
    Private-Token reached the other host."""
    root = cuda_root(version="12.4", layout="lib")
    with ArchiveServer() as s:
        _mirror_server(mirror, s, "/cdn")
        s.redirects["/redist/"] = f"http://localhost:{s.port}/cdn/"
        for label in mirror.manifests:
            s.redirects[f"/redist/redistrib_{label}.json"] = \
                f"http://localhost:{s.port}/cdn/redistrib_{label}.json"
        done, out = run_json(["list", "--cuda-root", root, "--mirror", f"{s.base}/redist/",
                              *_header_args()], home)
        assert done.returncode == 0, done.stderr
        hops = _hops_to_other_host(s)
        assert len(hops) >= 2, s.requests  # the index and the manifests followed
        for hop in hops:
            assert not set(SECRET_HEADERS) & set(hop["headers"]), hop["headers"]
        first = [r for r in s.requests if r["path"] == "/redist/"][0]
        assert set(SECRET_HEADERS) <= set(first["headers"])  # sent to the mirror itself


def test_install_version_and_sidecar_leave_secret_headers_behind(mirror, cuda_root, home,
                                                                  archives, tmp_path):
    root = cuda_root(version="12.4", layout="lib")
    with ArchiveServer() as s:
        _mirror_server(mirror, s, "/redist")
        _mirror_server(mirror, s, "/cdn")
        path = f"/redist/cudnn/linux-x86_64/{X86_12}"
        s.redirects[path] = f"http://localhost:{s.port}/cdn/cudnn/linux-x86_64/{X86_12}"
        done, out = run_json(["install", "9.1", "--cuda-root", root, "--no-theanorc",
                              "--no-verify", "--mirror", f"{s.base}/redist/", *_header_args()],
                             home, {"XDG_CACHE_HOME": str(home / "cache")})
        assert done.returncode == 0, done.stderr
        hops = _hops_to_other_host(s)
        assert hops and all(not set(SECRET_HEADERS) & set(h["headers"]) for h in hops)
        # a sidecar checksum redirected elsewhere
        s.requests.clear()
        s.files[f"/mirror/{V7}"] = archives[V7].read_bytes()
        s.files[f"/cdn/{V7}.sha256"] = hashlib.sha256(archives[V7].read_bytes()).hexdigest().encode()
        s.redirects[f"/mirror/{V7}.sha256"] = f"http://localhost:{s.port}/cdn/{V7}.sha256"
        done, out = run_json(["download", f"{s.base}/mirror/{V7}", "--cache-dir", tmp_path,
                              *_header_args()], home)
        assert done.returncode == 0 and "sidecar" in out["download"]["checksum"]["source"]
        hops = _hops_to_other_host(s)
        assert hops and all(not set(SECRET_HEADERS) & set(h["headers"]) for h in hops)


def test_keep_list_never_lets_a_credential_follow(server, tmp_path, home):
    server.files[f"/cdn/{V7}"] = server.files[f"/mirror/{V7}"]
    server.redirects[f"/mirror/{V7}"] = f"http://localhost:{server.port}/cdn/{V7}"
    done, out = run_json(["download", f"{server.base}/mirror/{V7}", "--cache-dir", tmp_path,
                          *_header_args()], home, {"CUDNN_SETUP_REDIRECT_KEEP_HEADERS":
                                                   ",".join(SECRET_HEADERS)})
    assert done.returncode == 0
    hop = _hops_to_other_host(server)[-1]
    assert hop["headers"].get("X-Trace") == "plain7"
    assert not (set(SECRET_HEADERS) - {"X-Trace"}) & set(hop["headers"])


def test_https_to_http_leaves_the_origin():
    assert leaves_origin("https://m.lan/a", "http://m.lan/a")
    assert leaves_origin("https://m.lan/a", "https://m.lan:8443/a")
    assert not leaves_origin("http://m.lan/a", "https://m.lan/b")
    assert not leaves_origin("https://m.lan/a", "https://m.lan/b")


@pytest.mark.parametrize("target", ["loop", "file", "ftp", "empty", "ipv6", "port"])
def test_bad_redirects_are_bad_redirect_in_every_command(target, mirror, cuda_root, home,
                                                         tmp_path, server):
    root = cuda_root(version="12.4", layout="lib")
    # ipv6, port: requests parsed these ahead of the tool and raised ValueError (exit 70)
    location = {"loop": None, "file": "file:///etc/passwd", "ftp": "ftp://127.0.0.1/x",
                "empty": "", "ipv6": "http://u:pw9@[::1/x", "port": "http://h:99999/x"}[target]

    def point(path):
        if target == "loop":
            server.redirects[path] = "/loop-b"
            server.redirects["/loop-b"] = path
        else:
            server.redirects[path] = location

    point(f"/mirror/{V7}")
    point("/redist/")
    point("/redist/redistrib_9.1.7.json")
    runs = [["download", f"{server.base}/mirror/{V7}", "--cache-dir", tmp_path],
            ["list", "--cuda-root", root, "--mirror", f"{server.base}/redist/"],
            ["install", "9.1.7", "--cuda-root", root, "--no-theanorc",
             "--mirror", f"{server.base}/redist/"]]
    for args in runs:
        done, out = run_json(args, home)
        assert done.returncode == 6 and out["error"]["code"] == "bad-redirect", (args, out["error"])
        assert "pw9" not in done.stdout + done.stderr


# --- waiting: one time limit per command ----------------------------------------------------------

def test_a_server_that_accepts_and_never_answers_costs_one_time_limit(server, tmp_path):
    """Before: every attempt waited its own read timeout (6 × 60 s on the CLI)."""
    server.hang.add(f"/mirror/{V7}")
    client = Client(timeout=(1.0, 1.5), budget=Budget(1.5))
    started = time.monotonic()
    with pytest.raises(DownloadFailed) as info:
        Downloader(tmp_path, client=client, retries=5, backoff=0.01).fetch(
            f"{server.base}/mirror/{V7}", use_sidecar=False)
    took = time.monotonic() - started
    assert info.value.code == "timed-out" and took < 4, (took, info.value.message)
    assert len(server.file_requests()) == 1


def test_one_budget_across_the_sidecar_and_the_archive(server, tmp_path):
    server.hang.update({f"/mirror/{V7}", f"/mirror/{V7}.sha256", f"/mirror/{V7}.md5"})
    client = Client(timeout=(1.0, 1.5), budget=Budget(1.5))
    started = time.monotonic()
    with pytest.raises(DownloadFailed):
        Downloader(tmp_path, client=client, retries=5, backoff=0.01).fetch(
            f"{server.base}/mirror/{V7}")
    assert time.monotonic() - started < 4


def test_a_stall_after_real_progress_is_retried_not_held_against_the_command(server, tmp_path):
    """A flaky link (2 MiB, then nothing) is resumed, though the waiting budget is one timeout."""
    data = os.urandom(5 << 20)
    server.files["/big.tgz"] = data
    server.hold_after["/big.tgz"], server.holds_left = 2 << 20, 2  # 2 MiB, stall; twice
    client = Client(timeout=(1.0, 1.0), budget=Budget(1.5))  # less than two timeouts
    got = Downloader(tmp_path, client=client, backoff=0.01).fetch(
        f"{server.base}/big.tgz", Expected("sha256", hashlib.sha256(data).hexdigest(), "test"))
    assert got.path.read_bytes() == data
    assert [r["headers"].get("Range") for r in server.file_requests(".tgz")] == \
        [None, f"bytes={2 << 20}-", f"bytes={4 << 20}-"]


def test_a_body_dripped_a_byte_at_a_time_is_cut_off(server, tmp_path):
    """Before: each byte restarted the read timeout; a 4 KB index page at 5 bytes/s took 14 min."""
    server.files["/redist/"] = b"<a href='redistrib_9.1.7.json'>x</a>" + b" " * 4096
    server.drip["/redist/"] = 0.2
    reader = Reader(client=Client(timeout=(2.0, 2.0), budget=Budget(10), slow_seconds=1.5))
    started = time.monotonic()
    with pytest.raises(DownloadFailed) as info:
        reader.labels(f"{server.base}/redist/")
    assert time.monotonic() - started < 6 and info.value.code == "timed-out"
    assert server.sent["/redist/"] < 100
    # the archive too, and its retries stop when the budget is spent
    server.drip[f"/mirror/{V7}"] = 0.2
    client = Client(timeout=(2.0, 2.0), budget=Budget(3), slow_seconds=1.5)
    started = time.monotonic()
    with pytest.raises(DownloadFailed) as info:
        Downloader(tmp_path, client=client, backoff=0.01).fetch(f"{server.base}/mirror/{V7}",
                                                                use_sidecar=False)
    assert time.monotonic() - started < 8 and info.value.code == "timed-out"


def test_a_status_line_dripped_a_byte_at_a_time_is_cut_off(tmp_path):
    """No read ever times out (a byte every 0.2 s); the watchdog ends the wait for the answer."""
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    stop = threading.Event()

    def drip():
        while not stop.is_set():
            try:
                listener.settimeout(0.2)
                conn, _ = listener.accept()
            except OSError:
                continue
            with conn:
                for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 10_000:
                    if stop.is_set():
                        break
                    try:
                        conn.sendall(bytes([byte]))
                    except OSError:
                        break
                    time.sleep(0.2)

    thread = threading.Thread(target=drip, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/redist/"
    try:
        started = time.monotonic()
        with pytest.raises(DownloadFailed) as info:
            Reader(client=Client(timeout=(0.5, 1.5), budget=Budget(10))).labels(url)
        assert info.value.code == "timed-out" and time.monotonic() - started < 5, info.value
        started = time.monotonic()
        with pytest.raises(DownloadFailed) as info:
            Downloader(tmp_path, client=Client(timeout=(0.5, 1.5), budget=Budget(2)),
                       backoff=0.01).fetch(url + "x.tgz", use_sidecar=False)
        assert info.value.code == "timed-out" and time.monotonic() - started < 6, info.value
    finally:
        stop.set()
        thread.join()
        listener.close()


def test_retries_are_reported_with_reason_and_count(server, tmp_path):
    server.fail_5xx = 2
    lines = []
    Downloader(tmp_path, backoff=0.01, retries=3, on_status=lines.append).fetch(
        f"{server.base}/mirror/{V7}", use_sidecar=False)
    host = server.base.split("//", 1)[1]
    assert lines[0] == f"downloading {V7} from {host}", lines  # said once, before the tries
    retries = lines[1:]  # the bytes are hashed as they are written: no checking step after
    assert len(retries) == 2 and "server error 503" in retries[0], lines
    assert "attempt 2 of 4" in retries[0] and "attempt 3 of 4" in retries[1]
    assert "retrying in" in retries[0]


def test_download_command_reports_retries_and_progress(server, tmp_path, home):
    """The status hook gets each retry, the progress hook the bytes (the CLI renders both:
    a bar on a terminal, plain lines in a log)."""
    server.fail_5xx = 1
    lines, progress = [], []
    ctx = Context(env={"HOME": str(home)}, home=home, python=sys.executable,
                  status=lines.append,
                  progress=lambda label: lambda done, total: progress.append((label, done, total)))
    sha = hashlib.sha256(server.files[f"/mirror/{V7}"]).hexdigest()
    result = download(ctx, f"{server.base}/mirror/{V7}", cache_dir=tmp_path, sha256=sha)
    assert result.error is None, result.error
    assert any("retrying" in line and "503" in line for line in lines), lines
    size = len(server.files[f"/mirror/{V7}"])
    assert progress and progress[-1] == (f"downloading {V7}", size, size), progress


# --- bodies bounded by what they were promised -------------------------------------------------------

def test_a_body_longer_than_the_manifest_size_is_cut_off_and_not_kept(server, tmp_path):
    """Before: 6.5 GB in 45 s for a 4,868-byte entry, left in the cache after a kill."""
    server.endless.add("/big.tgz")
    data_size = 4868
    started = time.monotonic()
    with pytest.raises(ArchiveRejected) as info:
        Downloader(tmp_path, retries=0).fetch(f"{server.base}/big.tgz",
                                               Expected("sha256", "0" * 64, "a manifest",
                                                        size=data_size))
    assert info.value.code == "size-mismatch" and time.monotonic() - started < 5
    assert str(data_size) in info.value.message
    assert not list(tmp_path.glob("*.part")) and not (tmp_path / "big.tgz").exists()
    assert server.sent.get("/big.tgz", 0) < 32 << 20  # the client stopped reading


def test_a_body_without_a_size_is_capped(server, tmp_path, monkeypatch):
    from cudnn_setup.fetch import downloader as dl
    monkeypatch.setattr(dl, "MAX_ARCHIVE", 1 << 20)
    server.endless.add("/big.tgz")
    with pytest.raises(DownloadFailed) as info:
        Downloader(tmp_path, retries=0).fetch(f"{server.base}/big.tgz", use_sidecar=False)
    assert info.value.code == "body-too-long"
    assert not list(tmp_path.iterdir()) or not list(tmp_path.glob("*.part"))


def test_a_content_length_other_than_the_manifest_size_is_refused_before_reading(server, tmp_path):
    data = server.files[f"/mirror/{V7}"]
    server.drip[f"/mirror/{V7}"] = 0.02  # reading it whole would take 50 s
    started = time.monotonic()
    with pytest.raises(ArchiveRejected) as info:
        Downloader(tmp_path, retries=0).fetch(
            f"{server.base}/mirror/{V7}", Expected("sha256", hashlib.sha256(data).hexdigest(),
                                                   "redistrib_x.json", size=len(data) + 7))
    assert info.value.code == "size-mismatch" and time.monotonic() - started < 5
    assert str(len(data)) in info.value.message and str(len(data) + 7) in info.value.message


def test_a_file_mirror_whose_manifest_size_disagrees_is_refused_from_the_stat(
        mirror, tmp_path, cuda_root, home):
    copy = tmp_path / "m"
    shutil.copytree(mirror.root, copy)
    path = copy / "redistrib_9.1.7.json"
    doc = json.loads(path.read_text())
    real = int(doc["cudnn"]["linux-x86_64"]["cuda12"]["size"])
    doc["cudnn"]["linux-x86_64"]["cuda12"]["size"] = str(real - 1)
    path.write_text(json.dumps(doc))
    root = cuda_root(version="12.4", layout="lib")
    before = tree_state(root)
    done, out = run_json(["install", "9.1", "--cuda-root", root, "--no-theanorc", "--no-verify",
                          "--mirror", copy], home)
    assert done.returncode == 3 and out["error"]["code"] == "size-mismatch", out["error"]
    assert str(real) in out["error"]["message"] and str(real - 1) in out["error"]["message"]
    assert tree_state(root) == before


@pytest.mark.parametrize("mode", ["asked", "always"])
def test_gzip_encoding_never_gives_a_false_checksum_mismatch(server, tmp_path, mode):
    data = server.files[f"/mirror/{V7}"]
    server.gzip = mode
    expected = Expected("sha256", hashlib.sha256(data).hexdigest(), "test")
    if mode == "asked":  # identity is asked for, so the archive comes as it is
        got = Downloader(tmp_path, retries=0).fetch(f"{server.base}/mirror/{V7}", expected)
        assert got.path.read_bytes() == data
        assert all(r["headers"].get("Accept-Encoding") == "identity" for r in server.requests)
    else:
        with pytest.raises(DownloadFailed) as info:
            Downloader(tmp_path, retries=0).fetch(f"{server.base}/mirror/{V7}", expected)
        assert info.value.code == "content-encoded" and "gzip" in info.value.message


@pytest.mark.parametrize("expected", [True, False])
def test_a_transfer_coding_but_chunked_is_refused_not_kept(server, tmp_path, expected):
    """`Transfer-Encoding: gzip, chunked`: http.client reads such a body as if it had no
    framing, so the chunk sizes and the gzip stream were kept as the archive: with a checksum
    a false `checksum-mismatch`, without one a file that is not the archive, placed."""
    data = server.files[f"/mirror/{V7}"]
    server.gzip = "transfer"
    out = tmp_path / "out"
    want = Expected("sha256", hashlib.sha256(data).hexdigest(), "test") if expected else None
    with pytest.raises(DownloadFailed) as info:
        Downloader(tmp_path / "cache", retries=0, output_dir=out).fetch(
            f"{server.base}/mirror/{V7}", want, use_sidecar=False)
    assert info.value.code == "content-encoded", info.value.message
    assert "Transfer-Encoding gzip, chunked" in info.value.message
    assert not out.exists() or not any(out.iterdir())


def test_contradicting_content_lengths_are_the_servers_fault_not_a_break(server, home,
                                                                        tmp_path):
    """Two Content-Length headers of different values: requests refuses the answer
    (InvalidHeader), which was worded as a download that broke off, "run again; a partial
    download is resumed", though nothing came and nothing will resume."""
    data = server.files[f"/mirror/{V7}"]
    server.second_length[f"/mirror/{V7}"] = len(data) + 5
    cache = tmp_path / "cache"
    done, out = run_json(["download", f"{server.base}/mirror/{V7}", "--cache-dir", cache], home)
    assert done.returncode == 6, done.stderr
    error = out["error"]
    assert error["code"] == "download-failed"
    assert "headers that contradict each other" in error["message"], error
    assert "Content-Length" in error["message"] and "broke off" not in error["message"]
    assert "resumed" not in error["hint"]
    assert not cache.exists() or not list(cache.glob(f"{V7}*"))


SNOWMAN = "p\u2603ss"  # beyond Latin-1, which HTTP/1.1 header values and Basic credentials are


@pytest.mark.parametrize("where", ["header", "user-info", "user-info-quoted", "netrc", "proxy"])
def test_a_credential_http_cannot_carry_is_refused_before_a_request(where, server, home,
                                                                    tmp_path):
    """http.client sends header values as Latin-1 and requests encodes Basic credentials so:
    a --header value, a URL's, a ~/.netrc or a proxy's password beyond it raised
    UnicodeEncodeError inside the request (download, install, list: exit 70)."""
    url = f"{server.base}/mirror/{V7}"
    args = ["download", url, "--cache-dir", tmp_path / "cache"]
    if where == "header":
        args += ["--header", f"X-Api-Key: {SNOWMAN}"]
    elif where.startswith("user-info"):
        secret = SNOWMAN if where == "user-info" else "p%E2%98%83ss"
        args[1] = url.replace("http://", f"http://fleet:{secret}@")
    elif where == "netrc":
        (home / ".netrc").write_text(f"machine 127.0.0.1 login fleet password {SNOWMAN}\n")
        (home / ".netrc").chmod(0o600)
    env = {"http_proxy": f"http://fleet:{SNOWMAN}@127.0.0.1:{server.port}/"} \
        if where == "proxy" else None
    done, out = run_json(args, home, env)
    code, exit_code = ("usage", 2) if where == "header" else ("bad-url", 6)
    assert done.returncode == exit_code and out["error"]["code"] == code, done.stderr
    assert "HTTP cannot carry" in out["error"]["message"]
    assert SNOWMAN not in done.stdout + done.stderr and "%E2%98%83" not in done.stdout
    assert server.requests == [] and not (tmp_path / "cache" / V7).exists()


def test_a_netrc_past_its_bound_is_not_read(server, home, tmp_path):
    """The netrc module reads a file whole and lexes it a character at a time: a 32 MiB
    sparse ~/.netrc cost the download 5.5 s of CPU (23 s on a loaded two-core machine), and
    its time and memory grow with the file. Past 1 MiB it is not read, as one that does not
    parse is not."""
    with open(home / ".netrc", "wb") as f:
        f.truncate(32 << 20)
    (home / ".netrc").chmod(0o600)
    started = time.process_time()
    done, out = run_json(["download", f"{server.base}/mirror/{V7}", "--cache-dir",
                          tmp_path / "cache"], home)
    assert done.returncode == 0, done.stderr
    assert time.process_time() - started < 2
    assert (tmp_path / "cache" / V7).read_bytes() == server.files[f"/mirror/{V7}"]


# --- nothing opened that could block or read without a bound ---------------------------------------

def _process(args, home, env=None, timeout=30):
    env = clean_env(home, **(env or {}))
    return subprocess.run([sys.executable, "-m", "cudnn_setup", *map(str, args), "--json"],
                          env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("bundle", ["fifo", "missing", "device"])
def test_a_ca_bundle_that_is_no_file_is_refused_without_blocking(bundle, server, home,
                                                                  tmp_path):
    """$REQUESTS_CA_BUNDLE naming a FIFO: OpenSSL opened it and waited for a writer, so every
    https request blocked for ever (killed at the test's 30 s); a missing one was said as
    "download failed: OSError". Each is now tls-error, named, before anything is sent."""
    path = {"fifo": tmp_path / "ca.pem", "missing": tmp_path / "none.pem",
            "device": Path("/dev/zero")}[bundle]
    if bundle == "fifo":
        os.mkfifo(path)
    url = f"https://127.0.0.1:{server.port}/mirror/{V7}"
    done = _process(["download", url, "--cache-dir", tmp_path / "c"], home,
                    {"REQUESTS_CA_BUNDLE": str(path)})
    error = json.loads(done.stdout.splitlines()[-1])["error"]
    assert done.returncode == 6 and error["code"] == "tls-error", done.stderr
    assert f"$REQUESTS_CA_BUNDLE {path}" in error["message"]
    assert server.requests == []
    # a plain http URL never reads it, as before
    done = _process(["download", f"{server.base}/mirror/{V7}", "--cache-dir", tmp_path / "c"],
                    home, {"REQUESTS_CA_BUNDLE": str(path)})
    assert done.returncode == 0, done.stderr


def test_a_fifo_config_file_is_refused_without_blocking(home, tmp_path):
    config = home / ".config" / "cudnn-setup" / "config.ini"
    config.parent.mkdir(parents=True)
    os.mkfifo(config)
    done = _process(["list", "--cuda", "12"], home)
    out = json.loads(done.stdout)
    assert done.returncode == 2 and "FIFO" in out["error"]["message"], done.stderr


@pytest.mark.parametrize("what", ["manifest", "archive"])
def test_a_fifo_in_a_file_mirror_is_refused_without_blocking(what, mirror, tmp_path, home,
                                                             cuda_root):
    copy = tmp_path / "m"
    shutil.copytree(mirror.root, copy)
    target = copy / ("redistrib_9.1.7.json" if what == "manifest"
                     else f"cudnn/linux-x86_64/{X86_12}")
    if what == "manifest":
        target.unlink()
        os.mkfifo(target)
        done = _process(["list", "--cuda", "12", "--mirror", copy], home)
        assert done.returncode == 6 and "FIFO" in json.loads(done.stdout)["error"]["message"]
    else:
        target.unlink()
        os.mkfifo(target)
        root = cuda_root(version="12.4", layout="lib")
        done = _process(["install", "9.1", "--cuda-root", root, "--no-theanorc", "--no-verify",
                         "--mirror", copy], home)
        assert done.returncode == 3 and "FIFO" in json.loads(done.stdout)["error"]["message"]


# --- regexes and JSON over untrusted text stay linear --------------------------------------------

def test_index_page_of_repeated_href_is_scanned_in_linear_time():
    page = "href=" * 200_000 + '"redistrib_9.1.7.json"'  # 1 MB: minutes with the old pattern
    started = time.monotonic()
    assert redist.listed_labels(page) == ["9.1.7"]
    assert redist.listed_labels("href=x" * 200_000 + 'redistrib_9.1.7.json"') == []
    assert time.monotonic() - started < 1


def test_index_page_links_still_found():
    page = ('<a href="redistrib_9.1.7.json">a</a> <a href=/x/redistrib_9.4.2.json>b</a> '
            "<a href='xredistrib_9.9.9.json'>c</a> redistrib_9.8.8.json ")
    assert redist.listed_labels(page) == ["9.4.2", "9.1.7"]


def test_duplicate_key_in_a_large_manifest_is_found_in_linear_time():
    n = 34_000  # 468 KB, the last key repeated: 20,000 keys took 22 s before, growing as n²
    keys = ",".join(f'"k{i}": {i}' for i in range(n))
    data = ('{"release_label": "9.1.7", "junk": {' + keys + f', "k{n - 1}": 0}}').encode()
    assert len(data) > 460_000
    started = time.monotonic()
    with pytest.raises(DownloadFailed, match="duplicate key"):
        parse_redistrib(data, "http://m.lan/redistrib_9.1.7.json", "9.1.7")
    assert time.monotonic() - started < 1


# --- malformed URLs: a usage error or a download failure, never exit 70 ---------------------------

BAD_URLS = ["http://[::1", f"https://u:{PASSWORD}@[::1/", "http://[::1]:99999/", "http://h:abc/",
            "http://h:-1/", "http://h:0/", "http://:80/", "http:///x", "http://", "http:x",
            "https://a b/", "http://h/\x01x", "http://" + "a" * 64 + ".lan/", "http://" + "a" * 300 + "/",
            "http://a..b/", "http://[zz::1]/", "ftp://h/x", "javascript:alert(1)",
            "file://remote/x", "HTTP://[::1", "http://h\\x/", "http://%zz/", "http://h:80:80/",
            "http://ü.lan:99999/", "http://-x-/"]


@pytest.mark.parametrize("url", BAD_URLS)
def test_malformed_mirror_urls_are_usage_errors(url, home):
    for args, env in ((["list", "--cuda", "12", "--mirror", url], {}),
                      (["list", "--cuda", "12"], {"CUDNN_SETUP_MIRROR": url})):
        done, out = run_json(args, home, env)
        assert done.returncode in (2, 6), (url, out["error"], done.stderr)
        assert out["error"]["hint"], out["error"]
        _no_secret(done, PASSWORD)
    # `mirror --from MIRROR`: the same judgement, naming the option that set it
    done, out = run_json(["mirror", home / "m", "9.1", "--cuda", "12", "--from", url], home)
    assert done.returncode in (2, 6), (url, out["error"], done.stderr)
    assert "set by --mirror" not in out["error"]["message"], out["error"]
    _no_secret(done, PASSWORD)


@pytest.mark.parametrize("url", BAD_URLS)
def test_malformed_package_index_urls_are_usage_errors(url, home):
    for args, env in ((["download", "9.1", "--cuda", "12", "--index-url", url], {}),
                      (["download", "9.1", "--cuda", "12", "--from", "pypi"],
                       {"PIP_INDEX_URL": url})):
        done, out = run_json(args, home, env)
        assert done.returncode in (2, 6), (url, out["error"], done.stderr)
        _no_secret(done, PASSWORD)


@pytest.mark.parametrize("url", BAD_URLS)
def test_malformed_download_urls_are_download_failures(url, tmp_path, home):
    done, out = run_json(["download", url, "--cache-dir", tmp_path], home)
    assert done.returncode in (2, 6), (url, out["error"], done.stderr)
    _no_secret(done, PASSWORD)


def test_malformed_url_in_the_config_file(home):
    config = home / ".config" / "cudnn-setup" / "config.ini"
    config.parent.mkdir(parents=True)
    config.write_text(f"[cudnn-setup]\nmirror = https://u:{PASSWORD}@[::1/\n")
    done, out = run_json(["list", "--cuda", "12"], home)
    assert done.returncode == 2 and "config.ini" in out["error"]["message"], out["error"]
    _no_secret(done, PASSWORD)


# --- download -o DIR ---------------------------------------------------------------------------

def test_output_dir_never_replaces_a_different_file(server, tmp_path, home):
    out_dir = tmp_path / "dl"
    out_dir.mkdir()
    mine = out_dir / V7
    mine.write_bytes(b"my own notes, not an archive")
    data = server.files[f"/mirror/{V7}"]
    for extra in ([], ["--sha256", hashlib.sha256(data).hexdigest()]):
        done, out = run_json(["download", f"{server.base}/mirror/{V7}", "-o", out_dir, *extra],
                             home)
        assert done.returncode == 6 and out["error"]["code"] == "download-target-exists", out
        assert mine.read_bytes() == b"my own notes, not an archive"
        assert sorted(p.name for p in out_dir.iterdir()) == [V7]


def test_output_dir_says_where_and_keeps_no_metadata_there(server, tmp_path, home):
    out_dir = tmp_path / "dl"
    args = ["download", f"{server.base}/mirror/{V7}", "-o", out_dir]
    done = run_cli(args, home)
    assert done.returncode == 0, done.stderr
    assert f"saved as {out_dir / V7}" in done.stdout
    assert sorted(p.name for p in out_dir.iterdir()) == [V7]
    # the same archive again, with no checksum known: the server says it is current
    done, out = run_json(args, home)
    assert done.returncode == 0 and out["download"]["from_cache"] is True, out
    assert sorted(p.name for p in out_dir.iterdir()) == [V7]


# --- concurrent fetches of one archive into one cache --------------------------------------------

def test_three_installs_of_one_version_sharing_a_cache_all_succeed(mirror, cuda_root, home):
    """Before: two of the three failed (exit 5, `….tar.xz.part`: No such file or directory)."""
    roots = [cuda_root(version="12.4", layout="lib") for _ in range(3)]
    with ArchiveServer() as s:
        _mirror_server(mirror, s)
        # the archive takes 4 s to come: the three runs' downloads overlap
        s.throttle[f"/redist/cudnn/linux-x86_64/{X86_12}"] = 4.0
        env = clean_env(home, XDG_CACHE_HOME=str(home / "cache"))
        procs = [subprocess.Popen([sys.executable, "-m", "cudnn_setup", "install", "9.1",
                                   "--cuda-root", str(r), "--no-theanorc", "--no-verify",
                                   "--mirror", f"{s.base}/redist/", "--json"], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for r in roots]
        outs = [p.communicate(timeout=300) for p in procs]
    for p, (stdout, stderr) in zip(procs, outs):
        assert p.returncode == 0, stderr
        assert json.loads(stdout)["ok"] is True
    cache = home / "cache" / "cudnn-setup"
    assert sorted(p.name for p in cache.iterdir()) == [X86_12, X86_12 + ".cudnn-setup.json"]
    archive_gets = [r for r in s.requests if r["path"].endswith(X86_12)]
    assert len(archive_gets) == 1  # one download, the other two found it complete
    # and they did overlap: the later ones waited for the lock, and said so
    assert any("waiting for another run's download" in err for _, err in outs), outs


@pytest.mark.parametrize("where", ["http://u:mpw11@127.0.0.1:9/x.tar.xz",
                                   "https://u:mpw11@/x.tar.xz",
                                   "u:mpw11@127.0.0.1:9/x.tar.xz"])
def test_a_manifest_quoting_a_secret_keeps_it_out_of_every_message(where, mirror, cuda_root,
                                                                    home, tmp_path):
    """A relative_path holding a URL with credentials was quoted whole in `manifest-damaged`."""
    tree = tmp_path / "tree"
    shutil.copytree(mirror.root, tree)
    manifest = tree / "redistrib_9.1.7.json"
    data = json.loads(manifest.read_text())
    data["cudnn"]["linux-x86_64"]["cuda12"]["relative_path"] = where
    manifest.write_text(json.dumps(data))
    root = cuda_root(version="12.4", layout="lib")
    for args in (["install", "9.1.7", "--cuda-root", root, "--no-theanorc", "--mirror", tree],
                 ["mirror", tmp_path / "out", "9.1.7", "--cuda", "12", "--from", tree]):
        done, out = run_json(args, home)
        assert done.returncode == 6 and out["error"]["code"] == "manifest-damaged", out["error"]
        assert "mpw11" not in done.stdout + done.stderr, done.stdout


# --- a tree out of reach: what was asked, what failed, and what to check ----------------------

NVIDIA_TREE = "https://developer.download.nvidia.com/compute/cudnn/redist/"


@pytest.mark.parametrize("command", [["install", "9.28", "--dry-run"], ["download", "9.28"]])
def test_nvidia_out_of_reach_is_said_without_a_mirror_in_the_hint(command, home, cuda_root,
                                                                  tmp_path):
    """NVIDIA's own tree through a proxy that refuses: the step says whom it asked, the error
    what failed; no mirror was used, so the hint names the other sources, not "the mirror"."""
    root = cuda_root("12.4")
    done, out = run_json([*command, "--cuda-root", root, "--output", tmp_path]
                         if command[0] == "download" else [*command, "--cuda-root", root,
                                                             "--no-theanorc"], home,
                         {"HTTPS_PROXY": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9"})
    assert done.returncode == 6, done.stderr
    assert f"cudnn-setup: asking {NVIDIA_TREE} for cuDNN 9.28" in done.stderr
    error = out["error"]
    assert "not listed" not in error["message"] and "lists" not in error["message"]
    assert "refused" in error["message"] or "proxy" in error["message"], error
    assert "mirror URL" not in error["hint"] and "--from pypi" in error["hint"], error


def test_a_mirror_out_of_reach_names_the_mirror_in_the_hint(home, cuda_root):
    root = cuda_root("12.4")
    done, out = run_json(["install", "9.28", "--dry-run", "--cuda-root", root, "--no-theanorc",
                          "--mirror", "http://127.0.0.1:9/cudnn/"], home)
    assert done.returncode == 6, done.stderr
    assert "cudnn-setup: asking http://127.0.0.1:9/cudnn/ for cuDNN 9.28" in done.stderr
    assert "connection refused" in out["error"]["message"]
    assert "check the mirror URL" in out["error"]["hint"]
