"""Downloads against a real HTTP server on 127.0.0.1: resume, checksums, errors, cache."""
import base64
import hashlib
import io
import json
import os
import socket
import stat
import threading
import time
from pathlib import Path

import pytest

from conftest import run_json
from cudnn_setup.cli import main
from cudnn_setup.fetch.checksums import Expected
from cudnn_setup.fetch.downloader import Downloader
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


def _interrupted(server, cache, after: int = 1500) -> None:
    """A run whose connection drops after `after` bytes and that gives up: its part stays."""
    server.drop_after, server.drops_left = after, 1
    with pytest.raises(DownloadFailed):
        Downloader(cache, retries=0).fetch(f"{server.base}/mirror/{V7}", use_sidecar=False)
    assert (cache / f"{V7}.part").stat().st_size == after


def test_interrupted_run_resumes_next_time(server, tmp_path):
    data = server.files[f"/mirror/{V7}"]
    _interrupted(server, tmp_path)
    got = Downloader(tmp_path).fetch(f"{server.base}/mirror/{V7}", use_sidecar=False)
    assert got.resumed_from == 1500 and got.path.read_bytes() == data
    assert server.requests[-1]["headers"]["Range"] == "bytes=1500-"
    etag = f'"{hashlib.sha256(data).hexdigest()[:16]}"'  # the server's, as the part began
    assert server.requests[-1]["headers"]["If-Range"] == etag


@pytest.mark.parametrize("checksum", [False, True])
def test_a_part_of_a_file_changed_since_is_not_spliced(server, tmp_path, checksum):
    """A part left by an interrupted run, then the server's file replaced (a mirror updated
    under the same name): the Range request was unconditional, the new file's rest was
    appended to the old file's start, and without a checksum that mix was saved as the
    archive. The resume is conditional (If-Range) on what the server said when the part
    began; a part nothing vouches for is not resumed without a checksum."""
    _interrupted(server, tmp_path)
    new = server.files[f"/mirror/{V7}"][::-1]
    server.files[f"/mirror/{V7}"] = new
    expected = Expected("sha256", hashlib.sha256(new).hexdigest(), "test") if checksum else None
    got = Downloader(tmp_path, retries=0).fetch(f"{server.base}/mirror/{V7}", expected,
                                                use_sidecar=False)
    assert got.path.read_bytes() == new and got.resumed_from == 0
    assert not list(tmp_path.glob("*.part*"))
    # the same part with its record gone (an older release's, or removed): never resumed blind
    (tmp_path / V7).unlink()
    _interrupted(server, tmp_path)
    (tmp_path / f"{V7}.part.cudnn-setup.json").unlink()
    server.files[f"/mirror/{V7}"] = new[::-1]
    got = Downloader(tmp_path, retries=0).fetch(f"{server.base}/mirror/{V7}", use_sidecar=False)
    assert got.path.read_bytes() == new[::-1] and got.resumed_from == 0


def test_a_weak_date_is_no_ground_to_resume_on(server, tmp_path):
    """No ETag, and a Last-Modified no second before the response's Date: a change within that
    second keeps the date (RFC 9110 8.8.2.2: such a date is weak). Resumed with If-Range on it,
    the file changed since under the same date had its rest spliced onto the old part and,
    without a checksum, kept as the archive. A weak date vouches for nothing."""
    import email.utils

    server.etag = False
    server.last_modified = email.utils.formatdate(time.time() + 3600, usegmt=True)
    _interrupted(server, tmp_path)
    new = server.files[f"/mirror/{V7}"][::-1]
    server.files[f"/mirror/{V7}"] = new  # replaced, its Last-Modified the same
    got = Downloader(tmp_path, retries=0).fetch(f"{server.base}/mirror/{V7}", use_sidecar=False)
    assert got.path.read_bytes() == new and got.resumed_from == 0
    assert "If-Range" not in server.requests[-1]["headers"]


