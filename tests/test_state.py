"""State read back from <root>/.cudnn-setup/ drives nothing until it is validated: hostile or
damaged manifests, journals and state pieces are refused (exit 5, state-damaged) and nothing
inside or outside the root changes."""
import hashlib
import json
import os
import time
from pathlib import Path

import pytest

from conftest import run_json, tree_state
from cudnn_setup.facts.cuda import find_cuda_root
from cudnn_setup.state.layout import StateDir
from cudnn_setup.trees import remove_tree
from fixtures.generate import GENERATION_SAMPLES

V7 = GENERATION_SAMPLES["v4-v7"]
SENTINEL = b"a file outside the CUDA root\n"


@pytest.fixture
def setup(archives, cuda_root, home, tmp_path):
    """A root with cuDNN 7 installed over a hand-copied cudnn.h, and a dir outside it."""
    root = cuda_root()
    (root / "include" / "cudnn.h").write_text("/* copied by hand */\n")
    done, _ = run_json(["install", archives[V7], "--cuda-root", root, "--no-theanorc",
                        "--no-verify", "--no-frameworks"], home)  # the state is the subject
    assert done.returncode == 0, done.stderr
    outside = tmp_path / "outside"
    (outside / "empty").mkdir(parents=True)
    (outside / "x").write_bytes(SENTINEL)
    return root, outside


def _state(root: Path) -> Path:
    return root / ".cudnn-setup"


def _edit(root: Path, name: str, change) -> None:
    path = _state(root) / name
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def refused(root: Path, outside: Path, home: Path, args: list, what: str = "") -> dict:
    before, before_outside = tree_state(root), tree_state(outside)
    done, out = run_json([*args, "--cuda-root", root], home)
    assert done.returncode == 5, done.stderr
    error = out["error"]
    assert error["code"] == "state-damaged"
    assert error["message"].startswith(f"the state in {root}/.cudnn-setup is damaged: "), error
    assert what in error["message"]
    assert "move" in error["hint"] and "aside" in error["hint"]
    assert tree_state(root) == before and tree_state(outside) == before_outside
    return out


def reported(root: Path, outside: Path, home: Path, what: str, code: str = "state-damaged",
             fifo: bool = False, **kw) -> dict:
    """verify only looks: state it cannot use is its failed `state` check (exit 1, never 5),
    the other checks run, and nothing inside or outside the root changes (a root holding a
    FIFO is not read to compare)."""
    before = {} if fifo else tree_state(root)
    before_outside = tree_state(outside)
    done, out = run_json(["verify", "--no-theano", "--cuda-root", root], home, **kw)
    assert done.returncode == 1 and out["error"] is None, done.stderr
    checks = {c["name"]: c for c in out["checks"]}
    assert checks["state"]["status"] == "fail" and what in checks["state"]["detail"], checks
    assert checks["state"]["data"]["code"] == code
    assert checks["load"]["status"] == "pass"
    assert (fifo or tree_state(root) == before) and tree_state(outside) == before_outside
    return out


def _sentinel_record(path: str) -> dict:
    return {"path": path, "type": "file", "sha256": hashlib.sha256(SENTINEL).hexdigest(),
            "mode": 0o644, "replaced": None}


