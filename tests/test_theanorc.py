"""The .theanorc merge keeps the user's file and changes only our keys."""
import configparser
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import clean_env, run_json
from cudnn_setup.theanorc_merge import (BACKUP_SUFFIX, TheanorcRefused, configure, default_path,
                                  effective_config, merge)
from sandboxfs import full_tmpfs, needs_namespaces, read_only_tmpfs, run_cli_in

ROOT, LIB = Path("/opt/cuda-x"), Path("/opt/cuda-x/lib64")

USER_FILE = """\
# my Theano settings
[global]
floatX = float32   ; keep this case
device = cpu
optimizer_including = fusion

[blas]
ldflags =

[nvcc]
# flags kept as they are
fastmath = True
"""


def test_merge_keeps_everything_else():
    merged, warnings = merge(USER_FILE, ROOT, LIB)
    assert "# my Theano settings" in merged and "# flags kept as they are" in merged
    assert "floatX = float32   ; keep this case" in merged
    assert "optimizer_including = fusion:cudnn" in merged
    assert "[dnn]\nbase_path = /opt/cuda-x\ninclude_path = /opt/cuda-x/include\n" \
           "library_path = /opt/cuda-x/lib64" in merged
    assert "[cuda]\nroot = /opt/cuda-x" in merged
    # every original line is still there, in order
    remaining = iter(merged.splitlines())
    assert all(line in remaining for line in USER_FILE.splitlines()
               if not line.startswith("optimizer_including"))
    assert not warnings


def test_merge_is_idempotent():
    once, _ = merge(USER_FILE, ROOT, LIB)
    twice, _ = merge(once, ROOT, LIB)
    assert once == twice


def test_empty_file_and_existing_paths_updated():
    merged, _ = merge("", ROOT, LIB)
    assert merged.startswith("[global]\noptimizer_including = cudnn\n")
    moved, _ = merge(merged, Path("/new"), Path("/new/lib"))
    assert "library_path = /new/lib" in moved and "/opt/cuda-x" not in moved


def test_excluding_cudnn_warns():
    _, warnings = merge("[global]\noptimizer_excluding = cudnn\n", ROOT, LIB)
    assert warnings and "optimizer_excluding" in warnings[0]


@pytest.mark.parametrize("text,expect", [
    ("[global]\ndevice = cpu\n[global]\nfloatX = float32\n", "duplicate"),
    ("[global]\ndevice = cpu\ndevice = cuda\n", "duplicate"),
    ("device = cpu\n", "not a valid config file"),
])
def test_ambiguous_files_are_refused(tmp_path, text, expect):
    path = tmp_path / ".theanorc"
    path.write_text(text)
    with pytest.raises(TheanorcRefused) as info:
        configure(path, ROOT, LIB)
    assert expect in info.value.message
    assert path.read_text() == text


def test_non_utf8_is_refused_untouched(tmp_path):
    path = tmp_path / ".theanorc"
    path.write_bytes(b"[global]\n# caf\xe9\n")
    with pytest.raises(TheanorcRefused) as info:
        configure(path, ROOT, LIB)
    assert "not UTF-8" in info.value.message
    assert path.read_bytes() == b"[global]\n# caf\xe9\n"


def test_read_only_file_is_refused(tmp_path):
    path = tmp_path / ".theanorc"
    path.write_text("[global]\n")
    path.chmod(0o444)
    with pytest.raises(TheanorcRefused, match="read-only"):
        configure(path, ROOT, LIB)
    assert path.read_text() == "[global]\n"


def test_symlinked_file_is_written_through(tmp_path):
    real = tmp_path / "dotfiles" / "theanorc"
    real.parent.mkdir()
    real.write_text(USER_FILE)
    link = tmp_path / ".theanorc"
    link.symlink_to(real)
    change = configure(link, ROOT, LIB)
    assert link.is_symlink() and change.path == real
    assert "cudnn" in real.read_text()
    assert (tmp_path / "dotfiles" / "theanorc.cudnn-setup.bak").read_text() == USER_FILE


def test_backup_mode_and_rerun(tmp_path):
    path = tmp_path / ".theanorc"
    path.write_text(USER_FILE)
    path.chmod(0o600)
    first = configure(path, ROOT, LIB)
    assert first.changed and first.backup.read_text() == USER_FILE
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    mtime = path.stat().st_mtime_ns
    second = configure(path, ROOT, LIB)
    assert not second.changed and path.stat().st_mtime_ns == mtime