def test_a_206_for_a_file_changed_since_is_not_spliced(server, tmp_path):
    """A server or proxy that honours Range but ignores If-Range answers 206 with the rest of
    the new file, under the new file's ETag: that rest was appended to the old file's start
    and, with no checksum to judge it, kept as the archive. The 206's own validator must be
    the one the resume was conditional on."""
    _interrupted(server, tmp_path)
    new = server.files[f"/mirror/{V7}"][::-1]
    server.files[f"/mirror/{V7}"] = new
    server.ignore_if_range = True
    got = Downloader(tmp_path, backoff=0.01).fetch(f"{server.base}/mirror/{V7}",
                                                    use_sidecar=False)
    assert got.path.read_bytes() == new and got.resumed_from == 0
    assert "Range" not in server.requests[-1]["headers"]


def test_a_416_for_a_file_changed_since_keeps_no_stale_part(server, tmp_path):
    """A part left whole (a run killed after its last byte, before the rename), then the file
    replaced on the server by one of the same size, through a proxy that drops If-Range: the
    Range from the part's end is answered 416 under the new file's ETag. The old bytes were
    kept as the archive and recorded under the new ETag, so every later run reused them as
    current. A 416 under another validator than the resume's starts the part over."""
    url = f"{server.base}/mirror/{V7}"
    old = server.files[f"/mirror/{V7}"]
    _interrupted(server, tmp_path)  # the part and its record (the old file's ETag)
    (tmp_path / f"{V7}.part").write_bytes(old)  # …then written to its end
    new = old[::-1]
    server.files[f"/mirror/{V7}"] = new
    server.ignore_if_range = True
    got = Downloader(tmp_path, backoff=0.01).fetch(url, use_sidecar=False)
    assert got.path.read_bytes() == new and got.resumed_from == 0
    again = Downloader(tmp_path, backoff=0.01).fetch(url, use_sidecar=False)
    assert again.path.read_bytes() == new


def test_a_206_of_unknown_total_cut_short_is_resumed_not_kept(server, tmp_path):
    """A 206 whose Content-Range names no total (`bytes 1500-4867/*`) and no Content-Length,
    its body ended by the connection closing early: the range's end says how many bytes were
    to come, but only a known total was held against what came, so the short file was kept as
    the archive (no checksum to judge it). It is a download cut short, resumed again."""
    url = f"{server.base}/mirror/{V7}"
    data = server.files[f"/mirror/{V7}"]
    _interrupted(server, tmp_path)
    server.unknown_total = True
    server.drop_after, server.drops_left = 500, 1
    got = Downloader(tmp_path, backoff=0.01).fetch(url, use_sidecar=False)
    assert got.path.read_bytes() == data
    assert [r["headers"].get("Range") for r in server.requests[-2:]] == ["bytes=1500-",
                                                                        "bytes=2000-"]


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
    with pytest.raises(DownloadFailed, match="refused") as info:
        Downloader(tmp_path, retries=2, backoff=0.01).fetch("http://127.0.0.1:9/x.tgz")
    assert "after 3 attempts" in info.value.message and info.value.code == "connection-refused"
    assert "port" in info.value.hint


def test_refused_connection_is_retried_until_the_server_is_up(archives, tmp_path):
    """Like a dropped connection: retried with backoff, so a mirror restarting is waited for."""
    # The port stays bound, not listening, until the server takes it: connections to it are
    # refused, and no other test's server can be given it meanwhile.
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    port = held.getsockname()[1]
    started = []

    def start_later():
        time.sleep(0.4)
        held.close()
        server = ArchiveServer(port).__enter__()
        server.files[f"/mirror/{V7}"] = archives[V7].read_bytes()
        started.append(server)

    thread = threading.Thread(target=start_later)
    thread.start()
    try:
        got = Downloader(tmp_path, retries=6, backoff=0.1).fetch(
            f"http://127.0.0.1:{port}/mirror/{V7}", use_sidecar=False)
        assert got.path.read_bytes() == archives[V7].read_bytes()
    finally:
        thread.join()
        held.close()
        for server in started:
            server.__exit__(None, None, None)


