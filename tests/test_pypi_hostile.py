"""Hostile package indexes, by class: secrets in every form of URL never shown, index pages
parsed in linear time at their size bound, the release read from the file the href names (never
from the anchor's text), and URLs that do not parse refused with the download-failed code, never
exit 70. Real index servers on 127.0.0.1, real wheels."""
import time

import pytest

from conftest import run_cli, run_json, tree_state
from cudnn_setup.errors import ARCHIVE_REJECTED, DOWNLOAD_FAILED
from cudnn_setup.sources import simple_api
from cudnn_setup.urls import redact, scrub
from fixtures.wheels import IndexFile, build_wheel, project_html, project_json, sha256
from httpserver import IndexServer

PROJECT = "nvidia-cudnn-cu12"
JSON = "application/vnd.pypi.simple.v1+json"
SECRET = "S3cr3tPW"
NO_FLAGS = ["--no-theanorc", "--no-frameworks"]


@pytest.fixture(scope="module")
def wheels(tmp_path_factory, compiler):
    out = tmp_path_factory.mktemp("wheels")
    return {v: build_wheel(out, v, "12", compiler) for v in ("9.1.7.99", "9.2.0.1")}


# --- secrets, whatever shape the URL has ------------------------------------------------------

@pytest.mark.parametrize("url,shown", [
    (f"https//user:{SECRET}@h/simple/", "https//h/simple/"),  # the scheme's colon missing
    (f"user:{SECRET}@host/simple/", "host/simple/"),  # no scheme at all
    (f"https://user:ab#{SECRET}@host/simple/", "https://host/simple/"),  # raw # in the password
    (f"https://user:ab/{SECRET}@host/simple/", "https://host/simple/"),  # raw /
    (f"https://user:ab?{SECRET}@host/simple/", "https://host/simple/"),  # raw ?
    (f"https://u:{SECRET}@x@host:8/a?t=1", "https://host:8/a?…"),  # the last @ ends it
    (f"http://{SECRET}@[::1/x", "http://[::1/x"),
    ("/home/u/archives/cudnn@9.tgz", "/home/u/archives/cudnn@9.tgz"),  # a path stays as it is
    (f"https://user:{SECRET}@/x.tgz", "https:///x.tgz"),  # no host after the user-info
    (f"https://user:{SECRET}@", "https://"),
    (f"https://user:{SECRET}@:8/x?t=1", "https://:8/x?…"),
    ("https://host/a@/b.tgz", "https://host/a@/b.tgz"),  # an `@` in the path stays
    ("file:///srv/a@/b.tgz", "file:///srv/a@/b.tgz"),
])
def test_redact_hides_user_info_in_every_form(url, shown):
    assert redact(url) == shown
    assert SECRET not in scrub(f"cannot read {url} now", url)


@pytest.mark.parametrize("index", [
    f"https//user:{SECRET}@127.0.0.1:9/simple/",
    f"user:{SECRET}@127.0.0.1:9/simple/",
    f"http://user:a#{SECRET}@127.0.0.1:9/simple/",
    f"http://user:a/{SECRET}@127.0.0.1:9/simple/",
    f"http://user:a?{SECRET}@127.0.0.1:9/simple/",
])
def test_index_url_secrets_never_reach_stdout_or_stderr(index, home):
    for json_flag in (["--json"], []):
        done = run_cli(["install", "9.1", "--from", "pypi", "--index-url", index, "--cuda", "12",
                        "--dry-run", *json_flag], home)
        text = done.stdout + done.stderr
        assert SECRET not in text, text
        assert done.returncode in (2, 6) and "Traceback" not in text, text


@pytest.mark.parametrize("args", [
    ["install", f"user:{SECRET}@127.0.0.1:9/x.tgz"],  # taken for a path: the path is shown
    ["install", f"https//user:{SECRET}@127.0.0.1:9/x.tgz"],
    ["install", f"https://user:{SECRET}@/x.tgz"],
    ["install", "9.1", "--cuda", "12", "--mirror", f"https//user:{SECRET}@127.0.0.1:9/x/"],
    ["inspect", f"user:{SECRET}@127.0.0.1:9/x.tgz"],
])
def test_url_like_sources_keep_their_secrets_wherever_they_are_taken(args, home):
    done = run_cli([*args, "--json"], home)
    assert SECRET not in done.stdout + done.stderr, done.stdout + done.stderr
    assert done.returncode in (2, 6), done.stderr


# --- linear time at the size bound ----------------------------------------------------------

