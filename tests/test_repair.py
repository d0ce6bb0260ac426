"""`repair`: each kind of damage put back as the manifest records it, from the archive a path
names, the cache's copy or a fetch again over HTTP; a checksum that differs refused; a user's
change kept; uninstall still restores the root; a kill at every step leaves the root damaged as
before or repaired, never a mix."""
from __future__ import annotations

import json
import os
import signal
import sys
import traceback
from pathlib import Path

import pytest

from conftest import run_json, tree_state
from cudnn_setup.facts.cuda import find_cuda_root
from cudnn_setup.placement import repair as engine
from cudnn_setup.placement.engine import recover_pending
from cudnn_setup.state.transaction import Filesystem
from fixtures.generate import GENERATION_SAMPLES, SPECS
from httpserver import ArchiveServer
from test_json_contract import check_contract

V9 = GENERATION_SAMPLES["9.x"]
V8L = GENERATION_SAMPLES["8.3.1+"]
STATE = ".cudnn-setup"
USER_PATCH = b"/* a local patch */\n"


def _fitting(name: str) -> str:
    cuda = SPECS[name].cuda
    return cuda if "." in cuda else f"{cuda}.4"


def _without_state(tree: dict) -> dict:
    return {k: v for k, v in tree.items() if not k.startswith(STATE)}


def _manifest(root: Path) -> dict:
    return json.loads((root / STATE / "manifest.json").read_text())


def _pick(root: Path, kind: str, name_part: str) -> str:
    """The recorded path of a file or link whose name holds `name_part`."""
    return next(f["path"] for f in _manifest(root)["files"]
                if f["type"] == kind and name_part in f["path"].rsplit("/", 1)[-1])


def _install(source, root: Path, home: Path):
    done, out = run_json(["install", source, "--cuda-root", root, "--no-verify",
                          "--no-theanorc", "--no-frameworks"], home)  # repair is the subject
    assert done.returncode == 0, out["error"]
    return out


def _library(root: Path) -> str:
    return _pick(root, "file", "libcudnn_ops.so.9.")


def _link(root: Path) -> str:
    return _pick(root, "symlink", "libcudnn_ops.so.9")


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))