def test_resumed_only_after_a_matching_206(server, home, tmp_path):
    """A part on disk and a server that ignores Range (200), or answers 206 for another
    offset: the whole file comes again, and nothing says "resumed"."""
    data = server.files[f"/mirror/{V7}"]
    url = f"{server.base}/mirror/{V7}"
    for setting in ("ignore_range", "wrong_range"):
        cache = tmp_path / setting
        cache.mkdir()
        (cache / f"{V7}.part").write_bytes(data[:1500])
        setattr(server, setting, True)
        done, out = run_json(["download", url, "--cache-dir", cache], home)
        setattr(server, setting, False)
        assert done.returncode == 0, done.stderr
        assert out["download"]["resumed_from"] == 0 and "resumed at byte" not in done.stderr
        assert (cache / V7).read_bytes() == data
    server.drop_after, server.drops_left = 1500, 1  # resumed by the run's next attempt
    done, out = run_json(["download", url, "--cache-dir", tmp_path / "c"], home)
    assert out["download"]["resumed_from"] == 1500 and "resumed at byte 1500" in done.stderr


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


def test_netrc_credentials(server, tmp_path, home, monkeypatch):
    """~/.netrc comes from the home the caller passes (in-process, like the CLI), not from the
    process's own $HOME."""
    server.token = None
    monkeypatch.setenv("HOME", str(tmp_path / "elsewhere"))
    (home / ".netrc").write_text("machine 127.0.0.1 login alice password wonderland\n")
    (home / ".netrc").chmod(0o600)
    done, out = run_json(["download", f"{server.base}/mirror/{V7}", "-o", tmp_path / "dl"], home)
    assert done.returncode == 0, done.stderr
    expected = "Basic " + base64.b64encode(b"alice:wonderland").decode()
    assert server.file_requests()[-1]["headers"]["Authorization"] == expected
    assert (tmp_path / "dl" / V7).exists() and "wonderland" not in done.stdout + done.stderr
    other = tmp_path / "other.netrc"
    other.write_text("machine 127.0.0.1 login bob password builder\n")
    run_json(["download", f"{server.base}/mirror/{V7}", "-o", tmp_path / "dl2"], home,
             env_extra={"NETRC": str(other)})
    assert server.file_requests()[-1]["headers"]["Authorization"] == \
        "Basic " + base64.b64encode(b"bob:builder").decode()


def test_proxy_comes_from_the_callers_environment(server, tmp_path, home, monkeypatch):
    """http_proxy in the env given to main() is used, no_proxy honoured; the process's own
    environment is not looked at."""
    url = f"{server.base}/mirror/{V7}"

    def download(cache, **env):
        out = io.StringIO()
        code = main(["download", url, "--cache-dir", str(cache), "--json"],
                    env={"HOME": str(home), **env}, home=home, stdout=out, stderr=io.StringIO())
        return code, json.loads(out.getvalue())

    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # refused, if it were read
    monkeypatch.setenv("no_proxy", "")
    assert download(tmp_path / "direct")[0] == 0
    with ArchiveServer() as proxy:
        code, out = download(tmp_path / "a", http_proxy=proxy.base)
        # a proxy gets the absolute URL; this one does not know it, so it answers 404
        assert code == 6 and url in [r["path"] for r in proxy.requests]
        seen = len(proxy.requests)
        code, out = download(tmp_path / "b", http_proxy=proxy.base, no_proxy="localhost,127.0.0.1")
        assert code == 0 and len(proxy.requests) == seen


SECRETS = ["Authorization: Bearer s3cret", "X-Api-Key: k3y", "Cookie: session=c00kie",
           "X-Trace: 42"]


