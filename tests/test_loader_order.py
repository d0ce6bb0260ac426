"""cuDNN 9 opens its sub-libraries by their full file names, libcudnn_graph first: the checks
follow that order, on gcc-built libraries that record the names they are opened under."""
import json
import os

import pytest

from cudnn_setup.installation import locate
from cudnn_setup.checks.coherence import check_coherence_with
from cudnn_setup.checks.deps import check_deps_with
from cudnn_setup.checks.files_check import check_files
from cudnn_setup.checks.load_check import load_libcudnn
from cudnn_setup.facts import cudnn as gen
from cudnn_setup.facts.ldresolve.environment import Environment
from cudnn_setup.facts.ldresolve.ldconfig import read_cache
from cudnn_setup.facts.ldresolve.loader_facts import probe_loader
from cudnn_setup.facts.ldresolve.search import Resolution
from conftest import check_facts
from fixtures import layouts
from fixtures.deplibs import LoadProbe, build


@pytest.fixture(scope="module")
def loader_facts():
    return probe_loader(), read_cache()


def env_with(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LD_", "CUDA"))}
    env.update(extra)
    return env


def verdicts(lib, facts, **env_extra):
    env = env_with(**env_extra)
    loader = Environment(ld_library_path=env.get("LD_LIBRARY_PATH") or None, cache=facts[1],
                         facts=facts[0])
    inst = locate.locate(lib)
    checks = (check_files(inst, check_facts()),
              check_coherence_with(inst, env, loader=loader, driver_present=True),
              check_deps_with(inst, env, loader=loader, driver_present=True,
                         packages=lambda manager, names: {}))
    for c in checks:
        json.dumps(c.to_dict())
    return checks


def opened_names(lib, tmp_path):
    probe = LoadProbe.compile(tmp_path / "probe")
    seen = probe.run([str(lib / "libcudnn.so.9"), "@fixture_front_load_all",
                      "@fixture_graph_load_all"], env_with())
    return seen.calls["fixture_front_load_all"] + seen.calls["fixture_graph_load_all"], seen


def test_names_tried_are_those_of_the_real_binaries():
    assert gen.names_opened("libcudnn_ops", "9.19.0", gen.V9) == (
        "libcudnn_ops.so.9.19.0", "libcudnn_ops.so.9.19", "libcudnn_ops.so.9", "libcudnn_ops.so")
    assert gen.names_opened("libcudnn_ops_infer", "8.9.6", gen.V8_LATE) == (
        "libcudnn_ops_infer.so.8",)


def test_the_real_loader_opens_full_file_names_and_the_checks_say_so(tmp_path, loader_facts):
    lib = layouts.loading_set9(tmp_path / "cudnn", tmp_path / "w")
    names, _ = opened_names(lib, tmp_path)
    assert "libcudnn_graph.so.9.1.0;libcudnn_ops.so.9.1.0;" in names and ".so.9;" not in names
    files, coherence, deps = verdicts(lib, loader_facts)
    assert coherence.status == "pass", coherence.detail
    assert "by their full file names" in coherence.detail
    subs = {s["soname"]: s for s in coherence.data["sublibraries"]}
    for soname, sub in subs.items():
        assert sub["opened_as"] == soname + ".1.0", sub  # libcudnn_ops.so.9 → …so.9.1.0
    assert deps.status == "pass", deps.detail


def test_a_deleted_graph_link_is_a_files_finding_not_a_load_failure(tmp_path, loader_facts):
    lib = layouts.loading_set9(tmp_path / "cudnn", tmp_path / "w")
    (lib / "libcudnn_graph.so.9").unlink()
    names, seen = opened_names(lib, tmp_path)
    assert "!" not in names and not seen.errors  # the real loader does without the link
    files, coherence, deps = verdicts(lib, loader_facts)
    assert coherence.status == "pass", coherence.detail
    # cuDNN's own graph and ops checks, called first, opened them by their full names
    first = coherence.data["opened_first"]
    assert [(c["function"], c["status"]) for c in first] == [("cudnnGraphVersionCheck", 0),
                                                            ("cudnnOpsVersionCheck", 0)]
    assert first[0]["opened"] == [str(lib / "libcudnn_graph.so.9.1.0")]
    assert first[1]["opened"] == [str(lib / "libcudnn_ops.so.9.1.0")]
    assert deps.status == "pass", deps.detail
    assert files.status == "fail"
    assert "libcudnn_graph.so.9 (the link to libcudnn_graph.so.9.1.0) is missing" in files.detail
    assert "programs linked against libcudnn_graph" in files.detail


def test_a_link_re_pointed_at_another_release_is_a_files_finding(tmp_path, loader_facts):
    lib = layouts.loading_set9(tmp_path / "cudnn", tmp_path / "w")
    other = build(tmp_path / "sys" / "libcudnn_heuristic.so.9.0.0", "libcudnn_heuristic.so.9",
                  work=tmp_path / "w-sys", version=90000)
    (lib / "libcudnn_heuristic.so.9").unlink()
    (lib / "libcudnn_heuristic.so.9").symlink_to(other)
    names, _ = opened_names(lib, tmp_path)
    assert "libcudnn_heuristic.so.9.1.0;" in names and str(other) not in names
    files, coherence, deps = verdicts(lib, loader_facts)
    assert coherence.status == "pass", coherence.detail
    assert "9.0.0" not in coherence.detail  # never the version of a file cuDNN did not open
    assert deps.status == "pass", deps.detail
    assert files.status == "fail"
    assert f"libcudnn_heuristic.so.9 leads to {other}, not to libcudnn_heuristic.so.9.1.0" \
        in files.detail


def test_a_missing_full_name_falls_back_to_the_link_as_cudnn_does(tmp_path, loader_facts):
    lib = layouts.loading_set9(tmp_path / "cudnn", tmp_path / "w")
    # only the .so.9 name left for ops: cuDNN's last numbered name
    (lib / "libcudnn_ops.so.9").unlink()
    os.replace(lib / "libcudnn_ops.so.9.1.0", lib / "libcudnn_ops.so.9")
    names, _ = opened_names(lib, tmp_path)
    assert "libcudnn_ops.so.9;" in names
    _, coherence, deps = verdicts(lib, loader_facts)
    assert coherence.status == "pass", coherence.detail
    subs = {s["soname"]: s for s in coherence.data["sublibraries"]}
    assert subs["libcudnn_ops.so.9"]["opened_as"] == "libcudnn_ops.so.9"
    assert "cuDNN opens 1 of them by a name without their full version (libcudnn_ops.so.9)" \
        in coherence.detail
    assert deps.status == "pass", deps.detail


def test_a_sub_library_under_no_name_fails_coherence_and_deps(tmp_path, loader_facts):
    lib = layouts.loading_set9(tmp_path / "cudnn", tmp_path / "w")
    (lib / "libcudnn_graph.so.9").unlink()
    (lib / "libcudnn_graph.so.9.1.0").unlink()
    names, _ = opened_names(lib, tmp_path)
    assert "!libcudnn_graph.so;" in names
    files, coherence, deps = verdicts(lib, loader_facts)
    assert coherence.status == "fail" and "libcudnn_graph.so.9" in coherence.detail
    assert deps.status == "fail" and "libcudnn_graph" in deps.detail
    assert files.status == "fail"


def test_jit_beside_another_cudnn_names_the_other_files_with_their_own_versions(tmp_path,
                                                                                 loader_facts):
    jit = layouts.loading_set9(tmp_path / "jit", tmp_path / "w", subs=layouts.JIT9)
    other = layouts.loading_set9(tmp_path / "sys", tmp_path / "w-sys", version=(9, 0, 0))
    files, coherence, deps = verdicts(jit, loader_facts, LD_LIBRARY_PATH=str(other))
    assert coherence.status == "fail", coherence.detail
    assert coherence.detail.startswith(
        "libcudnn_ops.so.9, libcudnn_cnn.so.9, libcudnn_adv.so.9, libcudnn_heuristic.so.9, "
        "libcudnn_engines_precompiled.so.9 are not part of this JIT release")
    assert f"another copy: {other} (cuDNN 9.0.0 by the file names, via LD_LIBRARY_PATH)" \
        in coherence.detail and "SUBLIBRARY_VERSION_MISMATCH" in coherence.detail
    assert "libcudnn_graph.so.9 is cuDNN" not in coherence.detail  # this copy's graph is fine
    assert "LD_LIBRARY_PATH" in coherence.data["hint"]
    # alone, the JIT flavour is coherent: what it lacks is for the clients check to say
    _, alone, _ = verdicts(jit, loader_facts)
    assert alone.status == "pass", alone.detail


def test_the_load_check_names_the_file_it_mapped(tmp_path):
    lib = layouts.loading_set9(tmp_path / "cudnn", tmp_path / "w")
    check, data = load_libcudnn(locate.locate(lib), env_with())
    assert check.status == "pass", check.detail
    assert f"libcudnn.so.9 loads (the file {lib / 'libcudnn.so.9.1.0'})" in check.detail


def test_cudnn_8_opens_its_parts_by_the_links_so_a_lost_one_says_so(archives, cuda_root, home):
    """libcudnn.so.8 keeps its sub-libraries' SONAMEs as literals and dlopens those: the link
    is what cuDNN itself loads. A managed install: the finding replaces "is missing"."""
    from conftest import run_json
    from fixtures.generate import GENERATION_SAMPLES

    root = cuda_root(version="12.4")
    done, _ = run_json(["install", archives[GENERATION_SAMPLES["8.3.1+"]], "--cuda-root", root,
                        "--no-theanorc", "--no-verify", "--no-frameworks"], home)
    assert done.returncode == 0
    inst = locate.locate(root / "lib64", root / "include")
    link = inst.lib_dir / "libcudnn_ops_infer.so.8"
    link.unlink()
    files = check_files(inst, check_facts())
    assert files.status == "fail"
    assert ("libcudnn_ops_infer.so.8 (the link to libcudnn_ops_infer.so.8.9.6) is missing: "
            "programs linked against libcudnn_ops_infer") in files.detail
    assert "libcudnn itself opens it by that name too, so cuDNN does not load" in files.detail
    assert files.detail.count("is missing") == 1, files.detail  # said once, not by the record too


def test_a_version_is_only_ever_paired_with_the_file_it_was_read_from():
    """The JIT flavour beside a system cuDNN 9.14 on the H200: a dlopen of the name took the
    system's graph while cuDNN's own check opened this copy's; the detail said
    "libcudnn_graph.so.9 is cuDNN 9.14.0 (…graph.so.9.19.0)"."""
    from cudnn_setup.checks.coherence import judge

    here, system = "/opt/jit/lib", "/usr/lib/x86_64-linux-gnu"
    res = Resolution("libcudnn_graph.so.9")  # the emulation did not find it
    got = {"loaded": True, "path": f"{system}/libcudnn_graph.so.9",
           "mapped": f"{system}/libcudnn_graph.so.9.14.0", "version": 91400,
           "version_from": "cudnnGetVersion",
           "version_check": {"status": 0, "function": "cudnnGraphVersionCheck",
                             "mapped": [f"{here}/libcudnn_graph.so.9.19.0"]}}
    sub = judge("libcudnn_graph.so.9", res, got, here, "9.19.0", "libcudnn.so.9")
    assert (sub["mapped"], sub["version"], sub["version_from"]) == (
        f"{here}/libcudnn_graph.so.9.19.0", "9.19.0", "file name")
    assert not any("9.14.0" in p for p in sub["problems"]), sub["problems"]


def test_the_sample_9_archive_loads_as_cudnn_9_does_a_lost_link_fails_files_alone(
        archives, cuda_root, home):
    """The sample archive's libcudnn opened its parts by the .so.9 links, as no cuDNN 9 does:
    with a link deleted its load aborted, and verify failed load, coherence, deps and compile
    where a real cuDNN 9.1 (its wheel, installed here) fails only `files`. Now it opens them
    by their full file names first, as cuDNN 9 does, and verify says what it says for the real
    one."""
    from conftest import run_json
    from fixtures.generate import GENERATION_SAMPLES

    root = cuda_root(version="12.4")
    done, _ = run_json(["install", archives[GENERATION_SAMPLES["9.x"]], "--cuda-root", root,
                        "--no-theanorc", "--no-verify", "--no-frameworks"], home)
    assert done.returncode == 0
    (root / "lib64" / "libcudnn_graph.so.9").unlink()
    done, out = run_json(["verify", "--cuda-root", root, "--no-theano", "--no-frameworks"],
                         home)
    failed = {c["name"]: c["detail"] for c in out["checks"] if c["status"] == "fail"}
    assert done.returncode == 1 and list(failed) == ["files"], failed
    assert "libcudnn_graph.so.9 (the link to libcudnn_graph.so.9.3.0) is missing" \
        in failed["files"]
    statuses = {c["name"]: c["status"] for c in out["checks"]}
    assert all(statuses[n] == "pass" for n in ("load", "coherence", "deps", "compile")), statuses