MANIFEST_CASES = {
    # name: (change(manifest, outside), fragment of the message)
    "dotdot": (lambda m, o: m["files"].append(_sentinel_record("../outside/x")), "normalised"),
    "absolute": (lambda m, o: m["files"].append(_sentinel_record(str(o / "x"))), "absolute"),
    "dot-part": (lambda m, o: m["files"].append(_sentinel_record("include/./cudnn.h")),
                 "normalised"),
    "empty-part": (lambda m, o: m["files"].append(_sentinel_record("include//cudnn.h")),
                   "normalised"),
    "trailing-slash": (lambda m, o: m["files"].append(_sentinel_record("include/")),
                       "normalised"),
    "empty": (lambda m, o: m["files"].append(_sentinel_record("")), "empty"),
    "nul": (lambda m, o: m["files"].append(_sentinel_record("include/a\x00b")), "NUL"),
    "through-a-link": (lambda m, o: m["files"].append(_sentinel_record("include/out/x")),
                       "leads out of the CUDA root"),
    "into-the-state": (lambda m, o: m["files"].append(_sentinel_record(".cudnn-setup/journal.json")),
                       "state dir"),
    "created-dir-outside": (lambda m, o: m["created_dirs"].append("../outside/empty"),
                            "created_dirs"),
    "original-outside": (lambda m, o: m["originals"].update({"../outside/x": {"type": "file",
                         "sha256": "0" * 64, "mode": 0o644}}), "originals"),
    "txid-path": (lambda m, o: m.update(txid="../../outside"), "txid"),
    "lib-dir-outside": (lambda m, o: m.update(lib_dir="../outside"), "lib_dir"),
    "files-not-a-list": (lambda m, o: m.update(files={}), "not a list"),
    "entry-not-an-object": (lambda m, o: m["files"].append("include/cudnn.h"), "not an object"),
    "sha-a-number": (lambda m, o: m["files"][0].update(sha256=5), "sha256"),
    "mode-a-string": (lambda m, o: m["files"][0].update(mode="644"), "mode"),
    "mode-a-bool": (lambda m, o: m["files"][0].update(mode=True), "mode"),
    "type-dir": (lambda m, o: m["files"][0].update(type="dir"), "type"),
    "stat-short": (lambda m, o: m["files"][0].update(stat=[1, 2]), "stat"),
    "listed-twice": (lambda m, o: m["files"].append(dict(m["files"][0])), "twice"),
    "format-4": (lambda m, o: m.update(format=4), "format 4"),
    # a name part no file system holds: an uninstall removed the files, failed at the rmdir
    # and its rollback at the same name, and left a journal no later run could get past
    "created-dir-name-too-long": (lambda m, o: m["created_dirs"].append("lib64/" + "c" * 256),
                                  "longer than 255 bytes"),
    "file-name-too-long": (lambda m, o: m["files"].append(_sentinel_record("include/" + "\xe9" * 128)),
                           "longer than 255 bytes"),
    "original-name-too-long": (lambda m, o: m["originals"].update({"lib64/" + "b" * 300: {
                               "type": "file", "sha256": "0" * 64, "mode": 0o644}}),
                               "longer than 255 bytes"),
    # `$` also matches before a final newline: each field is matched whole
    "version-and-a-newline": (lambda m, o: m.update(cudnn_version=m["cudnn_version"] + "\n"),
                              "cudnn_version"),
    "txid-and-a-newline": (lambda m, o: m.update(txid=m["txid"] + "\n"), "txid"),
    "hash-and-a-newline": (lambda m, o: m["files"][0].update(
        {k: v + "\n" for k, v in m["files"][0].items() if k in ("sha256", "blake3")}),
        "files[0]"),
    "format-a-string": (lambda m, o: m.update(format="1"), "format"),
    "no-format": (lambda m, o: m.pop("format"), "format is missing"),
    "version-a-number": (lambda m, o: m.update(cudnn_version=7), "cudnn_version"),
    "not-an-object": (lambda m, o: m.clear() or m.update(x=1), "missing"),
    # JSON's \ud800 escape spells a lone surrogate that no file name can hold: every system
    # call given it raised UnicodeEncodeError (exit 70); one undecodable byte (\udce9) can be
    "surrogate-in-a-path": (lambda m, o: m["files"].append(_sentinel_record("include/\udce9\ud800")),
                            "no file name can"),
    "surrogate-in-a-link-target": (lambda m, o: next(f for f in m["files"] if f["type"] ==
                                   "symlink").update(target="libcudnn\ud800"), "no file name can"),
    "surrogate-in-an-original": (lambda m, o: m["originals"].update({"include/x\ud800": {
                                 "type": "file", "sha256": "0" * 64, "mode": 0o644}}),
                                 "no file name can"),
}


