"""install VERSION and list, end to end: mirrors on a real HTTP server on 127.0.0.1 and on disk
(file://), built from real cuDNN-shaped archives under NVIDIA's names with build numbers no
table has, and NVIDIA-schema manifests. No test reaches the internet: NVIDIA's own tree is
read from a local copy wherever its URLs are resolved."""
import hashlib
import io
import json
import re
import shutil
from pathlib import Path

import pytest

from conftest import REPO, clean_env, run_json, tree_state
from cudnn_setup.cli import main
from cudnn_setup.steps.by_version import NAME, PATH, URL, VERSION, classify, target
from cudnn_setup.commands.list import rows
from cudnn_setup.errors import ARCHIVE_REJECTED, DOWNLOAD_FAILED, USAGE, UsageError
from cudnn_setup.fetch import known_releases, redist
from cudnn_setup.fetch.candidates import Release, parse_request
from cudnn_setup.fetch.redist import ManifestDamaged
from cudnn_setup.fetch.remote import Reader
from cudnn_setup.fetch.resolve import NotOnMirror, Tree, catalog, ranked, resolve, resolve_name
from cudnn_setup.settings import mirror_setting, read_config, user_config_path
from fixtures.mirror import STANDARD, MirrorArchive, build_mirror
from httpserver import ArchiveServer
from httpserver import DirectoryServer as Served


NVIDIA = REPO / "fixtures" / "nvidia"
X86_12 = STANDARD[0].name  # cudnn-linux-x86_64-9.1.7.99_cuda12-archive.tar.xz
X86_13 = STANDARD[1].name
NEWEST_13 = STANDARD[3].name  # 9.4.2.99, CUDA 13 only


@pytest.fixture(scope="session")
def mirror(tmp_path_factory, compiler):
    return build_mirror(tmp_path_factory.mktemp("mirror"), cc=compiler)


@pytest.fixture
def served(mirror):
    with Served(mirror.root) as s:
        yield s


def _install(source, root, home, *extra, verify_with: Path | None = None):
    """Verified only when `verify_with` names the interpreter whose Theano and frameworks the
    verification looks at: these tests' subject is neither, so one that has none."""
    args = ["install", source, "--cuda-root", root, "--no-theanorc", *extra]
    args += ["--python", str(verify_with)] if verify_with else ["--no-verify"]
    return run_json(args, home, {"XDG_CACHE_HOME": str(home / "cache")})


def _cached(home):
    cache = home / "cache" / "cudnn-setup"
    return sorted(p.name for p in cache.iterdir()) if cache.exists() else []


# --- the "done when": a fresh CUDA 12.x root, one command, then list -------------------

def test_install_9_1_from_http_mirror_installs_verifies_and_list_marks_it(
        served, mirror, cuda_root, home, bare_python):
    root = cuda_root(version="12.4", layout="lib")
    done, out = _install("9.1", root, home, "--mirror", served.url, verify_with=bare_python)
    assert done.returncode == 0, done.stderr
    assert out["ok"] and out["changed"] and out["cudnn_version"] == "9.1.7"
    release = out["release"]
    assert (release["file_name"], release["cuda_variant"], release["platform"]) == (
        X86_12, "cuda12", "linux-x86_64")
    assert release["sha256"] == mirror.sha256(X86_12)
    assert release["source"] == f"redistrib_9.1.7.json at {served.url}redistrib_9.1.7.json"
    assert out["download"]["checksum"]["source"] == release["source"]
    checks = {c["name"]: c["status"] for c in out["checks"]}
    for name in ("files", "elf", "versions", "load", "cuda", "compile"):
        assert checks[name] == "pass", out["checks"]
    assert checks["gpu"] == "skip" and "fail" not in checks.values()
    assert (root / "lib" / "libcudnn.so.9.1.7").is_file()
    # the index, the one manifest that matches 9.1, the archive: nothing else
    assert served.paths() == ["/", "/redistrib_9.1.7.json", f"/cudnn/linux-x86_64/{X86_12}"]

    done, listed = run_json(["list", "--cuda-root", root, "--mirror", served.url], home)
    assert done.returncode == 0, done.stderr
    assert listed["cudnn_version"] == "9.1.7" and listed["cuda_version"] == "12.4"
    assert listed["platform"] == "linux-x86_64" and listed["mirror"] == served.url
    assert [(r["version"], r["cuda_variant"], r["installed"]) for r in listed["releases"]] == [
        ("9.1.7.99", "cuda12", True)]
    assert set(listed["releases"][0]) == {"version", "cuda_variant", "platform", "file_name",
                                          "sha256", "size", "source", "format", "installed",
                                          "flavour", "provenance"}
    assert "9.1.7.99     cudnn-linux-x86_64-9.1.7.99_cuda12-archive.tar.xz  installed" in \
        done.stderr


