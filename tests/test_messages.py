"""Messages that say what happened: the right cause, once, with a name printed as it is."""
import json
from pathlib import Path

from conftest import run_cli, run_json
from cudnn_setup.steps.context import Context
from cudnn_setup.steps.loader_step import loader_step
from sandboxfs import needs_namespaces, run_cli_in

V7 = "cudnn-10.0-linux-x64-v7.4.2.24.tgz"
V8 = "cudnn-11.3-linux-x64-v8.2.1.32.tgz"
LONG = "n" * 300  # one name part over NAME_MAX (255)


def test_missing_sub_library_is_named_without_a_stray_dot(archives, cuda_root, home):
    """cuDNN 8 says "Could not load library libcudnn_cnn_infer.so.8. Error: …"."""
    root = cuda_root(version="11.3")
    run_json(["install", archives[V8], "--cuda-root", root, "--no-verify", "--no-theanorc"], home)
    (root / "lib64" / "libcudnn_cnn_infer.so.8.2.1").unlink()
    done, out = run_json(["verify", "--cuda-root", root, "--no-theano"], home)
    load = next(c for c in out["checks"] if c["name"] == "load")
    assert "libcudnn_cnn_infer.so.8 is missing" in load["detail"], load["detail"]


def test_ld_library_path_fix_is_printed_once(archives, cuda_root, home):
    for extra in ([], ["--no-verify"]):
        root = cuda_root()
        done = run_cli(["install", archives[V7], "--cuda-root", root, "--no-theanorc",
                        *extra], home)
        assert done.stdout.count("export LD_LIBRARY_PATH=") == 1, done.stdout


def test_python_that_does_not_exist_is_said_so(cuda_root, home):
    done, out = run_json(["verify", "--cuda-root", cuda_root(), "--python", "/nonexistent"], home)
    assert done.returncode == 2
    assert "/nonexistent does not exist" in out["error"]["message"]
    assert "Theano" not in out["error"]["message"]


def test_name_part_too_long(archives, cuda_root, tmp_path, home):
    done, out = run_json(["install", archives[V7], "--cuda-root", tmp_path / LONG], home)
    assert done.returncode == 4 and "File name too long" in out["error"]["message"]
    root = cuda_root()
    done, out = run_json(["install", archives[V7], "--cuda-root", root, "--no-verify",
                          "--theanorc", tmp_path / LONG / "rc"], home)
    check = next(c for c in out["checks"] if c["name"] == "theanorc")
    assert done.returncode == 1 and out["changed"] is True
    assert "file name too long" in check["detail"] and "free some space" not in check["detail"]
    done, out = run_json(["download", "http://127.0.0.1:9/x.tgz", "--cache-dir",
                          tmp_path / LONG], home)
    assert done.returncode == 6 and out["error"]["code"] == "name-too-long"
    assert "free some space" not in out["error"]["hint"]


@needs_namespaces
def test_root_on_a_read_only_filesystem_says_so(archives, cuda_root, tmp_path, home):
    mnt = tmp_path / "ro"
    mnt.mkdir()
    root = cuda_root()
    setup = (f"mount -t tmpfs tmpfs {mnt} && cp -a {root} {mnt}/cuda && "
             f"mount -o remount,ro {mnt}")
    done = run_cli_in(setup, ["install", archives[V7], "--cuda-root", mnt / "cuda", "--json",
                              "--no-theanorc"], home)
    out = json.loads(done.stdout.split("--after--")[0])
    assert done.returncode == 5 and out["error"]["code"] == "read-only-filesystem"
    text = out["error"]["message"] + out["error"]["hint"]
    assert "read-only filesystem" in text
    assert "free some space" not in text and "rolled back" not in text


def test_ldconfig_registration_that_fails_is_a_check_not_a_crash(tmp_path, home):
    not_a_dir = tmp_path / "conf.d"
    not_a_dir.write_text("")
    ctx = Context(env={}, home=home, python="python3", ld_conf_dir=not_a_dir)
    check = loader_step(ctx, Path("/opt/cuda/lib64"), register=True).check
    assert check.status == "fail" and "Not a directory" in check.detail
    assert check.data["code"] == "os-error"


def test_errors_that_escape_a_command_body():
    """A library's network error is a download failure; anything else a bug, with what was
    committed before it still reported."""
    import requests

    from cudnn_setup.steps.command_wrapper import command
    from cudnn_setup.errors import DownloadFailed

    @command("download", fails_as=DownloadFailed)
    def broken_download(result):
        raise requests.exceptions.ChunkedEncodingError("peer went away")

    @command("install")
    def bug_after_commit(result):
        result.changed = True
        raise KeyError("oops")

    @command("install")
    def disk_error_after_commit(result):
        result.changed = True
        raise OSError(5, "Input/output error", "/x/lib64/libcudnn.so")

    error = broken_download().error
    assert (error.exit_code, error.code) == (6, "download-failed")
    out = bug_after_commit()
    assert out.error.code == "internal" and out.to_dict()["changed"] is True
    assert "KeyError" in out.error.traceback
    error = disk_error_after_commit().error
    assert (error.exit_code, error.code) == (1, "io-error")  # not 5: nothing was rolled back
    assert "committed, which stands" in error.message and "rolled back" not in error.message