@pytest.mark.parametrize("unit", [b"<a ", b"<!--", b"<!x", b"<a x='", b'<a href="', b"<",
                                  b"</", b"<a\t", b"<p =", b"<?", b"<a>", b"<a href=x>y</a>"])
def test_a_hostile_page_at_the_bound_is_read_in_linear_time(unit):
    """html.parser took 42 s on 60 KB of `<a `, 69 s on 320 KB of `<!--`, and never ended on
    4 MB of `<!x`; each of these pages is 16 MiB."""
    assert simple_api.MAX_PAGE_BYTES <= 16 << 20
    page = (unit * (simple_api.MAX_PAGE_BYTES // len(unit) + 1))[:simple_api.MAX_PAGE_BYTES]
    started = time.monotonic()
    try:
        simple_api.parse_page(page, "text/html", "http://127.0.0.1:9/simple/x/")
    except simple_api.DownloadFailed as exc:
        assert exc.code == "index-damaged"
    # well under a second on an idle machine; generous for a loaded test machine
    assert time.monotonic() - started < 8


def test_anchors_inside_comments_and_other_tags_are_read_as_a_browser_would():
    page = (b'<!-- <a href="/f/hidden-1.0.whl">hidden-1.0.whl</a> -->'
            b'<p title="x>y"><a href="/f/a-1.0-py3-none-any.whl#sha256=' + b"A" * 64 +
            b'" data-yanked>a-1.0-py3-none-any.whl</a>'
            b"<A HREF='/f/b-1.0-py3-none-any.whl'><b>b-1.0-py3-none-any.whl</b></A>"
            b'<a href="/f/c%2B1-1.0-py3-none-any.whl">c+1-1.0-py3-none-any.whl</a>')
    files = simple_api.parse_page(page, "text/html", "http://127.0.0.1:9/simple/x/")
    assert [(f.filename, f.url, f.sha256, f.yanked) for f in files] == [
        ("a-1.0-py3-none-any.whl", "http://127.0.0.1:9/f/a-1.0-py3-none-any.whl", "a" * 64,
         True),
        ("b-1.0-py3-none-any.whl", "http://127.0.0.1:9/f/b-1.0-py3-none-any.whl", None, False),
        ("c+1-1.0-py3-none-any.whl", "http://127.0.0.1:9/f/c%2B1-1.0-py3-none-any.whl", None,
         False)]


# --- what is downloaded is what is judged ------------------------------------------------------

def test_anchor_text_that_names_another_release_than_the_href_is_refused(wheels, cuda_root,
                                                                           home):
    """The anchor said 9.1.7.99 while the href was a 9.2.0.1 wheel: `install 9.1.7` installed
    9.2.0."""
    root = cuda_root("12.4", "lib")
    before = tree_state(root)
    real = wheels["9.2.0.1"]
    with IndexServer() as server:
        server.routes[f"/files/{real.name}"] = ("application/octet-stream", real.read_bytes())
        page = (f'<a href="{server.base}/files/{real.name}#sha256={sha256(real)}">'
                f'{wheels["9.1.7.99"].name}</a>').encode()
        server.routes[f"/simple/{PROJECT}/"] = ("text/html", page)
        done, out = run_json(["install", "9.1.7", "--from", "pypi", "--index-url",
                              server.base + "/simple/", "--cuda-root", root, *NO_FLAGS], home)
        assert not [p for p in server.paths() if p.startswith("/files/")]
    assert done.returncode == DOWNLOAD_FAILED and out["error"]["code"] == "index-damaged", \
        done.stderr
    assert "9.2.0.1" in out["error"]["message"] and tree_state(root) == before


# --- URLs that do not parse ---------------------------------------------------------------------

@pytest.mark.parametrize("kind,page", [
    ("text/html", b'<a href="http://[x/nvidia_cudnn_cu12-9.1.7.99-py3-none-manylinux_2_27_x86_64'
                  b'.whl">nvidia_cudnn_cu12-9.1.7.99-py3-none-manylinux_2_27_x86_64.whl</a>'),
    (JSON, project_json(PROJECT, [IndexFile(
        "nvidia_cudnn_cu12-9.1.7.99-py3-none-manylinux_2_27_x86_64.whl", "http://[::1",
        "a" * 64)])),
    (JSON, project_json(PROJECT, [IndexFile(
        "nvidia_cudnn_cu12-9.1.7.99-py3-none-manylinux_2_27_x86_64.whl",
        "http://127.0.0.1:port/x.whl", "a" * 64)])),
])
def test_an_index_url_that_does_not_parse_is_a_damaged_page_not_exit_70(kind, page, cuda_root,
                                                                         home):
    root = cuda_root("12.4", "lib")
    with IndexServer() as server:
        server.routes[f"/simple/{PROJECT}/"] = (kind, page)
        done, out = run_json(["install", "9.1", "--from", "pypi", "--index-url",
                              server.base + "/simple/", "--cuda-root", root, *NO_FLAGS], home)
    assert done.returncode == DOWNLOAD_FAILED and out["error"]["code"] == "index-damaged", \
        done.stderr


def test_credentials_on_the_index_and_a_file_url_with_a_bad_port_is_not_exit_70(wheels,
                                                                                cuda_root, home):
    root = cuda_root("12.4", "lib")
    name = wheels["9.1.7.99"].name
    with IndexServer() as server:
        server.routes[f"/simple/{PROJECT}/"] = ("text/html", project_html(PROJECT, [IndexFile(
            name, f"http://127.0.0.1:{server.port}x/files/{name}", sha256(wheels["9.1.7.99"]))]))
        index = server.base.replace("http://", f"http://fleet:{SECRET}@") + "/simple/"
        done, out = run_json(["install", "9.1", "--from", "pypi", "--index-url", index,
                              "--cuda-root", root, *NO_FLAGS], home)
    assert done.returncode == DOWNLOAD_FAILED, done.stderr
    assert SECRET not in done.stdout + done.stderr


@pytest.mark.parametrize("href", ["files/x\ud800.whl", "/files/\udce9.whl"])
def test_a_url_no_request_can_carry_is_a_bad_url_not_exit_70(href, wheels, cuda_root, home):
    """JSON's `\\ud800` escape in a file's URL reached the cache as a file name: os.lstat
    raised UnicodeEncodeError, exit 70. An undecodable byte (`\\udce9`) went out as the
    UTF-8 of a surrogate, a name no server has. Both are refused before any request."""
    root = cuda_root("12.4", "lib")
    name = wheels["9.1.7.99"].name
    with IndexServer() as server:
        server.routes[f"/simple/{PROJECT}/"] = (JSON, project_json(PROJECT, [IndexFile(
            name, href, sha256(wheels["9.1.7.99"]))]))
        before = tree_state(root)
        done, out = run_json(["install", "9.1", "--from", "pypi", "--index-url",
                              server.base + "/simple/", "--cuda-root", root, *NO_FLAGS], home)
        asked = server.paths()
    assert done.returncode == DOWNLOAD_FAILED and out["error"]["code"] == "bad-url", done.stderr
    assert "not UTF-8" in out["error"]["message"] and "percent-encode" in out["error"]["message"]
    assert asked == [f"/simple/{PROJECT}/"] and tree_state(root) == before


# --- a CUDA major with no wheel -----------------------------------------------------------------

def test_a_cuda_major_without_that_release_names_the_majors_that_have_it(wheels, home):
    """`install 9.28 --cuda 11 --from pypi` exited 2 suggesting a development build."""
    with IndexServer() as server:
        real = wheels["9.1.7.99"]
        server.routes[f"/simple/{PROJECT}/"] = ("text/html", project_html(PROJECT, [IndexFile(
            real.name, f"{server.base}/files/{real.name}", sha256(real))]))
        done, out = run_json(["install", "9.1", "--cuda", "11", "--from", "pypi", "--index-url",
                              server.base + "/simple/", "--dry-run", *NO_FLAGS], home)
    assert done.returncode == ARCHIVE_REJECTED and out["error"]["code"] == "no-cuda-variant", \
        done.stderr
    assert "CUDA 11" in out["error"]["message"] and "CUDA 12" in out["error"]["hint"]


# --- network failures say what failed ---------------------------------------------------------

@pytest.mark.parametrize("index,code,words", [
    ("http://cudnn-setup-test.invalid/simple/", "unknown-host", "does not resolve"),
    ("http://127.0.0.1:9/simple/", "connection-refused", "connection refused"),
])
def test_an_index_that_cannot_be_reached_says_why(index, code, words, home):
    done, out = run_json(["install", "9.28", "--cuda", "12", "--from", "pypi", "--index-url",
                          index, "--dry-run", *NO_FLAGS], home)
    assert done.returncode == DOWNLOAD_FAILED and out["error"]["code"] == code, done.stderr
    assert words in out["error"]["message"] and "not listed" not in out["error"]["message"]