def test_major_request_takes_the_newest_with_the_roots_cuda_variant(mirror, cuda_root, home):
    for cuda, want in (("12.8", X86_12), ("13.0", NEWEST_13)):
        root = cuda_root(version=cuda, layout="lib")
        done, out = _install("9", root, home, "--mirror", mirror.url)
        assert done.returncode == 0, done.stderr
        assert out["release"]["file_name"] == want and out["changed"]
        assert out["cudnn_version"] == want.split("-")[3][:5]
        assert out["release"]["url"] == f"{mirror.url}cudnn/linux-x86_64/{want}"
        assert "download" not in out  # a file:// mirror is read in place, not copied
    # --cuda overrides the root's version in the choice of the build; a CUDA 13 build for a
    # CUDA 12 root is then refused before anything is written, unless --force
    root = cuda_root(version="12.8", layout="lib")
    done, out = _install("9", root, home, "--mirror", mirror.url, "--cuda", "13", "--dry-run")
    assert done.returncode == 3 and out["error"]["code"] == "cuda-mismatch"
    assert out["release"]["file_name"] == NEWEST_13
    done, out = _install("9", root, home, "--mirror", mirror.url, "--cuda", "13", "--dry-run",
                         "--force")
    assert done.returncode == 0 and out["release"]["file_name"] == NEWEST_13


def test_mirror_as_a_directory_path_and_from_the_environment(mirror, cuda_root, home):
    root = cuda_root(version="12.4", layout="lib")
    done, out = _install("9.1.7", root, home, "--mirror", str(mirror.root), "--dry-run")
    assert done.returncode == 0 and out["release"]["file_name"] == X86_12, done.stderr
    done, out = run_json(["install", "9.1.7", "--cuda-root", root, "--no-theanorc", "--dry-run"],
                         home, {"CUDNN_SETUP_MIRROR": mirror.url})
    assert done.returncode == 0 and out["release"]["file_name"] == X86_12
    assert out["would_change"] is True and not (root / "lib" / "libcudnn.so.9").exists()


def test_manifest_checksum_not_the_archives_is_refused_and_nothing_installed(
        tmp_path, compiler, cuda_root, home):
    bad = MirrorArchive("9.1.7.99", "12")
    m = build_mirror(tmp_path / "m", (bad,), cc=compiler, wrong_sha256=frozenset({bad.name}))
    root = cuda_root(version="12.4", layout="lib")
    before = tree_state(root)
    with Served(m.root) as s:
        done, out = _install("9.1", root, home, "--mirror", s.url)
    assert done.returncode == ARCHIVE_REJECTED, done.stderr
    assert "checksum mismatch" in out["error"]["message"]
    assert "redistrib_9.1.7.json" in out["error"]["message"]
    assert m.sha256(bad.name) in out["error"]["message"]
    assert tree_state(root) == before and _cached(home) == []
    done, out = _install("9.1", root, home, "--mirror", m.url)  # the same from disk
    assert done.returncode == ARCHIVE_REJECTED and "checksum mismatch" in out["error"]["message"]
    assert tree_state(root) == before


