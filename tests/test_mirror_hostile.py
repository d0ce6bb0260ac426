"""`mirror` against what others planted in its directory, by class: links where it writes (refused,
nothing outside DIR written or removed), modes under odd umasks, nothing left in `.incoming/`,
the download cache reused, manifests stat-checked before they are read, NVIDIA's direct
platform form, and releases the manifest schema cannot list refused before a byte is placed.
Real archives and wheels, real servers on 127.0.0.1, real processes for the umask."""
import json
import os
import resource
import stat
import time
from pathlib import Path

import pytest

from conftest import run_cli, run_json
from cudnn_setup.errors import ARCHIVE_REJECTED, DOWNLOAD_FAILED, INSTALL_FAILED
from fixtures.mirror import STANDARD, build_mirror
from fixtures.wheels import IndexFile, build_wheel, project_json, sha256
from httpserver import DirectoryServer as Served, IndexServer

X86_12 = STANDARD[0]


@pytest.fixture(scope="module")
def source(tmp_path_factory, compiler):
    return build_mirror(tmp_path_factory.mktemp("nvidia-copy"), archives=(X86_12,), cc=compiler)


def build(home, out, *args, **kw):
    return run_json(["mirror", out, *args], home, **kw)


def snapshot(path):
    return {str(p.relative_to(path)): (p.is_symlink(), p.read_bytes() if p.is_file() else None)
            for p in sorted(path.rglob("*"))}


# --- links where the mirror writes ----------------------------------------------------------

@pytest.mark.parametrize("link", ["cudnn/linux-x86_64", "cudnn", ".incoming"])
def test_a_link_planted_where_the_mirror_writes_is_refused_and_its_target_untouched(
        link, source, tmp_path, home):
    out, elsewhere = tmp_path / "fleet", tmp_path / "elsewhere"
    elsewhere.mkdir()
    # a user's file under the name a work copy of the archive once had
    (elsewhere / (X86_12.name + ".copy")).write_bytes(b"the user's own file")
    (elsewhere / X86_12.name).write_bytes(b"another of the user's files")
    (out / link).parent.mkdir(parents=True, exist_ok=True)
    (out / link).symlink_to(elsewhere, target_is_directory=True)
    before = snapshot(elsewhere)
    done, res = build(home, out, "9.1", "--cuda", "12", "--from", source.url)
    assert done.returncode == INSTALL_FAILED and res["error"]["code"] == "link-outside-root", \
        done.stderr
    assert link in res["error"]["message"]
    assert snapshot(elsewhere) == before
    assert not list(out.glob("redistrib_*.json"))


# --- pieces someone else could have written -------------------------------------------------

NOBODY = 65534


@pytest.mark.parametrize("piece,how", [
    ("", 0o777), ("", 0o1777), ("cudnn", 0o777), ("cudnn/linux-x86_64", 0o775),
    ("cudnn", NOBODY), ("redistrib_9.1.7.json", 0o666), ("redistrib_9.1.7.json", NOBODY)])
def test_a_mirror_piece_another_user_could_write_is_refused_before_anything_is_written(
        piece, how, source, tmp_path, home):
    """Built into a directory, or over a manifest, that another user may write, that user
    could swap an archive after its checksum went into the manifest, or plant a manifest the
    run keeps: the fleet would install their bytes. The rule of the state dir (state/trust.py)."""
    out = tmp_path / "fleet"
    (out / "cudnn" / "linux-x86_64").mkdir(parents=True)
    (out / "redistrib_9.1.7.json").write_text(json.dumps({"release_label": "9.1.7"}))
    target = out / piece
    if how == NOBODY:
        os.chown(target, NOBODY, NOBODY)
    else:
        target.chmod(how)
    before = snapshot(out)
    done, res = build(home, out, "9.1", "--cuda", "12", "--from", source.url)
    assert done.returncode == INSTALL_FAILED and res["error"]["code"] == "unsafe-mirror", \
        res["error"]
    assert snapshot(out) == before