def test_dry_run_shows_a_diff(tmp_path):
    path = tmp_path / ".theanorc"
    path.write_text(USER_FILE)
    change = configure(path, ROOT, LIB, dry_run=True)
    assert change.changed and "+library_path = /opt/cuda-x/lib64" in change.diff
    assert path.read_text() == USER_FILE


def test_default_path_follows_theanorc_env(tmp_path):
    env = {"THEANORC": os.pathsep.join(["/a/one", str(tmp_path / "two")])}
    assert default_path(env, tmp_path) == tmp_path / "two"
    assert default_path({}, tmp_path) == tmp_path / ".theanorc"


def test_cli_theanorc_uses_home_and_installed_lib_dir(archives, cuda_root, home):
    root = cuda_root(layout="lib64-link")
    run_json(["install", archives["cudnn-10.0-linux-x64-v7.4.2.24.tgz"], "--cuda-root", root,
              "--no-theanorc", "--no-verify"], home)
    done, out = run_json(["theanorc", "--cuda-root", root, "--dry-run"], home)
    assert done.returncode == 0 and not (home / ".theanorc").exists()
    assert out["theanorc"]["created"] is True and "would create" in out["checks"][0]["detail"]
    done, out = run_json(["theanorc", "--cuda-root", root], home)
    text = (home / ".theanorc").read_text()
    assert out["changed"] is True and f"library_path = {root / 'lib'}" in text
    # whether the file was made or changed is said, for a playbook that reports either
    assert out["theanorc"]["created"] is True and out["theanorc"]["changed"] is True
    assert out["checks"][0]["detail"].startswith(f"created {home / '.theanorc'}")
    done, out = run_json(["theanorc", "--cuda-root", root], home)
    assert out["changed"] is False and out["theanorc"]["created"] is False
    (home / ".theanorc").write_text("# mine\n")
    done, out = run_json(["theanorc", "--cuda-root", root], home)
    assert out["theanorc"]["changed"] is True and out["theanorc"]["created"] is False
    assert out["checks"][0]["detail"].startswith("updated ")
    (home / ".theanorc").write_text("[global]\n[global]\n")
    done, out = run_json(["theanorc", "--cuda-root", root], home)
    assert done.returncode == 5 and "duplicate" in out["error"]["message"]


# --- read the way Theano reads it --------------------------------------------------------------

MULTILINE = "[global]\nfloatX = float32\noptimizer_including = fusion\n    local_gpu\n"


def _theano_reads(text: str) -> configparser.ConfigParser:
    """What Theano 1.0.5 parses (theano/configparser.py: a strict ConfigParser)."""
    parser = configparser.ConfigParser()
    parser.read_string(text)
    return parser


def test_multiline_optimizer_including_is_merged_as_theano_reads_it():
    merged, warnings = merge(MULTILINE, ROOT, LIB)
    assert "optimizer_including = fusion\n    local_gpu:cudnn\n" in merged  # the user's lines kept
    value = _theano_reads(merged).get("global", "optimizer_including")
    assert value.split(":") == ["fusion\nlocal_gpu", "cudnn"]  # split on ':' only, like Theano
    assert warnings and "spans several lines" in warnings[0]
    assert merge(merged, ROOT, LIB)[0] == merged


def test_multiline_value_starting_on_its_own_line():
    merged, _ = merge("[global]\noptimizer_including =\n    fusion\n", ROOT, LIB)
    assert _theano_reads(merged).get("global", "optimizer_including").split(":")[-1] == "cudnn"
    assert "\n    fusion:cudnn\n" in merged


def test_multiline_path_value_is_replaced_whole():
    merged, _ = merge("[dnn]\nlibrary_path = /old\n    /older\n", ROOT, LIB)
    assert _theano_reads(merged).get("dnn", "library_path") == str(LIB)
    assert "/older" not in merged


