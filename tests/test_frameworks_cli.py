"""Frameworks through the command line. doctor --python reports which cuDNN each framework loads
and why; install never gives loader advice that breaks a framework: before it prints the
LD_LIBRARY_PATH line or registers the library dir with --ldconfig, it checks what each framework
of --python would then load.

The frameworks are the stand-ins of test_frameworks.py (real interpreters, gcc-built libraries):
a torch built for cuDNN 9.19 that finds its wheel's 9.19 through RUNPATH, and a TensorFlow built
for 9.19 without a GPU, whose library needs libcudnn.so.9 and has no RUNPATH. The cuDNN installed
is an older 9.14, into a root that is not on the loader path: the situation reproduced on an H200,
where `import torch` then failed with "cuDNN version incompatibility".
"""
import os
import sys

import pytest

from conftest import REPO, clean_env, run_json
from cudnn_setup.steps.context import Context
from cudnn_setup.commands.install import install
from cudnn_setup.facts.ldresolve.ldconfig import ldconfig_binary
from fixtures.generate import SPECS, SUB9, _archive, spec_entries, write_archive
from test_frameworks import CUDNN_C, FRAMEWORK_C, TENSORFLOW_PY, TORCH_PY, gcc, write


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """torch and TensorFlow stand-ins with an nvidia-cudnn wheel's 9.19, and an interpreter
    without site-packages (no Theano: the verification's Theano check is a quick skip)."""
    root = tmp_path_factory.mktemp("fw-site")
    site = root / "site"
    wheel = site / "nvidia" / "cudnn" / "lib"
    gcc(wheel / "libcudnn.so.9", CUDNN_C, "-DVERSION=91900", "-Wl,-soname,libcudnn.so.9")
    gcc(site / "torch" / "lib" / "libfake_fw.so", FRAMEWORK_C, "-DBUILT=91900", f"-L{wheel}",
        "-l:libcudnn.so.9", "-Wl,--enable-new-dtags", "-Wl,-rpath,$ORIGIN/../../nvidia/cudnn/lib")
    write(site / "torch" / "__init__.py", TORCH_PY)
    gcc(site / "tensorflow" / "libtensorflow_framework.so.2", FRAMEWORK_C, "-DBUILT=91900",
        f"-L{wheel}", "-l:libcudnn.so.9")
    write(site / "tensorflow" / "__init__.py", TENSORFLOW_PY)
    python = root / "python-no-site"
    python.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    python.chmod(0o755)
    return {"site": site, "python": python}


@pytest.fixture(scope="module")
def old_archive(tmp_path_factory, compiler):
    """cuDNN 9.14.0 for CUDA 13, as NVIDIA names it."""
    spec = _archive("x86_64", "9.14.0.99", "13", SUB9)
    assert spec.name not in SPECS
    return write_archive(tmp_path_factory.mktemp("old") / spec.name, spec_entries(spec, compiler))


def env_with(site) -> dict:
    return {"PYTHONPATH": os.pathsep.join([str(REPO), str(site["site"])])}


def by_framework(items):
    return {e["framework"]: e for e in items}


def test_the_ld_library_path_advice_becomes_a_warning_when_it_would_break_torch(
        site, old_archive, cuda_root, home):
    root = cuda_root(version="13.0")
    done, out = run_json(["install", old_archive, "--cuda-root", root, "--no-theanorc",
                          "--python", site["python"]], home, env_with(site))
    assert done.returncode == 0 and out["cudnn_version"] == "9.14.0", done.stderr
    lib = root / "lib64"
    checks = {c["name"]: c for c in out["checks"]}
    step = checks["ldconfig"]
    assert step["status"] == "warn"
    assert step["detail"].startswith(f"{lib} is not on the system loader path, and putting it on "
                                     "LD_LIBRARY_PATH for every program would break a framework: "
                                     "torch 2.11.0+standin would break: would load cuDNN 9.14.0")
    assert "per-program environment" in step["detail"] and "9.19.0 or newer" in step["detail"]
    # the bare line is given nowhere, neither by the install nor by the loader check after it
    assert "export LD_LIBRARY_PATH" not in done.stdout + done.stderr
    assert f"`env LD_LIBRARY_PATH={lib} program`" in checks["loader"]["detail"]
    what_if = by_framework(out["frameworks_what_if"])
    torch = what_if["torch"]  # tried for real: the probe ran again with the changed path
    assert (torch["breaks"], torch["built_for"], torch["loads_now"]["version"]) == \
        (True, "9.19.0", "9.19.0")
    assert torch["would_load"] == {"path": str(lib / "libcudnn.so.9.14.0"), "dir": str(lib),
                                   "version": "9.14.0", "why": "ld_library_path"}
    assert what_if["tensorflow"]["breaks"] is True  # once it loads cuDNN on a GPU
    # the frameworks check after the install is the report made before the advice: torch fine
    frameworks = checks["frameworks"]
    assert frameworks["status"] == "pass" and "torch 2.11.0+standin" in frameworks["detail"]
    assert {f["name"] for f in frameworks["data"]["frameworks"]} == {"torch", "tensorflow"}


def test_no_framework_no_what_if_and_the_bare_line_stays(old_archive, cuda_root, home):
    root = cuda_root(version="13.0")
    done, out = run_json(["install", old_archive, "--cuda-root", root, "--no-theanorc",
                          "--no-verify"], home)
    assert done.returncode == 0 and "frameworks_what_if" not in out, done.stderr
    step = {c["name"]: c for c in out["checks"]}["ldconfig"]
    assert step["status"] == "skip" and "export LD_LIBRARY_PATH=" in step["detail"]