def test_a_bug_in_rendering_still_gives_one_json_object(home, monkeypatch):
    from cudnn_setup.report import Result

    def broken(self):
        raise RuntimeError("cannot render")

    monkeypatch.setattr(Result, "to_dict", broken)
    done = run_cli(["inspect", "/nonexistent.tgz", "--json"], home)
    assert done.returncode == 70
    answer = json.loads(done.stdout)
    assert answer["error"]["code"] == "internal" and len(done.stdout.splitlines()) == 1
    assert "Traceback" not in done.stderr


def test_counts_agree_with_their_nouns_in_every_check_that_counts(archives, cuda_root, home):
    """A one-library cuDNN (v7) is "1 library", never "1 libraries"; what deps found is said in
    words that agree with the counts, whatever they are."""
    root = cuda_root(version="10.0")
    done = run_cli(["install", archives[V7], "--cuda-root", root, "--no-theanorc"], home)
    text = done.stdout + done.stderr
    assert "1 library: x86_64 ELF shared object with the expected SONAME" in text
    assert "the 1 cuDNN library in" in text and " needs no other library at load or run time" in text
    import re
    assert not re.search(r"\b1 (libraries|files|changes|problems|frameworks)\b", text), text
    assert not re.search(r"\b(0|[2-9]|\d\d+) (library|file|change|problem)\b", text), text
    assert "(s)" not in text


def test_deps_sentence_for_each_count():
    from cudnn_setup.checks.deps import _found_sentence

    d = Path("/x")
    assert _found_sentence(0, 1, d) == "the 1 cuDNN library in /x needs no other library at " \
                                       "load or run time"
    assert _found_sentence(1, 1, d) == "found the one library that the 1 cuDNN library in /x " \
                                       "needs at load and run time"
    assert _found_sentence(5, 8, d) == "found all 5 libraries that the 8 cuDNN libraries in /x " \
                                       "need at load and run time"


def test_doctor_says_what_a_missing_loader_entry_means(archives, cuda_root, home):
    """Never a bare "loads-libcudnn.so.9 warn not found": what was looked for, where, and what
    it means for a program."""
    root = cuda_root(version="12.4")
    run_json(["install", archives["cudnn-linux-x86_64-9.3.0.99_cuda12-archive.tar.xz"],
              "--cuda-root", root, "--no-verify", "--no-theanorc"], home)
    done, out = run_json(["doctor", "--cuda-root", root], home)
    loads = next(c for c in out["checks"] if c["name"] == "loads-libcudnn.so.9")
    assert loads["status"] == "warn"
    assert loads["detail"].startswith("a program started without help would not find "
                                      "libcudnn.so.9: it is in none of LD_LIBRARY_PATH, the "
                                      "ldconfig cache, the ld.so.conf directories")
    assert f"the cuDNN 9 found here ({root}" in loads["detail"]
    assert "not found" != loads["detail"] and " warn  not found" not in done.stderr


def test_install_that_fails_a_check_says_failed_after_installed(archives, cuda_root, tmp_path,
                                                                 home):
    """Exit 1 after "installed cuDNN …": the summary says which checks failed, as verify's does."""
    root = cuda_root()
    (tmp_path / "a-file").write_text("")
    done = run_cli(["install", archives[V7], "--cuda-root", root, "--no-verify",
                    "--theanorc", tmp_path / "a-file" / ".theanorc"], home)
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("installed cuDNN 7.4.2")
    assert f"cuDNN in {root}: FAILED (theanorc)" in lines


def test_commands_to_run_quote_a_root_with_a_space(archives, cuda_root, tmp_path, home):
    """A fix shown as a command runs as shown in a shell, for a root named like "/opt/my cuda"."""
    import re
    import shlex
    import subprocess

    root = cuda_root().rename(tmp_path / "my cuda")
    done, out = run_json(["install", archives[V7], "--cuda-root", root, "--no-theanorc",
                          "--no-verify"], home)
    assert done.returncode == 0, out["error"]
    done, out = run_json(["verify", "--cuda-root", root, "--no-theano", "--no-frameworks"], home)
    loader = next(c for c in out["checks"] if c["name"] == "loader")
    line = re.search(r"export LD_LIBRARY_PATH=\S*(?: \S+)*?\}", loader["detail"])[0]
    echoed = subprocess.run(["bash", "-c", f"unset LD_LIBRARY_PATH; {line}; "
                             'printf %s "$LD_LIBRARY_PATH"'], capture_output=True, text=True)
    assert echoed.stdout == str(root / "lib64"), line
    (root / "include" / "cudnn.h").write_text("changed\n")
    done, out = run_json(["verify", "--cuda-root", root, "--no-theano", "--no-frameworks"], home)
    files = next(c for c in out["checks"] if c["name"] == "files")
    repair = re.search(r"`([^`]*)`", files["data"]["hint"])[1]
    assert shlex.split(repair) == ["cudnn-setup", "repair", "--cuda-root", str(root)], repair


def test_uninstall_of_a_root_it_never_touched_says_so_once(cuda_root, home):
    root = cuda_root()
    for args in ([], ["--dry-run"]):
        done = run_cli(["uninstall", "--cuda-root", root, *args], home)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == [
            f"cudnn-setup has installed nothing in {root}; nothing to do"], done.stdout


def test_install_of_a_missing_file_names_no_step_for_it(cuda_root, tmp_path, home):
    """The error is the first thing said: no "staging nope.tgz: reading…" before it."""
    for missing in (tmp_path / "nope.tgz", tmp_path):
        done = run_cli(["install", missing, "--cuda-root", cuda_root()], home)
        assert done.returncode == 2
        assert done.stderr.startswith("error: "), done.stderr