def test_real_theano_reads_the_merged_multiline_file(tmp_path, home):
    """Theano itself, in a child interpreter, reads the merged file as intended."""
    rc = tmp_path / ".theanorc"
    rc.write_text(MULTILINE)
    configure(rc, ROOT, LIB)
    probe = ("import theano; print(repr(theano.config.optimizer_including)); "
             "print(theano.config.dnn.library_path)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=300, env=clean_env(home, THEANORC=str(rc),
                                                     THEANO_FLAGS="blas.ldflags=,cxx="))
    assert done.returncode == 0, done.stderr[-2000:]
    including, library_path = done.stdout.strip().splitlines()[-2:]
    assert eval(including).split(":") == ["fusion\nlocal_gpu", "cudnn"]
    assert library_path == str(LIB)


def test_duplicate_key_is_refused_because_theano_stops_at_it(tmp_path):
    rc = tmp_path / ".theanorc"
    rc.write_text("[global]\ndevice = cpu\nDevice = cuda\n")
    with pytest.raises(configparser.DuplicateOptionError):
        _theano_reads(rc.read_text())
    with pytest.raises(TheanorcRefused) as info:
        configure(rc, ROOT, LIB)
    assert "duplicate" in info.value.message and "stops Theano at import" in info.value.message
    env = {"THEANORC": str(rc)}
    report = effective_config(env, tmp_path)
    assert report["errors"] and "strict" in report["errors"][0]
    assert "global.device" not in report["effective"]  # Theano never gets to read a value


# --- files that are not config files -----------------------------------------------------------

def _finishes(fn, seconds=10.0):
    """fn() in a thread; its exception, or a failure if it is still running after `seconds`."""
    box = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the test
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s (blocked?)"
    return box.get("error")


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory", "socket"])
def test_non_regular_files_are_refused_without_reading(tmp_path, kind):
    rc = tmp_path / ".theanorc"
    if kind == "fifo":
        os.mkfifo(rc)
    elif kind == "dev-zero":
        rc.symlink_to("/dev/zero")
    elif kind == "directory":
        rc.mkdir()
    else:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(rc))
    error = _finishes(lambda: configure(rc, ROOT, LIB))
    assert isinstance(error, TheanorcRefused), error
    assert error.code == "theanorc-not-a-file"
    expected = {"fifo": "a fifo", "dev-zero": "a device", "directory": "a directory",
                "socket": "a socket"}[kind]
    assert expected in error.message
    assert not (tmp_path / f".theanorc{BACKUP_SUFFIX}").exists()


def test_doctor_never_blocks_on_a_fifo_or_dev_zero_in_theanorc(tmp_path, home):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    env = {"THEANORC": os.pathsep.join([str(fifo), "/dev/zero"])}
    done, out = run_json(["doctor"], home, env_extra=env, process=True, timeout=120)
    assert done.returncode == 1 and out["error"] is None, done.stderr  # a config Theano refuses
    errors = out["theano_config"]["errors"]
    assert any("is a fifo" in e for e in errors) and any("is a device" in e for e in errors)
    check = next(c for c in out["checks"] if c["name"] == "theano-config")
    assert check["status"] == "warn"


def test_oversized_config_is_refused(tmp_path):
    rc = tmp_path / ".theanorc"
    rc.write_bytes(b"[global]\n" + b"# padding\n" * 200_000)
    error = _finishes(lambda: configure(rc, ROOT, LIB))
    assert isinstance(error, TheanorcRefused) and "larger than" in error.message


def test_root_path_theano_cannot_carry_is_refused(tmp_path):
    rc = tmp_path / ".theanorc"
    for root in (Path("/opt/cuda\nx"), Path("/opt/cud\udce9")):
        with pytest.raises(TheanorcRefused) as info:
            configure(rc, root, root / "lib64")
        assert info.value.code == "theanorc-unwritable-path"
        assert "\n" not in info.value.message and "\udce9" not in info.value.message
    assert not rc.exists()


# --- an install that committed, then cannot write Theano's config ------------------------------

V7 = "cudnn-10.0-linux-x64-v7.4.2.24.tgz"
BEFORE = b"[global]\ndevice = cpu\n"
OLD_BACKUP = b"[global]\n# the backup from last time\n"


def _install_args(archives, root, rc):
    return ["install", archives[V7], "--cuda-root", root, "--theanorc", rc, "--no-verify", "--json"]


def _committed_with_theanorc_failure(done, root) -> dict:
    out = json.loads(done.stdout.split("--after--")[0])
    assert done.returncode == 1, done.stderr  # a failed check, not a crash
    assert out["changed"] is True and out["error"] is None
    assert (root / "lib64" / "libcudnn.so.7.4.2").is_file()
    return next(c for c in out["checks"] if c["name"] == "theanorc")


