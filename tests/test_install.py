"""install / uninstall: one atomic, reversible, idempotent transaction per run."""
import json
import os
import shutil
import shlex
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, clean_env, run_json, tree_state
from cudnn_setup.placement import engine as inst
from cudnn_setup.digest import file_digest
from cudnn_setup.facts.cuda import find_cuda_root
from cudnn_setup.errors import ArchiveRejected, InstallFailed
from cudnn_setup.state.transaction import Filesystem
from fixtures.generate import GENERATION_SAMPLES, SPECS
from fixtures.hostile import CASES, build_case, damaged
from sandboxfs import SMALL_FS, nearly_full, require, run_cli_in, tree_listing

V7 = GENERATION_SAMPLES["v4-v7"]
V8 = GENERATION_SAMPLES["8.0-8.3.0"]
V8L = GENERATION_SAMPLES["8.3.1+"]
V9 = GENERATION_SAMPLES["9.x"]


def fitting(name: str) -> str:
    """A CUDA root version of the major the archive was built for."""
    cuda = SPECS[name].cuda
    return cuda if "." in cuda else f"{cuda}.4"


def _root(path: Path):
    return find_cuda_root({}, path)


def _install(archives, name, root, home, *extra, verify=False):
    args = ["install", archives[name], "--cuda-root", root, "--theanorc", home / ".theanorc", *extra]
    if not verify:
        args.append("--no-verify")
    return run_json(args, home)


@pytest.mark.parametrize("generation", list(GENERATION_SAMPLES))
def test_every_generation_installs_with_resolving_chains(generation, archives, cuda_root, home):
    name = GENERATION_SAMPLES[generation]
    root = cuda_root(fitting(name), layout="lib64-link" if generation == "9.x" else "lib64")
    done, out = _install(archives, name, root, home)
    assert done.returncode == 0, done.stderr
    assert out["changed"] is True and out["ok"] is True
    lib = (root / "lib64").resolve()
    bare = lib / "libcudnn.so"
    assert bare.is_symlink()
    real = bare.resolve()
    assert real.is_file() and not real.is_symlink() and real.parent == lib
    chain = [os.readlink(bare), os.readlink(lib / os.readlink(bare))]
    assert chain[0].startswith("libcudnn.so.") and (lib / chain[1]).is_file()
    for p in list(lib.iterdir()) + list((root / "include").iterdir()):
        if p.name.startswith(("libcudnn", "cudnn")) and not p.is_symlink():
            mode = stat.S_IMODE(p.stat().st_mode)
            assert mode & 0o444 == 0o444 and not mode & 0o022 and not mode & 0o6000, (p, oct(mode))
    assert list(lib.glob("libcudnn*static.a")), "static libraries are installed too"
    manifest = json.loads((root / ".cudnn-setup" / "manifest.json").read_text())
    assert manifest["cudnn_version"] == out["cudnn_version"]
    assert manifest["source"]["sha256"] and all("type" in f for f in manifest["files"])


def test_v9_chain_for_every_sub_library(archives, cuda_root, home):
    root = cuda_root("12.4")
    _install(archives, V9, root, home)
    lib = root / "lib64"
    assert os.readlink(lib / "libcudnn_ops.so") == "libcudnn_ops.so.9"
    assert os.readlink(lib / "libcudnn_ops.so.9") == "libcudnn_ops.so.9.3.0"


def test_archive_without_links_gets_them(archives, cuda_root, home):
    root = cuda_root("6.5")
    _install(archives, "cudnn-6.5-linux-x64-v2.tgz", root, home)
    assert os.readlink(root / "lib64" / "libcudnn.so") == "libcudnn.so.6.5"
    assert os.readlink(root / "lib64" / "libcudnn.so.6.5") == "libcudnn.so.6.5.48"