def test_headers_stay_behind_on_a_redirect_to_another_host(server, tmp_path, home):
    data = server.files[f"/mirror/{V7}"]
    server.files[f"/cdn/{V7}"] = data
    server.redirects[f"/mirror/{V7}"] = f"http://localhost:{server.port}/cdn/{V7}"
    args = ["download", f"{server.base}/mirror/{V7}"] + [a for h in SECRETS for a in ("--header", h)]
    done, out = run_json(args + ["--cache-dir", tmp_path / "a"], home)
    assert done.returncode == 0, done.stderr
    first, hop = server.file_requests()[-2:]
    assert first["host"].startswith("127.0.0.1") and hop["host"].startswith("localhost")
    assert {"Authorization", "X-Api-Key", "Cookie", "X-Trace"} <= set(first["headers"])
    assert not {"Authorization", "X-Api-Key", "Cookie", "X-Trace"} & set(hop["headers"])
    # a header named in the keep list follows; credentials never do
    done, out = run_json(args + ["--cache-dir", tmp_path / "b"], home, env_extra={
        "CUDNN_SETUP_REDIRECT_KEEP_HEADERS": "X-Trace, Authorization, X-Api-Key"})
    hop = server.file_requests()[-1]
    assert hop["headers"].get("X-Trace") == "42"
    assert not {"Authorization", "X-Api-Key", "Cookie"} & set(hop["headers"])
    # a redirect on the same host keeps them all
    server.redirects[f"/mirror/{V7}"] = f"/cdn/{V7}"
    run_json(args + ["--cache-dir", tmp_path / "c"], home)
    assert {"Authorization", "X-Api-Key", "Cookie", "X-Trace"} <= \
        set(server.file_requests()[-1]["headers"])


def test_netrc_is_asked_per_host_across_a_redirect(server, tmp_path, home):
    server.files[f"/cdn/{V7}"] = server.files[f"/mirror/{V7}"]
    server.redirects[f"/mirror/{V7}"] = f"http://localhost:{server.port}/cdn/{V7}"
    (home / ".netrc").write_text("machine 127.0.0.1 login alice password a\n"
                                 "machine localhost login carol password c\n")
    done, out = run_json(["download", f"{server.base}/mirror/{V7}", "--cache-dir", tmp_path], home)
    assert done.returncode == 0, done.stderr
    first, hop = server.file_requests()[-2:]
    assert first["headers"]["Authorization"] == "Basic " + base64.b64encode(b"alice:a").decode()
    assert hop["headers"]["Authorization"] == "Basic " + base64.b64encode(b"carol:c").decode()


def test_cached_url_without_checksum_is_reused_while_the_server_says_so(server, tmp_path, home):
    url = f"{server.base}/mirror/{V7}"
    args = ["download", url, "--cache-dir", tmp_path]
    done, out = run_json(args, home)
    assert out["download"]["from_cache"] is False and out["download"]["checksum"] is None
    gets = len(server.file_requests())
    done, out = run_json(args, home)
    assert out["download"]["from_cache"] is True, done.stderr
    assert out["download"]["validated_by"] == "etag unchanged"
    assert [r["method"] for r in server.file_requests()[gets:]] == ["HEAD"]
    assert "reused from the cache" in done.stderr
    # the server now serves other bytes under the same URL: fetched again
    server.files[f"/mirror/{V7}"] = server.files[f"/mirror/{V7}"] + b"\0" * 512
    done, out = run_json(args, home)
    assert out["download"]["from_cache"] is False
    assert (tmp_path / V7).read_bytes() == server.files[f"/mirror/{V7}"]
    # a server that names no validator: nothing proves the copy current, so it is fetched
    server.validators = False
    done, out = run_json(args, home)
    assert out["download"]["from_cache"] is False


def test_a_weak_date_vouches_for_no_cached_copy(server, tmp_path, home):
    """No ETag, and a Last-Modified no second before the response's Date: the file replaced
    within that second by one of the same size keeps the date (RFC 9110 8.8.2.2: such a date
    is weak). The cached copy was reused on it, the old bytes handed out as the new file's
    with exit 0. A date vouches for a copy only where it was strong when the copy was made."""
    import email.utils

    url = f"{server.base}/mirror/{V7}"
    args = ["download", url, "--cache-dir", tmp_path]
    server.etag = False
    server.last_modified = email.utils.formatdate(time.time() + 3600, usegmt=True)
    done, out = run_json(args, home)
    assert done.returncode == 0 and out["download"]["from_cache"] is False, done.stderr
    server.files[f"/mirror/{V7}"] = server.files[f"/mirror/{V7}"][::-1]  # same size and date
    done, out = run_json(args, home)
    assert done.returncode == 0 and out["download"]["from_cache"] is False, done.stderr
    assert (tmp_path / V7).read_bytes() == server.files[f"/mirror/{V7}"]
    # a date a second or more before the response's is strong: the copy made under it is
    # reused while the server says the same
    server.last_modified = "Mon, 01 Jan 2024 00:00:00 GMT"
    run_json(args, home)
    done, out = run_json(args, home)
    assert out["download"]["from_cache"] is True, done.stderr
    assert out["download"]["validated_by"] == "last_modified unchanged"