@pytest.mark.parametrize("case", list(MANIFEST_CASES))
def test_hostile_manifest_is_refused_by_uninstall(case, setup, home):
    root, outside = setup
    change, what = MANIFEST_CASES[case]
    if case == "through-a-link":
        (root / "include" / "out").symlink_to(outside)
    _edit(root, "manifest.json", lambda m: change(m, outside))
    refused(root, outside, home, ["uninstall"], what)
    assert (outside / "x").read_bytes() == SENTINEL and (outside / "empty").is_dir()


@pytest.mark.parametrize("command", [["install", "ARCHIVE", "--no-theanorc", "--no-verify"],
                                     ["uninstall"],
                                     ["theanorc", "--theanorc", "RC"],
                                     ["install", "ARCHIVE", "--dry-run", "--no-theanorc"]])
def test_every_command_reads_state_through_the_validator(command, setup, home, archives):
    root, outside = setup
    _edit(root, "manifest.json", lambda m: m["files"].append(_sentinel_record("../outside/x")))
    args = [archives[V7] if a == "ARCHIVE" else home / "rc" if a == "RC" else a for a in command]
    refused(root, outside, home, args, "normalised")


@pytest.mark.parametrize("command", [["verify", "--no-theano"], ["doctor"], ["repair"]])
def test_a_path_no_file_can_have_is_damaged_state_in_every_command(command, setup, home):
    """A lone surrogate in a recorded path reached os.lstat in verify, doctor and repair: exit
    70. It is damaged state, said where each command says it, and nothing changes."""
    root, outside = setup
    _edit(root, "manifest.json",
          lambda m: m["files"].append(_sentinel_record("include/\ud800.h")))
    if command[0] == "repair":
        refused(root, outside, home, command, "no file name can")
    elif command[0] == "verify":
        reported(root, outside, home, "no file name can")
    else:
        before = tree_state(root)
        done, out = run_json([*command, "--cuda-root", root], home)
        assert done.returncode == 1 and out["error"] is None, done.stderr
        [state] = [p for p in out["problems"] if p["check"] == "state"]
        assert "no file name can" in state["message"]
        assert tree_state(root) == before


def test_verify_fails_the_state_check_on_damaged_state_and_runs_every_other_check(setup, home):
    """verify only looks: damaged state is its failed `state` check (exit 1), never exit 5,
    and every other check runs, on the files alone."""
    root, outside = setup
    _edit(root, "manifest.json", lambda m: m["files"].append(_sentinel_record("../outside/x")))
    out = reported(root, outside, home, "normalised")
    assert {c["name"]: c for c in out["checks"]}["compile"]["status"] == "pass"


def test_doctor_lists_damaged_state_and_bench_goes_on_without_it(setup, home):
    """The commands that only look report damaged state instead of stopping on it."""
    root, outside = setup
    _edit(root, "manifest.json", lambda m: m["files"].append(_sentinel_record("../outside/x")))
    before, before_outside = tree_state(root), tree_state(outside)
    done, out = run_json(["doctor", "--cuda-root", root], home)
    assert done.returncode == 1 and out["error"] is None, done.stderr
    [state] = [p for p in out["problems"] if p["check"] == "state"]
    assert state["severity"] == "fail" and "normalised" in state["message"]
    assert state["message"].startswith(f"the state in {root}/.cudnn-setup is damaged: ")
    assert "aside" in state["fix"] and "cudnn" not in out
    done, out = run_json(["bench", "--cuda-root", root, "--no-theano"], home)
    assert done.returncode == 0 and out["error"] is None, done.stderr
    [algorithms] = out["checks"]
    assert algorithms["status"] == "skip" and "normalised" in algorithms["detail"]
    assert "benchmarking without the root's cuDNN: the state in" in done.stderr
    assert tree_state(root) == before and tree_state(outside) == before_outside


@pytest.mark.parametrize("content,what", [
    (None, "not valid JSON"),  # truncated: the first half of the real manifest
    (b"", "not valid JSON"),
    (b"garbage", "not valid JSON"),
    (b"\xff\xfe{}", "not valid JSON"),
    (b"[]", "not an object"),
    (b"[" * 100000, "not valid JSON"),
])
def test_damaged_manifest_file_is_refused(content, what, setup, home):
    root, outside = setup
    path = _state(root) / "manifest.json"
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2] if content is None else content)
    refused(root, outside, home, ["uninstall"], what)