def test_no_frameworks_skips_the_what_if(site, old_archive, cuda_root, home):
    root = cuda_root(version="13.0")
    done, out = run_json(["install", old_archive, "--cuda-root", root, "--no-theanorc",
                          "--no-verify", "--no-frameworks", "--python", site["python"]], home,
                         env_with(site))
    assert done.returncode == 0 and "frameworks_what_if" not in out
    assert "export LD_LIBRARY_PATH=" in {c["name"]: c for c in out["checks"]}["ldconfig"]["detail"]


@pytest.fixture
def private_ldconfig(tmp_path):
    """tmp_path/bin/ldconfig: the real one working on a cache and a config of the test's own
    (the Context names it; the tool never looks ldconfig up on PATH)."""
    real = ldconfig_binary()
    conf = tmp_path / "ld.so.conf"
    conf.write_text(f"include {tmp_path / 'conf.d'}/*.conf\n")
    wrapper = tmp_path / "bin" / "ldconfig"
    wrapper.parent.mkdir()
    wrapper.write_text(f"#!/bin/sh\nexec {real} -C {tmp_path / 'ld.so.cache'} -f {conf} \"$@\"\n")
    wrapper.chmod(0o755)
    return tmp_path / "ld.so.cache"


def test_ldconfig_registration_that_would_break_a_framework_is_refused_unless_forced(
        site, old_archive, cuda_root, home, tmp_path, private_ldconfig):
    root = cuda_root(version="13.0")
    conf_dir = tmp_path / "conf.d"
    conf_dir.mkdir()
    ctx = Context(env=clean_env(home, **env_with(site)), home=home, python=str(site["python"]),
                  ld_conf_dir=conf_dir, ld_so_conf=tmp_path / "ld.so.conf",
                  ldconfig=str(tmp_path / "bin" / "ldconfig"))
    result = install(ctx, str(old_archive), cuda_root=root, no_theanorc=True, no_verify=True,
                     ldconfig=True)
    # exit 1, not 5: nothing was rolled back, the install stands
    assert result.exit_code == 1 and result.error.code == "would-break-frameworks"
    assert result.changed and (root / ".cudnn-setup" / "manifest.json").exists()  # it stands
    assert list(conf_dir.iterdir()) == [] and not private_ldconfig.exists()
    assert "tensorflow 2.20.0+standin would break" in result.error.message
    assert "the cuDNN installed there stands" in result.error.message
    assert "--force registers it anyway" in result.error.hint
    step = {c.name: c for c in result.checks}["ldconfig"]
    assert step.status == "fail" and step.data["code"] == "would-break-frameworks"
    what_if = by_framework(result.data["frameworks_what_if"])
    assert what_if["torch"]["breaks"] is False  # its RUNPATH comes before the ldconfig cache
    assert what_if["tensorflow"]["would_load"]["why"] == "ld_cache"
    forced = install(ctx, str(old_archive), cuda_root=root, no_theanorc=True, no_verify=True,
                     ldconfig=True, force=True)
    assert forced.error is None, forced.error
    step = {c.name: c for c in forced.checks}["ldconfig"]
    assert step.status == "pass" and "registered although tensorflow" in step.detail
    assert (conf_dir / "cudnn-setup.conf").read_text().splitlines()[-1] == str(root / "lib64")
    assert private_ldconfig.exists()


def test_doctor_python_reports_what_each_framework_loads(site, cuda_root, home):
    root = cuda_root(version="13.0")
    done, out = run_json(["doctor", "--cuda-root", root, "--python", site["python"]], home,
                         env_with(site))
    assert out["error"] is None, done.stderr
    frameworks = {f["name"]: f for f in out["frameworks"]}
    assert set(frameworks) == {"torch", "tensorflow"}
    torch = frameworks["torch"]
    wheel = site["site"] / "nvidia" / "cudnn" / "lib"
    assert (torch["cudnn_built_for"], torch["compatible"], torch["status"]) == ("9.19.0", True, "pass")
    assert torch["cudnn_loaded"]["path"] == str(wheel / "libcudnn.so.9")
    assert torch["cudnn_loaded"]["why"] == "runpath"
    assert torch["cudnn_loaded"]["detail"] == "RUNPATH $ORIGIN/../../nvidia/cudnn/lib of libfake_fw.so"
    assert frameworks["tensorflow"]["status"] == "skip"
    assert f"frameworks of {site['python']}:" in done.stderr
    assert "  torch 2.11.0+standin: built against cuDNN 9.19.0, loads 9.19.0" in done.stderr
    # an older cuDNN first on LD_LIBRARY_PATH: torch breaks, and doctor fails saying so
    old = root / "old"
    gcc(old / "libcudnn.so.9.14.0", CUDNN_C, "-DVERSION=91400", "-Wl,-soname,libcudnn.so.9")
    (old / "libcudnn.so.9").symlink_to("libcudnn.so.9.14.0")
    done, out = run_json(["doctor", "--cuda-root", root, "--python", site["python"]], home,
                         {**env_with(site), "LD_LIBRARY_PATH": str(old)})
    assert done.returncode == 1
    [problem] = [p for p in out["problems"] if p["check"] == "frameworks"]
    assert problem["severity"] == "fail" and "9.14.0" in problem["message"]
