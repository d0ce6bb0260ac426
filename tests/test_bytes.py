"""Bytes that are not UTF-8 anywhere: what children print, member names, the root's own path.
Whatever the locale, the tool answers with one valid JSON object and escaped names."""
import json
import os
import stat
import subprocess
import sys

import pytest

from conftest import clean_env, run_json
from cudnn_setup.probing.probe import run_probe
from cudnn_setup.child import STDOUT_LIMIT, run_command
from fixtures.generate import SPECS, Entry, compress, spec_entries, tar_bytes
from fixtures.hostile import BASE

GARBAGE = b"\xff\xfe caf\xe9 \x1b[31m"
LOCALES = ["C.UTF-8", "C"]


def _script(path, body: str):
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


# --- what children print ------------------------------------------------------------------------

def test_child_output_is_bytes_decoded_with_replacement_and_capped(tmp_path):
    child = _script(tmp_path / "noisy", "read key; printf '\\377\\376 caf\\351\\n' >&2; "
                    "head -c 20000000 /dev/zero; printf '\\n{\"answer_key\": \"%s\", "
                    "\"answer\": {\"x\": \"\\351\"}}\\n' \"$key\"\n")
    done = run_command([str(child)], 60)
    assert done.ok and "caf\ufffd" in done.err
    assert len(done.stdout) <= STDOUT_LIMIT + 3  # the last bytes are kept, with "..." before
    probe = run_probe([str(child)], 60, python="/bin/sh")
    assert probe.data == {"x": "\ufffd"} and "caf\ufffd" in probe.stderr


def _library_with_noisy_constructor(compiler, abort: bool) -> bytes:
    source = r"""
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
__attribute__((constructor)) static void noise(void) {
    fputs("\xff\xfe caf\xe9 \x1b[31m not UTF-8\n", stderr);
    if (FIX_ABORT) abort();
}
size_t cudnnGetVersion(void) { return 7402; }
size_t cudnnGetCudartVersion(void) { return 10000; }
"""
    return compiler.build(source, {"FIX_ABORT": "1" if abort else "0"}, "libcudnn.so.7")


@pytest.fixture
def installed_v7(archives, cuda_root, home):
    root = cuda_root(version="10.0")
    done, _ = run_json(["install", archives[BASE], "--cuda-root", root, "--no-verify",
                        "--no-theanorc"], home)
    assert done.returncode == 0
    return root


@pytest.mark.parametrize("abort", [False, True], ids=["prints", "prints-then-aborts"])
def test_library_writing_invalid_utf8_to_stderr(installed_v7, compiler, home, abort):
    lib = installed_v7 / "lib64" / "libcudnn.so.7.4.2"
    lib.chmod(0o644)
    lib.write_bytes(_library_with_noisy_constructor(compiler, abort))
    done, out = run_json(["verify", "--cuda-root", installed_v7, "--no-theano"], home,
                         process=True)
    assert done.returncode == 1 and out["error"] is None, done.stderr  # files check: changed
    load = next(c for c in out["checks"] if c["name"] == "load")
    if abort:
        assert load["status"] == "fail" and "SIGABRT" in load["detail"]
        assert "caf\ufffd" in load["detail"] and "\x1b" not in done.stdout + done.stderr
    else:
        assert load["status"] == "pass"


def test_compiler_output_that_is_not_utf8(installed_v7, home):
    header = installed_v7 / "include" / "cudnn.h"
    header.chmod(0o644)
    header.write_bytes(b"#error caf\xe9 \xff\n")
    done, out = run_json(["verify", "--cuda-root", installed_v7, "--no-theano"], home,
                         process=True)
    compile_ = next(c for c in out["checks"] if c["name"] == "compile")
    assert compile_["status"] == "fail" and "caf\ufffd" in compile_["detail"]


def test_nvcc_version_that_is_not_utf8(cuda_root, home):
    root = cuda_root(version="10.0")
    (root / "version.txt").unlink()
    (root / "include" / "cuda.h").write_text("/* no version macro */\n")
    (root / "bin").mkdir()
    _script(root / "bin" / "nvcc", "printf 'nvcc \\377\\376\\351 Cuda compilation tools, "
                                   "release 10.0, V10.0.130\\n'\n")
    done, out = run_json(["doctor", "--cuda-root", root], home)
    assert out["error"] is None, done.stderr
    assert done.returncode == 1  # the root holds no cuDNN: doctor lists that as a failure
    found = next(r for r in out["cuda_roots"] if r["path"] == str(root))
    assert found["version"] == "10.0"