def test_ldconfig_finds_no_file_where_a_link_belongs(archives, cuda_root, home):
    root = cuda_root("11.3")
    _install(archives, V8, root, home)
    out = subprocess.run(["ldconfig", "-N", "-X", "-v", "-n", str(root / "lib64")],
                         capture_output=True, text=True)
    assert "is not a symbolic link" not in out.stdout + out.stderr
    assert out.returncode == 0


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_rejected_archive_changes_nothing(case, tmp_path, compiler, cuda_root, home):
    root = cuda_root()
    sentinel = tmp_path / "sentinel"
    sentinel.write_text("keep")
    before = tree_state(root)
    done, out = run_json(["install", build_case(case, tmp_path, compiler), "--cuda-root", root,
                          "--theanorc", home / ".theanorc"], home)
    assert done.returncode == 3, done.stderr
    assert tree_state(root) == before
    assert sentinel.read_text() == "keep" and not (tmp_path / "evil.txt").exists()
    assert not (home / ".theanorc").exists()


@pytest.mark.parametrize("kind", ["truncated", "corrupt", "random", "bomb"])
def test_damaged_archive_changes_nothing(kind, archives, tmp_path, cuda_root, home):
    root = cuda_root()
    before = tree_state(root)
    path = damaged(archives[V7], tmp_path)[kind]
    done, _ = run_json(["install", path, "--cuda-root", root, "--no-theanorc"], home)
    assert done.returncode == 3
    assert tree_state(root) == before


def test_checksum_mismatch_is_refused_with_both_hashes(archives, cuda_root, home):
    root = cuda_root()
    before = tree_state(root)
    done, out = run_json(["install", archives[V7], "--cuda-root", root, "--no-theanorc",
                          "--sha256", "0" * 64], home)
    assert done.returncode == 3
    assert "0" * 64 in out["error"]["message"] and "got" in out["error"]["message"]
    assert tree_state(root) == before
    good = file_digest(archives[V7])
    done, out = run_json(["install", archives[V7], "--cuda-root", root, "--no-theanorc",
                          "--no-verify", "--sha256", good.upper()], home)
    assert done.returncode == 0


def test_idempotent_rerun_writes_nothing(archives, cuda_root, home):
    root = cuda_root("11.3")
    _install(archives, V8, root, home)
    before = tree_state(root)
    mtimes = {p: p.lstat().st_mtime_ns for p in root.rglob("*") if ".cudnn-setup" not in p.parts}
    done, out = _install(archives, V8, root, home)
    assert done.returncode == 0 and out["changed"] is False
    assert tree_state(root) == before
    assert mtimes == {p: p.lstat().st_mtime_ns for p in root.rglob("*")
                      if ".cudnn-setup" not in p.parts}
    done, out = _install(archives, V8, root, home, "--force")
    after = tree_state(root)
    assert out["changed"] is True
    assert after.pop(".cudnn-setup/manifest.json") != before.pop(".cudnn-setup/manifest.json")
    assert after == before


def _cudnn_files(root):
    return sorted(p.name for d in ("include", "lib64") for p in (root / d).iterdir()
                  if "cudnn" in p.name)


def test_upgrade_and_downgrade_replace_the_previous_version(archives, cuda_root, home):
    root = cuda_root("12.4")
    empty = tree_state(root)
    seen = {}
    for name, extra in ((V8L, ()), (V9, ()), (V8L, ()), (V7, ("--force",)), (V9, ())):
        done, out = _install(archives, name, root, home, *extra)
        assert done.returncode == 0 and out["changed"], done.stderr
        files = _cudnn_files(root)
        seen.setdefault(name, files)
        assert files == seen[name], "exactly this version's files, nothing left of the last"
        manifest = json.loads((root / ".cudnn-setup" / "manifest.json").read_text())
        assert sorted(Path(f["path"]).name for f in manifest["files"]) == files
    run_json(["uninstall", "--cuda-root", root], home)
    assert tree_state(root) == empty


def test_uninstall_restores_byte_for_byte(archives, cuda_root, home):
    root = cuda_root("12.4")
    before = tree_state(root)
    _install(archives, V9, root, home)
    assert tree_state(root) != before
    done, out = run_json(["uninstall", "--cuda-root", root], home)
    assert done.returncode == 0 and out["changed"] is True and out["cudnn_version"] == "9.3.0"
    assert tree_state(root) == before
    assert not (root / ".cudnn-setup").exists()
    done, out = run_json(["uninstall", "--cuda-root", root], home)
    assert done.returncode == 0 and out["changed"] is False