def test_manifest_that_is_a_symlink_or_a_fifo_is_refused(setup, home):
    root, outside = setup
    path = _state(root) / "manifest.json"
    (outside / "manifest.json").write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(outside / "manifest.json")
    refused(root, outside, home, ["uninstall"], "symbolic link")
    path.unlink()
    os.mkfifo(path)  # opening it must not block
    reported(root, outside, home, "not a regular file", fifo=True, timeout=60, process=True)


@pytest.mark.parametrize("name", ["manifest.json", "journal.json"])
@pytest.mark.parametrize("what", ["directory", "socket"])
def test_a_record_that_is_a_directory_or_a_socket_is_damaged_state(setup, home, name, what):
    """Python's fdopen refuses a directory (EISDIR, naming the descriptor's number) and open(2)
    a socket (ENXIO): each was a command's error, `os-error: Is a directory: 4`, verify's
    included, instead of damaged state naming the record."""
    import socket

    root, outside = setup
    path = _state(root) / name
    path.unlink(missing_ok=True)
    if what == "directory":
        path.mkdir()
    else:
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(str(path))
    said = f"{name} is not a regular file (a {what})"
    before = tree_state(root, leave_out=".cudnn-setup")
    done, out = run_json(["verify", "--no-theano", "--no-frameworks", "--cuda-root", root], home)
    assert done.returncode == 1 and out["error"] is None, done.stderr
    state = next(c for c in out["checks"] if c["name"] == "state")
    assert state["status"] == "fail" and said in state["detail"], state
    for command in (["uninstall"], ["repair"]):
        done, out = run_json([*command, "--cuda-root", root], home)
        assert done.returncode == 5, done.stderr
        assert out["error"]["code"] == "state-damaged" and said in out["error"]["message"]
    assert tree_state(root, leave_out=".cudnn-setup") == before
    assert stat_kind(path) == what


def stat_kind(path: Path) -> str:
    import stat

    mode = os.lstat(path).st_mode
    return "directory" if stat.S_ISDIR(mode) else "socket" if stat.S_ISSOCK(mode) else "other"


def _journal(root: Path, **changes) -> dict:
    manifest = json.loads((_state(root) / "manifest.json").read_text())
    journal = {"format": 1, "txid": "0123456789ab", "commit": {"manifest_txid": "fedcba987654"},
               "ops": [{"action": "put", "path": manifest["files"][0]["path"],
                        "source": ".cudnn-setup/tx/0123456789ab/staging/a", "backup": True,
                        "original": False, "kind": "file", "ino": 1}]}
    journal.update(changes)
    return journal


JOURNAL_CASES = {
    "txid-absolute": (lambda j, o: j.update(txid=str(o)), "txid"),
    "txid-dotdot": (lambda j, o: j.update(txid="../../../outside"), "txid"),
    "path-dotdot": (lambda j, o: j["ops"][0].update(path="../outside/x"), "normalised"),
    "path-absolute": (lambda j, o: j["ops"][0].update(path=str(o / "x")), "absolute"),
    "source-outside": (lambda j, o: j["ops"][0].update(source="../outside/new"), "normalised"),
    "source-in-the-root": (lambda j, o: j["ops"][0].update(source="include/cudnn.h"),
                           "neither staging"),
    "source-other-tx": (lambda j, o: j["ops"][0].update(
        source=".cudnn-setup/tx/ffffffffffff/staging/a"), "neither staging"),
    "unknown-action": (lambda j, o: j["ops"][0].update(action="chmod"), "action"),
    "put-without-inode": (lambda j, o: j["ops"][0].pop("ino"), "ino is missing"),
    "no-format": (lambda j, o: j.pop("format"), "format is missing"),
    "no-commit": (lambda j, o: j.pop("commit"), "commit is missing"),
    "empty-commit": (lambda j, o: j.update(commit={}), "neither which manifest"),
}


