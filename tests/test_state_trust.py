"""Nobody but the owner steers a root: the state dir's modes do not follow the umask, state
that someone else could have written is refused before it is read, and the commands that only
look (verify, doctor) work for an ordinary user and never change the root.

The second user is uid 65534 (nobody) through setpriv; the roots live in a directory it can
traverse."""
import functools
import hashlib
import json
import os
import shutil
import signal
import site
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import REPO, clean_env, run_json, tree_state
from cudnn_setup.facts.cuda import find_cuda_root
from cudnn_setup.placement import engine
from cudnn_setup.state.transaction import Filesystem
from fixtures.generate import GENERATION_SAMPLES, make_cuda_root

V9 = GENERATION_SAMPLES["9.x"]
V7 = GENERATION_SAMPLES["v4-v7"]
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
CUDART = "lib64/libcudart.so.12"


@pytest.fixture
def shared(tmp_path):
    """A directory the second user can traverse (tmp_path itself sits in a 0700 dir)."""
    base = Path(tempfile.mkdtemp(prefix="cudnn-setup-trust-"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def root12(shared, compiler):
    return make_cuda_root(shared / "cuda", "12.4", "lib64", cc=compiler)


@functools.lru_cache(maxsize=None)
def _python() -> tuple[str, str]:
    """An interpreter of this Python that the second user may run (the test's own may lie
    under a home it cannot enter) and the path that gives it this checkout's packages. Where
    the checkout or its .venv lie in a directory that user cannot enter (a clone under a 0700
    temporary dir), they are laid out where it can: the package copied, the site-packages
    linked file by file (hard links where the filesystem allows)."""
    path = os.pathsep.join([str(REPO), *site.getsitepackages()])
    found = _runnable(path)
    if found is None:
        path = _public_copy()
        found = _runnable(path)
    if found is None:
        pytest.skip("no interpreter of this Python that uid 65534 may run")
    return found, path


def _runnable(path: str) -> str | None:
    # it must import the tool and start itself again as that user: the probes are its children
    probe = ("import subprocess, sys, cudnn_setup.commands.verify, cudnn_setup.commands.install; "
             "subprocess.run([sys.executable, '-c', ''], check=True); print(sys.version_info[:2])")
    for candidate in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"):
        if not os.path.exists(candidate):
            continue
        done = subprocess.run([*NOBODY, candidate, "-c", probe], capture_output=True, text=True,
                              env={"PYTHONPATH": path})
        if done.returncode == 0 and done.stdout.strip() == str(sys.version_info[:2]):
            return candidate
    return None


def _public_copy() -> str:
    import atexit

    public = Path(tempfile.mkdtemp(prefix="cudnn-setup-public-"))
    atexit.register(shutil.rmtree, public, True)
    public.chmod(0o755)
    shutil.copytree(REPO / "cudnn_setup", public / "src" / "cudnn_setup",
                    ignore=shutil.ignore_patterns("__pycache__"))
    parts = [str(public / "src")]
    for i, packages in enumerate(site.getsitepackages()):
        if os.path.isdir(packages):
            shutil.copytree(packages, public / f"site{i}", copy_function=_link_or_copy,
                            symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
            parts.append(str(public / f"site{i}"))
    for dirpath, dirnames, _ in os.walk(public):
        os.chmod(dirpath, 0o755)
    return os.pathsep.join(parts)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _cli(args, home: Path, *, umask: int | None = None, user: bool = False, timeout=300):
    """The CLI in a process of its own, under `umask`, as root or as the second user (both
    with the same interpreter, so that what they find is the same)."""
    python, path = _python()
    cmd = [*(NOBODY if user else []), python, "-m", "cudnn_setup", *map(str, args), "--json"]
    env = clean_env(home, TMPDIR=str(home), PYTHONPATH=path)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                          preexec_fn=(lambda: os.umask(umask)) if umask is not None else None)
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, f"one JSON line expected: {done.stdout!r} {done.stderr[-3000:]}"
    return done, json.loads(lines[0])


def _home(shared: Path, name: str) -> Path:
    home = shared / name
    home.mkdir(mode=0o777)
    home.chmod(0o777)  # the second user's home and TMPDIR
    return home


def _as_nobody(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([*NOBODY, _python()[0], "-c", code], capture_output=True, text=True,
                          timeout=60)


def _modes(top: Path) -> dict[str, tuple[str, int]]:
    """{path: (dir|file, mode)} of everything under `top` but links, `top` itself as "."."""
    out = {".": ("dir", stat.S_IMODE(os.lstat(top).st_mode))}
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = os.lstat(p)
            if not stat.S_ISLNK(st.st_mode):
                kind = "dir" if stat.S_ISDIR(st.st_mode) else "file"
                out[str(p.relative_to(top))] = (kind, stat.S_IMODE(st.st_mode))
    return out


class Watching(Filesystem):
    """Records the modes under the state dir at the commit point, when tx/ holds everything
    the transaction staged and backed up."""

    def __init__(self, state: Path):
        self.state = state
        self.seen: dict[str, tuple[str, int]] = {}

    def write_manifest(self, path, manifest):
        self.seen = _modes(self.state)
        super().write_manifest(path, manifest)


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077])
def test_the_state_dir_and_its_pieces_have_fixed_modes_under_any_umask(
        umask, archives, cuda_root, tmp_path):
    """Directories 0755 and records 0644, whatever the umask: under 000 a plain mkdir made
    them 0777 (anyone could swap what is staged or recorded), under 077 0700 (nobody else
    could verify)."""
    root_path = cuda_root()
    (root_path / "include" / "cudnn.h").write_text("/* copied by hand */\n")  # an original
    state = root_path / ".cudnn-setup"
    root = find_cuda_root({}, root_path)
    old = os.umask(umask)
    try:
        engine.install(engine.Request(archives[V7], root))
        fs = Watching(state)
        engine.install(engine.Request(archives[GENERATION_SAMPLES["8.0-8.3.0"]], root, force=True), fs=fs)
    finally:
        os.umask(old)
    assert fs.seen, "the upgrade reached no commit point"
    staged = [k for k in fs.seen if k.startswith("tx/")]
    assert staged and any("backup" in k for k in staged)
    after = _modes(state)
    for seen in (fs.seen, after):
        dirs = {rel: mode for rel, (kind, mode) in seen.items() if kind == "dir"}
        assert set(dirs.values()) == {0o755}, {r: oct(m) for r, m in dirs.items()}
        # files: as the install gives them (never writable by group or others)
        assert all(mode & 0o022 == 0 for kind, mode in seen.values()), seen
    assert after["manifest.json"] == ("file", 0o644)
    assert "originals/include/cudnn.h" in after and "tx" not in after
    for lib in (root_path / "lib64").iterdir():
        if not lib.is_symlink():
            assert stat.S_IMODE(lib.stat().st_mode) & 0o022 == 0, lib


def _evil_manifest(root: Path) -> bytes:
    """The manifest with the root's own CUDA runtime claimed as installed by the tool."""
    manifest = json.loads((root / ".cudnn-setup" / "manifest.json").read_text())
    record = dict(next(f for f in manifest["files"] if f["type"] == "file"
                       and f["path"].startswith("lib64/")))
    record.pop("stat", None)
    record.pop("blake3", None)
    cudart = (root / CUDART).read_bytes()
    record.update(path=CUDART, sha256=hashlib.sha256(cudart).hexdigest(),
                  mode=stat.S_IMODE((root / CUDART).stat().st_mode))
    manifest["files"].append(record)
    return json.dumps(manifest).encode()


def test_a_second_user_cannot_make_roots_uninstall_delete_the_cuda_runtime(
        archives, root12, shared):
    """The privilege escalation: root installs under umask 000; a second user replaces the
    manifest with one listing lib64/libcudart.so.12; root's uninstall must not delete it.
    The state dir is 0755 now, so the replacement fails; and a state dir left 0777 (as
    earlier releases made it) is refused as unsafe before the manifest is read."""
    home = _home(shared, "home")
    done, out = _cli(["install", archives[V9], "--cuda-root", root12, "--no-theanorc",
                      "--no-verify"], home, umask=0o000)
    assert done.returncode == 0, done.stderr[-3000:]
    state = root12 / ".cudnn-setup"
    assert stat.S_IMODE(state.stat().st_mode) == 0o755
    evil = shared / "evil.json"
    evil.write_bytes(_evil_manifest(root12))
    evil.chmod(0o644)
    replace = (f"import os, shutil; shutil.copy({str(evil)!r}, {str(state / 'm.tmp')!r}); "
               f"os.replace({str(state / 'm.tmp')!r}, {str(state / 'manifest.json')!r})")
    tried = _as_nobody(replace)
    assert tried.returncode != 0 and "PermissionError" in tried.stderr
    assert (state / "manifest.json").read_bytes() != evil.read_bytes()

    state.chmod(0o777)  # as an earlier release left it under umask 000
    tried = _as_nobody(replace)
    assert tried.returncode == 0, tried.stderr
    assert (state / "manifest.json").stat().st_uid == 65534
    before = tree_state(root12)
    for command in (["uninstall"], ["install", archives[V9], "--no-theanorc", "--force"]):
        done, out = _cli([*command, "--cuda-root", root12], home)
        assert done.returncode == 5, done.stderr[-3000:]
        error = out["error"]
        assert error["code"] == "unsafe-state", error
        assert f"{state} is mode 0777: writable by group and others" in error["message"]
        assert "chmod -R go-w" in error["hint"]
        assert tree_state(root12) == before
    assert (root12 / CUDART).is_file()


def _refused(root: Path, home: Path, archives, why: str) -> None:
    """uninstall and install refuse the state as unsafe, naming `why`; nothing changes."""
    before = tree_state(root)
    for command in (["uninstall"], ["install", archives[V9], "--no-theanorc", "--force"]):
        done, out = _cli([*command, "--cuda-root", root], home)
        assert done.returncode == 5, done.stderr[-3000:]
        assert out["error"]["code"] == "unsafe-state", out["error"]
        assert why in out["error"]["message"], out["error"]
        assert tree_state(root) == before


@pytest.mark.parametrize("writable,rel,planted", [
    (".", "journal.json", "journal.json"),  # a journal for the next recovery to follow
    ("tx", "tx/0123456789ab/backup/lib64/libcudart.so.12", "tx/0123456789ab"),  # its backups
    ("originals", "originals/lib64/libcudart.so.12", "originals/lib64"),  # what uninstall restores
])
def test_state_another_user_could_plant_is_refused_before_it_is_read(
        writable, rel, planted, archives, root12, shared):
    """A directory of the state left writable by others (as an earlier release's umask could
    leave it): the second user plants a piece in it. Refused while the directory is writable,
    and still refused (by the piece's owner) once its mode is put right."""
    home = _home(shared, "home")
    done, _ = _cli(["install", archives[V9], "--cuda-root", root12, "--no-theanorc",
                    "--no-verify"], home, umask=0o000)
    assert done.returncode == 0, done.stderr[-3000:]
    state = root12 / ".cudnn-setup"
    (state / writable).mkdir(exist_ok=True)
    (state / writable).chmod(0o777)
    tried = _as_nobody(f"import pathlib; p = pathlib.Path({str(state / rel)!r}); "
                       "p.parent.mkdir(parents=True, exist_ok=True); p.write_bytes(b'{}')")
    assert tried.returncode == 0, tried.stderr
    where = state if writable == "." else state / writable
    _refused(root12, home, archives, f"{where} is mode 0777: writable by group and others")
    # verify only looks: the state is its failed check, and nothing is changed either
    before = tree_state(root12)
    done, out = _cli(["verify", "--cuda-root", root12, "--no-theano"], home)
    assert done.returncode == 1 and out["error"] is None, done.stderr[-3000:]
    check = {c["name"]: c for c in out["checks"]}["state"]
    assert check["status"] == "fail" and check["data"]["code"] == "unsafe-state"
    assert tree_state(root12) == before
    (state / writable).chmod(0o755)
    _refused(root12, home, archives, f"{state / planted} is owned by uid 65534")
    assert (root12 / CUDART).is_file()


def test_state_owned_by_another_user_is_refused(archives, root12, shared):
    home = _home(shared, "home")
    done, _ = _cli(["install", archives[V9], "--cuda-root", root12, "--no-theanorc",
                    "--no-verify"], home)
    assert done.returncode == 0, done.stderr[-3000:]
    manifest = root12 / ".cudnn-setup" / "manifest.json"
    os.chown(manifest, 65534, 65534)
    done, out = _cli(["uninstall", "--cuda-root", root12], home)
    assert done.returncode == 5 and out["error"]["code"] == "unsafe-state", done.stderr
    assert f"{manifest} is owned by uid 65534" in out["error"]["message"]
    assert (root12 / CUDART).is_file() and (root12 / "lib64" / "libcudnn.so.9").exists()


def test_a_state_dir_this_user_cannot_open_is_a_permission_not_damage(archives, root12, shared):
    """A second user's uninstall on a root whose state dir it may not read (mode 000, 0711):
    the lock's open of the dir fails with EACCES, which was taken for a state dir replaced by
    a link or a file: `state-damaged`, its hint to move the state dir aside. It is this user's
    permission, and nothing changes."""
    home = _home(shared, "home")
    done, _ = _cli(["install", archives[V9], "--cuda-root", root12, "--no-theanorc",
                    "--no-verify", "--no-frameworks"], home)
    assert done.returncode == 0, done.stderr[-3000:]
    state = root12 / ".cudnn-setup"
    for mode in (0o000, 0o711):
        state.chmod(mode)
        before = tree_state(root12, leave_out=".cudnn-setup")
        done, out = _cli(["uninstall", "--cuda-root", root12], _home(shared, f"u{mode:o}"),
                         user=True)
        assert done.returncode == 5, done.stderr[-3000:]
        assert out["error"]["code"] == "permission-denied", out["error"]
        assert out["error"]["message"] == f"permission denied: {state}"
        assert "aside" not in out["error"]["hint"]
        assert tree_state(root12, leave_out=".cudnn-setup") == before
        assert stat.S_IMODE(state.stat().st_mode) == mode
    state.chmod(0o755)


def test_verify_names_the_state_dir_it_cannot_search_not_a_piece_inside(archives, root12,
                                                                          shared):
    """A state dir of mode 000: verify's `state` finding said "permission denied:
    …/.cudnn-setup/tx", a directory that does not exist; the one this user may not search is
    the state dir."""
    home = _home(shared, "home")
    done, _ = _cli(["install", archives[V9], "--cuda-root", root12, "--no-theanorc",
                    "--no-verify", "--no-frameworks"], home)
    assert done.returncode == 0, done.stderr[-3000:]
    state = root12 / ".cudnn-setup"
    state.chmod(0o000)
    try:
        done, out = _cli(["verify", "--cuda-root", root12, "--no-theano", "--no-frameworks"],
                         _home(shared, "user"), user=True)
    finally:
        state.chmod(0o755)
    check = next(c for c in out["checks"] if c["name"] == "state")
    assert check["detail"].startswith(f"permission denied: {state}:"), check


def test_verify_and_doctor_run_every_check_as_a_second_user_on_a_root_installed_under_umask_077(
        archives, root12, shared):
    """Installed by root under umask 077, the root is verified by an ordinary user: every
    check runs as it does for root (the GPU ones skip on a machine without one), and nothing
    is written."""
    home = _home(shared, "home")
    done, _ = _cli(["install", archives[V9], "--cuda-root", root12, "--no-theanorc",
                    "--no-verify"], home, umask=0o077)
    assert done.returncode == 0, done.stderr[-3000:]
    before = tree_state(root12)
    by_root = _cli(["verify", "--cuda-root", root12, "--no-theano"], home)
    user_home = _home(shared, "user")
    by_user = _cli(["verify", "--cuda-root", root12, "--no-theano"], user_home, user=True)
    for done, out in (by_root, by_user):
        assert out["error"] is None, out["error"]
        assert done.returncode in (0, 1)
    statuses = {c["name"]: c["status"] for c in by_user[1]["checks"]}
    assert statuses == {c["name"]: c["status"] for c in by_root[1]["checks"]}
    assert by_user[0].returncode == by_root[0].returncode
    for name in ("files", "elf", "versions", "load", "coherence", "deps", "compile"):
        assert statuses[name] == "pass", (name, by_user[1]["checks"])
    assert "state" not in statuses
    # doctor runs verify's checks into its problems: the same ones for both users
    doctors = [_cli(["doctor", "--cuda-root", root12], h, user=u)[1]
               for h, u in ((home, False), (user_home, True))]
    for doctor in doctors:
        assert doctor["error"] is None and doctor["cudnn_version"] == "9.3.0", doctor
        assert not [p for p in doctor["problems"] if p["check"] in ("state", "files", "load",
                                                                   "coherence", "deps")]
    assert [(p["severity"], p["check"]) for p in doctors[1]["problems"]] == \
        [(p["severity"], p["check"]) for p in doctors[0]["problems"]]
    assert tree_state(root12) == before
    # a state dir an earlier release made 0700: the user's checks run on the files alone
    (root12 / ".cudnn-setup").chmod(0o700)
    done, out = _cli(["verify", "--cuda-root", root12, "--no-theano"], user_home, user=True)
    assert out["error"] is None and done.returncode in (0, 1), done.stderr[-3000:]
    checks = {c["name"]: c for c in out["checks"]}
    assert checks["state"]["status"] == "warn", checks["state"]
    assert "chmod -R a+rX" in checks["state"]["data"]["hint"]
    assert all(checks[n]["status"] == "pass" for n in ("elf", "versions", "load", "compile"))


class KillAt(Filesystem):
    """SIGKILLs its own process at the n-th rename: a transaction left half done."""

    def __init__(self, n: int):
        self.n = n

    def replace(self, src, dst):
        self.n -= 1
        if self.n == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        super().replace(src, dst)


def _killed_upgrade(archives, root_path: Path, first: bool = False) -> None:
    """An upgrade of the root's v7 killed after its third rename; `first`: the v7 install
    itself, into a root the tool had no install in."""
    root = find_cuda_root({}, root_path)
    if not first:
        engine.install(engine.Request(archives[V7], root))
    pid = os.fork()
    if pid == 0:
        try:
            engine.install(engine.Request(archives[V7] if first else
                                          archives[GENERATION_SAMPLES["8.0-8.3.0"]], root,
                                          force=not first), fs=KillAt(3))
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    assert (root_path / ".cudnn-setup" / "journal.json").exists()


def test_verify_and_doctor_report_an_interrupted_transaction_with_the_command_that_completes_it(
        archives, cuda_root, home):
    """They never finish it themselves (doctor used to roll it back, then report as left the
    staging it had just deleted): the root, journal and staging stay as they are."""
    root = cuda_root()
    _killed_upgrade(archives, root)
    before = tree_state(root)
    repair = f"cudnn-setup repair --cuda-root {root}"
    done, out = run_json(["verify", "--cuda-root", root, "--no-theano"], home)
    assert done.returncode == 1 and out["error"] is None, done.stderr
    check = {c["name"]: c for c in out["checks"]}["state"]
    assert check["status"] == "fail" and repair in check["detail"], check
    assert out["pending"]["finish_with"] == repair and out["pending"]["committed"] is False
    assert tree_state(root) == before
    done, out = run_json(["doctor", "--cuda-root", root], home)
    assert out["error"] is None, done.stderr
    [state] = [p for p in out["problems"] if p["check"] == "state"]
    assert state["severity"] == "fail" and state["fix"] == f"run `{repair}`"
    assert "left by a cudnn-setup run that was killed" not in json.dumps(out["problems"])
    assert tree_state(root) == before
    # install completes it (rolls it back) before it looks at the root
    done, out = run_json(["install", archives[V7], "--cuda-root", root, "--no-theanorc",
                          "--no-verify"], home)
    assert done.returncode == 0 and out["install"]["recovered"], done.stderr
    assert not (root / ".cudnn-setup" / "journal.json").exists()


def test_repair_completes_a_killed_first_install_as_verify_says_it_will(archives, cuda_root,
                                                                        home):
    """verify and doctor name `repair` as the command that completes a transaction a killed run
    left. For a first install killed before its commit, repair rolled it back (the libraries
    it had placed removed) and then answered exit 2 `no-cudnn`, `changed: false`, with the
    rollback said on stderr only; uninstall said `changed: false` too."""
    root = cuda_root()
    _killed_upgrade(archives, root, first=True)
    placed = sorted(p.name for p in (root / "lib64").glob("libcudnn*"))
    assert placed, "the kill came before anything was placed"
    before = tree_state(root)
    done, out = run_json(["repair", "--cuda-root", root, "--dry-run"], home)
    assert done.returncode == 0 and out["error"] is None, out
    assert out["would_change"] is True and out["changed"] is False, out
    assert "completed first" in " ".join(out["repair"]["notes"]), out
    assert tree_state(root) == before
    done, out = run_json(["repair", "--cuda-root", root], home)
    assert done.returncode == 0 and out["error"] is None, out
    assert out["changed"] is True and "rolled back" in out["repair"]["recovered"], out
    assert not list((root / "lib64").glob("libcudnn*"))
    other = cuda_root()
    _killed_upgrade(archives, other, first=True)
    before = tree_state(other)
    done, out = run_json(["uninstall", "--cuda-root", other, "--dry-run"], home)
    assert done.returncode == 0 and "completed first" in " ".join(out["uninstall"]["notes"]), out
    assert "nothing to do" not in done.stderr and tree_state(other) == before
    done, out = run_json(["uninstall", "--cuda-root", other], home)
    assert done.returncode == 0 and out["changed"] is True, out
    assert "rolled back" in out["uninstall"]["recovered"], out
    assert not list((other / "lib64").glob("libcudnn*"))


def test_a_shared_cache_root_filled_serves_a_user_who_cannot_write_it(shared, compiler):
    """A fleet sets CUDNN_SETUP_CACHE_DIR once; root fills it (`download`, under umask 077).
    A user's `install VERSION` into their own root then failed, exit 5 `permission-denied` on
    the cache's lock file, though the archive was there, readable, with the published sha256.
    The copy is used as it is, checked against that sha256; the mirror is not asked for it."""
    from fixtures.mirror import build_mirror
    from httpserver import DirectoryServer

    mirror = build_mirror(shared / "mirror", cc=compiler)
    cache = shared / "cache"
    user_root = make_cuda_root(shared / "user-cuda", "12.4", "lib64", cc=compiler)
    subprocess.run(["chown", "-R", "65534:65534", str(user_root)], check=True)
    with DirectoryServer(mirror.root) as served:
        done, out = _cli(["download", "9.1", "--mirror", served.url, "--cuda", "12",
                          "--cache-dir", cache], _home(shared, "admin"), umask=0o077)
        assert done.returncode == 0, out
        fetched = len(served.log)
        done, out = _cli(["install", "9.1", "--mirror", served.url, "--cache-dir", cache,
                          "--cuda-root", user_root, "--no-theanorc", "--no-verify"],
                         _home(shared, "user"), user=True)
        assert done.returncode == 0 and out["changed"] is True, out
        assert out["download"]["from_cache"] is True, out["download"]
        assert not [p for p in served.paths()[fetched:] if p.endswith(".tar.xz")]
    assert (user_root / "lib64" / "libcudnn.so.9.1.7").is_file()
    # a copy whose bytes are not the published ones is never taken: the error stands
    archive = next(cache.glob("*.tar.xz"))
    archive.write_bytes(archive.read_bytes()[:-1] + b"x")
    with DirectoryServer(mirror.root) as served:
        done, out = _cli(["install", "9.1", "--mirror", served.url, "--cache-dir", cache,
                          "--cuda-root", user_root, "--no-theanorc", "--no-verify", "--force"],
                         _home(shared, "user2"), user=True)
        assert done.returncode == 6 and out["error"]["code"] == "permission-denied", out
        assert "--cache-dir" in out["error"]["hint"], out
        # the same cache refused by `download`: the same exit code and words
        done, again = _cli(["download", "9.1", "--mirror", served.url, "--cuda", "12",
                            "--cache-dir", cache], _home(shared, "user3"), user=True)
    assert done.returncode == 6 and again["error"]["message"] == out["error"]["message"], again


def test_a_root_this_user_cannot_write_is_refused_before_anything_is_downloaded(
        root12, shared, compiler):
    """As an ordinary user, `install VERSION --from pypi` into a root-owned root stops at once:
    the index is not even asked, nothing lands in the cache."""
    from httpserver import IndexServer
    from fixtures.wheels import IndexFile, build_wheel, project_json

    wheel = build_wheel(shared / "wheels", "9.1.7.99", "12", compiler)
    user_home = _home(shared, "user")
    cache = user_home / "cache"
    before = tree_state(root12)
    with IndexServer() as server:
        files = [IndexFile(wheel.name, f"{server.base}/files/{wheel.name}",
                           hashlib.sha256(wheel.read_bytes()).hexdigest())]
        server.routes["/simple/nvidia-cudnn-cu12/"] = (
            "application/vnd.pypi.simple.v1+json", project_json("nvidia-cudnn-cu12", files))
        server.routes[f"/files/{wheel.name}"] = ("application/octet-stream", wheel.read_bytes())
        done, out = _cli(["install", "9.1", "--from", "pypi", "--index-url",
                          server.base + "/simple/", "--cache-dir", cache, "--cuda-root", root12,
                          "--no-theanorc", "--no-frameworks"], user_home, user=True)
        asked = server.paths()
    assert done.returncode == 5, done.stderr[-3000:]
    assert out["error"]["code"] == "permission-denied"
    assert "nothing was downloaded" in out["error"]["message"]
    assert "--cuda-root" in out["error"]["hint"]
    assert not any(p.startswith("/files/") for p in asked), asked
    assert not cache.exists() or not any(cache.rglob("*.whl"))
    assert tree_state(root12) == before


def test_a_root_the_second_user_cannot_enter_is_said_to_be_unreadable(shared, compiler):
    """A root made under umask 077 is 0700: for another user that is a permission, not a
    missing toolkit, and the hint says what to change."""
    root = make_cuda_root(shared / "private", "12.4", "lib64", cc=compiler)
    root.chmod(0o700)
    home = _home(shared, "h-private")
    done, out = _cli(["verify", "--cuda-root", root, "--no-theano", "--no-frameworks"], home,
                     user=True)
    assert done.returncode == 4, out
    assert "cannot be read by this user" in out["error"]["message"], out["error"]
    assert "chmod a+rX" in out["error"]["hint"]


def test_uninstall_where_nothing_was_installed_says_so_once(cuda_root, home):
    """A root cudnn-setup never installed into: uninstall said "note: cudnn-setup has
    installed nothing here", then "... installed nothing in ROOT besides that", a "that"
    standing for nothing, where it had said "nothing to do"."""
    root = cuda_root()
    for dry_run in ([], ["--dry-run"]):
        done, out = run_json(["uninstall", "--cuda-root", root, *dry_run], home)
        assert done.returncode == 0 and out["changed"] is False, out
        assert "besides that" not in done.stderr, done.stderr
        assert f"cudnn-setup has installed nothing in {root}; nothing to do" in done.stderr


def test_download_into_a_writable_dir_names_the_cache_it_cannot_write(shared, archives):
    """`download URL -o DIR` keeps its lock and what it knows of the file in the cache. With
    DIR this user's own and the cache root's (a fleet's CUDNN_SETUP_CACHE_DIR), the error said
    "cannot write to the download directory DIR (or pass -o DIR somewhere writable)": the one
    directory that could be written, and an option that changes nothing."""
    from httpserver import ArchiveServer

    name = GENERATION_SAMPLES["v4-v7"]
    cache, out_dir = shared / "cache", shared / "out"
    cache.mkdir(mode=0o755)
    out_dir.mkdir()
    os.chown(out_dir, 65534, 65534)
    with ArchiveServer() as server:
        server.files[f"/{name}"] = archives[name].read_bytes()
        done, out = _cli(["download", f"{server.base}/{name}", "-o", out_dir,
                          "--cache-dir", cache], _home(shared, "user"), user=True)
    assert done.returncode == 6 and out["error"]["code"] == "permission-denied", out
    said = out["error"]["message"] + " " + out["error"]["hint"]
    assert f"download cache {cache}" in said and "--cache-dir DIR" in said, said
    assert str(out_dir) not in said and not list(out_dir.iterdir())
