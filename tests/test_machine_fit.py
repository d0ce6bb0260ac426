"""The GPUs and the driver, through the command line, with a gcc-built stand-in libcuda.so.1 that
the commands find through LD_LIBRARY_PATH as they would the driver's: install refuses a build
that cannot run here before writing anything (unless --force), list says which releases fit,
doctor ranks what no install can fix first and exits 1 on a fail."""
import pytest

from conftest import run_json, tree_state
from fixtures import libcuda
from fixtures.generate import GENERATION_SAMPLES
from fixtures.mirror import build_mirror

V9 = GENERATION_SAMPLES["9.x"]  # cuDNN 9.3.0 for CUDA 12
V7 = GENERATION_SAMPLES["v4-v7"]
H200, K80 = ("NVIDIA H200", "9.0"), ("Tesla K80", "3.7")
C2075_LINE = ("Using gpu device 0: Tesla C2075 (CNMeM is enabled with initial size: 95.0% of "
              "memory, cuDNN not available)")


def driver_env(tmp_path, **kw) -> dict:
    """The environment of a machine whose driver answers for the GPUs asked for; no nvidia-smi."""
    directory = libcuda.build(tmp_path / "driver", **kw)
    return {"LD_LIBRARY_PATH": str(directory), "PATH": f"{tmp_path / 'no-smi'}:/usr/bin:/bin"}


def install(archive, root, home, env, *extra):
    return run_json(["install", archive, "--cuda-root", root, "--no-theanorc", "--no-verify",
                     "--no-frameworks", *extra], home, env)


def test_a_gpu_the_release_dropped_is_refused_before_anything_is_written(archives, cuda_root,
                                                                         home, tmp_path):
    root = cuda_root(version="12.4")
    env = driver_env(tmp_path, gpus=[H200, K80], driver=12040)
    before = tree_state(root)
    for extra in ((), ("--dry-run",)):
        done, out = install(archives[V9], root, home, env, *extra)
        assert done.returncode == 3, done.stderr
        error = out["error"]
        assert error["code"] == "gpu-unsupported"
        assert "Tesla K80 (compute capability 3.7)" in error["message"]
        assert "cuDNN 8.5.0 for CUDA 11 supports compute capability 3.7" in error["hint"]
        assert error["hint"].endswith("--force installs it anyway")
        assert tree_state(root) == before
    done, out = install(archives[V9], root, home, env, "--force")
    assert done.returncode == 0 and out["changed"], done.stderr
    notes = out["install"]["notes"]
    assert any(n.startswith("installed anyway (--force): Tesla K80 (compute capability 3.7)")
               for n in notes)


def test_a_misfit_from_an_inferred_row_is_a_note_not_a_refusal(tmp_path, compiler, cuda_root,
                                                               home):
    """NVIDIA's matrices for 9.11-9.16 were not found: whether they still run a Pascal GPU is
    inferred, so it is said, not refused."""
    from fixtures.generate import SUB9, _archive, spec_entries, write_archive

    spec = _archive("x86_64", "9.12.0.99", "12", SUB9)
    archive = write_archive(tmp_path / spec.name, spec_entries(spec, compiler))
    root = cuda_root(version="12.4")
    env = driver_env(tmp_path, gpus=[("Tesla P100-PCIE-16GB", "6.0")], driver=13000)
    done, out = install(archive, root, home, env)
    assert done.returncode == 0, done.stderr
    [note] = out["install"]["notes"]
    assert note.startswith("Tesla P100-PCIE-16GB (compute capability 6.0): cuDNN 9.12.0 for "
                           "CUDA 12 needs compute capability 7.5")
    assert f"note: {note}" in done.stderr


def test_a_driver_too_old_for_the_build_is_refused(archives, cuda_root, home, tmp_path):
    root = cuda_root(version="12.4")
    done, out = install(archives[V9], root, home, driver_env(tmp_path, gpus=[H200], driver=11080))
    assert done.returncode == 3 and out["error"]["code"] == "driver-too-old", done.stderr
    assert "the driver supports CUDA 11.8 at most" in out["error"]["message"]
    assert "install NVIDIA driver 525.60.13 or newer" in out["error"]["hint"]
    assert not (root / ".cudnn-setup" / "manifest.json").exists()


def test_a_fitting_gpu_and_driver_install_and_verify_says_so(archives, cuda_root, home, tmp_path):
    root = cuda_root(version="12.4")
    env = driver_env(tmp_path, gpus=[H200], driver=13000)
    done, out = install(archives[V9], root, home, env)
    assert done.returncode == 0 and out["install"]["notes"] == [], done.stderr
    done, out = run_json(["verify", "--cuda-root", root, "--no-theano", "--no-frameworks"], home,
                         env)
    driver = {c["name"]: c for c in out["checks"]}["driver"]
    assert driver["status"] == "pass", driver
    assert driver["detail"].startswith("NVIDIA H200 (compute capability 9.0); driver ? (runs "
                                       "CUDA 13.0 at most); cuDNN 9.3.0 for CUDA 12.0")