def _manual_copy(archives, root, tmp_path):
    """What people do by hand: extract and `cp` (links become files)."""
    import tarfile

    with tarfile.open(archives[V8L]) as tar:
        tar.extractall(tmp_path / "x", filter="data")
    top = tmp_path / "x" / V8L.replace(".tar.xz", "")
    for p in (top / "include").iterdir():
        shutil.copy(p, root / "include")
    for p in (top / "lib").iterdir():
        shutil.copy(p, root / "lib64")  # follows links: "is not a symbolic link" later


def test_manual_cudnn_is_backed_up_and_restored(archives, cuda_root, home, tmp_path):
    root = cuda_root("12.4")
    _manual_copy(archives, root, tmp_path)
    before = tree_state(root)
    done, out = _install(archives, V9, root, home)
    assert done.returncode == 0
    backed = out["install"]["backed_up"]
    assert "include/cudnn.h" in backed and "lib64/libcudnn.so" in backed
    assert "backed up include/cudnn.h" in done.stderr
    assert os.path.islink(root / "lib64" / "libcudnn.so")
    run_json(["uninstall", "--cuda-root", root], home)
    assert tree_state(root) == before


def test_changed_file_is_never_silently_replaced(archives, cuda_root, home):
    root = cuda_root("12.4")
    _install(archives, V8L, root, home)
    header = root / "include" / "cudnn.h"
    header.write_text(header.read_text() + "/* local patch */\n")
    before = tree_state(root)
    done, out = _install(archives, V9, root, home)
    assert done.returncode == 5 and "include/cudnn.h" in out["error"]["message"]
    assert "--force" in out["error"]["hint"] and out["error"]["code"] == "changed-files"
    assert tree_state(root) == before
    done, out = run_json(["uninstall", "--cuda-root", root], home)
    assert done.returncode == 5 and tree_state(root) == before
    done, out = _install(archives, V9, root, home, "--force")
    assert done.returncode == 0


def test_dry_run_prints_the_plan_and_touches_nothing(archives, cuda_root, home):
    root = cuda_root()
    before = tree_state(root)
    done, out = _install(archives, V7, root, home, "--dry-run")
    assert done.returncode == 0 and out["changed"] is False and out["would_change"] is True
    actions = {(a["action"], a["path"]) for a in out["install"]["plan"]}
    assert ("create", "include/cudnn.h") in actions and ("link", "lib64/libcudnn.so") in actions
    assert "+optimizer_including = cudnn" in done.stderr  # the theanorc diff
    assert tree_state(root) == before and not (home / ".theanorc").exists()
    _install(archives, V7, root, home)
    done, out = _install(archives, V7, root, home, "--dry-run")
    assert out["would_change"] is False
    done, out = run_json(["uninstall", "--cuda-root", root, "--dry-run"], home)
    assert any(a["action"] == "remove" for a in out["uninstall"]["plan"])
    assert (root / "include" / "cudnn.h").exists()


def test_targets_layout_and_created_lib64(archives, cuda_root, home, compiler):
    root = cuda_root(layout="targets")
    _install(archives, V7, root, home)
    assert (root / "targets" / "x86_64-linux" / "lib" / "libcudnn.so.7.4.2").is_file()


class Faulty(Filesystem):
    """Raises OSError at the n-th filesystem step."""

    def __init__(self, fail_at):
        self.fail_at = fail_at
        self.step = 0

    def _tick(self):
        self.step += 1
        if self.step == self.fail_at:
            raise OSError(5, "injected fault")

    def replace(self, src, dst):
        self._tick()
        super().replace(src, dst)

    def mkdir(self, path):
        self._tick()
        super().mkdir(path)

    def rmdir(self, path):
        self._tick()
        super().rmdir(path)

    def makedirs(self, path):
        self._tick()
        super().makedirs(path)

    def write_manifest(self, path, data):
        self._tick()
        super().write_manifest(path, data)

    def unlink(self, path):
        self._tick()
        super().unlink(path)


