"""The program at its edge: the classic install command as people type it, options read from the
environment, a closed stderr, crash reports (where, which mode, what they leave out), `--from`
values that are neither a source nor a mirror, and option handling linear in argv."""
import io
import json
import os
import stat
import subprocess
import sys
import time

import pytest

from conftest import REPO, clean_env, run_cli
from cudnn_setup.arguments import ArgsError, parse
from cudnn_setup.cli import main
from fixtures.generate import GENERATION_SAMPLES

V3 = GENERATION_SAMPLES["v3"]  # cudnn-7.0-linux-x64-v3.0-prod.tgz
SAMPLE = REPO / "fixtures" / "samples" / "cudnn-10.0-linux-x64-v7.4.2.24.tgz"


def program(args, home, cwd=None, env_extra=None, closed_stderr=False):
    """The console program in a process, as a shell runs it (`2>&-` when closed_stderr)."""
    env = clean_env(home, **(env_extra or {}))
    cmd = [sys.executable, "-c", "from cudnn_setup.cli import console_main; console_main()",
           *map(str, args)]
    if closed_stderr:
        cmd = ["bash", "-c", '"$@" 2>&-', "bash", *cmd]
    return subprocess.run(cmd, env=env, cwd=cwd or REPO, capture_output=True, text=True,
                          timeout=300)


def test_the_classic_command_as_written(archives, cuda_root, home, tmp_path):
    """`CUDA_ROOT=/usr/local/cuda cudnn-setup install cudnn-7.0-linux-x64-v3.0-prod.tgz`, with a
    fabricated root for /usr/local/cuda, from the directory the archive was downloaded to; and
    CUDNN_SETUP_CUDA_ROOT, the fleet's setting, before CUDA_ROOT."""
    downloads = tmp_path / "Downloads"
    downloads.mkdir()
    (downloads / V3).write_bytes(archives[V3].read_bytes())
    root, other = cuda_root("7.0"), cuda_root("7.0")
    done = program(["install", V3, "--json"], home, downloads, {"CUDA_ROOT": str(root)})
    out = json.loads(done.stdout)
    assert done.returncode == 0, done.stderr
    assert out["cuda_root"] == str(root) and out["cudnn_version"] == "3.0.7"
    assert "found via $CUDA_ROOT" in done.stderr
    assert (root / "lib64" / "libcudnn.so.7.0").exists() and (root / "include" / "cudnn.h").exists()
    assert (home / ".theanorc").is_file()

    done = program(["install", V3, "--no-verify", "--no-theanorc", "--json"], home, downloads,
                   {"CUDA_ROOT": str(root), "CUDNN_SETUP_CUDA_ROOT": str(other)})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["cuda_root"] == str(other)
    assert (other / "include" / "cudnn.h").exists()


def test_fleet_settings_are_read_from_the_environment_and_shown_in_help():
    env = {"CUDNN_SETUP_CUDA_ROOT": "/fleet/cuda", "CUDNN_SETUP_CACHE_DIR": "/fleet/cache"}
    values = parse(["download", "9.1"], env).values
    assert str(values["cuda_root"]) == "/fleet/cuda" and str(values["cache_dir"]) == "/fleet/cache"
    # the option given beats the variable; an empty variable is unset
    assert str(parse(["verify", "--cuda-root", "/r"], env).values["cuda_root"]) == "/r"
    assert parse(["verify"], {"CUDNN_SETUP_CUDA_ROOT": ""}).values["cuda_root"] is None
    # the mirror and the index are read where their other sources are (config files, pip.conf):
    # the CLI passes nothing for them, so --index-url's "implies --from pypi" is not triggered
    below = {"CUDNN_SETUP_MIRROR": "/m", "PIP_INDEX_URL": "http://i/"}
    values = parse(["install", "9"], below).values
    assert values["mirror"] is None and values["index_url"] is None
    out = io.StringIO()
    assert main(["install", "--help"], env={}, stdout=out, stderr=io.StringIO()) == 0
    text = " ".join(out.getvalue().split())
    for variable in ("CUDNN_SETUP_CUDA_ROOT", "CUDNN_SETUP_CACHE_DIR", "CUDNN_SETUP_MIRROR",
                     "PIP_INDEX_URL", "$CUDA_ROOT", "$CUDA_PATH", "$CUDA_HOME"):
        assert variable in text, variable


@pytest.mark.parametrize("value, suggestion", [("pipy", "pypi"), ("nvida", "nvidia"),
                                               ("PyPI", "pypi")])