@pytest.mark.parametrize("case", list(JOURNAL_CASES))
def test_hostile_journal_is_refused_by_recovery(case, setup, home):
    root, outside = setup
    change, what = JOURNAL_CASES[case]
    journal = _journal(root)
    change(journal, outside)
    (_state(root) / "journal.json").write_text(json.dumps(journal))
    reported(root, outside, home, what)
    refused(root, outside, home, ["install", "ARCHIVE-unused", "--no-theanorc"], what)


def test_state_dir_that_is_a_symlink_is_refused(setup, home):
    root, outside = setup
    os.rename(_state(root), outside / "state")
    _state(root).symlink_to(outside / "state")
    refused(root, outside, home, ["uninstall"], "symbolic link")
    reported(root, outside, home, "symbolic link")


def test_dangling_state_link_fails_at_once_instead_of_spinning(archives, cuda_root, home, tmp_path):
    root = cuda_root()
    _state(root).symlink_to(tmp_path / "nowhere")
    start = time.monotonic()
    done, out = run_json(["install", archives[V7], "--cuda-root", root, "--no-theanorc"], home,
                         process=True, timeout=120)
    assert time.monotonic() - start < 60
    assert done.returncode == 5 and out["error"]["code"] == "state-damaged"
    assert os.readlink(_state(root)) == str(tmp_path / "nowhere")
    assert not (root / "include" / "cudnn.h").exists()


def test_state_dir_that_is_a_file_is_refused(cuda_root, home, archives, tmp_path):
    root = cuda_root()
    _state(root).write_text("not a dir")
    outside = tmp_path / "outside"
    outside.mkdir()
    refused(root, outside, home, ["install", archives[V7], "--no-theanorc"], "not a directory")


def test_tx_that_is_a_symlink_is_not_emptied(setup, home):
    root, outside = setup
    (_state(root) / "tx").symlink_to(outside)
    reported(root, outside, home, "tx is a symbolic link")
    refused(root, outside, home, ["uninstall"], "tx is a symbolic link")


def test_originals_that_is_a_symlink_is_refused(setup, home, archives):
    root, outside = setup
    store = _state(root) / "originals"
    os.rename(store, outside / "originals")
    store.symlink_to(outside / "originals")
    refused(root, outside, home, ["uninstall"], "originals is a symbolic link")
    refused(root, outside, home, ["install", archives[V7], "--no-theanorc", "--force"],
            "originals is a symbolic link")


def test_changed_that_is_a_symlink_is_refused_before_a_repair_commits(setup, home):
    """`changed/` is where a repair keeps the files someone changed. Planted as a link, it was
    not looked at until after the repair's commit: the repair put cudnn.h back, then ended
    exit 1 `state-damaged` with the hint "nothing was changed", its journal left for a repair
    that failed the same way every time. It is checked with tx/ and originals/, before
    anything is done."""
    root, outside = setup
    (outside / "changed").mkdir()
    (_state(root) / "changed").symlink_to(outside / "changed")
    (root / "include" / "cudnn.h").write_text("/* changed by hand */\n")
    out = refused(root, outside, home, ["repair"], "changed is a symbolic link")
    assert out["changed"] is False
    refused(root, outside, home, ["uninstall"], "changed is a symbolic link")
    reported(root, outside, home, "changed is a symbolic link")
    assert not (_state(root) / "journal.json").exists()


def test_symlinked_dir_inside_a_transaction_is_not_followed(setup, home):
    """A journal whose backup dir holds a link out of the root: rollback must not pull the
    outside file into the root."""
    root, outside = setup
    manifest = json.loads((_state(root) / "manifest.json").read_text())
    header = next(f for f in manifest["files"] if f["path"].endswith("cudnn.h"))
    backup = _state(root) / "tx" / "0123456789ab" / "backup"
    backup.mkdir(parents=True)
    (backup / "include").symlink_to(outside)
    (outside / "cudnn.h").write_text("outside\n")
    journal = _journal(root, commit={"manifest_absent": True})
    journal["ops"] = [{"action": "remove", "path": header["path"], "source": None,
                       "backup": True, "original": False, "kind": "file", "ino": None}]
    (_state(root) / "journal.json").write_text(json.dumps(journal))
    refused(root, outside, home, ["uninstall"], "symbolic link")
    assert (outside / "cudnn.h").read_text() == "outside\n"