DAMAGE = {  # kind -> (what to do to the root, the damage repair must name)
    "deleted file": (lambda r: os.unlink(r / _library(r)), "missing"),
    "deleted header": (lambda r: os.unlink(r / "include" / "cudnn.h"), "missing"),
    "truncated file": (lambda r: os.truncate(r / _library(r), 100), "changed"),
    "bit flip": (lambda r: _flip(r / _library(r)), "changed"),
    "deleted link": (lambda r: os.unlink(r / _link(r)), "link-missing"),
    "re-pointed link": (lambda r: (os.unlink(r / _link(r)), os.symlink(
        os.path.basename(_pick(r, "file", "libcudnn_cnn.so.9.")), r / _link(r))), "re-pointed"),
    "mode changed": (lambda r: os.chmod(r / _library(r), 0o600), "mode"),
    "user-changed file": (lambda r: (r / "include" / "cudnn.h").write_bytes(
        (r / "include" / "cudnn.h").read_bytes() + USER_PATCH), "changed"),
}


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_each_kind_of_damage_is_put_back(kind, archives, cuda_root, home):
    root = cuda_root(_fitting(V9))
    (root / "include" / "cudnn.h").write_text("/* a cudnn.h copied by hand */\n")
    pristine = tree_state(root)
    _install(archives[V9], root, home)
    installed = _without_state(tree_state(root))
    damage, named = DAMAGE[kind]
    damage(root)
    damaged = tree_state(root)
    done, out = run_json(["verify", "--cuda-root", root, "--no-theano", "--no-frameworks"], home)
    files = next(c for c in out["checks"] if c["name"] == "files")
    assert files["status"] == "fail"
    assert f"repair --cuda-root {root}" in files["data"]["hint"], files

    done, out = run_json(["repair", "--cuda-root", root, "--dry-run"], home)
    assert done.returncode == 0 and out["changed"] is False and out["would_change"] is True
    assert [d["damage"] for d in out["repair"]["damage"]] == [named], out["repair"]
    assert tree_state(root) == damaged  # the dry run changed nothing

    done, out = run_json(["repair", "--cuda-root", root], home)
    assert done.returncode == 0 and out["changed"] is True, out["error"]
    check_contract(out, done.returncode)
    assert [d["damage"] for d in out["repair"]["damage"]] == [named]
    assert out["cudnn_version"] == _manifest(root)["cudnn_version"]
    assert _without_state(tree_state(root)) == installed
    kept = [a for a in out["repair"]["plan"] if a["action"] == "back up"]
    if kind in ("user-changed file", "truncated file", "bit flip"):
        # what stood there is kept where the answer says, byte for byte
        (copy,) = kept
        assert copy["to"].startswith(f"{STATE}/changed/")
        assert tree_state(root)[copy["to"]][2] == damaged[copy["path"]][2]
        if kind == "user-changed file":
            assert (root / copy["to"]).read_bytes().endswith(USER_PATCH)
            # named before the transaction replaced it, and again in the summary
            named = done.stderr.index("include/cudnn.h changed since cudnn-setup installed it")
            assert named < done.stderr.index("putting back 1 file and link")
            assert "kept what stood at include/cudnn.h" in done.stderr
    else:
        assert kept == [] and not (root / STATE / "changed").exists()

    done, out = run_json(["repair", "--cuda-root", root], home)
    assert done.returncode == 0 and out["changed"] is False and out["repair"]["damage"] == []
    done, out = run_json(["uninstall", "--cuda-root", root, "--dry-run"], home)
    said = [n for n in out["uninstall"]["notes"] if f"{STATE}/changed/" in n]
    assert len(said) == (1 if kept else 0), out["uninstall"]["notes"]
    done, out = run_json(["uninstall", "--cuda-root", root], home)
    assert done.returncode == 0, out["error"]
    assert tree_state(root) == pristine


def test_repair_from_the_cache_and_from_a_fetch_again(archives, cuda_root, home):
    root = cuda_root(_fitting(V9))
    with ArchiveServer() as server:
        server.files[f"/mirror/{V9}"] = archives[V9].read_bytes()
        url = f"{server.base}/mirror/{V9}"
        _install(url, root, home)
        installed = _without_state(tree_state(root))
        cached = home / ".cache" / "cudnn-setup" / V9
        assert cached.is_file()
        asked = len(server.requests)

        os.unlink(root / _library(root))  # the cache's copy serves, nothing is downloaded
        done, out = run_json(["repair", "--cuda-root", root], home)
        assert done.returncode == 0 and out["changed"] is True, out["error"]
        assert out["repair"]["archive"] == str(cached) and len(server.requests) == asked
        assert _without_state(tree_state(root)) == installed

        cached.unlink()  # no copy: fetched again from where the manifest says it came from
        _flip(root / _library(root))
        done, out = run_json(["repair", "--cuda-root", root], home)
        assert done.returncode == 0 and out["changed"] is True, out["error"]
        assert len(server.requests) > asked and cached.is_file()
        assert out["download"]["sha256"] == _manifest(root)["source"]["sha256"]
        assert _without_state(tree_state(root)) == installed

        cached.unlink()  # the server now has other bytes under that name: refused
        server.files[f"/mirror/{V9}"] = archives[V8L].read_bytes()
        os.unlink(root / _library(root))
        damaged = tree_state(root)
        done, out = run_json(["repair", "--cuda-root", root], home)
        assert done.returncode == 3 and out["error"]["code"] == "checksum-mismatch", out["error"]
        assert out["changed"] is False
        assert tree_state(root) == damaged