# --- modes, whatever the umask ----------------------------------------------------------------

def _modes(out):
    return {str(p.relative_to(out)): stat.S_IMODE(p.lstat().st_mode) for p in out.rglob("*")}


@pytest.mark.parametrize("umask", [0o000, 0o077])
def test_mirror_dirs_are_0755_and_files_0644_under_any_umask(umask, source, tmp_path, home):
    out = tmp_path / "www" / "fleet"  # its parent made too
    done = run_cli(["mirror", out, "9.1", "--cuda", "12", "--from", source.url], home,
                   preexec_fn=lambda: os.umask(umask))
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(out.parent.stat().st_mode) == 0o755
    modes = _modes(out)
    assert {"cudnn", "cudnn/linux-x86_64", f"cudnn/linux-x86_64/{X86_12.name}", "index.html",
            "redistrib_9.1.7.json"} == set(modes)
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    for name, mode in modes.items():
        assert mode == (0o755 if (out / name).is_dir() else 0o644), (name, oct(mode))


# --- nothing left behind, and the cache reused ------------------------------------------------

def test_nothing_stays_in_incoming_after_a_run_that_succeeded_or_failed(source, tmp_path, home,
                                                                      compiler):
    out = tmp_path / "fleet"
    done, _ = build(home, out, "9.1", "--cuda", "12", "--from", source.url)
    assert done.returncode == 0, done.stderr
    assert not (out / ".incoming").exists()
    bad = build_mirror(tmp_path / "bad", archives=(X86_12,), cc=compiler,
                       wrong_sha256=frozenset({X86_12.name}))
    other = tmp_path / "other"
    done, res = build(home, other, "9.1", "--cuda", "12", "--from", bad.url)
    assert done.returncode == ARCHIVE_REJECTED and res["error"]["code"] == "checksum-mismatch"
    assert not (other / ".incoming").exists() or not list((other / ".incoming").iterdir())
    assert not (other / "cudnn" / "linux-x86_64" / X86_12.name).exists()


def test_a_second_mirror_of_the_same_release_downloads_nothing(source, tmp_path, home):
    with Served(source.root) as served:
        done, _ = build(home, tmp_path / "one", "9.1", "--cuda", "12", "--from", served.url)
        assert done.returncode == 0, done.stderr
        fetched = [p for p in served.paths() if p.endswith(X86_12.name)]
        assert len(fetched) == 1
        started = time.monotonic()
        done, res = build(home, tmp_path / "two", "9.1", "--cuda", "12", "--from", served.url)
        assert done.returncode == 0, done.stderr
        assert [p for p in served.paths() if p.endswith(X86_12.name)] == fetched
    assert time.monotonic() - started < 30
    assert (tmp_path / "two" / "cudnn" / "linux-x86_64" / X86_12.name).read_bytes() == \
        source.archives[X86_12.name].read_bytes()


def test_a_second_pypi_mirror_reuses_the_cached_wheel(tmp_path, home, compiler):
    wheel = build_wheel(tmp_path / "wheels", "9.1.7.99", "12", compiler)
    with IndexServer() as index:
        page = project_json("nvidia-cudnn-cu12", [
            IndexFile(wheel.name, f"{index.base}/f/{wheel.name}", sha256(wheel))])
        index.routes["/simple/nvidia-cudnn-cu12/"] = ("application/vnd.pypi.simple.v1+json", page)
        index.routes[f"/f/{wheel.name}"] = ("application/octet-stream", wheel.read_bytes())
        for out in ("one", "two"):
            done, res = build(home, tmp_path / out, "9.1", "--cuda", "12", "--from", "pypi",
                              "--index-url", index.base + "/simple/")
            assert done.returncode == 0, done.stderr
            assert not (tmp_path / out / ".incoming").exists()
    assert index.paths().count(f"/f/{wheel.name}") == 1