def test_a_changed_etag_is_not_outvoted_by_an_unchanged_date(server, tmp_path, home):
    """The server replaced the file with one of the same size: its ETag changed, its
    Last-Modified did not (a copy that kept its mtime, or one within the same second). Either
    validator matching was enough: the old copy was reused. Every validator both sides name
    must match."""
    url = f"{server.base}/mirror/{V7}"
    args = ["download", url, "--cache-dir", tmp_path]
    run_json(args, home)
    server.files[f"/mirror/{V7}"] = server.files[f"/mirror/{V7}"][::-1]  # same size
    done, out = run_json(args, home)
    assert out["download"]["from_cache"] is False, done.stderr
    assert (tmp_path / V7).read_bytes() == server.files[f"/mirror/{V7}"]


@pytest.mark.parametrize("planted", ["dangling-link", "link-to-a-file", "directory", "fifo"])
def test_a_lock_file_that_is_no_file_is_named_and_never_followed(planted, server, tmp_path,
                                                                 home):
    """`<cache>/<name>.lock`, which the tool makes as a plain file and removes, found as a
    link or a directory: exit 6 os-error "Too many levels of symbolic links" (or "Is a
    directory"), the lock file unnamed as such. Now download-target-exists saying what it is;
    the link is neither followed nor removed."""
    cache, victim = tmp_path / "cache", tmp_path / "victim"
    cache.mkdir()
    victim.write_bytes(b"not the tool's\n")
    lock = cache / f"{V7}.lock"
    if planted == "directory":
        lock.mkdir()
    elif planted == "fifo":  # opened and locked as if a file, then removed as the tool's own
        os.mkfifo(lock)
    else:
        lock.symlink_to(victim if planted == "link-to-a-file" else tmp_path / "nothing")
    done, out = run_json(["download", f"{server.base}/mirror/{V7}", "--cache-dir", cache], home)
    assert done.returncode == 6 and out["error"]["code"] == "download-target-exists", done.stderr
    what = {"directory": "a directory", "fifo": "a FIFO"}.get(planted, "a symbolic link")
    assert f"{V7}.lock exists and is {what}, not a lock file this tool made" in \
        out["error"]["message"]
    assert victim.read_bytes() == b"not the tool's\n" and os.path.lexists(lock)
    assert not (cache / V7).exists()


@pytest.mark.parametrize("given", ["-o", "--cache-dir"])
def test_a_download_directory_that_is_no_directory_says_what_it_is(given, server, tmp_path,
                                                                   home):
    """`-o /dev/null`, a FIFO or a file: "cannot create the download directory X: File
    exists", with a hint naming --cache-dir even for -o. Now what stands there is named, and
    the hint names the option given; it is left as it is."""
    fifo, plain = tmp_path / "fifo", tmp_path / "plain"
    os.mkfifo(fifo)
    plain.write_bytes(b"a file\n")
    for where, what in ((fifo, "a FIFO"), (plain, "a file"), (Path("/dev/null"),
                                                               "a character device")):
        args = ["download", f"{server.base}/mirror/{V7}", given, where]
        if given == "-o":
            args += ["--cache-dir", tmp_path / "cache"]
        done, out = run_json(args, home)
        assert done.returncode == 6, done.stderr
        assert out["error"]["code"] == "download-target-exists"
        assert out["error"]["message"] == f"{where} is {what}, not a directory to download into"
        assert out["error"]["hint"] == f"give {given} a directory"
    assert plain.read_bytes() == b"a file\n" and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_cached_copy_changed_on_disk_is_fetched_again(server, tmp_path, home):
    url = f"{server.base}/mirror/{V7}"
    run_json(["download", url, "--cache-dir", tmp_path], home)
    cached = tmp_path / V7
    cached.write_bytes(b"x" * cached.stat().st_size)  # same size, other bytes
    done, out = run_json(["download", url, "--cache-dir", tmp_path], home)
    assert out["download"]["from_cache"] is False
    assert cached.read_bytes() == server.files[f"/mirror/{V7}"]


