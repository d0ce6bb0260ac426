"""deps: what a cuDNN needs at load and run time, resolved as ld.so would in the user's
environment, rated, with fixes for this machine; gcc-built libraries, and the real loader to
confirm what the check says."""
import os
import shutil

import pytest

from cudnn_setup.probing.load_answer import LoadAnswer
from cudnn_setup.installation import locate
from cudnn_setup.checks.deps import check_deps_with
from cudnn_setup.facts.ldresolve.environment import Environment
from cudnn_setup.facts.ldresolve.ldconfig import read_cache
from cudnn_setup.facts.ldresolve.loader_facts import probe_loader
from fixtures import layouts
from fixtures.deplibs import LoadProbe, build


@pytest.fixture(scope="module")
def loader_facts():
    return probe_loader(), read_cache()


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    return LoadProbe.compile(tmp_path_factory.mktemp("probe"))


FAKE_MANAGER = """#!/bin/sh
# a package manager whose configured repositories hold exactly the names in ./known
here=$(dirname "$0"); echo "$(basename "$0") $*" >> "$here/asked"
for n in "$@"; do
  case "$n" in -*|policy|list|search|package) continue ;; esac
  grep -qx "$n" "$here/known" 2>/dev/null || continue
  case "$(basename "$0")" in
    apt-cache) printf '%s:\n  Installed: (none)\n  Candidate: 1.0-1\n  Version table:\n' "$n" ;;
    dnf) printf '%s.x86_64  1.0-1  cuda-rhel9-x86_64\n' "$n"; found=1 ;;
    zypper) printf 'S | %s | a package | package\n' "$n"; found=1 ;;
  esac
done
[ "$(basename "$0")" = apt-cache ] || [ -n "$found" ] || exit "$([ "$(basename "$0")" = dnf ] && echo 1 || echo 104)"
exit 0
"""


