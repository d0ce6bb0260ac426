"""The manifest's formats: an install writes format 3 (each file by its BLAKE3 hash), and the
manifests older versions wrote still verify, install again and uninstall.

fixtures/manifests/ holds manifests written by the tool itself before format 3: format 1 by
the code of commit c0ae2a0's parent, format 2 by that of commit 49a65e6, each installing the
bundled sample (cuDNN 7.4.2 for CUDA 10.0) into a fresh CUDA 10.0 root over a hand-copied
include/cudnn.h. Their stats are of that machine's files; the files here are hashed with sha256,
the hash those records hold."""
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from conftest import run_json, tree_state
from cudnn_setup.digest import BLAKE3, SHA256, file_digest
from cudnn_setup.state.files import describe, describe_known
from cudnn_setup.state.manifest import FILE, Content, FileRecord
from fixtures.generate import make_cuda_root

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "fixtures" / "samples" / "cudnn-10.0-linux-x64-v7.4.2.24.tgz"
OLDER = {1: REPO / "fixtures" / "manifests" / "format1-sample-7.4.2.json",
         2: REPO / "fixtures" / "manifests" / "format2-sample-7.4.2.json"}
BY_HAND = "/* copied by hand */\n"


def installed(tmp_path: Path, home: Path) -> Path:
    root = make_cuda_root(tmp_path / "cuda", "10.0")
    (root / "include" / "cudnn.h").write_text(BY_HAND)
    done, out = run_json(["install", SAMPLE, "--cuda-root", root, "--no-verify",
                          "--no-theanorc", "--no-frameworks"], home)
    assert done.returncode == 0, done.stderr
    return root


def manifest_of(root: Path) -> dict:
    return json.loads((root / ".cudnn-setup" / "manifest.json").read_text())


def test_an_install_records_each_file_by_its_blake3_hash(tmp_path, home):
    root = installed(tmp_path, home)
    m = manifest_of(root)
    assert m["format"] == 3
    files = [f for f in m["files"] if f["type"] == "file"]
    assert files and all(set(f) >= {"blake3", "mode"} and "sha256" not in f for f in files)
    for f in files:
        assert f["blake3"] == file_digest(root / f["path"], BLAKE3)
    # the hand-copied header, backed up: known by the hash it was compared with
    original = m["originals"]["include/cudnn.h"]
    kept = root / ".cudnn-setup" / "originals" / "include" / "cudnn.h"
    assert original["blake3"] == file_digest(kept, BLAKE3)
    # the archive itself stays known by its sha256, the hash NVIDIA publishes
    assert m["source"]["sha256"] == hashlib.sha256(SAMPLE.read_bytes()).hexdigest()


@pytest.mark.parametrize("fmt", sorted(OLDER))
def test_an_older_manifest_still_verifies_installs_again_and_uninstalls(tmp_path, home, fmt):
    root = installed(tmp_path, home)
    older = json.loads(OLDER[fmt].read_text())
    assert older["format"] == fmt and all("blake3" not in f for f in older["files"])
    (root / ".cudnn-setup" / "manifest.json").write_text(json.dumps(older))
    verify = ["verify", "--cuda-root", root, "--no-theano", "--no-frameworks"]
    done, out = run_json(verify, home)
    files = {c["name"]: c for c in out["checks"]}["files"]
    assert files["status"] == "pass", files
    # installing the same archive again: nothing to do, the older manifest answers
    done, out = run_json(["install", SAMPLE, "--cuda-root", root, "--no-verify",
                          "--no-theanorc", "--no-frameworks"], home)
    assert done.returncode == 0 and out["changed"] is False, (done.stderr, out)
    # a library changed since is found through the record's sha256
    lib = root / "lib64" / "libcudnn.so.7.4.2"
    saved = lib.read_bytes()
    lib.chmod(0o644)
    lib.write_bytes(saved[:-1] + bytes([saved[-1] ^ 1]))
    lib.chmod(0o755)
    done, out = run_json(verify, home)
    files = {c["name"]: c for c in out["checks"]}["files"]
    assert files["status"] == "fail" and "lib64/libcudnn.so.7.4.2" in \
        files["data"]["changed_since_install"], files
    lib.chmod(0o644)
    lib.write_bytes(saved)
    lib.chmod(0o755)
    done, out = run_json(["uninstall", "--cuda-root", root], home)
    assert done.returncode == 0, done.stderr
    assert (root / "include" / "cudnn.h").read_text() == BY_HAND
    assert not (root / "lib64" / "libcudnn.so.7.4.2").exists()
    assert not (root / ".cudnn-setup").exists()


def test_a_new_archive_over_an_older_manifest_compares_each_file_by_both_hashes(tmp_path, home):
    """An install over a format 2 manifest: the files it recorded (sha256) are compared with
    the archive's (BLAKE3); a file changed since is still refused, an unchanged one replaced,
    and the manifest written is format 3."""
    root = installed(tmp_path, home)
    (root / ".cudnn-setup" / "manifest.json").write_text(OLDER[2].read_text())
    header = root / "include" / "cudnn.h"
    header.chmod(0o644)
    header.write_text(header.read_text() + "/* edited */\n")
    before = tree_state(root)
    done, out = run_json(["install", SAMPLE, "--cuda-root", root, "--no-verify",
                          "--no-theanorc", "--no-frameworks"], home)
    assert done.returncode == 5 and out["error"]["code"] == "changed-files", out
    assert "include/cudnn.h" in out["error"]["message"]
    assert tree_state(root) == before
    done, out = run_json(["install", SAMPLE, "--cuda-root", root, "--no-verify",
                          "--no-theanorc", "--no-frameworks", "--force"], home)
    assert done.returncode == 0, done.stderr
    m = manifest_of(root)
    assert m["format"] == 3 and all("blake3" in f for f in m["files"] if f["type"] == "file")