def _fault_sweep(action, root, stride=1):
    """Fail at step 1, 2, … (or 1, 1 + stride, …) until the action succeeds; every failure must
    leave the same tree. Returns the steps before the first run that succeeded.

    A fault after the commit point does not fail the command (its change stands): the journal
    stays, and the next command, here recover_pending, tidies up."""
    before = tree_state(root)
    n = 1
    while True:
        fs = Faulty(n)
        try:
            action(fs)
        except InstallFailed:
            assert tree_state(root) == before, f"fault at step {n} left a changed tree"
            n += stride
            continue
        inst.recover_pending(_root(root))
        assert not (root / ".cudnn-setup" / "journal.json").exists()
        return n - 1


def _install_upgrade_uninstall_sweeps(archives, root_path, stride):
    root = _root(root_path)
    (root_path / "include" / "cudnn.h").write_text("/* a manual cudnn.h */\n")
    install = _fault_sweep(lambda fs: inst.install(inst.Request(archives[V7], root), fs=fs), root_path, stride)
    assert install >= 5
    # another CUDA major, so forced: the biggest upgrade the samples make
    upgrade = _fault_sweep(lambda fs: inst.install(inst.Request(archives[V9], root, force=True), fs=fs),
                           root_path, stride)
    assert upgrade >= 20
    uninstall = _fault_sweep(lambda fs: inst.uninstall(root, fs=fs), root_path, stride)
    assert uninstall >= 10
    assert (root_path / "include" / "cudnn.h").read_text() == "/* a manual cudnn.h */\n"
    return install, upgrade, uninstall


@pytest.mark.slow
def test_fault_at_each_step_of_install_upgrade_uninstall_rolls_back(archives, cuda_root,
                                                                   record_property):
    install, upgrade, uninstall = _install_upgrade_uninstall_sweeps(archives, cuda_root(), 1)
    record_property("faults_install", install)
    record_property("faults_upgrade", upgrade)
    record_property("faults_uninstall", uninstall)


def test_fault_at_every_5th_step_of_install_upgrade_uninstall_rolls_back(archives, cuda_root):
    """The default run's share of the sweep above (`slow`): steps 1, 6, 11, …"""
    _install_upgrade_uninstall_sweeps(archives, cuda_root(), 5)


@pytest.mark.parametrize("kind", SMALL_FS)
def test_full_disk_exits_5_and_keeps_the_tree(kind, archives, cuda_root, home, tmp_path):
    """The root on a real filesystem with 64 KiB left, less than the 9.x sample's files need:
    staging them fails with ENOSPC, and the root is left exactly as it was."""
    require(kind)
    root = cuda_root("12.4")
    before = subprocess.run(["sh", "-c", tree_listing(root)], capture_output=True, text=True,
                            check=True).stdout
    mnt = tmp_path / "small"
    mnt.mkdir()
    setup = nearly_full(kind, mnt, 8 << 10, root, free_kib=64)
    done = run_cli_in(setup, ["install", archives[V9], "--cuda-root", mnt / root.name,
                              "--no-theanorc", "--json"], home,
                      after=f"{tree_listing(mnt / root.name)}; df -k {mnt}",
                      user_namespace=kind == "tmpfs")
    answer, _, after = done.stdout.partition("--after--\n")
    assert done.returncode == 5, done.stdout + done.stderr
    error = json.loads(answer)["error"]
    assert error["code"] == "disk-full", error
    assert "no space left on the device" in error["message"] and "free some space" in error["hint"]
    assert after.startswith(before), after


