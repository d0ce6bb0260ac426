"""coherence: sub-libraries from the same copy and version as libcudnn, judged in the user's
environment, on gcc-built libraries loaded for real in child processes."""
import json
import os
import shutil

import pytest

from cudnn_setup.installation import locate
from cudnn_setup.checks.coherence import check_coherence_with
from cudnn_setup.facts.ldresolve.environment import Environment
from cudnn_setup.facts.ldresolve.ldconfig import read_cache
from cudnn_setup.facts.ldresolve.loader_facts import probe_loader
from cudnn_setup.facts.ldresolve.search import Resolution
from fixtures import layouts
from fixtures.deplibs import build


@pytest.fixture(scope="module")
def loader_facts():
    return probe_loader(), read_cache()


def env_with(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LD_", "CUDA"))}
    env.update(extra)
    return env


def judge(lib, facts, **env_extra):
    env = env_with(**env_extra)
    loader = Environment(ld_library_path=env.get("LD_LIBRARY_PATH") or None, cache=facts[1],
                         facts=facts[0])
    check = check_coherence_with(locate.locate(lib), env, loader=loader)
    json.dumps(check.to_dict())  # whatever the children did, the check serializes
    return check, {s["soname"]: s for s in check.data.get("sublibraries", [])}


def test_a_whole_set_found_through_runpath_origin_passes(tmp_path, loader_facts):
    lib = layouts.built_set(tmp_path / "cudnn", tmp_path / "w")
    check, subs = judge(lib, loader_facts)
    assert check.status == "pass", check.detail
    assert "7 sub-libraries load from" in check.detail and "all the same version" in check.detail
    assert "cuDNN's own version checks pass (1)" in check.detail
    assert subs["libcudnn_ops.so.9"]["via"] == f"DT_RUNPATH of {lib / 'libcudnn.so.9'}"
    assert subs["libcudnn_graph.so.9"]["version"] == "9.1.0"
    assert check.data["ld_library_path"] is None  # the user's environment, nothing prepended


def test_older_sub_library_first_on_ld_library_path_fails_naming_both(tmp_path, loader_facts):
    lib = layouts.built_set(tmp_path / "new", tmp_path / "w")
    old = tmp_path / "old"
    build(old / "libcudnn_ops.so.9", "libcudnn_ops.so.9", work=tmp_path / "w-old", version=90000)
    check, subs = judge(lib, loader_facts, LD_LIBRARY_PATH=str(old))
    assert check.status == "fail"
    ops = subs["libcudnn_ops.so.9"]
    assert ops["path"] == str(old / "libcudnn_ops.so.9") and ops["via"] == "LD_LIBRARY_PATH"
    assert ops["version"] == "9.0.0"
    assert (f"libcudnn_ops.so.9 comes from another copy: {old / 'libcudnn_ops.so.9'} (cuDNN 9.0.0, "
            f"via LD_LIBRARY_PATH) while libcudnn.so.9 is in {lib} (cuDNN 9.1.0)") in check.detail
    # cuDNN's own check (here: the stand-in's) agrees
    assert "cudnnOpsVersionCheck() returned CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH" in check.detail
    assert "LD_LIBRARY_PATH" in check.data["hint"] and str(old) in check.data["hint"]
    assert not subs["libcudnn_cnn.so.9"]["problems"]  # the rest still come from the set
    # the same set without that LD_LIBRARY_PATH is coherent: the environment decides
    assert judge(lib, loader_facts)[0].status == "pass"


def test_another_version_in_the_same_directory_fails(tmp_path, loader_facts):
    lib = layouts.built_set(tmp_path / "cudnn", tmp_path / "w",
                            options={"heuristic": {"version": 91400}})
    check, subs = judge(lib, loader_facts)
    assert check.status == "fail"
    assert (f"libcudnn_heuristic.so.9 is cuDNN 9.14.0 ({lib / 'libcudnn_heuristic.so.9'}) but "
            f"libcudnn.so.9 is cuDNN 9.1.0") in check.detail


def test_sub_library_whose_dt_needed_is_missing_fails_with_dlerror(tmp_path, loader_facts):
    ghost = build(tmp_path / "gone" / "libghost.so.1", "libghost.so.1", work=tmp_path / "wg")
    lib = layouts.built_set(tmp_path / "cudnn", tmp_path / "w", options={"cnn": {"needed": [ghost]}})
    shutil.rmtree(tmp_path / "gone")
    check, subs = judge(lib, loader_facts)
    assert check.status == "fail"
    assert subs["libcudnn_cnn.so.9"]["loaded"] is False
    assert ("libcudnn_cnn.so.9 (" in check.detail and "cannot be loaded: libghost.so.1: cannot "
            "open shared object file" in check.detail)


def test_missing_sub_library_fails(tmp_path, loader_facts):
    lib = layouts.built_set(tmp_path / "cudnn", tmp_path / "w", skip=("engines_precompiled",))
    check, subs = judge(lib, loader_facts)
    assert check.status == "fail"
    assert "libcudnn_engines_precompiled.so.9 cannot be found where libcudnn.so.9 looks for it" \
        in check.detail
    assert "reinstall" in check.data["hint"]


def test_aborting_sub_library_is_the_detail_not_a_traceback(tmp_path, loader_facts):
    lib = layouts.built_set(tmp_path / "cudnn", tmp_path / "w", options={"adv": {"abort": True}})
    check, subs = judge(lib, loader_facts)
    assert check.status == "fail"
    assert subs["libcudnn_adv.so.9"]["error"] == "the process died of SIGABRT"
    assert "loading libcudnn_adv.so.9" in check.detail and "SIGABRT" in check.detail
    assert not subs["libcudnn_graph.so.9"]["problems"]  # one crash costs only its own entry


def test_constructor_writing_invalid_utf8_leaves_the_report_intact(tmp_path, loader_facts):
    lib = layouts.built_set(tmp_path / "cudnn", tmp_path / "w", options={"graph": {"noise": True}})
    check, subs = judge(lib, loader_facts)
    assert check.status == "pass", check.detail
    assert subs["libcudnn_graph.so.9"]["loaded"] is True


def test_main_library_that_cannot_load(tmp_path, loader_facts):
    lib = layouts.built_set(tmp_path / "cudnn", tmp_path / "w", runpath=None)
    # without RUNPATH, libcudnn's DT_NEEDED libcudnn_ops.so.9 is found nowhere
    check, _ = judge(lib, loader_facts)
    assert check.status == "fail"
    assert "libcudnn.so.9 itself cannot be loaded: libcudnn_ops.so.9: cannot open shared object" \
        in check.detail


def test_wheel_and_distribution_layouts_are_coherent(tmp_path, compiler, loader_facts):
    for lib in (layouts.wheel(tmp_path / "site", compiler), layouts.multiarch(tmp_path / "root", compiler)):
        check, subs = judge(lib, loader_facts)
        assert check.status == "pass", check.detail
        assert len(subs) == 7 and all(s["version"] in ("9", "9.3.0") for s in subs.values())


def test_before_cudnn_8_there_is_nothing_to_mix(tmp_path, loader_facts):
    lib = tmp_path / "lib"
    build(lib / "libcudnn.so.7.6.5", "libcudnn.so.7", work=tmp_path / "w", version=7605)
    (lib / "libcudnn.so.7").symlink_to("libcudnn.so.7.6.5")
    layouts.version_header(tmp_path / "include", (7, 6, 5))
    check, _ = judge(lib, loader_facts)
    assert check.status == "skip" and "one library" in check.detail


def test_sub_library_replaced_by_another_release_is_told_by_its_version_constant(tmp_path, loader_facts):
    """cuDNN's sub-libraries carry their version as cudnn_<name>_version (0x91400 = 9.14.0): a
    9.14 libcudnn_ops.so.9 put into a 9.19 directory is found even without cudnnGetVersion."""
    import subprocess

    lib = layouts.built_set(tmp_path / "cudnn", tmp_path / "w", version=(9, 19, 0))
    src = tmp_path / "ops914.c"
    src.write_text("const unsigned cudnn_ops_infer_version = 0x91400;\nint cudnnOpsVersionCheck(void) "
                   "{ return 0; }\n")
    (lib / "libcudnn_ops.so.9").unlink()
    subprocess.run(["gcc", "-shared", "-fPIC", str(src), "-Wl,-soname,libcudnn_ops.so.9", "-o",
                    str(lib / "libcudnn_ops.so.9")], check=True)
    check, subs = judge(lib, loader_facts)
    assert check.status == "fail"
    ops = subs["libcudnn_ops.so.9"]
    assert (ops["version"], ops["version_from"]) == ("9.14.0", "cudnn_ops_infer_version")
    assert check.detail.startswith(f"libcudnn_ops.so.9 is cuDNN 9.14.0 ({lib / 'libcudnn_ops.so.9'}, "
                                   "by its cudnn_ops_infer_version constant) but libcudnn.so.9 "
                                   "is cuDNN 9.19.0")


def test_whatever_the_probe_answers_is_judged_without_raising():
    from cudnn_setup.checks.coherence import judge

    res = Resolution("libcudnn_ops.so.9", "/x/libcudnn_ops.so.9", "LD_LIBRARY_PATH")
    for got in ({}, {"mapped": 5, "loaded": "yes", "version": [9]},
                {"version_check": {"status": [1], "mapped": 3, "function": {"a": 1}}},
                {"version_check": {"status": 2002, "mapped": ["/y/libcudnn_ops.so.9", 7]}},
                {"error": b"bytes?", "dlerror": None}):
        sub = judge("libcudnn_ops.so.9", res, got, "/x", "9.1.0", "libcudnn.so.9")
        json.dumps(sub)
    sub = judge("libcudnn_ops.so.9", res, {"loaded": True, "version_check":
                {"status": 2002, "mapped": ["/y/libcudnn_ops.so.9"], "function": "cudnnOpsVersionCheck"}},
                "/x", "9.1.0", "libcudnn.so.9")
    assert sub["directory"] == "/y" and sub["via"] == "loaded by cuDNN itself"
    assert sub["problems"][0].startswith("libcudnn_ops.so.9 comes from another copy: /y/libcudnn_ops.so.9")
    assert "cuDNN's own cudnnOpsVersionCheck() returned CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH" \
        in sub["problems"]


def test_a_stale_version_constant_is_no_mismatch_when_cudnns_own_check_accepts_it():
    """Seen with NVIDIA's cuDNN 9.19.0 wheel on a GPU machine: libcudnn_adv.so.9 exports
    cudnn_adv_infer_version = 9.13.0, yet cudnnAdvVersionCheck() returns success. The check that
    cuDNN itself applies stands; a version from cudnnGetVersion that differs still fails."""
    from cudnn_setup.checks.coherence import judge as judge_one
    from cudnn_setup.facts.ldresolve.search import Resolution

    d = "/opt/cudnn/lib"
    res = Resolution("libcudnn_adv.so.9", path=f"{d}/libcudnn_adv.so.9", via="RUNPATH")
    accepted = {"status": 0, "function": "cudnnAdvVersionCheck", "mapped": [f"{d}/libcudnn_adv.so.9"]}
    got = {"loaded": True, "mapped": f"{d}/libcudnn_adv.so.9", "version": "9.13.0",
           "version_from": "cudnn_adv_infer_version", "version_check": accepted}
    sub = judge_one("libcudnn_adv.so.9", res, got, d, "9.19.0", "libcudnn.so.9")
    assert sub["problems"] == [] and "9.13.0" in sub["note"] and "cudnnAdvVersionCheck" in sub["note"]
    refused = dict(got, version_check=dict(accepted, status=1003))
    assert judge_one("libcudnn_adv.so.9", res, refused, d, "9.19.0", "libcudnn.so.9")["problems"]
    asked = dict(got, version_from="cudnnGetVersion")
    assert judge_one("libcudnn_adv.so.9", res, asked, d, "9.19.0", "libcudnn.so.9")["problems"]
