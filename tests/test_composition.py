"""A release's composition read from its own libraries (facts/composition.py), on gcc-built
libraries: a sub-library named only in a string of libcudnn, the JIT flavour, a sub-library that
needs the absent driver, one that loads and exports nothing. Archives are real .tar.xz streams
installed through the CLI."""
import json
import os
import shutil
import tarfile
from pathlib import Path

import pytest

from cudnn_setup.installation import locate
from cudnn_setup.checks.coherence import check_coherence_with
from cudnn_setup.checks.deps import check_deps_with
from cudnn_setup.checks.elf_check import check_elf
from cudnn_setup.checks.files_check import check_files
from cudnn_setup.facts import composition as C
from cudnn_setup.facts.ldresolve.environment import Environment
from cudnn_setup.facts.ldresolve.ldconfig import read_cache
from cudnn_setup.facts.ldresolve.loader_facts import probe_loader
from cudnn_setup.facts.elf import code_problem
from conftest import check_facts, run_json, tree_state
from fixtures import layouts
from fixtures.deplibs import build
from fixtures.generate import make_cuda_root

FUTURE = "libcudnn_future.so"  # a sub-library next year's release might add
# names of no published release: the known checksums of those would (rightly) refuse these
FULL_NAME = "cudnn-linux-x86_64-9.1.9.99_cuda12-archive.tar.xz"
JIT_NAME = "cudnn_jit-linux-x86_64-9.1.9.99_cuda12-archive.tar.xz"
JIT_SUBS = ("graph", "engines_runtime_compiled")


@pytest.fixture(scope="module")
def loader_facts():
    return probe_loader(), read_cache()


def env():
    return {k: v for k, v in os.environ.items() if not k.startswith(("LD_", "CUDA"))}


def loader(facts):
    return Environment(cache=facts[1], facts=facts[0])


def future_set(tmp_path, with_future=True, **kw):
    """cuDNN 9.1.0 whose libcudnn opens libcudnn_future.so at run time (a string, no DT_NEEDED)."""
    opts = {"main": {"runtime": FUTURE}}
    lib = layouts.built_set(tmp_path / "cudnn", tmp_path / "w", options=opts, **kw)
    if with_future:
        build(lib / "libcudnn_future.so.9", "libcudnn_future.so.9", work=tmp_path / "wf",
              version=90100)
    return lib


def headers(include: Path) -> Path:
    (include / "cudnn.h").write_text('#include "cudnn_version.h"\n')
    return include


def archive_of(lib: Path, include: Path, out: Path, name: str) -> Path:
    """NVIDIA's layout: <top>/include/cudnn*.h, <top>/lib/libcudnn*.so.9.1.0 with the .so.9 and
    .so links; a real xz stream."""
    top = name[:-len(".tar.xz")]
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    with tarfile.open(path, "w:xz") as tar:
        for h in sorted(include.iterdir()):
            tar.add(h, f"{top}/include/{h.name}")
        for f in sorted(lib.iterdir()):
            stem = f.name.split(".so")[0]
            full = f"{stem}.so.9.1.0"
            tar.add(f, f"{top}/lib/{full}")
            for link, target in ((f"{stem}.so.9", full), (f"{stem}.so", f"{stem}.so.9")):
                info = tarfile.TarInfo(f"{top}/lib/{link}")
                info.type, info.linkname = tarfile.SYMTYPE, target
                tar.addfile(info)
    return path


def test_a_sub_library_named_only_in_a_string_of_libcudnn_is_required(tmp_path, loader_facts):
    lib = future_set(tmp_path)
    comp = C.compose({C.cudnn_stem(p.name): p for p in lib.iterdir()}, "9.x")
    assert "libcudnn_future" in comp.required and not comp.missing
    assert comp.why["libcudnn_future"] == "libcudnn.so.9 opens it at run time"
    (lib / "libcudnn_future.so.9").unlink()
    inst = locate.locate(lib)
    assert inst.composition().missing == ("libcudnn_future",)
    files = check_files(inst, check_facts())
    assert files.status == "fail"
    assert f"libcudnn_future is missing from {lib} (libcudnn.so.9 opens it at run time)" in files.detail
    coherence = check_coherence_with(inst, env(), loader=loader(loader_facts), driver_present=True)
    assert coherence.status == "fail"
    assert "libcudnn_future.so.9 cannot be found where libcudnn.so.9 looks for it" in coherence.detail
    deps = check_deps_with(inst, env(), loader=loader(loader_facts), driver_present=True)
    assert deps.status == "fail" and "libcudnn_future" in deps.detail


