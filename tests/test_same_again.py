"""The same archive installed again: answered from the manifest, without decoding the archive,
while every installed file is as recorded; anything else goes the long way and is reported as
it always was.

Whether the archive was read is seen for real: the archive reader of this process is replaced by
one that fails the test (cudnn_setup.placement.judge.read_package), and the CLI runs in this
process (conftest.run_cli).
"""
import gzip
import json
import os
import shutil

import pytest

from conftest import REPO, run_json, tree_state

from cudnn_setup.placement import judge

SAMPLE = REPO / "fixtures" / "samples" / "cudnn-10.0-linux-x64-v7.4.2.24.tgz"
NOT_READ = "the archive was not read again"


@pytest.fixture
def installed(cuda_root, home, tmp_path):
    root = cuda_root("10.0")
    archive = tmp_path / SAMPLE.name
    shutil.copy(SAMPLE, archive)
    done, out = run_json(["install", archive, "--cuda-root", root, "--no-verify", "--no-theanorc",
                          "--no-frameworks"], home)  # the install again is the subject
    assert done.returncode == 0 and out["changed"] is True
    return root, archive


@pytest.fixture
def unread(monkeypatch):
    """Reading the archive fails the test; `calls` counts the attempts when allowed."""
    calls = []
    real = judge.read_package

    def guard(*args, **kwargs):
        calls.append(args[0])
        if not guard.allowed:
            raise AssertionError("the archive was decoded")
        return real(*args, **kwargs)

    guard.allowed = False
    monkeypatch.setattr(judge, "read_package", guard)
    return guard, calls


def again(root, archive, home, *extra):
    return run_json(["install", archive, "--cuda-root", root, "--no-verify", "--no-theanorc",
                     *extra], home)


def test_the_same_file_again_is_answered_from_the_manifest(installed, home, unread):
    root, archive = installed
    source = json.loads((root / ".cudnn-setup" / "manifest.json").read_text())["source"]
    assert len(source["stat"]) == 5 and source["size"] == archive.stat().st_size
    before = tree_state(root)
    done, out = again(root, archive, home)
    assert done.returncode == 0 and out["changed"] is False and out["error"] is None
    assert out["cudnn_version"] == "7.4.2"
    assert any(NOT_READ in n and "unchanged since" in n for n in out["install"]["notes"])
    assert out["install"]["unchanged"] == len(json.loads(
        (root / ".cudnn-setup" / "manifest.json").read_text())["files"])
    assert "is already installed" in done.stderr and "nothing changed" in done.stderr
    assert tree_state(root) == before
    done, out = again(root, archive, home, "--dry-run")
    assert done.returncode == 0 and out["would_change"] is False


def test_a_copy_of_the_archive_is_known_by_its_sha256(installed, home, unread, tmp_path):
    root, archive = installed
    copy = tmp_path / "elsewhere" / archive.name
    copy.parent.mkdir()
    shutil.copy(archive, copy)
    done, out = again(root, copy, home)
    assert done.returncode == 0 and out["changed"] is False
    assert any("its sha256 is the installed archive's" in n for n in out["install"]["notes"])


def test_another_archive_of_the_same_name_goes_the_long_way(installed, home, unread):
    """The same tar in other gzip bytes: another sha256, so it is read (and then, its files
    being the installed ones, nothing changes, as before)."""
    root, archive = installed
    guard, calls = unread
    guard.allowed = True
    tar = gzip.decompress(archive.read_bytes())
    archive.write_bytes(gzip.compress(tar, compresslevel=1, mtime=12345))
    done, out = again(root, archive, home)
    assert calls, "a different archive must be read"
    assert done.returncode == 0 and out["changed"] is False
    assert not any(NOT_READ in n for n in out["install"]["notes"])


def test_a_file_changed_since_is_found_and_reported_as_before(installed, home, unread):
    root, archive = installed
    guard, calls = unread
    guard.allowed = True
    header = root / "include" / "cudnn.h"
    header.write_bytes(header.read_bytes() + b"/* a local patch */\n")
    before = tree_state(root)
    done, out = again(root, archive, home)
    assert calls, "with a file changed, the install goes the long way"
    assert done.returncode == 5 and out["error"]["code"] == "changed-files"
    assert "include/cudnn.h" in out["error"]["message"]
    assert tree_state(root) == before


def test_a_mode_changed_since_goes_the_long_way(installed, home, unread):
    root, archive = installed
    guard, calls = unread
    guard.allowed = True
    lib = next(p for p in (root / "lib64").iterdir() if p.is_file() and not p.is_symlink()
               and p.name.startswith("libcudnn.so."))
    os.chmod(lib, 0o600)
    again(root, archive, home)
    assert calls