KILLER = r"""
import os, signal, sys
sys.path.insert(0, {repo!r})
from pathlib import Path
from cudnn_setup.placement import engine as inst
from cudnn_setup.cli import _on_signal
from cudnn_setup.facts.cuda import find_cuda_root
from cudnn_setup.state.transaction import Filesystem

class Killer(Filesystem):
    step = 0
    def replace(self, src, dst):
        Killer.step += 1
        if Killer.step == {at}:
            os.kill(os.getpid(), signal.{sig})
        super().replace(src, dst)

signal.signal(signal.SIGTERM, _on_signal)
root = find_cuda_root({{}}, Path({root!r}))
inst.{call}
print("finished")
"""


def _killed_run(root, at, sig, call):
    code = KILLER.format(repo=str(REPO), root=str(root), at=at, sig=sig, call=call)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


# a kill before any rename and one among them by default; the other points under `slow`
@pytest.mark.parametrize("at", [1, pytest.param(3, marks=pytest.mark.slow),
                                pytest.param(8, marks=pytest.mark.slow), 15,
                                pytest.param(25, marks=pytest.mark.slow)])
def test_sigkill_mid_install_is_reported_by_verify_and_rolled_back_by_recovery(
        at, archives, cuda_root, home):
    root = cuda_root("12.4")
    _install(archives, V8L, root, home)
    before = tree_state(root)
    done = _killed_run(root, at, "SIGKILL", f"install(inst.Request(Path({str(archives[V9])!r}), root), fs=Killer())")
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert (root / ".cudnn-setup" / "journal.json").exists()
    done, out = run_json(["verify", "--cuda-root", root, "--no-theano"], home)
    assert f"`cudnn-setup repair --cuda-root {root}` to complete it" in done.stderr
    assert (root / ".cudnn-setup" / "journal.json").exists()  # verify only looks
    assert "rolled back" in inst.recover_pending(_root(root))  # install, uninstall, repair
    assert tree_state(root) == before


def test_sigterm_mid_install_rolls_back(archives, cuda_root):
    root = cuda_root("11.3")
    before = tree_state(root)
    done = _killed_run(root, 4, "SIGTERM", f"install(inst.Request(Path({str(archives[V8])!r}), root), fs=Killer())")
    assert done.returncode != 0 and "finished" not in done.stdout
    assert "Interrupted" in done.stderr
    assert tree_state(root) == before


def test_sigkill_after_commit_is_rolled_forward(archives, cuda_root, home):
    """Killed after the manifest is in place: the next command keeps the new install."""
    root = cuda_root()
    done = _killed_run(root, 10_000, "SIGKILL", f"install(inst.Request(Path({str(archives[V7])!r}), root), fs=Killer())")
    assert done.returncode == 0
    state = root / ".cudnn-setup"
    manifest = json.loads((state / "manifest.json").read_text())
    # Simulate a kill between the commit and the cleanup: the journal is still there.
    (state / "journal.json").write_text(json.dumps({"format": 1, "txid": manifest["txid"], "ops": [],
                                                    "commit": {"manifest_txid": manifest["txid"]}}))
    done, out = run_json(["verify", "--cuda-root", root, "--no-theano"], home)
    assert "was committed but not tidied up" in done.stderr
    assert {c["name"]: c for c in out["checks"]}["state"]["status"] == "warn"
    assert "finished transaction" in inst.recover_pending(_root(root))
    assert (root / "lib64" / "libcudnn.so.7.4.2").exists()
    assert not (state / "journal.json").exists()