def test_a_release_that_embeds_no_names_is_held_to_its_generation(tmp_path):
    lib = layouts.built_set(tmp_path / "cudnn", tmp_path / "w", skip=("heuristic",))
    comp = locate.locate(lib).composition()
    assert comp.missing == ("libcudnn_heuristic",)
    assert comp.why["libcudnn_heuristic"] == "every cuDNN 9.x release has it"


def test_install_refuses_a_release_without_the_sub_library_it_names(tmp_path, home):
    lib = future_set(tmp_path)
    (lib / "libcudnn_future.so.9").unlink()
    archive = archive_of(lib, headers(lib.parent / "include"), tmp_path / "a", FULL_NAME)
    root = make_cuda_root(tmp_path / "cuda", "12.4")
    before = tree_state(root)
    done, out = run_json(["inspect", archive], home)
    pkg = out["package"]
    assert done.returncode == 3 and pkg["installable"] is False
    assert pkg["missing"] == ["libcudnn_future"]
    assert pkg["composition"]["why"]["libcudnn_future"] == "libcudnn.so.9.1.0 opens it at run time"
    done, out = run_json(["install", archive, "--cuda-root", root, "--no-theanorc", "--no-verify",
                          "--no-frameworks"], home)
    assert done.returncode == 3 and out["error"]["code"] == "archive-rejected"
    assert "libcudnn_future is missing: libcudnn.so.9.1.0 opens it at run time" in out["error"]["message"]
    assert tree_state(root) == before  # refused before anything was written


def test_the_same_release_whole_installs_and_its_files_pass(tmp_path, home):
    lib = future_set(tmp_path)
    archive = archive_of(lib, headers(lib.parent / "include"), tmp_path / "a", FULL_NAME)
    root = make_cuda_root(tmp_path / "cuda", "12.4")
    done, out = run_json(["install", archive, "--cuda-root", root, "--no-theanorc", "--no-verify",
                          "--no-frameworks"], home)
    assert done.returncode == 0, out["error"]
    assert (root / "lib64" / "libcudnn_future.so.9").exists()
    files = check_files(locate.locate(root / "lib64", root / "include"), check_facts())
    assert "libcudnn_future" in files.data["composition"]["required"]


def jit_set(tmp_path):
    return layouts.built_set(tmp_path / "jit", tmp_path / "wj", subs=JIT_SUBS)


def test_the_jit_flavour_is_a_complete_release_of_its_own(tmp_path, home, loader_facts):
    lib = jit_set(tmp_path)
    archive = archive_of(lib, headers(lib.parent / "include"), tmp_path / "a", JIT_NAME)
    done, out = run_json(["inspect", archive], home)
    comp = out["package"]["composition"]
    assert done.returncode == 0 and out["package"]["installable"], out["package"]["problems"]
    assert comp["flavour"] == "jit"
    assert comp["required"] == ["libcudnn", "libcudnn_graph", "libcudnn_engines_runtime_compiled"]
    assert out["package"]["platform"]["from_name"]["flavour"] == "jit"
    root = make_cuda_root(tmp_path / "cuda", "12.4")
    done, out = run_json(["install", archive, "--cuda-root", root, "--no-theanorc", "--no-verify",
                          "--no-frameworks"], home)
    assert done.returncode == 0, out["error"]
    inst = locate.locate(root / "lib64", root / "include")
    assert inst.composition().flavour == "jit"
    assert check_files(inst, check_facts()).status in ("pass", "warn")
    coherence = check_coherence_with(inst, env(), loader=loader(loader_facts), driver_present=True)
    assert coherence.status == "pass", coherence.detail
    assert "2 sub-libraries" in coherence.detail


def test_the_jit_files_under_a_full_release_name_are_refused_naming_what_is_missing(tmp_path, home):
    lib = jit_set(tmp_path)
    archive = archive_of(lib, headers(lib.parent / "include"), tmp_path / "a", FULL_NAME)
    done, out = run_json(["inspect", archive], home)
    assert done.returncode == 3
    assert out["package"]["composition"]["flavour"] == "full"
    assert {"libcudnn_ops", "libcudnn_cnn", "libcudnn_adv", "libcudnn_heuristic",
            "libcudnn_engines_precompiled"} <= set(out["package"]["missing"])