def test_mirror_without_manifests_falls_back_to_the_table(tmp_path, compiler, cuda_root, home):
    """Archives under names the table knows (with NVIDIA's real checksums, which these
    fabricated archives cannot have): the mirror is asked for each candidate, newest first,
    the one it has is fetched, and the table's checksum refuses it."""
    held = (MirrorArchive("9.5.1.17", "12"), MirrorArchive("9.2.0.82", "12"))
    m = build_mirror(tmp_path / "m", held, cc=compiler, manifests=False)
    root = cuda_root(version="12.4", layout="lib")
    before = tree_state(root)
    want = held[0].name
    order = [r.file_name for r in ranked(parse_request("9"), known_releases.releases(),
                                         "linux-x86_64", "12.4")]
    with Served(m.root) as s:
        done, out = _install("9", root, home, "--mirror", s.url)
    assert out["release"]["file_name"] == want and out["release"]["source"] == "known table"
    assert out["release"]["archives_probed"] == order.index(want) + 1
    probes = [(p, r) for p, r in s.log if r == "bytes=0-0"]
    assert [p.rsplit("/", 1)[1] for p, _ in probes] == order[:order.index(want) + 1]
    assert s.log[-1] == (f"/cudnn/linux-x86_64/{want}", None)
    assert done.returncode == ARCHIVE_REJECTED
    assert "known releases table" in out["error"]["message"]
    # the table's size differs from the fabricated archive's: refused before its body is read
    published = next(r.size for r in known_releases.releases() if r.file_name == want)
    assert out["error"]["code"] == "size-mismatch", out["error"]
    assert str(published) in out["error"]["message"]
    assert str(m.archives[want].stat().st_size) in out["error"]["message"]
    assert tree_state(root) == before


def test_version_missing_for_the_roots_cuda_major_names_the_variants(mirror, cuda_root, home):
    root = cuda_root(version="12.4", layout="lib")
    before = tree_state(root)
    done, out = _install("9.4.2", root, home, "--mirror", mirror.url)
    assert done.returncode == ARCHIVE_REJECTED and out["error"]["code"] == "no-cuda-variant"
    assert "CUDA 12" in out["error"]["message"] and "cuda13" in out["error"]["hint"]
    root11 = cuda_root(version="11.8", layout="lib")
    done, out = _install("9.1.7", root11, home, "--mirror", mirror.url)
    assert done.returncode == ARCHIVE_REJECTED and "cuda12, cuda13" in out["error"]["hint"]
    assert tree_state(root) == before and _cached(home) == []


def test_unknown_version_names_the_nearest(mirror, cuda_root, home):
    root = cuda_root(version="12.4", layout="lib")
    done, out = _install("9.19.0", root, home, "--mirror", mirror.url)  # found nowhere
    assert done.returncode == USAGE and out["error"]["code"] == "unknown-version"
    assert "nearest versions:" in out["error"]["hint"] and "9.19.1.2" in out["error"]["hint"]
    done, out = _install("9.1.8", root, home, "--mirror", mirror.url)
    # the mirror's releases count, read from the manifests nearest the request: versions, never labels
    near = out["error"]["hint"].split(": ", 1)[1].split(", ")
    assert done.returncode == USAGE and "9.1.7.99" in near, near
    assert all(len(v.split(".")) == 4 for v in near), near  # no "9.1.7" label among them


def test_mirror_without_an_index_is_asked_for_the_named_manifest(mirror, cuda_root, home):
    root = cuda_root(version="12.4", layout="lib")
    with ArchiveServer() as s:  # serves files, no directory pages
        for path in mirror.root.rglob("*"):
            if path.is_file():
                s.files["/m/" + str(path.relative_to(mirror.root))] = path.read_bytes()
        url = f"{s.base}/m/"
        done, out = _install("9.1.7", root, home, "--mirror", url, "--dry-run")
        assert done.returncode == 0 and out["release"]["file_name"] == X86_12, done.stderr
        asked = [r["path"] for r in s.requests]
        assert asked == ["/m/", "/m/redistrib_9.1.7.json", f"/m/cudnn/linux-x86_64/{X86_12}"]
        # "9.23" names no manifest; the table has no 9.23 either: nothing to find
        done, out = _install("9.23", root, home, "--mirror", url)
        assert done.returncode == USAGE and out["error"]["code"] == "unknown-version"


