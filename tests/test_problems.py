"""doctor's problem list: a GPU that can run no cuDNN first, then fail before warn, root causes
before what they cause; the exit code follows the severities listed."""
from cudnn_setup.probing.driver import DriverFacts, Gpu
from cudnn_setup.doctor_order import cannot_run_cudnn, problems_from
from cudnn_setup.commands.doctor import problems_check
from cudnn_setup.report import Check
from cudnn_setup.startup_line import explain

LINE = ("Using gpu device 0: Tesla C2075 (CNMeM is enabled with initial size: 95.0% of memory, "
        "cuDNN not available)")


def test_a_gpu_that_cannot_run_cudnn_at_all_ranks_above_everything():
    checks = [Check("loader", "warn", "not on the loader path"),
              Check("load", "fail", "libcudnn.so.7 died of SIGABRT", {"hint": "reinstall"}),
              Check("files", "fail", "include/cudnn.h is missing"),
              Check("elf", "pass", "fine")]
    problems = problems_from(checks, explanation=explain(LINE))
    assert [p["check"] for p in problems] == ["gpu", "files", "load", "loader"]
    top = problems[0]
    assert top["rank"] == 0 and top["severity"] == "fail"
    assert top["message"].startswith("Tesla C2075 (compute capability 2.0) cannot run cuDNN at all")
    assert problems[2]["fix"] == "reinstall"
    assert problems_check(problems).status == "fail"  # doctor exits 1


def test_driver_facts_count_too_and_each_gpu_is_listed_once():
    driver = DriverFacts(gpus=(Gpu(0, "Tesla C2075", "2.0"), Gpu(1, "NVIDIA H200", "9.0")))
    problems = problems_from([], driver=driver, explanation=explain(LINE))
    assert [p["message"].split(" (")[0] for p in problems] == ["Tesla C2075"]


def test_warnings_and_notes_alone_exit_0():
    problems = problems_from([Check("loader", "warn", "x"), Check("theano", "pass", "y")],
                             extra=[{"severity": "info", "message": "device=cpu"}])
    assert [p["severity"] for p in problems] == ["warn", "info"]
    assert problems_check(problems).status == "warn"  # doctor exits 0
    assert problems_check([]).status == "pass"


def test_deps_fix_comes_from_its_first_missing_dependency():
    deps = Check("deps", "fail", "libcublasLt.so.12 not found", {"dependencies": [
        {"name": "libz.so.1", "found": True, "severity": None, "fixes": []},
        {"name": "libcublasLt.so.12", "found": False, "severity": "fail",
         "fixes": [{"how": "package", "text": "apt-get install libcublas-12-4"}]}]})
    [p] = problems_from([deps])
    assert p["fix"] == "apt-get install libcublas-12-4"


def test_cannot_run_cudnn_threshold():
    assert cannot_run_cudnn("2.1") and not cannot_run_cudnn("3.0") and not cannot_run_cudnn("9.0")
    assert not cannot_run_cudnn(None) and not cannot_run_cudnn("not a version")