def test_manifest_of_the_previous_release_still_loads(setup):
    """Format 1 as the previous release wrote it (no include_dir, cuda_source, kept)."""
    root, _ = setup
    def old_shape(m):
        for key in ("include_dir", "cuda_source"):
            m.pop(key)
        for original in m["originals"].values():
            original.pop("kept")
    _edit(root, "manifest.json", old_shape)
    manifest = StateDir(find_cuda_root({}, root).path).manifest()
    assert manifest.include_dir == "include"
    assert manifest.originals["include/cudnn.h"].in_place is False


def test_written_manifest_round_trips(setup):
    root, _ = setup
    state = StateDir(root)
    manifest = state.manifest()
    assert manifest.to_dict() == json.loads(state.manifest_path.read_text())


def test_a_format_1_manifest_without_provenance_still_drives_verify_and_uninstall(setup, home):
    """Manifests written before the provenance (format 1) keep working: verify reads them and
    uninstall takes the install out and puts the hand-copied header back."""
    root, _ = setup
    manifest = json.loads((_state(root) / "manifest.json").read_text())
    assert manifest["format"] == 3 and manifest["source"]["provenance"]["source"] == "path"

    def sha256_of(record, path):  # before format 3 every file is known by its sha256
        if record and record.get("type") == "file":
            record["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
            record.pop("blake3", None)

    def older(m):
        m["format"] = 1
        del m["source"]["provenance"]
        for f in m["files"]:
            sha256_of(f, root / f["path"])
            sha256_of(f["replaced"], _state(root) / "originals" / f["path"])
        for path, o in m["originals"].items():
            sha256_of(o, _state(root) / "originals" / path)
    _edit(root, "manifest.json", older)
    done, out = run_json(["verify", "--cuda-root", root, "--no-theano", "--no-frameworks"], home)
    assert {c["name"]: c["status"] for c in out["checks"]}["files"] == "pass", out["checks"]
    done, out = run_json(["uninstall", "--cuda-root", root], home)
    assert done.returncode == 0, done.stderr
    assert (root / "include" / "cudnn.h").read_text() == "/* copied by hand */\n"
    assert not (root / "lib64" / "libcudnn.so.7.4.2").exists()


@pytest.mark.parametrize("change,what", [
    (lambda p: p.update(source="ftp"), "provenance.source"),
    (lambda p: p.update(sha256="not-hex"), "provenance.sha256"),
    (lambda p: p.update(repacked_from={"wheel": "../../x.whl", "sha256": "0" * 64}), "repacked_from"),
    (lambda p: p.update(with_deps=[{"wheel": "a/b.whl", "sha256": "0" * 64, "location": "x"}]),
     "with_deps"),
])
def test_a_hostile_provenance_is_refused(setup, home, change, what):
    root, outside = setup
    _edit(root, "manifest.json", lambda m: change(m["source"]["provenance"]))
    refused(root, outside, home, ["uninstall"], what)


def test_a_deep_tree_in_the_state_is_removed_without_recursion(setup, home):
    """shutil.rmtree recursed once per level: 1,500 directories under originals/ ended a
    committed uninstall with RecursionError, exit 70. A link in the tree goes, not its target."""
    root, outside = setup
    top = root / ".cudnn-setup" / "originals" / "deep"
    top.mkdir(parents=True)
    fd = os.open(top, os.O_RDONLY)
    for _ in range(1500):  # through descriptors: Path.mkdir(parents=True) recurses too
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.symlink(outside, "to-outside", dir_fd=fd)
    os.close(fd)
    try:
        done, out = run_json(["uninstall", "--cuda-root", root], home)
        assert done.returncode == 0 and "Traceback" not in done.stderr, out["error"]
        assert not top.exists()
        assert (outside / "x").read_bytes() == SENTINEL
    finally:  # pytest's own clean-up of old runs recurses too: leave no such tree behind
        remove_tree(top)