# --- what is read from DIR ---------------------------------------------------------------------

def test_a_huge_sparse_manifest_in_dir_is_refused_from_its_size(tmp_path, home, source):
    out = tmp_path / "fleet"
    out.mkdir()
    with open(out / "redistrib_9.1.7.json", "wb") as f:
        f.truncate(2 << 30)  # 2 GiB, no block on disk
    started = time.monotonic()
    # 1 GiB of data at most: reading the file whole would fail
    done, res = build(home, out, "9.1", "--cuda", "12", "--from", source.url,
                      preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_DATA,
                                                            (1 << 30, 1 << 30)))
    assert done.returncode == DOWNLOAD_FAILED and res["error"]["code"] == "manifest-damaged", \
        done.stderr
    assert "bytes" in res["error"]["message"] and time.monotonic() - started < 20


def test_a_manifest_with_nvidias_direct_platform_form_is_extended_not_a_crash(tmp_path, home,
                                                                              source):
    """8.x manifests and 9.27.0's windows-arm64 give a platform one archive directly."""
    out = tmp_path / "fleet"
    out.mkdir()
    doc = json.loads(source.manifests["9.1.7"].read_text())
    sbsa = X86_12.name.replace("x86_64", "sbsa")
    direct = {"relative_path": f"cudnn/linux-sbsa/{sbsa}", "sha256": "1" * 64, "md5": "1" * 32,
              "size": "10"}
    doc["cudnn"]["linux-sbsa"] = direct  # one sbsa archive, no variant (8.x's form)
    # a direct archive beside the variants (9.27.0's windows-arm64 form)
    beside = {**direct, "relative_path": "cudnn/linux-x86_64/"
              + X86_12.name.replace("cuda12", "cuda13")}
    doc["cudnn"]["linux-x86_64"] = beside
    (out / "redistrib_9.1.7.json").write_text(json.dumps(doc))
    from cudnn_setup.fetch.redistrib_json import parse_redistrib
    parse_redistrib((out / "redistrib_9.1.7.json").read_bytes(), "file:///x/redistrib_9.1.7.json")
    done, res = build(home, out, "9.1", "--cuda", "12", "--from", source.url)
    assert done.returncode != 70 and "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stderr
    written = json.loads((out / "redistrib_9.1.7.json").read_text())["cudnn"]
    assert written["linux-sbsa"] == direct
    assert written["linux-x86_64"]["cuda12"]["sha256"] == source.sha256(X86_12.name)
    assert {k: v for k, v in written["linux-x86_64"].items() if k != "cuda12"} == beside


# --- what the manifest could not list is never placed -------------------------------------------

@pytest.mark.parametrize("version", ["9.2.0.5rc1", "9.1.7.99+local"])
def test_a_release_the_manifest_cannot_list_is_refused_before_a_byte_is_placed(
        version, tmp_path, home, compiler):
    wheel = build_wheel(tmp_path / "wheels", version.replace("+local", ""), "12", compiler)
    name = wheel.name.replace(version.replace("+local", ""), version)
    out = tmp_path / "fleet"
    with IndexServer() as index:
        index.routes["/simple/nvidia-cudnn-cu12/"] = (
            "application/vnd.pypi.simple.v1+json",
            project_json("nvidia-cudnn-cu12", [IndexFile(name, f"{index.base}/f/{name}",
                                                         sha256(wheel))]))
        index.routes[f"/f/{name}"] = ("application/octet-stream", wheel.read_bytes())
        asked = version if "+" not in version else "9.1"
        done, res = build(home, out, asked, "--cuda", "12", "--from", "pypi",
                          "--index-url", index.base + "/simple/")
        assert f"/f/{name}" not in index.paths()
    assert done.returncode == ARCHIVE_REJECTED and res["error"]["code"] == "not-mirrorable", \
        done.stderr
    assert not (out / "cudnn").exists() or not list((out / "cudnn").rglob("*.tar.gz"))
    assert not list(out.glob("redistrib_*.json"))