def test_manifest_contradicting_the_table_is_refused(tmp_path, cuda_root, home):
    doc = json.loads((NVIDIA / "redistrib_9.13.0.json").read_text())
    doc["cudnn"]["linux-x86_64"]["cuda12"]["sha256"] = "0" * 64
    (tmp_path / "redistrib_9.13.0.json").write_text(json.dumps(doc))
    root = cuda_root(version="12.4", layout="lib")
    done, out = _install("9.13", root, home, "--mirror", (tmp_path).as_uri())
    assert done.returncode == DOWNLOAD_FAILED and out["error"]["code"] == "manifest-damaged"
    assert "known table" in out["error"]["message"]
    (tmp_path / "redistrib_9.13.0.json").write_text("<html>not json</html>")
    done, out = _install("9.13", root, home, "--mirror", (tmp_path).as_uri())
    assert done.returncode == DOWNLOAD_FAILED and out["error"]["code"] == "manifest-damaged"


def test_unreachable_mirror_is_a_download_failure(cuda_root, home, tmp_path, refused_port):
    port = refused_port
    root = cuda_root(version="12.4", layout="lib")
    for args in (["install", "9.1", "--cuda-root", root, "--no-theanorc"],
                 ["list", "--cuda-root", root]):
        done, out = run_json([*args, "--mirror", f"http://127.0.0.1:{port}/"], home)
        assert done.returncode == DOWNLOAD_FAILED, done.stderr
        assert "connection refused" in out["error"]["message"]
    done, out = run_json(["list", "--cuda", "12", "--mirror", str(tmp_path / "nowhere")], home)
    assert done.returncode == DOWNLOAD_FAILED and "cannot list the mirror" in out["error"]["message"]