def test_output_dir_holding_a_directory_of_the_archives_name(server, tmp_path, home):
    (tmp_path / "dl" / V7).mkdir(parents=True)
    done, out = run_json(["download", f"{server.base}/mirror/{V7}", "-o", tmp_path / "dl"], home)
    assert done.returncode == 6 and out["error"]["code"] == "download-target-exists"
    assert "Traceback" not in done.stderr and (tmp_path / "dl" / V7).is_dir()


def test_header_with_a_newline_is_a_usage_error(server, tmp_path, home):
    done, out = run_json(["download", f"{server.base}/mirror/{V7}", "--cache-dir", tmp_path,
                          "--header", "X-Evil: a\r\nHost: other"], home)
    assert done.returncode == 2 and not server.requests


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


@pytest.mark.parametrize("url,code", [("http://[bad/x.tgz", "bad-url"),
                                      ("http://127.0.0.1:99999/x.tgz", "bad-url"),
                                      ("ftp://127.0.0.1/x.tgz", "bad-url")])
def test_urls_that_do_not_parse_exit_6(url, code, tmp_path, home):
    done, out = run_json(["download", url, "--cache-dir", tmp_path], home)
    assert done.returncode == 6 and out["error"]["code"] == code, out["error"]


@pytest.mark.parametrize("umask", [0o000, 0o077])
def test_cache_and_output_modes_do_not_follow_the_umask(umask, server, home, tmp_path):
    """Under `umask 000` the cache dir was 0777 and the archive 0666: anyone could swap the
    bytes that root's next install reads from it. Under 077 the `-o` copy was 0600."""
    import os
    import stat

    from conftest import run_cli
    cache, out = tmp_path / "shared" / "cache", tmp_path / "shared" / "out"
    for args in (["--cache-dir", cache], ["--cache-dir", cache, "-o", out]):
        done = run_cli(["download", f"{server.base}/mirror/{V7}", *args, "--json"], home,
                       preexec_fn=lambda: os.umask(umask))
        assert done.returncode == 0, done.stderr
    made = [cache.parent, *cache.rglob("*"), cache, out, *out.rglob("*")]
    assert {p.name for p in made} >= {V7, "cache", "out", "saved"}
    for path in made:
        mode = stat.S_IMODE(path.lstat().st_mode)
        if path.name.endswith(".lock"):
            continue  # the lock is the holder's alone (0600) while it exists
        assert mode == (0o755 if path.is_dir() else 0o644), (str(path), oct(mode))


def test_a_cached_copy_another_user_could_have_planted_is_not_reused(server, tmp_path, home):
    """A cache dir anyone may add to (1777, or one left 0777 by an earlier umask 000): another
    user planted an archive of the served size and a record naming the server's ETag, and a
    URL with no checksum was answered from their bytes."""
    import os

    url = f"{server.base}/mirror/{V7}"
    learned = tmp_path / "learned"
    run_json(["download", url, "--cache-dir", learned], home)
    record = json.loads((learned / f"{V7}.cudnn-setup.json").read_text())
    real = server.files[f"/mirror/{V7}"]
    planted = b"P" * len(real)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    (shared / V7).write_bytes(planted)
    record["sha256"] = _sha(planted)
    (shared / f"{V7}.cudnn-setup.json").write_text(json.dumps(record))
    for name in (V7, f"{V7}.cudnn-setup.json"):
        os.chown(shared / name, 65534, 65534)  # the other user's files
    done, out = run_json(["download", url, "--cache-dir", shared], home)
    assert done.returncode == 0, out["error"]
    assert out["download"]["from_cache"] is False and out["download"]["sha256"] == _sha(real)