def test_what_a_killed_run_left_in_incoming_is_removed_and_a_users_file_kept(source, tmp_path,
                                                                             home):
    out = tmp_path / "fleet"
    (out / ".incoming").mkdir(parents=True)
    left = out / ".incoming" / f"0123456789ab-{X86_12.name}"
    left.write_bytes(b"half of an archive")
    mine = out / ".incoming" / (X86_12.name + ".copy")
    mine.write_bytes(b"the user's own file")
    done, _ = build(home, out, "9.1", "--cuda", "12", "--from", source.url)
    assert done.returncode == 0, done.stderr
    assert not left.exists() and mine.read_bytes() == b"the user's own file"


def test_nvidias_own_9_27_0_manifest_with_its_mixed_windows_arm64_entry_is_extended(tmp_path):
    """The real redistrib_9.27.0.json: windows-arm64 holds a cuda13 variant and, beside it, a
    direct archive built for CUDA 13.4."""
    import shutil

    from conftest import REPO
    from cudnn_setup.mirror.directory import MirrorDir
    from cudnn_setup.mirror.manifest import Artifact
    from cudnn_setup.fetch.mirror_tree import MirrorTree
    from cudnn_setup.fetch.redistrib_json import parse_redistrib
    from cudnn_setup.sources.base import Offer

    out = tmp_path / "fleet"
    out.mkdir()
    shutil.copy(REPO / "data" / "known-releases" / "manifests" / "redistrib_9.27.0.json", out)
    name = "cudnn-linux-x86_64-9.27.0.42_cuda12-archive.tar.xz"
    offer = Offer(version="9.27.0.42", cuda_variant="cuda12", platform="linux-x86_64",
                  file_name=name, url="https://mirror.example/" + name, sha256="a" * 64,
                  checksum_from=None, format="archive")
    tree = MirrorTree(out)
    try:
        mirror = MirrorDir(tree)
        mirror.check_listable(offer, name, None)
        mirror.record(offer, Artifact(f"cudnn/linux-x86_64/{name}", "a" * 64, "b" * 32, 123))
        assert mirror.write() == ["9.27.0"]
    finally:
        tree.close()
    data = (out / "redistrib_9.27.0.json").read_bytes()
    releases = parse_redistrib(data, (out / "redistrib_9.27.0.json").as_uri(), "9.27.0")
    assert any(r.file_name.endswith("cuda13.4-archive.zip") for r in releases)
    assert any(r.sha256 == "a" * 64 for r in releases)


def test_another_user_can_serve_a_mirror_built_under_umask_077(source, home):
    """The web server's user (here nobody, uid 65534) reads every file the mirror wrote."""
    import shutil
    import subprocess
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="cudnn-mirror-serve-"))
    try:
        base.chmod(0o755)
        out = base / "www" / "fleet"
        done = run_cli(["mirror", out, "9.1", "--cuda", "12", "--from", source.url], home,
                       preexec_fn=lambda: os.umask(0o077))
        assert done.returncode == 0, done.stderr
        files = [p for p in out.rglob("*") if p.is_file()]
        assert len(files) == 3
        read = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                               "cat", *map(str, files)], capture_output=True)
        assert read.returncode == 0, read.stderr
        assert len(read.stdout) == sum(p.stat().st_size for p in files)
    finally:
        shutil.rmtree(base)


# --- two builders, one HTTP client --------------------------------------------------------------

def _served(source, server):
    """The copy of NVIDIA's tree served by `server`, below its root."""
    for path in source.root.rglob("*"):
        if path.is_file():
            server.files[f"/{path.relative_to(source.root)}"] = path.read_bytes()