def test_a_jit_install_over_a_full_one_leaves_no_mix(tmp_path, home):
    full = layouts.built_set(tmp_path / "full", tmp_path / "wfull")
    root = make_cuda_root(tmp_path / "cuda", "12.4")
    a_full = archive_of(full, headers(full.parent / "include"), tmp_path / "a1", FULL_NAME)
    assert run_json(["install", a_full, "--cuda-root", root, "--no-theanorc", "--no-verify",
                     "--no-frameworks"], home)[0].returncode == 0
    jit = jit_set(tmp_path)
    a_jit = archive_of(jit, headers(jit.parent / "include"), tmp_path / "a2", JIT_NAME)
    done, out = run_json(["install", a_jit, "--cuda-root", root, "--no-theanorc", "--no-verify",
                          "--no-frameworks"], home)
    assert done.returncode == 0, out["error"]
    left = sorted(p.name for p in (root / "lib64").glob("libcudnn*.so.9"))
    assert left == ["libcudnn.so.9", "libcudnn_engines_runtime_compiled.so.9", "libcudnn_graph.so.9"]
    assert locate.locate(root / "lib64", root / "include").composition().flavour == "jit"


def test_deps_does_not_ask_a_jit_release_for_the_legacy_sub_libraries_its_libcudnn_names(tmp_path, loader_facts):
    lib = layouts.built_set(tmp_path / "jit", tmp_path / "wj", subs=JIT_SUBS,
                            options={"main": {"runtime": "libcudnn_ops.so"}})
    inst = locate.locate(lib)
    comp = inst.composition()
    assert comp.flavour == "jit" and "libcudnn_ops" in comp.optional and not comp.missing
    deps = check_deps_with(inst, env(), loader=loader(loader_facts), driver_present=True)
    ops = [d for d in deps.data["dependencies"] if d["name"].startswith("libcudnn_ops.so")]
    assert [(d["severity"], d["kind"], d["found"]) for d in ops] == [("skip", "runtime", False)]
    assert deps.status == "pass", deps.detail
    assert "not part of this cuDNN's JIT flavour" in deps.detail


def driver_set(tmp_path, **extra):
    """cuDNN 9.1 whose libcudnn_engines_runtime_compiled.so.9 lists libcuda.so.1 as DT_NEEDED
    (as 9.28's does), on a machine where no libcuda.so.1 exists."""
    fake = build(tmp_path / "drv" / "libcuda.so.1", "libcuda.so.1", work=tmp_path / "wd")
    needed = [fake] + extra.pop("needed", [])
    lib = layouts.built_set(tmp_path / "cudnn", tmp_path / "w",
                            options={"engines_runtime_compiled": {"needed": needed}}, **extra)
    shutil.rmtree(tmp_path / "drv")
    return lib


def test_without_a_driver_the_sub_library_that_needs_it_is_a_skip_not_a_failure(tmp_path, loader_facts):
    lib = driver_set(tmp_path)
    inst = locate.locate(lib)
    check = check_coherence_with(inst, env(), loader=loader(loader_facts), driver_present=False)
    json.dumps(check.to_dict())
    assert check.status == "pass", check.detail
    subs = {s["soname"]: s for s in check.data["sublibraries"]}
    rc = subs["libcudnn_engines_runtime_compiled.so.9"]
    assert rc["status"] == "skip" and rc["loaded"] is None and not rc["problems"]
    assert "no NVIDIA driver" in rc["skip"] and rc["version"] == "9"
    assert "libcudnn_engines_runtime_compiled.so.9 list libcuda.so.1" not in check.detail
    assert ("libcudnn_engines_runtime_compiled.so.9 lists libcuda.so.1 as DT_NEEDED (skip)"
            in check.detail)
    assert all(s["loaded"] for n, s in subs.items() if n != "libcudnn_engines_runtime_compiled.so.9")
    deps = check_deps_with(inst, env(), loader=loader(loader_facts), driver_present=False)
    assert deps.status == "pass" and "libcuda.so.1 (no NVIDIA driver on this machine)" in deps.detail


