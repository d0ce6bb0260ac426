"""The loader cache that cannot be read: `ldconfig -p` hangs, crashes or prints something other
than a cache listing. verify's `loader` check and doctor say so (the check's detail and its
`hint`, one line each) instead of judging silently without the cache, and a pass the cache
could overturn becomes a warning.

The tool runs the system's ldconfig (/sbin/ldconfig, /usr/sbin/ldconfig), never one found on
the caller's PATH, so the real script is put there instead, with a bind mount in a mount
namespace of the CLI's own; so is an /etc/ld.so.conf that lists the root's library dir, where
the loader finds our cuDNN without the cache. Before, a crash or garbage was taken for an empty
cache, and a hang was noted only on libraries not found: the check passed either way."""
import json
import shlex

import pytest

from conftest import REPO, run_json
from cudnn_setup.facts.ldresolve.ldconfig import LDCONFIG_PATHS
from sandboxfs import needs_namespaces, run_cli_in

SAMPLE = REPO / "fixtures" / "samples" / "cudnn-10.0-linux-x64-v7.4.2.24.tgz"

SCRIPTS = {
    "hangs": "#!/bin/sh\nexec sleep 600\n",
    "crashes": "#!/bin/sh\nkill -SEGV $$\n",
    "prints-garbage": "#!/bin/sh\necho 'hello from a broken ldconfig'\n"
                      "printf '\\tlibnothing.so.1 (libc6,x86-64) => /nowhere/libnothing.so.1\\n'\n",
}
SAID = {"hangs": "did not finish in time", "crashes": "killed by SIGSEGV",
        "prints-garbage": "printed no cache listing"}


def _setup(tmp_path, kind: str, lib_dir) -> str:
    """Shell lines: the script over the system's ldconfig, an ld.so.conf listing `lib_dir`."""
    script = tmp_path / "ldconfig"
    script.write_text(SCRIPTS[kind])
    script.chmod(0o755)
    conf = tmp_path / "ld.so.conf"
    conf.write_text(f"{lib_dir}\n")
    lines = [f"mount --bind {shlex.quote(str(script))} {p}" for p in LDCONFIG_PATHS]
    lines.append(f"mount --bind {shlex.quote(str(conf))} /etc/ld.so.conf")
    return " && ".join(lines)


def _one_json(done) -> dict:
    out = done.stdout.split("--after--")[0].strip().splitlines()
    assert len(out) == 1, f"one JSON line expected: {done.stdout!r} {done.stderr[-3000:]}"
    return json.loads(out[0])


@needs_namespaces
@pytest.mark.parametrize("kind", [pytest.param("hangs", marks=pytest.mark.slow),
                                  "crashes", "prints-garbage"])
def test_a_loader_cache_that_cannot_be_read_is_said_by_verify_and_doctor(kind, tmp_path,
                                                                         cuda_root, home):
    root = cuda_root("10.0")
    done, out = run_json(["install", SAMPLE, "--cuda-root", root, "--no-verify",
                          "--no-theanorc", "--no-frameworks"], home)
    assert done.returncode == 0, out
    setup = _setup(tmp_path, kind, root / "lib64")

    done = run_cli_in(setup, ["verify", "--cuda-root", root, "--no-theano", "--no-frameworks",
                              "--json"], home, timeout=600)
    out = _one_json(done)
    check = next(c for c in out["checks"] if c["name"] == "loader")
    assert check["status"] == "warn", check  # it passed, via ld.so.conf, before
    assert str(root / "lib64") in check["detail"] and "\n" not in check["detail"]
    assert "judged without the loader cache, which could not be read" in check["detail"], check
    assert SAID[kind] in check["detail"] and SAID[kind] in check["data"]["cache_error"], check
    hint = check["data"]["hint"]
    assert "ldconfig -p" in hint and "\n" not in hint, hint

    done = run_cli_in(setup, ["doctor", "--cuda-root", root, "--json"], home, timeout=600)
    out = _one_json(done)
    loads = next(c for c in out["checks"] if c["name"] == "loads-libcudnn.so.7")
    assert loads["status"] == "warn" and SAID[kind] in loads["detail"], loads
    problem = next(p for p in out["problems"] if p["check"] == "loader")
    assert problem["severity"] == "warn" and SAID[kind] in problem["message"], problem
    assert problem["fix"] == hint, problem


@needs_namespaces
def test_a_readable_loader_cache_changes_nothing(tmp_path, cuda_root, home):
    """The real ldconfig in the same namespace: the check passes, with no word of the cache."""
    root = cuda_root("10.0")
    done, out = run_json(["install", SAMPLE, "--cuda-root", root, "--no-verify",
                          "--no-theanorc", "--no-frameworks"], home)
    assert done.returncode == 0, out
    conf = tmp_path / "ld.so.conf"
    conf.write_text(f"{root / 'lib64'}\n")
    done = run_cli_in(f"mount --bind {shlex.quote(str(conf))} /etc/ld.so.conf",
                      ["verify", "--cuda-root", root, "--no-theano", "--no-frameworks", "--json"],
                      home)
    check = next(c for c in _one_json(done)["checks"] if c["name"] == "loader")
    assert check["status"] == "pass" and "loader cache" not in check["detail"], check
    assert "cache_error" not in check.get("data", {}), check