def test_an_archive_that_is_gone_is_a_clear_error(archives, cuda_root, home, tmp_path):
    root = cuda_root(_fitting(V9))
    copy = tmp_path / V9
    copy.write_bytes(archives[V9].read_bytes())
    _install(copy, root, home)
    copy.unlink()
    os.chmod(root / _library(root), 0o600)  # a mode needs no archive: its own bytes serve
    done, out = run_json(["repair", "--cuda-root", root], home)
    assert done.returncode == 0 and out["repair"]["archive"] is None, out["error"]
    os.unlink(root / _library(root))
    damaged = tree_state(root)
    done, out = run_json(["repair", "--cuda-root", root], home)
    assert done.returncode == 3 and out["error"]["code"] == "archive-unreadable"
    assert str(copy) in out["error"]["message"] + out["error"]["hint"]
    assert tree_state(root) == damaged


@pytest.mark.parametrize("location", ["file://elsewhere/x.tgz", "/" + "a" * 300 + "/x.tgz"])
def test_a_recorded_location_no_file_here_can_be_is_an_archive_that_is_gone(
        archives, cuda_root, home, location):
    """The manifest's location is read from disk, not typed: a `file://` URL of another host
    was a usage error (exit 2, "names a remote host") and a name no file system holds exit 5
    `name-too-long`, each before the cache was looked in. Both are an archive that is gone."""
    root = cuda_root(_fitting(V9))
    _install(archives[V9], root, home)
    manifest = _manifest(root)
    manifest["source"]["provenance"]["location"] = location
    manifest["source"]["name"] = "n" * 300
    (root / STATE / "manifest.json").write_text(json.dumps(manifest))
    os.unlink(root / _library(root))
    damaged = tree_state(root)
    done, out = run_json(["repair", "--cuda-root", root], home)
    assert done.returncode == 3, out["error"]
    assert out["error"]["code"] == "archive-unreadable", out["error"]
    assert location[:40] in out["error"]["message"]
    assert tree_state(root) == damaged


def test_a_root_without_a_managed_install(cuda_root, home):
    root = cuda_root()
    before = tree_state(root)
    for extra in ([], ["--dry-run"]):
        done, out = run_json(["repair", "--cuda-root", root, *extra], home)
        assert done.returncode == 2 and out["error"]["code"] == "no-cudnn", out["error"]
        assert "cudnn-setup install" in out["error"]["hint"]
    assert tree_state(root) == before


def test_damaged_state_is_refused(archives, cuda_root, home):
    root = cuda_root(_fitting(V9))
    _install(archives[V9], root, home)
    (root / STATE / "manifest.json").write_text('{"format": 3, "files": "no"}')
    before = tree_state(root)
    done, out = run_json(["repair", "--cuda-root", root], home)
    assert done.returncode == 5 and out["error"]["code"] == "state-damaged", out["error"]
    assert tree_state(root) == before


class _Killer(Filesystem):
    """SIGKILLs this process at its `at`-th filesystem step."""

    def __init__(self, at: int):
        self.at, self.step = at, 0

    def _tick(self):
        self.step += 1
        if self.step == self.at:
            os.kill(os.getpid(), signal.SIGKILL)

    def replace(self, src, dst):
        self._tick()
        super().replace(src, dst)

    def mkdir(self, path):
        self._tick()
        super().mkdir(path)

    def makedirs(self, path):
        self._tick()
        super().makedirs(path)

    def fsync_dir(self, path):
        self._tick()
        super().fsync_dir(path)

    def write_manifest(self, path, manifest):
        self._tick()
        super().write_manifest(path, manifest)

    def unlink(self, path):
        self._tick()
        super().unlink(path)

    def remove_tree(self, path):
        self._tick()
        super().remove_tree(path)


def _in_child(fn) -> str:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            fn()
        except BaseException:
            traceback.print_exc()
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
        return "killed"
    return "ok" if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 else f"failed {status}"