def test_python_child_printing_garbage(installed_v7, tmp_path, home):
    fake = _script(tmp_path / "python", "printf '\\377\\376 caf\\351\\n'; "
                   "printf '\\377 broken \\351\\n' >&2; exit 0\n")
    done, out = run_json(["verify", "--cuda-root", installed_v7, "--python", fake], home)
    theano = next(c for c in out["checks"] if c["name"] == "theano")
    assert theano["status"] == "fail" and "\ufffd" in theano["detail"]
    json.dumps(out, ensure_ascii=False).encode("utf-8")  # valid Unicode throughout


# --- names and paths that are not UTF-8 -----------------------------------------------------------

E9_HEADER = "cuda/include/cudnn_caf\udce9.h"  # byte 0xE9 in the name, as os.fsdecode carries it


@pytest.fixture(scope="module")
def e9_archive(tmp_path_factory, compiler):
    path = tmp_path_factory.mktemp("e9") / BASE
    entries = spec_entries(SPECS[BASE], compiler) + [Entry(E9_HEADER, b"/* caf\xe9 */\n"),
                                                     Entry("cuda/doc/r\udce9sum\udce9.txt", b"x")]
    path.write_bytes(compress(tar_bytes(entries), path.name))
    return path


def _cli(args, home, lang):
    """The CLI as a process under `lang`, its output checked to be plain ASCII."""
    env = clean_env(home, LANG=lang, LC_ALL=lang)
    done = subprocess.run([sys.executable, "-m", "cudnn_setup", *map(str, args)], env=env,
                          capture_output=True, timeout=300)
    assert b"Traceback" not in done.stderr, done.stderr.decode(errors="replace")
    out, err = done.stdout.decode("ascii"), done.stderr.decode("utf-8")  # strict: raises if not
    return done.returncode, out, err


@pytest.mark.parametrize("lang", LOCALES)
def test_member_names_with_byte_e9(e9_archive, cuda_root, home, lang):
    code, out, err = _cli(["inspect", e9_archive, "--json"], home, lang)
    pkg = json.loads(out)["package"]
    assert code == 0 and "cudnn_caf\\xe9.h" in pkg["headers"]
    code, out, err = _cli(["inspect", e9_archive], home, lang)
    assert "cudnn_caf\\xe9.h" in out
    root = cuda_root()
    code, out, err = _cli(["install", e9_archive, "--cuda-root", root, "--dry-run",
                           "--no-theanorc"], home, lang)
    assert code == 0 and "include/cudnn_caf\\xe9.h" in out
    code, out, err = _cli(["install", e9_archive, "--cuda-root", root, "--no-theanorc",
                           "--no-verify", "--json"], home, lang)
    assert code == 0, err
    assert b"cudnn_caf\xe9.h" in os.listdir(os.fsencode(root / "include"))
    for extra in (["--dry-run"], []):
        code, out, err = _cli(["uninstall", "--cuda-root", root, *extra], home, lang)
        assert code == 0 and "include/cudnn_caf\\xe9.h" in out, err
    assert b"cudnn_caf\xe9.h" not in os.listdir(os.fsencode(root / "include"))


@pytest.mark.parametrize("lang", LOCALES)
def test_root_path_with_byte_e9_and_a_newline(archives, tmp_path, compiler, home, lang):
    from fixtures.generate import make_cuda_root

    root = make_cuda_root(tmp_path / "r\udce9\nx", "10.0", cc=compiler)
    shown = str(root).replace("\udce9", "\\xe9").replace("\n", "\\n")
    code, out, err = _cli(["install", archives[BASE], "--cuda-root", root, "--no-verify",
                           "--theanorc", tmp_path / "rc", "--json"], home, lang)
    result = json.loads(out)
    assert result["changed"] is True and result["cuda_root"] == shown.replace("\\n", "\n")
    theanorc = next(c for c in result["checks"] if c["name"] == "theanorc")
    assert code == 1 and theanorc["status"] == "fail" and "cannot be written" in theanorc["detail"]
    assert shown in err and "\n".join(["r\\xe9", "x"]) not in err
    code, out, err = _cli(["verify", "--cuda-root", root, "--no-theano"], home, lang)
    assert shown in out and f"cuDNN in {shown}: " in out, out
    code, out, err = _cli(["uninstall", "--cuda-root", root], home, lang)
    assert code == 0 and f"from {shown}:" in out
    assert not stat.S_ISREG(os.lstat(root / "include").st_mode)