def test_verify_content_hashes_files_whose_stat_was_made_to_match(installed, home, unread):
    """A manifest whose stats say a changed file is unchanged: --verify-content still finds it."""
    root, archive = installed
    guard, calls = unread
    header = root / "include" / "cudnn.h"
    data = header.read_bytes()
    header.write_bytes(data[:-1] + (b"X" if data[-1:] != b"X" else b"Y"))  # same size
    manifest_path = root / ".cudnn-setup" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    st = os.lstat(header)
    for f in manifest["files"]:
        if f["path"] == "include/cudnn.h":
            f["stat"] = [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    manifest_path.write_text(json.dumps(manifest))
    done, out = again(root, archive, home)  # trusts the recorded stat, as verify does
    assert out["changed"] is False and not calls
    guard.allowed = True
    done, out = again(root, archive, home, "--verify-content")
    assert calls and done.returncode == 5 and out["error"]["code"] == "changed-files"


def test_a_manifest_without_the_archives_stat_still_works(installed, home, unread):
    """Manifests written before the archive's stat was recorded: known by sha256, and they still
    verify and uninstall."""
    root, archive = installed
    manifest_path = root / ".cudnn-setup" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    del manifest["source"]["stat"]
    manifest_path.write_text(json.dumps(manifest))
    done, out = again(root, archive, home)
    assert done.returncode == 0 and out["changed"] is False
    assert any("its sha256 is the installed archive's" in n for n in out["install"]["notes"])
    done, out = run_json(["verify", "--cuda-root", root, "--no-theano", "--no-frameworks"], home)
    assert {c["name"]: c["status"] for c in out["checks"]}["files"] == "pass"
    done, out = run_json(["uninstall", "--cuda-root", root], home)
    assert done.returncode == 0 and out["changed"] is True
    assert not (root / "include" / "cudnn.h").exists()


def test_force_always_reads_the_archive(installed, home, unread):
    root, archive = installed
    guard, calls = unread
    guard.allowed = True
    done, out = again(root, archive, home, "--force")
    assert calls and done.returncode == 0


@pytest.mark.parametrize("value", [[1, 2, 3], [1, 2, 3, 4, -5], "x", [1, 2, 3, 4, "5"]])
def test_a_damaged_archive_stat_in_the_manifest_is_state_damaged(installed, home, value):
    root, archive = installed
    manifest_path = root / ".cudnn-setup" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["source"]["stat"] = value
    manifest_path.write_text(json.dumps(manifest))
    done, out = again(root, archive, home)
    assert done.returncode == 5 and out["error"]["code"] == "state-damaged"
    assert "source.stat" in out["error"]["message"]


def test_by_version_the_installed_release_is_neither_fetched_nor_read(cuda_root, home, unread,
                                                                       compiler, tmp_path):
    """`install 9.1` with 9.1.7 installed from a mirror: the tree's manifest is read to know
    which release 9.1 is; its archive is not downloaded again, nor decoded."""
    from test_install_by_version import Served, _install

    from fixtures.mirror import build_mirror

    guard, calls = unread
    guard.allowed = True
    mirror = build_mirror(tmp_path / "mirror", cc=compiler)
    root = cuda_root(version="12.4", layout="lib")
    with Served(mirror.root) as served:
        done, out = _install("9.1", root, home, "--mirror", served.url)
        assert done.returncode == 0 and out["changed"] is True and len(calls) == 1
        archive = [p for p in served.paths() if p.startswith("/cudnn/")]
        (home / "cache" / "cudnn-setup" / archive[0].rsplit("/", 1)[1]).unlink()  # not even cached
        served.log.clear()
        guard.allowed = False
        done, out = _install("9.1", root, home, "--mirror", served.url)
        assert done.returncode == 0 and out["changed"] is False, done.stderr
        assert not [p for p in served.paths() if p.startswith("/cudnn/")], served.paths()
        assert any("published sha256" in n for n in out["install"]["notes"])
        assert out["cudnn_version"] == "9.1.7"
        # a file changed since: fetched and read the long way, reported as before
        guard.allowed = True
        header = root / "include" / "cudnn_version.h"
        header.write_bytes(header.read_bytes() + b"/* patched */\n")
        done, out = _install("9.1", root, home, "--mirror", served.url)
        assert done.returncode == 5 and out["error"]["code"] == "changed-files"
        assert [p for p in served.paths() if p.startswith("/cudnn/")] and len(calls) == 2


@pytest.mark.parametrize("extra", [(), ("--dry-run",)])
def test_the_release_installed_is_asked_about_before_a_byte_is_fetched(cuda_root, home, compiler,
                                                                       tmp_path, extra):
    """`install 9.1` of the release installed: the engine answers from the published checksum
    before the archive is asked for; with the archive gone from the mirror and the cache, a
    single request for it would fail the install (exit 6)."""
    from test_install_by_version import Served, _install

    from fixtures.mirror import build_mirror

    mirror = build_mirror(tmp_path / "mirror", cc=compiler)
    root = cuda_root(version="12.4", layout="lib")
    with Served(mirror.root) as served:
        done, out = _install("9.1", root, home, "--mirror", served.url)
        assert done.returncode == 0 and out["changed"] is True
        fetched = [p for p in served.paths() if p.startswith("/cudnn/")]
        assert fetched
        for path in fetched:
            (mirror.root / path.lstrip("/")).unlink()
        shutil.rmtree(home / "cache" / "cudnn-setup")
        served.log.clear()
        done, out = _install("9.1", root, home, "--mirror", served.url, *extra)
        assert done.returncode == 0, done.stderr
        assert out["changed"] is False and out["cudnn_version"] == "9.1.7"
        assert not [p for p in served.paths() if p.startswith("/cudnn/")], served.paths()
        assert "download" not in out


def test_the_engine_takes_one_request_and_has_no_mode_flag():
    """The install is asked as one typed request; whether it is needed at all is a question
    of its own (installed_already), not a flag that turns the install into a query."""
    import inspect

    import msgspec

    from cudnn_setup.placement import engine

    for entry in (engine.install, engine.installed_already, engine.uninstall,
                  engine.recover_pending):
        assert len(inspect.signature(entry).parameters) <= 8, entry.__name__
    assert issubclass(engine.Request, msgspec.Struct)
    assert list(inspect.signature(engine.install).parameters)[0] == "request"
    fields = set(engine.Request.__struct_fields__)
    assert not {n for n in fields if n.endswith("_only")}, fields