def _kill_sweep(archives, compiler, tmp_path, home, points) -> list[tuple[int, str]]:
    """Repair killed at each step n of `points(total)`, then `repair` again: the root is as
    installed, and the user's changed header kept once, whatever step the kill hit."""
    import shutil
    from fixtures.generate import make_cuda_root

    template = make_cuda_root(tmp_path / "template", _fitting(V9), cc=compiler)
    _install(archives[V9], template, home)
    installed = _without_state(tree_state(template))
    library = _library(template)
    os.unlink(template / library)
    os.unlink(template / _link(template))
    (template / "include" / "cudnn.h").write_bytes(b"/* mine */\n")
    damaged = _without_state(tree_state(template))
    counter = _Killer(0)
    probe = tmp_path / "probe"
    shutil.copytree(template, probe, symlinks=True)
    engine.repair(find_cuda_root({}, probe), lambda m: archives[V9], fs=counter)
    runs = []
    for n in points(counter.step):
        root = tmp_path / f"root{n}"
        shutil.copytree(template, root, symlinks=True)
        killed = _in_child(lambda: engine.repair(find_cuda_root({}, root), lambda m: archives[V9],
                                                 fs=_Killer(n)))
        pending = (root / STATE / "journal.json").exists()
        if n % 2:  # what the kill left, finished: exactly the damaged root, or the repaired one
            recover_pending(find_cuda_root({}, root))
            assert _without_state(tree_state(root)) in (damaged, installed), n
            pending = False
        done, out = run_json(["repair", "--cuda-root", root], home)
        assert done.returncode == 0, (n, out["error"])
        assert (out["repair"]["recovered"] is not None) == pending, (n, out["repair"])
        assert _without_state(tree_state(root)) == installed, n
        copies = list((root / STATE / "changed").glob("*/include/cudnn.h"))
        assert [c.read_bytes() for c in copies] == [b"/* mine */\n"], n
        assert not (root / STATE / "journal.json").exists() and not (root / STATE / "tx").exists()
        runs.append((n, killed))
        shutil.rmtree(root)
    assert all(k == "killed" for _, k in runs), runs
    return runs


def test_a_kill_at_sampled_steps_of_repair(archives, compiler, tmp_path, home):
    runs = _kill_sweep(archives, compiler, tmp_path, home,
                       lambda total: sorted({1, 2, total // 3, total // 3 + 1, 2 * total // 3,
                                             total - 1, total}))
    assert len(runs) >= 3


@pytest.mark.slow
def test_a_kill_at_every_step_of_repair(archives, compiler, tmp_path, home, record_property):
    runs = _kill_sweep(archives, compiler, tmp_path, home, lambda total: range(1, total + 1))
    record_property("repair_kill_points", len(runs))


def test_a_wheel_from_a_package_index_is_fetched_again_from_the_index(cuda_root, home, tmp_path,
                                                                      compiler):
    from fixtures.wheels import IndexFile, build_wheel, project_json, sha256
    from httpserver import IndexServer

    project = "nvidia-cudnn-cu12"
    wheel = build_wheel(tmp_path / "wheels", "9.1.7.99", "12", compiler)
    root = cuda_root("12.4", "lib")
    with IndexServer() as server:
        server.routes[f"/simple/{project}/"] = (
            "application/vnd.pypi.simple.v1+json",
            project_json(project, [IndexFile(wheel.name, f"{server.base}/files/{wheel.name}",
                                             sha256(wheel))]))
        server.routes[f"/files/{wheel.name}"] = ("application/octet-stream", wheel.read_bytes())
        done, out = run_json(["install", "9", "--from", "pypi", "--index-url",
                              server.base + "/simple/", "--cuda-root", root, "--no-verify",
                              "--no-theanorc", "--no-frameworks"], home)
        assert done.returncode == 0, out["error"]
        installed = _without_state(tree_state(root))
        for cached in (home / ".cache" / "cudnn-setup").rglob(wheel.name):
            cached.unlink()
        os.unlink(root / _library(root))
        done, out = run_json(["repair", "--cuda-root", root], home)
    assert done.returncode == 0 and out["changed"] is True, out["error"]
    assert out["download"]["from_cache"] is False and out["repair"]["archive"].endswith(wheel.name)
    assert _without_state(tree_state(root)) == installed