def test_bare_archive_name_and_file_url(mirror, cuda_root, home, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no file of that name here
    root = cuda_root(version="12.4", layout="lib")
    done, out = _install(X86_12, root, home, "--mirror", mirror.url, "--dry-run")
    assert done.returncode == 0 and out["release"]["source"].startswith("redistrib_9.1.7.json")
    unknown = X86_12.replace("9.1.7.99", "9.1.7.98")
    done, out = _install(unknown, root, home, "--mirror", mirror.url)
    assert done.returncode == USAGE and out["error"]["code"] == "unknown-archive"
    shutil.copy(mirror.archives[X86_12], tmp_path / X86_12)  # an existing file wins
    done, out = _install(X86_12, root, home, "--dry-run")
    assert done.returncode == 0 and "release" not in out
    done, out = _install(mirror.archives[X86_12].as_uri(), root, home, "--dry-run")
    assert done.returncode == 0 and out["cudnn_version"] == "9.1.7" and "release" not in out


def test_sha256_option_must_agree_with_the_published_one(mirror, cuda_root, home):
    root = cuda_root(version="12.4", layout="lib")
    done, out = _install("9.1", root, home, "--mirror", mirror.url, "--sha256", "a" * 64)
    assert done.returncode == ARCHIVE_REJECTED and "a" * 64 in out["error"]["message"]
    done, out = _install("9.1", root, home, "--mirror", mirror.url, "--dry-run",
                         "--sha256", mirror.sha256(X86_12).upper())
    assert done.returncode == 0, done.stderr


def test_cuda_and_mirror_options_belong_to_versions(mirror, cuda_root, home):
    root = cuda_root(version="12.4", layout="lib")
    for extra in (["--cuda", "12"], ["--mirror", mirror.url]):
        done, out = _install(str(mirror.archives[X86_12]), root, home, *extra)
        assert done.returncode == USAGE and "is an archive already" in out["error"]["message"]
    done, out = _install("9.1", root, home, "--mirror", mirror.url, "--cuda", "twelve")
    assert done.returncode == USAGE and "not a CUDA version" in out["error"]["message"]
    done, out = _install("9.1", root, home, "--mirror", "ftp://mirror/redist/")
    assert done.returncode == USAGE and "--mirror" in out["error"]["message"]


def test_root_of_unknown_cuda_version_needs_the_cuda_option(mirror, cuda_root, home):
    root = cuda_root(version="12.4", layout="lib", version_file="none")
    (root / "include" / "cuda.h").write_text("/* no version here */\n")
    done, out = _install("9.1", root, home, "--mirror", mirror.url)
    assert done.returncode == USAGE and "--cuda" in out["error"]["hint"]
    done, out = _install("9.1", root, home, "--mirror", mirror.url, "--cuda", "12", "--dry-run")
    assert done.returncode == 0 and out["release"]["file_name"] == X86_12


# --- list ---------------------------------------------------------------------------------------

def test_list_per_variant_newest_first(mirror, cuda_root, home):
    root = cuda_root(version="13.0", layout="lib")
    done, out = run_json(["list", "--cuda-root", root, "--mirror", mirror.url], home)
    assert done.returncode == 0 and out["cuda_version"] == "13.0"
    assert [r["file_name"] for r in out["releases"]] == [NEWEST_13, X86_13]
    assert all(not r["installed"] and r["size"] > 0 for r in out["releases"])
    done, out = run_json(["list", "--cuda-root", root, "--cuda", "12", "--mirror", mirror.url], home)
    assert [r["file_name"] for r in out["releases"]] == [X86_12]
    done, out = run_json(["list", "--cuda-root", root, "--cuda", "11", "--mirror", mirror.url], home)
    assert done.returncode == 0 and out["releases"] == []
    assert "nothing published fits" in done.stderr


def test_list_of_a_mirror_without_manifests_shows_the_table_and_says_so(tmp_path, cuda_root, home):
    root = cuda_root(version="11.8", layout="lib")
    (tmp_path / "m").mkdir()
    done, out = run_json(["list", "--cuda-root", root, "--mirror", tmp_path / "m"], home)
    assert done.returncode == 0
    table = [r for r in known_releases.releases() if r.platform == "linux-x86_64"
             and redist.variant_fits(r.cuda_variant, "11.8")]
    assert {r["file_name"] for r in out["releases"]} == {r.file_name for r in table}
    assert all(r["source"] == "known table" for r in out["releases"])
    assert "lists no redistrib_*.json" in done.stderr
    versions = [tuple(map(int, r["version"].split("."))) for r in out["releases"]]
    assert versions == sorted(versions, reverse=True)


def test_list_rows_take_a_gpu_fit_judge():
    r = Release("9.1.7.99", "cuda12", "linux-x86_64", "n", "cudnn/linux-x86_64/n", "0" * 64)
    old = Release("8.9.7.29", "cuda12", "linux-x86_64", "o", "cudnn/linux-x86_64/o", "1" * 64)
    got = rows([old, r], {"sha256": "1" * 64, "name": "o", "version": "8.9.7"},
               lambda rel: (rel.version.startswith("9"), "sm_50 needs cuDNN 9") if rel is r else None)
    assert [(g["version"], g["installed"]) for g in got] == [("9.1.7.99", False), ("8.9.7.29", True)]
    assert got[0]["fits"] == {"ok": True, "why": "sm_50 needs cuDNN 9"} and got[1]["fits"] is None
    assert "fits" not in rows([r], None)[0]


# --- settings: option > environment > user file > system file ----------------------------------

def test_mirror_setting_precedence(tmp_path, home):
    dirs = {k: tmp_path / k for k in ("opt", "env", "user", "system")}
    for d in dirs.values():
        d.mkdir()
    user = home / ".config" / "cudnn-setup" / "config.ini"
    user.parent.mkdir(parents=True)
    system = home / "etc-cudnn-setup.conf"  # what run_cli hands main() as the system file
    user.write_text(f"[cudnn-setup]\nmirror = {dirs['user']}\n")
    system.write_text(f"# the fleet's mirror\n[cudnn-setup]\nmirror = {dirs['system'].as_uri()}\n")

    def chosen(*args, env=None):
        done, out = run_json(["list", "--cuda", "12", *args], home, env)
        assert done.returncode == 0, done.stderr
        return out["mirror"]

    env = {"CUDNN_SETUP_MIRROR": str(dirs["env"])}
    assert chosen("--mirror", dirs["opt"], env=env) == dirs["opt"].as_uri() + "/"
    assert chosen(env=env) == dirs["env"].as_uri() + "/"
    assert chosen(env={"CUDNN_SETUP_MIRROR": ""}) == dirs["user"].as_uri() + "/"
    user.write_text("[cudnn-setup]\n")
    assert chosen() == dirs["system"].as_uri() + "/"
    xdg = tmp_path / "xdg"
    (xdg / "cudnn-setup").mkdir(parents=True)
    (xdg / "cudnn-setup" / "config.ini").write_text(f"[cudnn-setup]\nmirror={dirs['user']}\n")
    assert chosen(env={"XDG_CONFIG_HOME": str(xdg)}) == dirs["user"].as_uri() + "/"


@pytest.mark.parametrize("where", ["user", "env"])
def test_a_mirror_the_command_line_does_not_name_is_said_with_where_it_was_set(where, home,
                                                                               refused_port):
    """Set by the user's config.ini (or $CUDNN_SETUP_MIRROR): the run says which mirror it uses
    and who set it, and a mirror that cannot be reached is blamed on that setting."""
    dead = f"http://127.0.0.1:{refused_port}/cudnn/"
    user = home / ".config" / "cudnn-setup" / "config.ini"
    env = None
    if where == "user":
        user.parent.mkdir(parents=True)
        user.write_text(f"[cudnn-setup]\nmirror = {dead}\n")
        origin = str(user)
    else:
        env, origin = {"CUDNN_SETUP_MIRROR": dead}, "$CUDNN_SETUP_MIRROR"
    done, out = run_json(["list", "--cuda", "12"], home, env)
    assert f"using the mirror {dead}, set by {origin}" in done.stderr
    assert out["error"]["code"] == "connection-refused", out["error"]
    assert f"check the mirror URL (set by {origin})" in out["error"]["hint"]
    done, out = run_json(["list", "--cuda", "12", "--mirror", dead], home, env)
    assert "using the mirror" not in done.stderr  # named on the command line: the user knows
    assert "set by" not in out["error"]["hint"]


def test_relative_mirror_option_is_taken_from_the_callers_directory(tmp_path, home):
    """The directory comes from main()'s caller (the shell's), never from this process's cwd."""
    (tmp_path / "here" / "rel").mkdir(parents=True)
    out, err = io.StringIO(), io.StringIO()
    code = main(["list", "--cuda", "12", "--mirror", "rel", "--json"], env=clean_env(home),
                home=home, stdout=out, stderr=err, system_config=home / "etc-cudnn-setup.conf",
                cwd=tmp_path / "here")
    assert code == 0, err.getvalue()
    assert json.loads(out.getvalue())["mirror"] == (tmp_path / "here" / "rel").as_uri() + "/"


@pytest.mark.parametrize("text,complaint", [
    ("mirror = x\n", "not valid INI"),
    ("[cudnn-setup]\nmiror = http://m/\n", "unknown key 'miror'"),
    ("[cudnn-setup]\nmirror = relative/dir\n", "relative path"),
    ("[cudnn-setup]\nmirror = http://m/\nmirror = http://n/\n", "not valid INI"),
])
def test_bad_settings_files_are_usage_errors(home, text, complaint):
    system = home / "etc-cudnn-setup.conf"
    system.write_text(text)
    done, out = run_json(["list", "--cuda", "12"], home)
    assert done.returncode == USAGE and complaint in out["error"]["message"], out["error"]
    assert str(system) in out["error"]["message"]


def test_settings_paths_follow_xdg(tmp_path):
    assert user_config_path({}, tmp_path) == tmp_path / ".config/cudnn-setup/config.ini"
    assert user_config_path({"XDG_CONFIG_HOME": "/x"}, tmp_path) == Path("/x/cudnn-setup/config.ini")
    assert user_config_path({"XDG_CONFIG_HOME": "rel"}, tmp_path) == \
        tmp_path / ".config/cudnn-setup/config.ini"
    assert read_config(tmp_path / "missing.ini") == {}
    big = tmp_path / "big.ini"
    big.write_text("[cudnn-setup]\n" + "#" * (70 << 10))
    with pytest.raises(UsageError):
        read_config(big)
    assert mirror_setting(None, {}, tmp_path / "a", tmp_path / "b") is None


# --- NVIDIA's own tree, read from a local copy (its server is not reachable from tests) ----------

class LocalNvidia(Reader):
    """The real reader, with NVIDIA's host swapped for a local directory: every URL it is asked
    for is recorded, and must be one of NVIDIA's."""

    def __init__(self, root: Path, index: bool = True):
        super().__init__()
        self.root, self.index, self.asked = root, index, []

    def _local(self, url):
        assert url.startswith(redist.NVIDIA_REDIST), url
        self.asked.append(url)
        return self.root.as_uri() + "/" + url[len(redist.NVIDIA_REDIST):]

    def labels(self, base):
        return super().labels(self._local(base)) if self.index else None

    def read(self, url, limit):
        return super().read(self._local(url), limit)

    def exists(self, url):
        raise AssertionError("NVIDIA's tree holds every table archive: nothing to ask")


@pytest.fixture
def nvidia_copy(tmp_path, mirror):
    shutil.copy(NVIDIA / "redistrib_9.13.0.json", tmp_path)
    shutil.copy(mirror.manifests["9.4.2"], tmp_path)  # a release the table does not know
    return tmp_path


def test_nvidia_tree_by_default(nvidia_copy):
    reader = LocalNvidia(nvidia_copy)
    tree = Tree(redist.NVIDIA_REDIST, reader)
    got = resolve(parse_request("9"), tree, "linux-x86_64", "12.4")
    newest = ranked(parse_request("9"), known_releases.releases(), "linux-x86_64", "12.4")[0]
    assert got.release == newest and got.release.source == "known table"
    assert got.url == redist.NVIDIA_COMPUTE + newest.public_path
    got = resolve(parse_request("9.13.0"), tree, "linux-x86_64", "12.4")
    assert got.release.size == 873944756 and got.manifests == ("9.13.0",)
    assert got.url == ("https://developer.download.nvidia.com/compute/cudnn/redist/cudnn/"
                       "linux-x86_64/cudnn-linux-x86_64-9.13.0.50_cuda12-archive.tar.xz")
    got = resolve(parse_request("9.4.2"), tree, "linux-x86_64", "13.0")  # newer than the table
    assert got.release.version == "9.4.2.99" and got.url.startswith(redist.NVIDIA_REDIST)
    got = resolve(parse_request("7"), tree, "linux-x86_64", "10.2")
    assert got.url == ("https://developer.download.nvidia.com/compute/redist/cudnn/v7.6.5/"
                       "cudnn-10.2-linux-x64-v7.6.5.32.tgz")
    assert resolve_name("cudnn-10.2-linux-x64-v7.6.5.32.tgz", tree).url == got.url
    assert all(u.startswith(redist.NVIDIA_REDIST) for u in reader.asked)


def test_nvidia_catalog_adds_only_what_the_table_lacks(nvidia_copy):
    reader = LocalNvidia(nvidia_copy)
    found = catalog(Tree(redist.NVIDIA_REDIST, reader), "linux-x86_64")
    assert found.manifests == ("9.4.2",)  # 9.13.0 is in the table already
    names = {r.file_name for r in found.releases}
    assert NEWEST_13 in names
    assert {r.file_name for r in known_releases.releases() if r.platform == "linux-x86_64"} <= names


def test_resolve_probes_a_mirror_for_table_releases_newest_first(tmp_path, compiler):
    """With a table that vouches for these fabricated archives, the probe path installs."""
    held = MirrorArchive("9.5.1.99", "12")
    m = build_mirror(tmp_path, (held, MirrorArchive("9.2.0.99", "12")), cc=compiler,
                     manifests=False)
    table = [Release(v, "cuda12", "linux-x86_64", f"cudnn-linux-x86_64-{v}_cuda12-archive.tar.xz",
                     f"cudnn/linux-x86_64/cudnn-linux-x86_64-{v}_cuda12-archive.tar.xz",
                     hashlib.sha256(v.encode()).hexdigest())
             for v in ("9.8.0.99", "9.5.1.99", "9.2.0.99")]
    tree = Tree(m.url, Reader())
    got = resolve(parse_request("9"), tree, "linux-x86_64", "12.4", table)
    assert got.release.version == "9.5.1.99" and got.probes == 2
    assert redist.local_path(got.url) == m.archives[held.name]
    with pytest.raises(NotOnMirror) as err:
        resolve(parse_request("9.8"), tree, "linux-x86_64", "12.4", table)
    assert err.value.exit_code == DOWNLOAD_FAILED and err.value.code == "not-on-mirror"
    # the one archive asked for is named without a "…" of more, and the hint gives no
    # example version the mirror may not hold
    assert err.value.message.endswith("(asked for the 1 newest: "
                                      "cudnn-linux-x86_64-9.8.0.99_cuda12-archive.tar.xz)")
    assert not re.search(r"\d+\.\d+\.\d+", err.value.hint), err.value.hint
    with pytest.raises(ManifestDamaged):
        (tmp_path / "redistrib_9.2.0.json").write_text("{}")
        resolve(parse_request("9.2.0"), tree, "linux-x86_64", "12.4", table)


def test_sources_are_classified_files_first(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "9").mkdir()  # a directory is no archive: "9" stays a version
    (tmp_path / "9.1").write_text("a file")
    assert classify("9") == VERSION and classify("9.1") == PATH
    assert classify("9.17.0.29") == VERSION and classify(X86_12) == NAME
    assert classify("https://m/" + X86_12) == URL and classify("sub/" + X86_12) == PATH
    assert classify("cudnn.tar.xz") == PATH


def test_target_follows_the_machine_and_the_cuda_option(mirror):
    assert target(None, "12", "aarch64") == ("linux-sbsa", "12")
    assert target(None, None, "x86_64") == ("linux-x86_64", None)
    platform, cuda = target(None, " 12.4 ", "arm64")
    got = resolve(parse_request("9"), Tree(mirror.url, Reader()), platform, cuda)
    assert got.release.file_name == "cudnn-linux-sbsa-9.1.7.99_cuda12-archive.tar.xz"
    with pytest.raises(UsageError):
        target(None, "12.x", "x86_64")


def _roots_cache() -> Path | None:
    import os
    import pwd

    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return None
    cache = Path(pwd.getpwuid(0).pw_dir) / ".cache"
    return cache if cache.is_dir() else None


@pytest.mark.skipif(_roots_cache() is None,
                    reason="needs root, unshare and root's ~/.cache to mount a tmpfs on")
def test_root_with_a_users_home_keeps_its_downloads_in_its_own_cache(served, cuda_root, home):
    """`sudo cudnn-setup install 9.1 …` keeps the user's HOME on many systems: the download
    made ~/.cache and ~/.cache/cudnn-setup there root's, and the user's own `download` and
    `install VERSION` then failed with permission denied (so did any program caching under
    ~/.cache). Root's downloads go to root's own cache (a tmpfs over it here, in a mount
    namespace of the command's own, so the machine's is untouched)."""
    import os
    import subprocess
    import sys

    nobody = 65534
    os.chown(home, nobody, nobody)
    (home / ".theano").unlink()
    root = cuda_root(version="12.4", layout="lib")
    own = _roots_cache()
    script = (f'mount -t tmpfs tmpfs "{own}" && "$0" -m cudnn_setup "$@"; rc=$?; '
              f'echo --after--; ls -A "{own}/cudnn-setup"; exit $rc')
    done = subprocess.run(["unshare", "-m", "sh", "-c", script, sys.executable, "install", "9.1",
                           "--mirror", served.url, "--cuda-root", str(root), "--no-verify",
                           "--no-theanorc", "--json"], env=clean_env(home), cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    answer, _, cached = done.stdout.partition("--after--\n")
    assert done.returncode == 0 and json.loads(answer)["changed"] is True, done.stderr
    assert list(home.iterdir()) == [], list(home.iterdir())
    assert X86_12 in cached.split(), cached


def test_list_from_a_mirror_with_no_manifests_warns_in_the_json_too(served, home):
    """A mistyped mirror URL (404 for everything) lists the known table's releases, as a mirror
    without a directory listing does: said in a human note, while the JSON had no check at all
    (ok, exit 0, 50 releases, none of them on that mirror). A program keys off checks."""
    done, out = run_json(["list", "--mirror", served.url + "no-such-dir/", "--cuda", "12"], home)
    assert done.returncode == 0 and out["releases"], out
    assert [(c["name"], c["status"]) for c in out["checks"]] == [("manifests", "warn")], out
    assert "lists no redistrib_*.json" in out["checks"][0]["detail"]
    done, out = run_json(["list", "--mirror", served.url, "--cuda", "12"], home)
    assert out["checks"] == [] and out["releases"], out  # a mirror with manifests: nothing to say
