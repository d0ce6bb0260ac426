"""The compile check where programs may not run from the temporary directory.

Hardened machines mount /tmp noexec: a program built there cannot run, which says nothing of
cuDNN. The check then builds in the user's cache, says so when neither place will do, and
words a program that could not be started as that, never as a program that ran and failed.
"""
import json
import os
import stat

from conftest import REPO, run_json
from sandboxfs import needs_namespaces, run_cli_in

SAMPLE = REPO / "fixtures" / "samples" / "cudnn-10.0-linux-x64-v7.4.2.24.tgz"
VERIFY = ["verify", "--no-theano", "--no-frameworks", "--json"]


def _installed(cuda_root, home):
    root = cuda_root("10.0")
    done, _ = run_json(["install", SAMPLE, "--cuda-root", root, "--no-verify", "--no-theanorc"],
                       home)
    assert done.returncode == 0, done.stderr
    return root


def _compile(done) -> dict:
    out = json.loads(done.stdout.split("--after--")[0].strip().splitlines()[-1])
    return next(c for c in out["checks"] if c["name"] == "compile")


@needs_namespaces
def test_a_noexec_temporary_directory_builds_in_the_users_cache(tmp_path, home, cuda_root):
    root = _installed(cuda_root, home)
    tmp = tmp_path / "noexec"
    tmp.mkdir()
    done = run_cli_in(f"mount -t tmpfs -o noexec tmpfs {tmp} && export TMPDIR={tmp}",
                      [*VERIFY, "--cuda-root", root], home,
                      after=f"ls -A {tmp}; ls -A {home}/.cache/cudnn-setup/tmp")
    check = _compile(done)
    assert done.returncode == 0 and check["status"] == "pass", (check, done.stderr)
    assert done.stdout.split("--after--")[1].split() == []  # both left empty
    spare = home / ".cache" / "cudnn-setup" / "tmp"
    assert stat.S_IMODE(spare.stat().st_mode) == 0o700 and spare.stat().st_uid == os.geteuid()


@needs_namespaces
def test_nowhere_to_run_a_program_is_a_skip_that_says_so(tmp_path, home, cuda_root):
    root = _installed(cuda_root, home)
    tmp = tmp_path / "noexec"
    tmp.mkdir()
    done = run_cli_in(f"mount -t tmpfs -o noexec tmpfs {tmp} && mkdir {tmp}/t {tmp}/cache && "
                      f"export TMPDIR={tmp}/t XDG_CACHE_HOME={tmp}/cache",
                      [*VERIFY, "--cuda-root", root], home)
    check = _compile(done)
    assert done.returncode == 0 and check["status"] == "skip", (check, done.stderr)
    assert f"programs may not run from {tmp}/t (mounted noexec), nor from {tmp}/cache" \
        in check["detail"] and "set TMPDIR" in check["detail"], check


def test_a_program_that_cannot_be_started_is_said_so(tmp_path, home, cuda_root):
    root = _installed(cuda_root, home)
    cc = tmp_path / "cc"  # gcc, then the program left without any execute bit
    cc.write_text('#!/bin/sh\ngcc "$@" || exit\nwhile [ $# -gt 0 ]; do\n'
                  '  [ "$1" = -o ] && chmod a-x "$2"\n  shift\ndone\n')
    cc.chmod(0o755)
    done, out = run_json([*VERIFY[:-1], "--cuda-root", root], home, {"CC": str(cc)})
    check = next(c for c in out["checks"] if c["name"] == "compile")
    assert check["status"] == "fail" and done.returncode != 0, check
    assert "it could not be started: " in check["detail"] and "Permission denied" in \
        check["detail"], check