def test_the_archive_is_fetched_before_the_lock_is_waited_for(archives, cuda_root, home):
    """A download takes minutes at times: it does not hold the root's lock meanwhile."""
    from cudnn_setup.errors import InstallFailed
    from cudnn_setup.state.layout import StateDir

    root = cuda_root(_fitting(V9))
    _install(archives[V9], root, home)
    os.unlink(root / _library(root))
    asked = []

    def obtain(manifest):
        asked.append(manifest.source.name)
        return archives[V9]

    with StateDir(root).locked():  # another run holds the lock throughout
        with pytest.raises(InstallFailed) as refused:
            engine.repair(find_cuda_root({}, root), obtain, lock_timeout=0.2)
    assert refused.value.code == "lock-held" and asked == [V9]
    outcome = engine.repair(find_cuda_root({}, root), obtain)  # asked once, before the lock
    assert outcome.changed and asked == [V9, V9]


def test_verify_says_repairs_hint_to_people_and_each_damage_once(archives, cuda_root, home):
    """The hint that names repair was in the JSON only; a deleted library's links were each
    said twice (by their record and again by the directory's listing)."""
    from conftest import run_cli

    root = cuda_root()
    done, _ = run_json(["install", archives[GENERATION_SAMPLES["v4-v7"]], "--cuda-root", root,
                        "--no-verify", "--no-theanorc"], home)
    assert done.returncode == 0, done.stderr
    (root / "lib64" / "libcudnn.so.7.4.2").unlink()
    done = run_cli(["verify", "--cuda-root", root, "--no-theano", "--no-frameworks"], home)
    assert done.returncode == 1
    assert f"hint: run `cudnn-setup repair --cuda-root {root}`" in done.stdout, done.stdout
    files = next(line for line in done.stdout.splitlines() if line.lstrip().startswith("files"))
    assert files.count("libcudnn.so.7 -> libcudnn.so.7.4.2 is a broken link") == 1, files


@pytest.mark.parametrize("forged", ["setuid mode", "world-writable mode", "absolute link",
                                    "link out of the root"])
def test_repair_applies_no_mode_or_link_that_no_install_writes(forged, archives, cuda_root, home):
    """Repair takes modes and link targets from the manifest alone: a record asking for set-id
    bits, a file anyone may write, or a link out of the root is damaged state, and nothing of
    it is applied."""
    root = cuda_root()
    done, _ = run_json(["install", archives[GENERATION_SAMPLES["v4-v7"]], "--cuda-root", root,
                        "--no-verify", "--no-theanorc"], home)
    assert done.returncode == 0, done.stderr
    path = root / ".cudnn-setup" / "manifest.json"
    manifest = json.loads(path.read_text())
    lib = next(f for f in manifest["files"] if f["type"] == "file" and ".so." in f["path"])
    link = next(f for f in manifest["files"] if f["type"] == "symlink")
    if forged == "setuid mode":
        lib["mode"] = 0o6755
    elif forged == "world-writable mode":
        lib["mode"] = 0o666
    elif forged == "absolute link":
        link["target"] = "/etc/passwd"
    else:
        link["target"] = "../../outside"
    path.write_text(json.dumps(manifest))
    (root / lib["path"]).chmod(0o644)  # damage, so that repair has something to do
    os.unlink(root / link["path"])
    before = tree_state(root)
    done, out = run_json(["repair", "--cuda-root", root], home)
    assert done.returncode == 5 and out["error"]["code"] == "state-damaged", out
    assert tree_state(root) == before


def test_repair_under_umask_000_leaves_no_state_anyone_may_write(archives, cuda_root, home):
    """repair made its transaction's directories with the umask's mode: 0777 under umask 000,
    which its own next run (and every other command) then refused as unsafe state."""
    root = cuda_root()
    done, _ = run_json(["install", archives[GENERATION_SAMPLES["v4-v7"]], "--cuda-root", root,
                        "--no-verify", "--no-theanorc"], home)
    assert done.returncode == 0, done.stderr
    (root / "include" / "cudnn.h").unlink()
    done, out = run_json(["repair", "--cuda-root", root], home,
                         preexec_fn=lambda: os.umask(0))
    assert done.returncode == 0 and out["changed"] is True, out
    for dirpath, dirnames, _ in os.walk(root / ".cudnn-setup"):
        assert os.stat(dirpath).st_mode & 0o022 == 0, dirpath
    done, out = run_json(["repair", "--cuda-root", root], home)
    assert done.returncode == 0 and out["changed"] is False, out