def test_concurrent_installs_wait_for_each_other(archives, cuda_root, home):
    root = cuda_root("12.4")
    env = clean_env(home)
    procs = [subprocess.Popen([sys.executable, "-m", "cudnn_setup", "install", str(archives[name]),
                               "--cuda-root", str(root), "--no-theanorc", "--no-verify", "--json"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for name in (V8L, V9, V8L, V9)]
    results = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), results
    manifest = json.loads((root / ".cudnn-setup" / "manifest.json").read_text())
    installed = {p.name for d in ("include", "lib64") for p in (root / d).iterdir() if "cudnn" in p.name}
    assert installed == {Path(f["path"]).name for f in manifest["files"]}
    done, out = run_json(["verify", "--cuda-root", root, "--no-theano"], home)
    assert {c["name"]: c["status"] for c in out["checks"]}["files"] == "pass"


def test_lock_timeout_exits_5(archives, cuda_root):
    import fcntl

    from cudnn_setup.state.layout import StateDir

    root_path = cuda_root()
    state = StateDir(root_path)
    state.ensure()
    fd = os.open(state.path, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        with pytest.raises(InstallFailed) as info:
            inst.install(inst.Request(archives[V7], _root(root_path), lock_timeout=0.3))
        assert "holds the lock" in info.value.message and info.value.exit_code == 5
    finally:
        os.close(fd)


def test_permission_denied_exits_5_with_hint(archives, cuda_root, home):
    """A root-owned CUDA root the caller may not write: setpriv drops every capability, so even
    uid 0 is held to the permission bits (and the test needs no world-readable checkout)."""
    root = cuda_root()
    for d in (root, root / "include", root / "lib64"):
        d.chmod(0o555)
    before = tree_state(root)
    try:
        cmd = ["setpriv", "--bounding-set=-all", "--inh-caps=-all", sys.executable, "-m",
               "cudnn_setup", "install", str(archives[V7]), "--cuda-root", str(root),
               "--no-theanorc", "--json"]
        done = subprocess.run(cmd, env=clean_env(home), capture_output=True, text=True, timeout=120)
        assert done.returncode == 5, done.stderr
        out = json.loads(done.stdout)
        assert "permission denied" in out["error"]["message"]
        assert "sudo" in out["error"]["hint"]
        assert tree_state(root) == before
    finally:
        for d in (root, root / "include", root / "lib64"):
            d.chmod(0o755)


def test_library_install_rejects_with_exception(archives, tmp_path, compiler, cuda_root):
    case = next(c for c in CASES if c.name == "traversal")
    with pytest.raises(ArchiveRejected):
        inst.install(inst.Request(build_case(case, tmp_path, compiler), _root(cuda_root())))


def _without_manifest(state):
    return {k: v for k, v in state.items() if not k.startswith(".cudnn-setup")}


def _random_kills(tmp_path, compiler, cuda_root, home, archives, pad: dict[str, int],
                  kills: int, enough: int | None = None) -> tuple[int, dict[str, int]]:
    """Kill a 9.x install over 8.x at random moments (timed from its transaction's start),
    `kills` times or until `enough` kills landed inside the transaction; after each, the next
    command must leave exactly old or exactly new. Returns (kills inside, outcomes)."""
    import random

    from fixtures.generate import SPECS, spec_entries, tar_bytes, xz_fast

    name = V9
    big = tmp_path / name
    # the padding is random bytes: xz's fastest matching stores them as well as its default does
    big.write_bytes(xz_fast(tar_bytes(spec_entries(SPECS[name], compiler, pad))))
    reference = cuda_root("12.4")
    _install(archives, V8L, reference, home)
    old = _without_manifest(tree_state(reference))
    env = clean_env(home)
    cmd = [sys.executable, "-m", "cudnn_setup", "install", str(big), "--cuda-root"]

    def start(root: Path) -> subprocess.Popen:
        """The install in a process of its own, returned once its transaction dir exists: kills
        are timed from there, so they land in the install itself, whatever the machine's load
        does to the interpreter's start."""
        proc = subprocess.Popen([*cmd, str(root), "--no-theanorc", "--no-verify"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while proc.poll() is None and not (root / ".cudnn-setup" / "tx").exists():
            time.sleep(0.002)
        return proc

    proc = start(reference)
    started = time.monotonic()
    assert proc.wait() == 0
    took = time.monotonic() - started  # staging, renames and commit of one whole run
    new = _without_manifest(tree_state(reference))
    assert new != old
    rng = random.Random(7)
    outcomes = {"old": 0, "new": 0}
    interrupted = 0
    for i in range(kills):
        root = cuda_root("12.4")
        _install(archives, V8L, root, home)
        proc = start(root)
        time.sleep(rng.uniform(0, 1.1 * took))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        state_dir = root / ".cudnn-setup"
        if (state_dir / "journal.json").exists() or (state_dir / "tx").exists():
            interrupted += 1  # the kill left a transaction for the next command to finish
        # verify only looks: it names the command that completes what the kill left, and that
        # command (run as the user would, from the JSON) brings the root to old or new
        _, seen = run_json(["verify", "--cuda-root", root, "--no-theano"], home)
        pending = seen.get("pending")
        assert (pending is not None) == (state_dir / "journal.json").exists(), seen
        if pending is not None:
            finish = shlex.split(pending["finish_with"])
            assert finish[0] == "cudnn-setup", pending
            run_json(finish[1:], home)
        state = _without_manifest(tree_state(root))
        assert state in (old, new), f"kill {i}: a mix of old and new"
        outcomes["old" if state == old else "new"] += 1
        assert not (root / ".cudnn-setup" / "journal.json").exists()
        if enough is not None and interrupted >= enough:
            break
    return interrupted, outcomes


@pytest.mark.slow
def test_sigkill_at_random_moments_leaves_old_or_new(tmp_path, compiler, cuda_root, home, archives,
                                                     record_property):
    """Kills at random moments of a 32 MiB 9.x install over 8.x, until 10 have landed inside its
    transaction (30 at most): after the next command, exactly old or exactly new."""
    pad = {"libcudnn_engines_precompiled": 24 << 20, "libcudnn_adv": 8 << 20}
    interrupted, outcomes = _random_kills(tmp_path, compiler, cuda_root, home, archives, pad,
                                          kills=30, enough=10)
    # The kills must have landed inside installs, not only before or after them.
    assert interrupted >= 10, (interrupted, outcomes)
    record_property("kills_mid_transaction", interrupted)
    record_property("kills_old", outcomes["old"])
    record_property("kills_new", outcomes["new"])


def test_sigkill_at_a_few_random_moments_leaves_old_or_new(tmp_path, compiler, cuda_root, home,
                                                           archives):
    """The default run's share of the random kills (all 20 are `slow`): an 8 MiB install,
    killed until 3 kills have landed inside its transaction."""
    pad = {"libcudnn_engines_precompiled": 6 << 20, "libcudnn_adv": 2 << 20}
    interrupted, outcomes = _random_kills(tmp_path, compiler, cuda_root, home, archives, pad,
                                          kills=12, enough=3)
    assert interrupted >= 3, (interrupted, outcomes)


def test_plan_names_links_by_kind_not_by_path(archives, compiler, tmp_path, home):
    from fixtures.generate import make_cuda_root

    root = make_cuda_root(tmp_path / "links" / "cuda", cc=compiler)  # "links" in the root's path
    done, out = _install(archives, V7, root, home, "--dry-run")
    actions = {(a["action"], a["path"]) for a in out["install"]["plan"]}
    assert ("create", "include/cudnn.h") in actions and ("link", "lib64/libcudnn.so") in actions


@pytest.mark.parametrize("args", [[], ["--force"], ["--dry-run"]])
def test_uninstall_shows_putting_back_a_backed_up_header_as_restore(args, archives, cuda_root,
                                                                    home):
    root = cuda_root("10.0")
    (root / "include" / "cudnn.h").write_text("/* a manual cudnn.h */\n")
    run_json(["install", archives[V7], "--cuda-root", root, "--no-theanorc", "--no-verify"], home)
    done, out = run_json(["uninstall", "--cuda-root", root, *args], home)
    assert done.returncode == 0, done.stderr
    stored = ".cudnn-setup/originals/include/cudnn.h"
    assert {"action": "restore", "path": "include/cudnn.h", "from": stored} in \
        out["uninstall"]["plan"]
    assert not any(a["action"] == "create" for a in out["uninstall"]["plan"])
    assert f"  restore          include/cudnn.h (backed up in {stored} when cudnn-setup first " \
           "installed over it; put back as it was)" in done.stderr.splitlines()
    if "--dry-run" not in args:
        assert (root / "include" / "cudnn.h").read_text() == "/* a manual cudnn.h */\n"