def test_list_says_which_releases_fit_this_machine(tmp_path, compiler, home):
    mirror = build_mirror(tmp_path / "mirror", cc=compiler)
    k80 = driver_env(tmp_path / "k80", gpus=[K80], driver=12040)

    def listed(cuda, env):
        done, out = run_json(["list", "--cuda", cuda, "--mirror", mirror.root], home, env)
        assert done.returncode == 0, done.stderr
        return done, {(r["version"], r["cuda_variant"]): r.get("fits", "absent")
                      for r in out["releases"] if r["platform"] == "linux-x86_64"}

    done, fits = listed("12", k80)
    assert fits[("9.1.7.99", "cuda12")]["ok"] is False
    assert "Tesla K80 (compute capability 3.7): cuDNN 9.1.7.99 for CUDA 12 needs compute " \
           "capability 5.0" in fits[("9.1.7.99", "cuda12")]["why"]
    assert "does not fit this machine" in done.stderr
    done, fits = listed("13", k80)
    assert "the driver supports CUDA 12.4 at most" in fits[("9.4.2.99", "cuda13")]["why"]
    done, fits = listed("13", driver_env(tmp_path / "h200", gpus=[H200], driver=13000))
    assert all(f["ok"] for f in fits.values()) and len(fits) == 2
    assert fits[("9.4.2.99", "cuda13")]["why"].startswith("runs on NVIDIA H200 (compute "
                                                          "capability 9.0)")
    done, fits = listed("13", {})  # no driver: whether they fit is not known
    assert set(fits.values()) == {"absent"}


def test_doctor_ranks_a_gpu_no_cudnn_runs_on_first_then_the_driver_misfit(archives, cuda_root,
                                                                        home, tmp_path):
    root = cuda_root(version="12.4")
    env = driver_env(tmp_path, gpus=[K80], driver=12040)
    done, _ = install(archives[V9], root, home, env, "--force")
    assert done.returncode == 0, done.stderr
    done, out = run_json(["doctor", "--cuda-root", root], home, env)
    assert done.returncode == 1 and out["error"] is None, done.stderr
    assert out["driver"]["gpus"] == [{"index": 0, "name": "Tesla K80", "compute_capability": "3.7"}]
    assert out["cudnn"]["version"] == "9.3.0" and out["cudnn"]["managed"] is True
    first = out["problems"][0]
    assert (first["severity"], first["check"], first["rank"]) == ("fail", "driver", 1)
    assert "Tesla K80 (compute capability 3.7)" in first["message"]
    done, out = run_json(["doctor", C2075_LINE, "--cuda-root", root], home, env)
    assert done.returncode == 1
    assert [p["check"] for p in out["problems"][:2]] == ["gpu", "driver"]
    assert out["problems"][0]["rank"] == 0
    assert out["problems"][0]["message"].startswith("Tesla C2075 (compute capability 2.0) cannot "
                                                    "run cuDNN at all")


def test_doctor_exits_0_when_nothing_fails(archives, cuda_root, home):
    root = cuda_root(version="10.2")
    done, _ = install(archives[V7], root, home, {})
    assert done.returncode == 0, done.stderr
    done, out = run_json(["doctor", "--cuda-root", root], home)
    assert done.returncode == 0 and out["ok"], done.stderr
    assert out["problems"] and all(p["severity"] != "fail" for p in out["problems"])
    problems = {c["name"]: c for c in out["checks"]}["problems"]
    assert problems["status"] in ("pass", "warn") and problems["detail"].split(";")[0] != "none"
    assert out["frameworks"] == [] and out["cudnn"]["version"] == "7.4.2"


@pytest.mark.parametrize("built_for, root, same", [
    ("12.4", "12.8", True), ("12.4", 12, True), ("11.8", "12.0", False), ("13.0", 12, False),
    (None, "12.8", None), ("12.4", None, None), ("", "12", None), ("x.4", "12", None),
    ("12", "12.1", True),
])
def test_one_rule_says_whether_a_build_fits_a_roots_cuda_major(built_for, root, same):
    from cudnn_setup.facts.cuda import same_major

    assert same_major(built_for, root) is same


def test_a_driver_that_cannot_be_asked_is_said_not_taken_for_no_gpu(archives, cuda_root, home,
                                                                    tmp_path):
    """A probe that dies (the driver's cuInit aborts) leaves the fit unjudged: the install goes
    on, and says so, instead of passing in silence as if the machine had no GPU."""
    root = cuda_root(version="12.4")
    done, out = install(archives[V9], root, home, driver_env(tmp_path, abort=True), "--dry-run")
    assert done.returncode == 0, done.stderr
    [note] = [n for n in out["install"]["notes"] if "could not be asked" in n]
    assert note.startswith("the GPUs and the driver could not be asked (")
    assert "the CUDA driver API's probe died of SIGABRT; the driver is not judged" in note
    assert note.endswith("whether this build runs on them was not judged")
