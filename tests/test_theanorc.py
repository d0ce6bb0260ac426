"""The .theanorc merge keeps the user's file and changes only our keys."""
import os
from pathlib import Path

import pytest

from conftest import run_json
from cudnn_setup.theanorc import TheanorcRefused, configure, default_path, merge

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
    done, out = run_json(["theanorc", "--cuda-root", root], home)
    text = (home / ".theanorc").read_text()
    assert out["changed"] is True and f"library_path = {root / 'lib'}" in text
    done, out = run_json(["theanorc", "--cuda-root", root], home)
    assert out["changed"] is False
    (home / ".theanorc").write_text("[global]\n[global]\n")
    done, out = run_json(["theanorc", "--cuda-root", root], home)
    assert done.returncode == 5 and "duplicate" in out["error"]["message"]