@needs_namespaces
def test_full_filesystem_leaves_config_and_backup_whole(archives, cuda_root, tmp_path, home):
    root, mnt = cuda_root(), tmp_path / "small"
    mnt.mkdir()
    setup = full_tmpfs(mnt, {".theanorc": BEFORE, f".theanorc{BACKUP_SUFFIX}": OLD_BACKUP})
    after = f"cat {mnt}/.theanorc; echo --backup--; cat {mnt}/.theanorc{BACKUP_SUFFIX}; ls -a {mnt}"
    done = run_cli_in(setup, _install_args(archives, root, mnt / ".theanorc"), home, after)
    check = _committed_with_theanorc_failure(done, root)
    assert check["status"] == "fail" and "no space left" in check["detail"]
    assert check["data"]["code"] == "disk-full" and "left untouched" in check["detail"]
    shown = done.stdout.split("--after--\n")[1]
    config, rest = shown.split("--backup--\n")
    assert config.encode() == BEFORE and rest.startswith(OLD_BACKUP.decode())
    assert sorted(rest[len(OLD_BACKUP):].split()) == [".", "..", ".theanorc",
                                                      f".theanorc{BACKUP_SUFFIX}", "filler"]


@needs_namespaces
def test_theanorc_on_a_read_only_filesystem_is_a_check_failure(archives, cuda_root, tmp_path, home):
    root, mnt = cuda_root(), tmp_path / "ro"
    mnt.mkdir()
    done = run_cli_in(read_only_tmpfs(mnt, {".theanorc": BEFORE}),
                      _install_args(archives, root, mnt / ".theanorc"), home)
    check = _committed_with_theanorc_failure(done, root)
    assert "read-only filesystem" in check["detail"] and "free some space" not in check["detail"]
    assert check["data"]["code"] == "read-only-filesystem"


def test_unreadable_config_is_a_theanorc_check_failure(archives, cuda_root, home):
    """The default ~/.theanorc, unreadable: setpriv drops every capability, so even uid 0 is held
    to the permission bits. (An unreadable --theanorc FILE is a usage error before anything.)"""
    root = cuda_root()
    rc = home / ".theanorc"
    rc.write_bytes(BEFORE)
    rc.chmod(0o000)
    args = [a for a in _install_args(archives, root, rc) if a not in ("--theanorc", rc)]
    cmd = ["setpriv", "--bounding-set=-all", "--inh-caps=-all", sys.executable, "-m",
           "cudnn_setup", *map(str, args)]
    done = subprocess.run(cmd, env=clean_env(home), capture_output=True, text=True, timeout=300)
    check = _committed_with_theanorc_failure(done, root)
    assert "permission denied" in check["detail"] and check["data"]["code"] == "permission-denied"
    rc.chmod(0o600)
    assert rc.read_bytes() == BEFORE


def test_verify_and_bench_do_not_start_theano_on_a_fifo(archives, cuda_root, tmp_path, home):
    """Theano in the child would block reading a FIFO until the check's 10-minute limit."""
    root = cuda_root()
    run_json(["install", archives[V7], "--cuda-root", root, "--no-verify", "--no-theanorc"], home)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for command, check in (("verify", "theano"), ("bench", "theano-conv")):
        done, out = run_json([command, "--cuda-root", root], home,
                             env_extra={"THEANORC": str(fifo)}, process=True, timeout=120)
        found = next(c for c in out["checks"] if c["name"] == check)
        assert found["status"] == "fail" and "is a fifo" in found["detail"], found