def test_a_part_another_user_planted_is_not_resumed(server, tmp_path, home):
    """In a cache others may add to, another user's `.part` was resumed: their bytes became
    the start of the archive, and with no checksum to check nothing noticed."""
    import os

    url = f"{server.base}/mirror/{V7}"
    real = server.files[f"/mirror/{V7}"]
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    part = shared / f"{V7}.part"
    part.write_bytes(b"P" * (len(real) // 2))
    os.chown(part, 65534, 65534)
    done, out = run_json(["download", url, "--cache-dir", shared], home)
    assert done.returncode == 0, out["error"]
    assert (shared / V7).read_bytes() == real and out["download"]["sha256"] == _sha(real)


@pytest.mark.parametrize("host, code", [(None, "connection-refused"),
                                        ("cudnn-setup-test.invalid", "unknown-host")])
@pytest.mark.parametrize("argv", [["download", "7.4"], ["install", "7.4", "--dry-run"]])
def test_a_mirror_that_cannot_be_reached_is_coded_as_the_downloader_codes_it(argv, host, code,
                                                                             home, cuda_root,
                                                                             refused_port):
    """The release manifests and indexes are read before any archive is downloaded: a mirror
    that refuses the connection, or whose host does not resolve (.invalid never does), has
    the codes docs/json.md gives those failures, not plain download-failed."""
    mirror = f"http://{host or f'127.0.0.1:{refused_port}'}/"
    done, out = run_json([*argv, "--mirror", mirror, "--cuda-root", cuda_root("12.4")], home)
    assert done.returncode == 6, out
    assert out["error"]["code"] == code, out["error"]


def test_what_to_try_when_nvidia_cannot_be_reached_is_an_option_of_each_command(refused_port):
    """NVIDIA's tree unreachable: the hint names the other sources of a version by options that
    every command reading the tree takes (`mirror` has no --mirror; following a hint that
    names it was a usage error)."""
    import re

    from cudnn_setup.fetch.http import Budget, Client
    from cudnn_setup.fetch.remote import Reader
    from cudnn_setup.grammar import COMMANDS

    reader = Reader(client=Client(timeout=(1, 1), budget=Budget(2)), mirror=False)
    with pytest.raises(DownloadFailed) as info:
        reader.labels(f"http://127.0.0.1:{refused_port}/compute/cudnn/redist/")
    named = set(re.findall(r"--[a-z][a-z-]*", info.value.hint))
    assert "--from" in named, info.value.hint
    for command in ("install", "download", "list", "mirror"):
        takes = {flag for opt in COMMANDS[command].options for flag in opt.flags}
        assert named <= takes, (command, named - takes)


def test_an_interrupted_download_says_its_bytes_are_kept_for_the_next_run(tmp_path, home):
    """Ctrl-C mid-download: no "change rolled back" (none was), the .part stays and is resumed."""
    import signal
    import subprocess
    import sys
    import time

    from conftest import clean_env
    from httpserver import ArchiveServer

    with ArchiveServer() as s:
        s.files["/big.tgz"] = os.urandom(1 << 20)
        s.hold_after["/big.tgz"], s.holds_left = 1 << 19, 1
        out = tmp_path / "out"
        proc = subprocess.Popen([sys.executable, "-m", "cudnn_setup", "download",
                                 f"{s.base}/big.tgz", "-o", str(out), "--json"],
                                env=clean_env(home), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        part = out / "big.tgz.part"
        end = time.monotonic() + 60
        while not (part.exists() and part.stat().st_size == 1 << 19) and time.monotonic() < end:
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
        s.released.set()
    error = json.loads(stdout)["error"]
    assert error["code"] == "interrupted", error
    assert "rolled back" not in error["message"] and "kept" in error["message"], error
    assert "resumes" in error["hint"]
    assert part.stat().st_size == 1 << 19