@pytest.mark.parametrize("command", ["repair", "uninstall"])
def test_an_include_dir_linked_out_of_the_root_is_said_as_such(command, archives, cuda_root,
                                                               home, tmp_path):
    """As install says it (`link-outside-root`, naming the link), not as damaged state."""
    import shutil

    root = cuda_root()
    done, _ = run_json(["install", archives[GENERATION_SAMPLES["v4-v7"]], "--cuda-root", root,
                        "--no-verify", "--no-theanorc"], home)
    assert done.returncode == 0, done.stderr
    outside = tmp_path / "outinc"
    shutil.copytree(root / "include", outside, symlinks=True)
    shutil.rmtree(root / "include")
    (root / "include").symlink_to(outside)
    done, out = run_json([command, "--cuda-root", root], home)
    assert done.returncode == 5 and out["error"]["code"] == "link-outside-root", out


def test_a_url_recorded_without_its_query_is_not_asked_for_as_recorded(archives, cuda_root,
                                                                       home):
    """An install from a URL with a query (a pre-signed or token URL) records it as shown,
    `?…` in place of the query: repair takes the cache's copy, and without one says so,
    instead of asking the server for `…?%E2%80%A6`."""
    root = cuda_root(_fitting(V9))
    with ArchiveServer() as server:
        server.files[f"/mirror/{V9}"] = archives[V9].read_bytes()
        _install(f"{server.base}/mirror/{V9}?token=SECRET", root, home)
        assert "?…" in _manifest(root)["source"]["provenance"]["location"]
        cached = home / ".cache" / "cudnn-setup" / V9
        asked = len(server.requests)
        os.unlink(root / _library(root))
        done, out = run_json(["repair", "--cuda-root", root], home)
        assert done.returncode == 0 and out["repair"]["archive"] == str(cached), out["error"]
        cached.unlink()
        os.unlink(root / _library(root))
        damaged = tree_state(root)
        done, out = run_json(["repair", "--cuda-root", root], home)
        assert done.returncode == 3 and out["error"]["code"] == "archive-unreadable", out["error"]
        assert "without its query" in out["error"]["message"]
        assert "SECRET" not in json.dumps(out)
        assert len(server.requests) == asked and tree_state(root) == damaged


def test_every_check_a_lost_sub_library_fails_names_repair_for_a_managed_install(
        archives, cuda_root, home):
    """A sub-library the tool installed, deleted: files named repair, while coherence and deps
    told the user to reinstall (`cudnn-setup install ARCHIVE`), an install that repair makes
    needless. Each check whose finding is in the tool's own files now names the one command."""
    root = cuda_root(version=_fitting(V9))
    _install(archives[V9], root, home)
    os.unlink(root / _library(root))
    repair = f"cudnn-setup repair --cuda-root {root}"
    done, out = run_json(["verify", "--cuda-root", root, "--no-theano", "--no-frameworks"],
                         home)
    assert done.returncode == 1, done.stderr
    checks = {c["name"]: c for c in out["checks"]}
    for name in ("files", "coherence", "deps"):
        assert checks[name]["status"] == "fail", checks[name]
        assert repair in checks[name]["data"]["hint"], (name, checks[name]["data"]["hint"])
        assert "reinstall" not in checks[name]["data"]["hint"]
    [lost] = [e for e in checks["deps"]["data"]["dependencies"]
              if e["name"].startswith("libcudnn_ops") and not e["found"]]
    assert [f["how"] for f in lost["fixes"]] == ["repair"] and lost["fixes"][0]["text"] == repair