def test_an_unknown_from_value_is_a_usage_error_with_a_suggestion(tmp_path, value, suggestion):
    with pytest.raises(ArgsError) as err:
        parse(["install", "9", "--from", value], {}, tmp_path)
    assert "--from" in err.value.message and err.value.hint == f"did you mean {suggestion}?"
    out, errs = io.StringIO(), io.StringIO()
    assert main(["list", "--from", value, "--json"], env={}, stdout=out, stderr=errs,
                cwd=tmp_path) == 2
    assert json.loads(out.getvalue())["error"]["hint"] == f"did you mean {suggestion}?"
    # a directory of that name is a mirror, and so is a URL
    (tmp_path / value).mkdir()
    assert parse(["install", "9", "--from", value], {}, tmp_path).values["from_"] == value
    for url in ("https://mirror.example/cudnn/redist/", "file:/srv/cudnn/"):
        assert parse(["mirror", "d", "9", "--from", url], {}, tmp_path).values["from_"] == url


def test_a_closed_stderr_changes_nothing(tmp_path, home, cuda_root):
    """`2>&-`: the documented exit code and, under --json, one JSON object alone on stdout."""
    root = cuda_root("10.0")
    cases = [
        (["install", SAMPLE, "--cuda-root", root, "--no-verify", "--no-theanorc",
          "--no-frameworks", "--json"], 0),
        (["inspect", tmp_path / "missing.tgz", "--json"], 2),
        (["install", "x.tgz", "--cuda-root", "--json"], 2),
        (["verify", "--cuda-root", tmp_path / "nowhere", "--json"], 4),
    ]
    for args, code in cases:
        expected = program(args, home)
        done = program(args, home, closed_stderr=True)
        assert (expected.returncode, done.returncode) == (code, code), (args, done.stdout)
        lines = done.stdout.splitlines()
        assert len(lines) == 1, (args, done.stdout)
        assert json.loads(lines[0])["error"] == json.loads(expected.stdout)["error"]
    # and without --json, nothing meant for stderr reaches stdout
    done = program(["install", "x.tgz", "--bogus"], home, closed_stderr=True)
    assert done.returncode == 2 and done.stdout == ""


def _crash(monkeypatch, home, env_extra, argv):
    """A bug (exit 70) in `download`, in this process, under a umask of 000."""
    import cudnn_setup.commands.download as download_module

    def broken(ctx, **values):
        raise RuntimeError("boom while sending Authorization: Bearer tok-SECRET-1 to "
                           "https://user:pw-SECRET-2@index.example/simple/?token=SECRET-3")

    monkeypatch.setattr(download_module, "download", broken)
    previous = os.umask(0)
    try:
        return run_cli(argv, home, env_extra)
    finally:
        os.umask(previous)


def test_a_crash_report_is_the_users_alone_and_holds_no_secret(monkeypatch, home, tmp_path):
    cache = tmp_path / "cache"
    argv = ["download", "9.1", "--header", "Authorization: Bearer tok-SECRET-1",
            "--header=Cookie: sid=SECRET-4", "--header", "X-Custom: SECRET-5",
            "--index-url", "https://user:pw-SECRET-2@index.example/simple", "--json"]
    done = _crash(monkeypatch, home, {"XDG_CACHE_HOME": str(cache)}, argv)
    assert done.returncode == 70
    message = json.loads(done.stdout)["error"]["message"]
    assert "traceback saved in" in message
    reports = list((cache / "cudnn-setup" / "crashes").iterdir())
    assert len(reports) == 1
    assert stat.S_IMODE(reports[0].stat().st_mode) == 0o600
    assert stat.S_IMODE(reports[0].parent.stat().st_mode) == 0o700
    text = reports[0].read_text()
    assert "RuntimeError" in text and "X-Custom" in text and "SECRET" not in text, text


def test_header_values_never_reach_the_crash_report():
    from cudnn_setup.crash_report import report_text

    argv = ["download", "https://user:pw-SECRET-2@host.example/x.tgz",
            "--header", "Authorization: Bearer tok-SECRET-1", "--header=Cookie: sid=SECRET-4",
            "--header", "X-Api-Key: SECRET-5", "--header", "X-Custom: SECRET-6"]
    traceback = ("Traceback...\nHTTPError: 401 for headers {'X-Custom': 'SECRET-6', "
                 "'Authorization': 'Bearer tok-SECRET-1'} access_token=SECRET-7\n")
    text = report_text("0", argv, traceback)
    assert "SECRET" not in text, text
    assert "--header Authorization: …" in text and "X-Custom" in text and "401" in text