def test_uninstall_is_not_failed_by_a_config_it_cannot_read(archives, cuda_root, home):
    """The note about Theano's config is only a note: an unreadable ~/.theanorc (capabilities
    dropped, so uid 0 is held to the bits) or a FIFO there leave the uninstall a success."""
    for kind in ("unreadable", "fifo"):
        root = cuda_root()
        run_json(["install", archives[V7], "--cuda-root", root, "--no-verify", "--no-theanorc"],
                 home)
        rc = home / ".theanorc"
        rc.unlink(missing_ok=True)
        if kind == "fifo":
            os.mkfifo(rc)
        else:
            rc.write_text(f"[dnn]\nbase_path = {root}\n")
            rc.chmod(0o000)
        cmd = ["setpriv", "--bounding-set=-all", "--inh-caps=-all", sys.executable, "-m",
               "cudnn_setup", "uninstall", "--cuda-root", str(root), "--json"]
        done = subprocess.run(cmd, env=clean_env(home), capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0 and json.loads(done.stdout)["changed"] is True, done.stderr


def test_uninstall_says_in_its_answer_that_the_config_still_points_at_the_root(archives,
                                                                              cuda_root, home):
    """The note that Theano's config still names the root is in the JSON answer's notes, not
    only on stderr: a fleet (the Ansible role) reads the answer."""
    root = cuda_root()
    done, _ = run_json(["install", archives[V7], "--cuda-root", root, "--no-verify"], home)
    assert done.returncode == 0 and str(root) in (home / ".theanorc").read_text()
    done, out = run_json(["uninstall", "--cuda-root", root], home)
    assert done.returncode == 0 and out["changed"] is True, out
    notes = [n for n in out["uninstall"]["notes"] if "still points Theano at" in n]
    assert notes and str(root) in notes[0] and "cudnn-setup created it" in notes[0], out
    assert f"note: {notes[0]}" in done.stderr


def test_theanorc_command_keeps_each_refusals_code_and_hint(archives, cuda_root, tmp_path, home):
    """docs/json.md names a code for each refusal; the command must not flatten them into one."""
    root = cuda_root()
    run_json(["install", archives["cudnn-10.0-linux-x64-v7.4.2.24.tgz"], "--cuda-root", root,
              "--no-theanorc", "--no-verify"], home)
    dup = tmp_path / "dup.theanorc"
    dup.write_text("[global]\ndevice = cpu\ndevice = cuda\n")
    cases = {"theanorc-no-directory": tmp_path / "missing" / ".theanorc",
             "theanorc-not-a-file": tmp_path, "theanorc-ambiguous": dup}
    for code, path in cases.items():
        done, out = run_json(["theanorc", "--cuda-root", root, "--theanorc", path], home)
        assert done.returncode == 5, out
        assert out["error"]["code"] == code, (code, out["error"])
        assert out["error"]["hint"] and out["error"]["hint"] not in out["error"]["message"]
    assert dup.read_text() == "[global]\ndevice = cpu\ndevice = cuda\n"


def test_theanorc_for_a_root_without_cudnn_is_refused_and_writes_nothing(cuda_root, home):
    """optimizer_including=cudnn and [dnn] paths into a root that has no cuDNN would make
    Theano stop at import, and doctor report the paths: refused, with what to do instead."""
    root = cuda_root()
    before = "[global]\nfloatX = float32\n"
    (home / ".theanorc").write_text(before)
    done, out = run_json(["theanorc", "--cuda-root", root], home)
    assert done.returncode == 2 and out["ok"] is False and out["changed"] is False
    error = out["error"]
    assert error["code"] == "no-cudnn"
    assert error["message"] == (f"no cuDNN in {root} (no libcudnn.so.N in {root / 'lib64'}); "
                                "Theano's config was left untouched")
    assert f"cudnn-setup install ARCHIVE --cuda-root {root}" in error["hint"]
    assert not any(c["status"] == "pass" for c in out["checks"])
    assert (home / ".theanorc").read_text() == before
    assert not (home / (".theanorc" + BACKUP_SUFFIX)).exists()
    # a plan made before the install (a fleet's check mode) shows the diff, never a pass
    done, out = run_json(["theanorc", "--cuda-root", root, "--dry-run"], home)
    assert done.returncode == 0 and out["changed"] is False
    check = out["checks"][0]
    assert check["status"] == "warn"
    assert check["detail"].endswith(f"but there is no cuDNN in {root} yet (no libcudnn.so.N in "
                                    f"{root / 'lib64'}): a real run refuses until cuDNN is "
                                    "installed there")
    assert (home / ".theanorc").read_text() == before


@pytest.mark.skipif(os.geteuid() != 0, reason="only root writes a file another user owns")
def test_root_run_with_a_users_home_leaves_their_config_theirs(archives, cuda_root, home):
    """`sudo cudnn-setup install …` keeps the user's HOME on many systems: root merges their
    ~/.theanorc. The file and its backup stay the user's, mode and all; a new one in their home
    is theirs too. Else a 0600 config came back root's, and Theano run as them read none."""
    nobody = 65534
    root = cuda_root()
    run_json(["install", archives["cudnn-10.0-linux-x64-v7.4.2.24.tgz"], "--cuda-root", root,
              "--no-theanorc", "--no-verify"], home)
    rc = home / ".theanorc"
    rc.write_text("[global]\nfloatX = float32\n")
    rc.chmod(0o600)
    os.chown(rc, nobody, nobody)
    os.chown(home, nobody, nobody)
    done, out = run_json(["theanorc", "--cuda-root", root], home)
    assert done.returncode == 0 and out["theanorc"]["changed"] is True, done.stderr
    backup = home / (".theanorc" + BACKUP_SUFFIX)
    for path in (rc, backup):
        st = path.stat()
        assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (nobody, nobody, 0o600), path
    assert "library_path" in rc.read_text()
    rc.unlink()
    backup.unlink()
    done, out = run_json(["theanorc", "--cuda-root", root], home)
    assert out["theanorc"]["created"] is True
    st = rc.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (nobody, nobody, 0o644)


def test_a_config_theano_flags_override_is_not_said_to_be_in_use(archives, cuda_root, home):
    """THEANO_FLAGS (set once in a ~/.bashrc, say) win over every config file: with a dnn path
    there, `theanorc` said `pass: created ~/.theanorc` while Theano kept using the old cuDNN;
    with an optimizer_including there, the file's cudnn was replaced. It warns, naming each."""
    root = cuda_root()
    run_json(["install", archives["cudnn-10.0-linux-x64-v7.4.2.24.tgz"], "--cuda-root", root,
              "--no-theanorc", "--no-verify"], home)
    flags = "floatX=float32,dnn.library_path=/old/cuda/lib64,optimizer_including=fusion"
    done, out = run_json(["theanorc", "--cuda-root", root], home, {"THEANO_FLAGS": flags})
    check = out["checks"][0]
    assert done.returncode == 0 and check["status"] == "warn", check
    assert (f"THEANO_FLAGS sets dnn.library_path=/old/cuda/lib64, which Theano takes over the "
            f"config's {root / 'lib64'}") in check["detail"], check
    assert "THEANO_FLAGS sets optimizer_including=fusion, which replaces" in check["detail"]
    # flags that agree with the config, or set other things, are no warning
    flags = f"floatX=float32,dnn.library_path={root / 'lib64'},optimizer_including=fusion:cudnn"
    done, out = run_json(["theanorc", "--cuda-root", root], home, {"THEANO_FLAGS": flags})
    assert out["checks"][0]["status"] == "pass", out["checks"]


def test_a_config_theano_does_not_read_or_that_a_later_one_overrides_is_said(archives,
                                                                             cuda_root, home):
    """`theanorc --theanorc FILE` for a FILE Theano never reads here (it reads $THEANORC's
    files, else ~/.theanorc) said `pass: created FILE`; so did a file $THEANORC lists before one
    that sets its own dnn.library_path, which Theano takes. Both warn, saying why."""
    root = cuda_root()
    run_json(["install", archives["cudnn-10.0-linux-x64-v7.4.2.24.tgz"], "--cuda-root", root,
              "--no-theanorc", "--no-verify"], home)
    elsewhere = home / "elsewhere.rc"
    done, out = run_json(["theanorc", "--cuda-root", root, "--theanorc", elsewhere], home)
    check = out["checks"][0]
    assert check["status"] == "warn" and f"Theano does not read {elsewhere} here: it reads " \
        f"{home / '.theanorc'}" in check["detail"], check
    first, last = home / "a.rc", home / "b.rc"
    last.write_text("[dnn]\nlibrary_path = /old/cuda/lib64\n")
    env = {"THEANORC": f"{first}:{last}"}
    done, out = run_json(["theanorc", "--cuda-root", root, "--theanorc", first], home, env)
    check = out["checks"][0]
    assert check["status"] == "warn" and (f"{last}, which Theano reads after {first}, sets "
                                          "dnn.library_path=/old/cuda/lib64") in check["detail"]
    # the file read last, as `theanorc` picks by default: what it writes is what Theano uses
    done, out = run_json(["theanorc", "--cuda-root", root], home, env)
    assert out["checks"][0]["status"] == "pass", out["checks"]