def repositories(directory, known=(), managers=("apt-cache",)):
    """A PATH on which the package managers' repositories hold exactly `known` (the fakes come
    first; the system's tools after them run the fakes' shell)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "known").write_text("".join(f"{k}\n" for k in known))
    for name in managers:
        (directory / name).write_text(FAKE_MANAGER)
        (directory / name).chmod(0o755)
    return f"{directory}:/usr/bin:/bin"


def deps(lib, facts, llp=None, path=None, **kw):
    loader = Environment(ld_library_path=llp, cache=facts[1], facts=facts[0])
    kw.setdefault("driver_present", False)
    kw.setdefault("distro_id", ("ubuntu", "debian"))
    kw.setdefault("search_dirs", [])
    env = {"LD_LIBRARY_PATH": llp} if llp else {}
    env["PATH"] = path or "/nonexistent"  # no package manager to ask unless a test gives one
    check = check_deps_with(locate.locate(lib), env, loader=loader, **kw)
    return check, {d["name"]: d for d in check.data.get("dependencies", [])}


def real_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LD_", "CUDA"))}
    env.update(extra)
    return env


def test_every_dependency_found_passes_and_lists_them(tmp_path, loader_facts):
    lib = layouts.built_set(tmp_path / "cudnn", tmp_path / "w")
    check, got = deps(lib, loader_facts)
    assert check.status == "pass", check.detail
    assert got["libcudnn_ops.so.9"]["found"] and got["libcudnn_ops.so.9"]["kind"] == "needed"
    assert got["libc.so.6"]["found"] and got["libc.so.6"]["via"] in ("ld.so.cache", "default directories")
    assert len(check.data["libraries"]) == 8


def test_dt_needed_of_a_sub_library_that_does_not_exist_fails(tmp_path, loader_facts, probe):
    ghost = build(tmp_path / "gone" / "libghost.so.1", "libghost.so.1", work=tmp_path / "wg")
    lib = layouts.built_set(tmp_path / "cudnn", tmp_path / "w", options={"cnn": {"needed": [ghost]}})
    shutil.rmtree(tmp_path / "gone")
    check, got = deps(lib, loader_facts)
    assert check.status == "fail"
    g = got["libghost.so.1"]
    assert (g["found"], g["kind"], g["severity"]) == (False, "needed", "fail")
    assert g["needed_by"] == [str(lib / "libcudnn_cnn.so.9")]
    assert "ld.so refuses to load libcudnn_cnn.so.9" in g["what_breaks"]
    assert "libghost.so.1 not found (DT_NEEDED by libcudnn_cnn.so.9) [fail]" in check.detail
    # the real loader says the same
    seen = probe.run([str(lib / "libcudnn_cnn.so.9")], real_env())
    assert seen.errors == [g["error"]]


def test_embedded_runtime_name_that_is_absent_is_rated_and_fixed_per_distro(tmp_path, loader_facts, probe):
    lib = layouts.built_set(tmp_path / "cudnn", tmp_path / "w",
                            options={"adv": {"runtime": "libcublasLt.so.12"},
                                     "graph": {"runtime": "libnvrtc.so.%d"}})
    load = LoadAnswer(version=90100, cudart_version=12040)
    # a Debian machine whose repositories have neither Debian's nor NVIDIA's cuBLAS
    path = repositories(tmp_path / "bin-none")
    check, got = deps(lib, loader_facts, load_data=load, path=path)
    assert check.status == "fail"
    blas, nvrtc = got["libcublasLt.so.12"], got["libnvrtc.so.12"]
    assert (blas["kind"], blas["severity"], blas["component"]) == ("runtime", "fail", "cuBLASLt")
    assert blas["needed_by"] == [str(lib / "libcudnn_adv.so.9")]
    assert "legacy convolution API" in blas["needed_for"]
    assert [(f["how"], f["text"]) for f in blas["fixes"]] == [
        ("wheel", "pip install nvidia-cublas-cu12"),
        ("repository", "add NVIDIA's CUDA repository "
         "(https://developer.download.nvidia.com/compute/cuda/repos/<distro>/<arch>/), "
         "then apt-get install libcublas-12-4")]
    assert "apt-cache policy -- libcublaslt12 libcublas-12-4" in (tmp_path / "bin-none" / "asked").read_text()
    assert nvrtc["severity"] == "warn" and nvrtc["candidates"] == ["libnvrtc.so.12"]  # %d filled
    assert nvrtc["fixes"][0]["text"] == "pip install nvidia-cuda-nvrtc-cu12"
    assert check.detail.index("libcublasLt.so.12") < check.detail.index("libnvrtc.so.12")
    assert check.data["hint"] == "libcublasLt.so.12: pip install nvidia-cublas-cu12"
    # the person reads every fix the JSON gives, with what it says of each
    for fix in blas["fixes"] + nvrtc["fixes"]:
        assert fix["text"] in check.detail and fix["detail"] in check.detail
    assert "from NVIDIA's CUDA repository" in check.detail
    seen = probe.run([str(lib / "libcudnn_adv.so.9"), "@fixture_load"], real_env())
    assert seen.calls["fixture_load"] == blas["error"]  # dlopen() fails with the same message
    # the distribution's own package, where its repositories have it, before NVIDIA's
    path = repositories(tmp_path / "bin-debian", ["libcublaslt12", "libnvrtc12"])
    _, got = deps(lib, loader_facts, load_data=load, path=path)
    assert [f["text"] for f in got["libcublasLt.so.12"]["fixes"]] == [
        "pip install nvidia-cublas-cu12", "apt-get install libcublaslt12"]
    assert "apt-cache policy libcublaslt12" in got["libcublasLt.so.12"]["fixes"][1]["detail"]
    assert got["libnvrtc.so.12"]["fixes"][1]["text"] == "apt-get install libnvrtc12"
    # NVIDIA's repository configured on a RHEL machine: its package, said to be there
    path = repositories(tmp_path / "bin-rhel", ["libcublas-12-4"], managers=("dnf",))
    _, got = deps(lib, loader_facts, load_data=load, distro_id=("rocky", "rhel centos fedora"),
                  path=path)
    assert got["libcublasLt.so.12"]["fixes"][1]["text"] == "dnf install libcublas-12-4"
    path = repositories(tmp_path / "bin-suse", [], managers=("zypper",))
    _, got = deps(lib, loader_facts, load_data=load, distro_id=("opensuse-leap", "suse"),
                  path=path)
    assert got["libcublasLt.so.12"]["fixes"][1]["how"] == "repository"
    assert got["libcublasLt.so.12"]["fixes"][1]["text"].endswith("zypper install libcublas-12-4")


def test_only_warn_rated_missing_is_a_warning_and_a_directory_that_has_it_comes_first(tmp_path, loader_facts):
    lib = layouts.built_set(tmp_path / "cudnn", tmp_path / "w",
                            options={"graph": {"runtime": "libnvrtc.so.12"}})
    elsewhere = tmp_path / "cuda-12.4" / "lib64"
    build(elsewhere / "libnvrtc.so.12", "libnvrtc.so.12", work=tmp_path / "wn")
    check, got = deps(lib, loader_facts, search_dirs=[elsewhere])
    assert check.status == "warn"
    fix = got["libnvrtc.so.12"]["fixes"][0]
    assert fix["how"] == "directory" and str(elsewhere) in fix["text"]
    # with that directory on LD_LIBRARY_PATH, the loader finds it: nothing is missing
    check, got = deps(lib, loader_facts, llp=str(elsewhere))
    assert check.status == "pass" and got["libnvrtc.so.12"]["via"] == "LD_LIBRARY_PATH"


def test_runpath_origin_finds_what_the_library_opens_at_run_time(tmp_path, loader_facts, probe):
    build(tmp_path / "cudnn" / "deps" / "libnvrtc.so.12", "libnvrtc.so.12", work=tmp_path / "wn")
    lib = layouts.built_set(tmp_path / "cudnn", tmp_path / "w",
                            options={"graph": {"runtime": "libnvrtc.so.12", "runpath": "$ORIGIN/../deps"}})
    check, got = deps(lib, loader_facts)
    assert check.status == "pass", check.detail
    nvrtc = got["libnvrtc.so.12"]
    assert nvrtc["via"] == f"DT_RUNPATH of {lib / 'libcudnn_graph.so.9'}"
    seen = probe.run([str(lib / "libcudnn_graph.so.9"), "@fixture_load"], real_env())
    assert seen.calls["fixture_load"] == "ok"
    assert os.path.realpath(nvrtc["path"]) in [os.path.realpath(m) for m in seen.mapped]


def test_libcuda_without_a_driver_is_a_skip_with_one_a_failure(tmp_path, loader_facts):
    if any(e.name == "libcuda.so.1" for e in loader_facts[1]):
        pytest.skip("this machine has a libcuda.so.1")
    lib = layouts.built_set(tmp_path / "cudnn", tmp_path / "w",
                            options={"ops": {"runtime": "libcuda.so.1"}})
    check, got = deps(lib, loader_facts, driver_present=False)
    assert check.status == "pass" and got["libcuda.so.1"]["severity"] == "skip"
    assert "libcuda.so.1 (no NVIDIA driver on this machine)" in check.detail
    check, got = deps(lib, loader_facts, driver_present=True)
    assert check.status == "fail" and got["libcuda.so.1"]["severity"] == "fail"
    # no package manager to ask: the distribution's package is offered as unconfirmed, then
    # NVIDIA's repository
    assert [f["text"] for f in got["libcuda.so.1"]["fixes"]][0] == "apt-get install libcuda1"
    assert "not confirmed" in got["libcuda.so.1"]["fixes"][0]["detail"]
    assert got["libcuda.so.1"]["fixes"][1]["text"].endswith("apt-get install cuda-drivers")


def test_a_name_this_tool_does_not_know_is_a_warning_naming_who_asks(tmp_path, loader_facts):
    lib = layouts.built_set(tmp_path / "cudnn", tmp_path / "w",
                            options={"heuristic": {"runtime": "libfuturething.so.3"}})
    check, got = deps(lib, loader_facts)
    assert check.status == "warn"
    assert got["libfuturething.so.3"]["severity"] == "warn"
    assert "libcudnn_heuristic.so.9" in got["libfuturething.so.3"]["what_breaks"]


def test_missing_own_sub_library_opened_at_run_time_fails_with_reinstall(tmp_path, loader_facts):
    lib = layouts.built_set(tmp_path / "cudnn", tmp_path / "w", skip=("engines_precompiled",),
                            options={"graph": {"runtime": "libcudnn_engines_precompiled.so.9"}})
    check, got = deps(lib, loader_facts)
    e = got["libcudnn_engines_precompiled.so.9"]
    assert check.status == "fail" and e["severity"] == "fail"
    assert e["fixes"][-1]["how"] == "reinstall"


def test_nothing_to_resolve_without_cudnn(tmp_path, loader_facts):
    from cudnn_setup.installation.model import Installation
    from cudnn_setup.facts.cuda import CudaRoot

    inst = Installation(CudaRoot(tmp_path, "test", None, None), tmp_path / "lib64", None)
    check = check_deps_with(inst, {}, loader=Environment(), driver_present=False)
    assert check.status == "skip" and "nothing to resolve" in check.detail


def test_names_only_the_driver_opens_are_not_cudnn_problems(tmp_path, loader_facts):
    """A libcuda.so.1 that embeds names of its own optional pieces (EGL, NvSci on a real driver):
    missing, they are a skip naming who opens them, not a warning about cuDNN."""
    drv = tmp_path / "driver"
    build(drv / "libcuda.so.1", "libcuda.so.1", work=tmp_path / "wd", runtime="libEGL_vendor.so.0")
    lib = layouts.built_set(tmp_path / "cudnn", tmp_path / "w",
                            options={"ops": {"runtime": "libcuda.so.1"}})
    check, got = deps(lib, loader_facts, llp=str(drv), driver_present=True)
    assert got["libcuda.so.1"]["found"]
    egl = got["libEGL_vendor.so.0"]
    assert not egl["found"] and egl["severity"] == "skip", egl
    assert check.status == "pass", check.detail
    assert "1 more not found that only libcuda.so.1 open" in check.detail
    assert "e.g. libEGL_vendor.so.0" in check.detail
    # the same unknown name asked for by a cuDNN library stays a warning
    lib2 = layouts.built_set(tmp_path / "cudnn2", tmp_path / "w2",
                             options={"ops": {"runtime": "libEGL_vendor.so.0"}})
    check2, got2 = deps(lib2, loader_facts)
    assert got2["libEGL_vendor.so.0"]["severity"] == "warn" and check2.status == "warn"


def test_a_package_manager_that_hangs_costs_its_time_limit_and_is_not_believed(tmp_path):
    import time

    from cudnn_setup.facts import dependencies as D

    (tmp_path / "apt-cache").write_text("#!/bin/sh\nsleep 60\n")
    (tmp_path / "apt-cache").chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    started = time.monotonic()
    assert D.query_packages("apt", ["libcublaslt12"], env, timeout=1.0) is None
    assert time.monotonic() - started < 10
    # a name that could be taken for an option is never passed on
    (tmp_path / "apt-cache").write_text("#!/bin/sh\necho \"$*\" > \"$(dirname \"$0\")/args\"\n")
    assert D.query_packages("apt", ["--help", "zlib1g"], env) == {"zlib1g": False}
    assert (tmp_path / "args").read_text().split() == ["policy", "--", "zlib1g"]


def test_the_package_manager_is_asked_once_for_every_missing_library(tmp_path, loader_facts):
    """Each question is a child that loads the manager's whole cache (most of a second with
    apt): the names all missing libraries' fixes ask about go in one query, and each fix is
    answered from it as if it had been asked on its own."""
    lib = layouts.built_set(tmp_path / "cudnn", tmp_path / "w",
                            options={"adv": {"runtime": "libcublasLt.so.12"},
                                     "graph": {"runtime": "libnvrtc.so.%d"}})
    load = LoadAnswer(version=90100, cudart_version=12040)
    path = repositories(tmp_path / "bin", ["libnvrtc12"])
    check, got = deps(lib, loader_facts, load_data=load, path=path)
    asked = (tmp_path / "bin" / "asked").read_text().splitlines()
    assert len(asked) == 1, asked
    for name in ("libcublaslt12", "libcublas-12-4", "libnvrtc12"):
        assert f" {name}" in asked[0]
    assert [f["text"] for f in got["libnvrtc.so.12"]["fixes"]] == [
        "pip install nvidia-cuda-nvrtc-cu12", "apt-get install libnvrtc12"]
    assert got["libcublasLt.so.12"]["fixes"][-1]["how"] == "repository"
    # a manager that cannot answer is said to be so for every library, as before
    (tmp_path / "bin" / "apt-cache").write_text("#!/bin/sh\nexit 100\n")
    _, got = deps(lib, loader_facts, load_data=load, path=path)
    assert "could not be asked here" in got["libnvrtc.so.12"]["fixes"][1]["detail"]