def test_a_crash_report_is_not_saved_where_others_could_reach_it(monkeypatch, home, tmp_path):
    """A cache dir that others may write (or a link planted there) is not used, and nothing
    falls back to $TMPDIR: the message says the traceback was not saved, and why."""
    import tempfile

    shared_tmp = tmp_path / "tmp"
    shared_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(shared_tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)
    cache = tmp_path / "cache"
    (cache / "cudnn-setup").mkdir(parents=True)
    planted = tmp_path / "elsewhere"
    planted.mkdir(mode=0o777)
    planted.chmod(0o777)
    (cache / "cudnn-setup" / "crashes").symlink_to(planted)
    done = _crash(monkeypatch, home, {"XDG_CACHE_HOME": str(cache)}, ["download", "9", "--json"])
    assert done.returncode == 70
    message = json.loads(done.stdout)["error"]["message"]
    assert "traceback not saved" in message and "is a link" in message
    assert list(planted.iterdir()) == [] and list(shared_tmp.iterdir()) == []

    (cache / "cudnn-setup" / "crashes").unlink()
    (cache / "cudnn-setup" / "crashes").mkdir()
    (cache / "cudnn-setup" / "crashes").chmod(0o777)
    done = _crash(monkeypatch, home, {"XDG_CACHE_HOME": str(cache)}, ["download", "9", "--json"])
    message = json.loads(done.stdout)["error"]["message"]
    assert "traceback not saved" in message and "writable by others" in message
    assert list(shared_tmp.iterdir()) == []


def test_option_handling_is_linear_in_argv():
    """50,000 options (and as many arguments) parse in well under 5 s, not quadratic time."""
    argv = ["install", "a.tgz"] + ["--header", "A: b"] * 50_000
    started = time.perf_counter()
    values = parse(argv, {}).values
    assert time.perf_counter() - started < 5
    assert len(values["headers"]) == 50_000
    argv = ["mirror", "dir"] + [f"9.{i}" for i in range(50_000)] + ["--cuda-root", "/r"] * 50_000
    started = time.perf_counter()
    values = parse(argv, {}).values
    assert time.perf_counter() - started < 5
    assert len(values["versions"]) == 50_000 and str(values["cuda_root"]) == "/r"


def test_a_double_dash_before_the_command_is_a_usage_error(home):
    """`cudnn-setup -- verify --json` exited 0 having run nothing and said nothing."""
    from conftest import run_json

    done, out = run_json(["--", "verify"], home)
    assert done.returncode == 2 and out["error"]["code"] == "usage", out
    assert "the command comes first" in out["error"]["message"]


@pytest.mark.parametrize("words", [{"COMP_WORDS": "cudnn-setup", "COMP_CWORD": "abc"},
                                   {"COMP_WORDS": "cudnn-setup"}, {"COMP_CWORD": "1"}])
def test_completion_asked_without_the_shells_words_is_no_traceback(words, home):
    import subprocess
    import sys

    from conftest import clean_env

    env = clean_env(home, _CUDNN_SETUP_COMPLETE="complete_bash", **words)
    done = subprocess.run([sys.executable, "-m", "cudnn_setup"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "nothing completed" in done.stderr


def test_a_removed_working_directory_is_a_usage_error_not_a_traceback(tmp_path, home):
    """getcwd() fails once the directory a shell sits in is removed: a traceback and exit 1."""
    gone = tmp_path / "gone"
    gone.mkdir()
    done = subprocess.run(
        ["bash", "-c", 'cd "$1" && rmdir "$1" && exec "$2" -m cudnn_setup verify --json',
         "-", str(gone), sys.executable], env=clean_env(home), capture_output=True, text=True,
        timeout=120)
    assert "Traceback" not in done.stderr, done.stderr
    out = json.loads(done.stdout)
    assert done.returncode == 2 and out["error"]["code"] == "no-working-directory", out


@pytest.mark.parametrize("as_json", [True, False])
def test_an_answer_that_cannot_be_written_is_a_failure_said_on_stderr(home, as_json):
    """`inspect ARCHIVE --json > /dev/full`: the disk took nothing, so the command did not
    succeed (exit 1, `disk-full`'s words on stderr), whatever it found."""
    env = clean_env(home)
    argv = [sys.executable, "-c", "from cudnn_setup.cli import console_main; console_main()",
            "inspect", str(SAMPLE)] + (["--json"] if as_json else [])
    with open("/dev/full", "w") as full:
        done = subprocess.run(argv, env=env, cwd=REPO, stdout=full, stderr=subprocess.PIPE,
                              text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    assert "error: cannot write the answer to stdout: no space left on the device" \
        in done.stderr
    assert "Traceback" not in done.stderr


def test_a_reader_that_leaves_early_is_no_failure(home):
    """`… --json | head -c 1`: the reader wanted no more; the command's own exit code stands."""
    argv = [sys.executable, "-c", "from cudnn_setup.cli import console_main; console_main()",
            "inspect", str(SAMPLE), "--json"]
    read_end, write_end = os.pipe()
    os.close(read_end)  # gone before the answer comes
    try:
        done = subprocess.run(argv, env=clean_env(home), cwd=REPO, stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(write_end)
    assert done.returncode == 0, done.stderr
    assert "cannot write the answer" not in done.stderr