def test_two_mirrors_into_one_dir_at_once_the_second_waits_for_the_first(source, tmp_path,
                                                                        home):
    """The second run used to fail at once (lock-held) while the first was downloading; it
    waits for DIR's lock as install waits for a root's, says so, then finds the work done."""
    import subprocess
    import sys

    from conftest import clean_env
    from httpserver import ArchiveServer

    out = tmp_path / "fleet"
    archive = f"/cudnn/linux-x86_64/{X86_12.name}"
    with ArchiveServer() as server:
        _served(source, server)
        server.throttle[archive] = 4.0  # the first run holds DIR's lock while it downloads
        cmd = [sys.executable, "-m", "cudnn_setup", "mirror", str(out), "9.1.7", "--cuda", "12",
               "--platform", "linux-x86_64", "--from", server.base + "/", "--json"]
        first = subprocess.Popen(cmd, env=clean_env(home), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not any(r["path"] == archive for r in server.requests):
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()
            time.sleep(0.05)
        second = subprocess.run(cmd, env=clean_env(home), capture_output=True, text=True,
                                timeout=300)
        first_out, first_err = first.communicate(timeout=300)
    assert first.returncode == 0, first_err
    assert second.returncode == 0, second.stderr
    assert f"waiting for the lock on {out}: held by PID {first.pid}" in second.stderr
    assert f"got the lock on {out}" in second.stderr
    assert [r["action"] for r in json.loads(first_out)["mirror"]["releases"]] == ["fetched"]
    assert [r["action"] for r in json.loads(second.stdout)["mirror"]["releases"]] == ["kept"]
    assert [r["path"] for r in server.requests].count(archive) == 1
    assert not (out / ".incoming").exists()


def test_a_mirror_of_several_platforms_makes_one_http_client(source, tmp_path, home,
                                                            monkeypatch):
    """Each platform's source used to get a client of its own, and with it a waiting budget
    of its own: one budget per command, whatever the number of platforms."""
    from cudnn_setup.fetch import http
    from httpserver import ArchiveServer

    made = []
    real = http.Client.__init__

    def counted(self, *args, **kwargs):
        real(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(http.Client, "__init__", counted)
    with ArchiveServer() as server:
        _served(source, server)
        done, res = build(home, tmp_path / "fleet", "9.1.7", "--cuda", "12", "--platform",
                          "linux-x86_64", "--platform", "linux-sbsa", "--platform",
                          "linux-aarch64", "--from", server.base + "/")
    assert done.returncode == 0, done.stderr
    assert [r["platform"] for r in res["mirror"]["releases"]] == ["linux-x86_64"]
    assert {s["platform"] for s in res["mirror"]["skipped"]} == {"linux-sbsa", "linux-aarch64"}
    assert len(made) == 1, f"{len(made)} clients made"


def test_a_mirror_lock_held_past_the_budget_is_lock_held_naming_its_holder(tmp_path):
    """The wait is bounded by the command's lock budget (Context.lock_timeout), as a root's."""
    import subprocess

    from cudnn_setup.errors import SetupError
    from cudnn_setup.mirror.build import Built, MirrorRequest, build

    out = tmp_path / "fleet"
    out.mkdir()
    holder = subprocess.Popen(["flock", str(out), "sleep", "60"])
    heard: list[str] = []
    try:
        deadline = time.monotonic() + 10
        while f" {holder.pid} " not in Path("/proc/locks").read_text():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        built = Built(out)
        started = time.monotonic()
        with pytest.raises(SetupError) as refused:
            build(MirrorRequest(out, (), ("12",), (), None, {}, lock_timeout=1.0), built,
                  heard.append)
        assert 1.0 <= time.monotonic() - started < 10
    finally:
        holder.kill()
        holder.wait()
    assert refused.value.code == "lock-held" and "waited 1 s" in refused.value.message
    assert heard == [f"waiting for the lock on {out}: held by PID {holder.pid} (flock "
                     f"{out} sleep 60, running since " + heard[0].rsplit("since ", 1)[1]]
    assert not built.started and not list(out.iterdir())