def test_a_record_is_completed_only_with_the_hash_it_lacks(tmp_path):
    """describe_known: a file whose stat is as recorded is not read for the recorded hash,
    only for another one asked for; one whose stat moved is hashed with both."""
    path = tmp_path / "lib.so"
    path.write_bytes(b"\x7fELF" + bytes(4096))
    st = path.lstat()
    stat = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    record = FileRecord("lib.so", Content(FILE, "0" * 64, 0o644), stat=stat)
    # trusted: the recorded (here deliberately wrong) sha256 comes back unread
    assert describe_known(path, record) == Content(FILE, "0" * 64, 0o644)
    got = describe_known(path, record, (BLAKE3,))
    assert got == Content(FILE, "0" * 64, 0o644, blake3=file_digest(path, BLAKE3))
    path.write_bytes(b"\x7fELF" + bytes(4095))
    got = describe_known(path, record, (BLAKE3,))
    assert got == Content(FILE, file_digest(path, SHA256), 0o644, blake3=file_digest(path, BLAKE3))
    assert describe(path, (BLAKE3,)) == Content(FILE, None, 0o644, blake3=got.blake3)


def test_contents_compare_by_the_hash_both_hold():
    a = Content(FILE, "a" * 64, 0o644, blake3="b" * 64)
    assert a.same(Content(FILE, "a" * 64, 0o644))
    assert a.same(Content(FILE, None, 0o644, blake3="b" * 64))
    assert not a.same(Content(FILE, "c" * 64, 0o644))
    with pytest.raises(ValueError, match="no content hash in common"):
        Content(FILE, "a" * 64, 0o644).same(Content(FILE, None, 0o644, blake3="b" * 64))


@pytest.mark.parametrize("record,what", [
    ({"type": "file", "mode": 420}, "sha256 is missing"),
    ({"type": "file", "mode": 420, "blake3": "xyz"}, "blake3"),
    ({"type": "file", "mode": 420, "blake3": 5}, "blake3"),
])
def test_a_format_3_file_record_needs_one_hash_of_the_right_form(tmp_path, home, record, what):
    root = installed(tmp_path, home)
    m = manifest_of(root)
    entry = next(f for f in m["files"] if f["path"] == "lib64/libcudnn.so.7.4.2")
    for key in ("sha256", "blake3"):
        entry.pop(key, None)
    entry.update(record)
    (root / ".cudnn-setup" / "manifest.json").write_text(json.dumps(m))
    before = tree_state(root)
    done, out = run_json(["uninstall", "--cuda-root", root], home)
    assert done.returncode == 5 and out["error"]["code"] == "state-damaged", out
    assert what in out["error"]["message"]
    assert tree_state(root) == before


def test_a_format_2_record_with_only_a_blake3_hash_is_damaged(tmp_path, home):
    """Before format 3 every file is known by its sha256: a blake3 alone there is not what any
    version wrote."""
    root = installed(tmp_path, home)
    older = json.loads(OLDER[2].read_text())
    entry = next(f for f in older["files"] if f["type"] == "file")
    entry["blake3"] = entry.pop("sha256")
    (root / ".cudnn-setup" / "manifest.json").write_text(json.dumps(older))
    done, out = run_json(["uninstall", "--cuda-root", root], home)
    assert done.returncode == 5 and out["error"]["code"] == "state-damaged", out
    assert "sha256 is missing" in out["error"]["message"]
    shutil.rmtree(root)


# The CLI in a Python that cannot import blake3 (as where the package has no wheel).
WITHOUT_BLAKE3 = """import sys
sys.modules["blake3"] = None
from cudnn_setup.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_without_blake3_a_blake3_record_that_must_be_hashed_is_a_clear_error(tmp_path, home):
    import subprocess
    import sys

    from conftest import clean_env

    root = installed(tmp_path, home)
    lib = root / "lib64" / "libcudnn.so.7.4.2"
    lib.touch()  # its stat moved: only hashing can tell whether its bytes did
    before = tree_state(root)
    for args in (["verify", "--no-theano", "--no-frameworks"], ["uninstall"]):
        done = subprocess.run([sys.executable, "-c", WITHOUT_BLAKE3, *args, "--cuda-root",
                               str(root), "--json"], env=clean_env(home), capture_output=True,
                              text=True, timeout=300)
        out = json.loads(done.stdout)
        # verify only looks (exit 1, never 5); uninstall stops before changing anything (5)
        assert done.returncode == (1 if args[0] == "verify" else 5), out
        assert out["error"]["code"] == "missing-blake3", out
        assert "pip install blake3" in out["error"]["hint"]
    assert tree_state(root) == before
    # and an install made there records sha256, which any version reads
    other = make_cuda_root(tmp_path / "other", "10.0")
    done = subprocess.run([sys.executable, "-c", WITHOUT_BLAKE3, "install", str(SAMPLE),
                           "--cuda-root", str(other), "--no-verify", "--no-theanorc",
                           "--no-frameworks", "--json"], env=clean_env(home), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    files = [f for f in manifest_of(other)["files"] if f["type"] == "file"]
    assert all("sha256" in f and "blake3" not in f for f in files)