def test_with_a_driver_a_libcuda_that_cannot_be_found_still_fails(tmp_path, loader_facts):
    lib = driver_set(tmp_path)
    check = check_coherence_with(locate.locate(lib), env(), loader=loader(loader_facts),
                            driver_present=True)
    assert check.status == "fail"
    assert "libcuda.so.1: cannot open shared object file" in check.detail


def test_without_a_driver_the_rest_of_that_sub_library_is_still_judged(tmp_path, loader_facts):
    ghost = build(tmp_path / "gone" / "libghost.so.1", "libghost.so.1", work=tmp_path / "wg")
    lib = driver_set(tmp_path, needed=[ghost])
    shutil.rmtree(tmp_path / "gone")
    check = check_coherence_with(locate.locate(lib), env(), loader=loader(loader_facts),
                            driver_present=False)
    assert check.status == "fail"
    assert ("libcudnn_engines_runtime_compiled.so.9 (" in check.detail and "cannot be loaded even "
            "with a driver: libghost.so.1" in check.detail)


def test_without_a_driver_a_sub_library_of_another_release_is_still_told(tmp_path, loader_facts):
    lib = driver_set(tmp_path)
    rc = lib / "libcudnn_engines_runtime_compiled.so.9"
    rc.rename(lib / "libcudnn_engines_runtime_compiled.so.9.0.0")
    rc.symlink_to("libcudnn_engines_runtime_compiled.so.9.0.0")
    check = check_coherence_with(locate.locate(lib), env(), loader=loader(loader_facts),
                            driver_present=False)
    assert check.status == "fail"
    assert "libcudnn_engines_runtime_compiled.so.9 is cuDNN 9.0.0" in check.detail


def test_a_library_that_loads_and_exports_nothing_is_refused_and_fails_elf(tmp_path, home):
    lib = layouts.built_set(tmp_path / "cudnn", tmp_path / "w")
    src = tmp_path / "empty.c"
    src.write_text("/* no code */\n")
    stub = lib / "libcudnn_heuristic.so.9"
    stub.unlink()
    import subprocess

    subprocess.run(["gcc", "-shared", "-fPIC", str(src), "-o", str(stub),
                    "-Wl,-soname,libcudnn_heuristic.so.9"], check=True)
    # the loader takes it: a dlopen succeeds
    done = subprocess.run([os.sys.executable, "-c", f"import ctypes; ctypes.CDLL({str(stub)!r})"],
                          capture_output=True, env=env())
    assert done.returncode == 0
    assert code_problem(stub) == "exports no symbols: a library with this name but no code to call"
    elf = check_elf(locate.locate(lib), check_facts())
    assert elf.status == "fail" and "libcudnn_heuristic.so.9 exports no symbols" in elf.detail
    archive = archive_of(lib, headers(lib.parent / "include"), tmp_path / "a", FULL_NAME)
    done, out = run_json(["inspect", archive], home)
    assert done.returncode == 3
    assert [p["code"] for p in out["package"]["problems"] if p["severity"] == "error"] == ["no-code"]


def test_a_truncated_library_is_told_before_pyelftools_gives_up(tmp_path):
    lib = layouts.built_set(tmp_path / "cudnn", tmp_path / "w")
    ops = lib / "libcudnn_ops.so.9"
    data = ops.read_bytes()
    ops.write_bytes(data[:len(data) // 2])
    assert code_problem(ops).startswith("is truncated: its ELF header places its section table")
    assert "libcudnn_ops.so.9 is truncated" in check_elf(locate.locate(lib), check_facts()).detail


def test_a_hostile_libcudnn_naming_endless_sub_libraries_is_bounded(tmp_path):
    names = b"".join(b"libcudnn_x%03d.so\x00" % i for i in range(300))
    lib = tmp_path / "lib"
    lib.mkdir()
    src = tmp_path / "names.c"
    src.write_text("const char names[] = \"" + "".join(
        f"libcudnn_x{i:03d}.so\\0" for i in range(300)) + "\";\nint f(void) { return names[0]; }\n")
    import subprocess

    subprocess.run(["gcc", "-shared", "-fPIC", str(src), "-o", str(lib / "libcudnn.so.9"),
                    "-Wl,-soname,libcudnn.so.9"], check=True)
    assert names  # the strings above, as the library keeps them
    comp = C.compose({"libcudnn": lib / "libcudnn.so.9"}, "9.x")
    assert len(comp.required) <= C.MAX_LIBRARIES
    assert comp.missing  # every named one is absent: refused, never trusted
