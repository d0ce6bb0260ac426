"""The GPU probe (probes/gpu_steps.py) and the `gpu` check (checks/gpu.py) without a GPU: the numpy
references, the stage-to-sub-library blame, the NVRTC warn, the enum values against NVIDIA's
headers, and the check reading whatever a real child process answers (crafted answers stand in
for the GPU, the one part this machine cannot have; the GPU run itself is on the H200, see
docs/evidence/h200-damage-corpus.md)."""
import importlib.util
import io
import json
import os
import re
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest

from cudnn_setup.installation import locate
from cudnn_setup.checks.gpu import STEPS, check_gpu_with
from cudnn_setup.probing.probe import run_probe
from fixtures import layouts
from fixtures.deplibs import build

PROBE = Path(__file__).resolve().parent.parent / "cudnn_setup" / "probes" / "gpu_steps.py"
spec = importlib.util.spec_from_file_location("gpu_probe", PROBE)
G = importlib.util.module_from_spec(spec)
spec.loader.exec_module(G)


def test_every_step_the_probe_runs_is_one_the_check_knows_and_names_its_sub_libraries():
    assert [name for name, _ in G.STEPS] == list(STEPS)
    assert set(G.STEP_LIBS) == set(STEPS)
    assert G.STEP_LIBS["legacy_conv_fwd"] == ["libcudnn_cnn"]
    assert G.STEP_LIBS["rnn_fwd"] == ["libcudnn_adv"]
    assert G.STEP_LIBS["batchnorm_fwd"] == ["libcudnn_ops"]
    assert {"libcudnn_graph", "libcudnn_heuristic"} <= set(G.STEP_LIBS["graph_conv_fwd"])
    assert "libcudnn_engines_runtime_compiled" in G.STEP_LIBS["fused_runtime_compiled"]
    # cuDNN 8 has no graph steps in this probe: only the legacy API ones run
    assert [n for n, _ in G.steps_for(8907)] == ["batchnorm_fwd", "rnn_fwd", "legacy_conv_fwd"]


def test_backward_references_are_the_adjoints_of_the_forward_one():
    x, w, ys = G._conv_data(G.CHECK_LAYER)
    x, w = x.astype(float), w.astype(float)
    dy = np.random.RandomState(5).randn(*ys)
    pad = G.CHECK_LAYER[7]
    y = G.reference(x, w, pad)
    assert y.shape == ys
    inner = float(np.sum(y * dy))
    assert inner == pytest.approx(float(np.sum(x * G.reference_bwd_data(dy, w, pad, x.shape))))
    assert inner == pytest.approx(float(np.sum(w * G.reference_bwd_filter(x, dy, pad, w.shape))))


def test_rnn_and_batchnorm_references():
    rng = np.random.RandomState(0)
    x, wi, wr = rng.randn(3, 2, 4), rng.randn(5, 4), rng.randn(5, 5)
    h1 = np.tanh(x[0] @ wi.T)
    h2 = np.tanh(x[1] @ wi.T + h1 @ wr.T)
    out = G.reference_rnn(x, wi, wr)
    assert np.allclose(out[0], h1) and np.allclose(out[1], h2)
    xb = rng.randn(4, 3, 5, 5)
    y = G.reference_batchnorm(xb, np.ones(3), np.array([1.0, 2.0, 3.0]), 0.0)
    assert np.allclose(y.mean(axis=(0, 2, 3)), [1, 2, 3]) and np.allclose(y.std(axis=(0, 2, 3)), 1)


def test_compare_fails_past_its_limit_and_on_nan():
    want = np.ones((2, 2))
    assert G.compare(want + 1e-6, want, 1e-4, "x") < 1e-4
    with pytest.raises(G.ProbeError) as err:
        G.compare(want + 0.1, want, 1e-4, "the result")
    assert err.value.stage == "compare" and "the result differs from numpy's" in str(err.value)
    with pytest.raises(G.ProbeError):
        G.compare(want * np.nan, want, 1e-4, "x")


@pytest.mark.parametrize("step, stage, blamed", [
    ("graph_conv_fwd", "heuristics", "libcudnn_heuristic"),
    ("graph_conv_fwd", "descriptors", "libcudnn_graph"),
    ("graph_conv_bwd_data", "plan", "libcudnn_engines_precompiled (which runs the engine) or "
                                    "libcudnn_heuristic (which chose it)"),
    ("graph_conv_fwd", "compare", "libcudnn_engines_precompiled (which runs the engine) or "
                                  "libcudnn_heuristic"),
    ("fused_runtime_compiled", "execute", "libcudnn_engines_runtime_compiled"),
    ("batchnorm_fwd", "execute", "libcudnn_ops"),
    ("rnn_fwd", "descriptors", "libcudnn_adv"),
    ("legacy_conv_fwd", "execute", "libcudnn_cnn"),
])
def test_a_failed_step_points_to_the_sub_library_of_its_stage(step, stage, blamed):
    def work(gpu, out):
        out["stage"] = stage
        raise G.ProbeError("cudnnSomething returned 3009 (NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE)",
                           stage, 3009)

    log = io.StringIO()
    entry = G.run_step(None, step, work, log=log)
    assert log.getvalue() == f"gpu-step: {step}\n"
    assert entry["status"] == "fail" and entry["cudnn_status"] == 3009
    assert entry["blamed"].startswith(blamed)


def test_the_stage_of_the_failing_call_decides_the_blame():
    def work(gpu, out):  # the step's own mark is still "descriptors" when heuristics fail
        raise G.ProbeError("heuristics counted 18 engine configurations and returned none",
                           "heuristics")

    entry = G.run_step(None, "graph_conv_bwd_data", work, log=io.StringIO())
    assert (entry["stage"], entry["blamed"]) == ("heuristics", "libcudnn_heuristic")


def test_a_bug_in_one_step_is_that_steps_failure_and_a_skip_is_a_warn():
    def bug(gpu, out):
        raise TypeError("argument 14: wrong type")

    def skip(gpu, out):
        raise G.Skip("libnvrtc.so.13 cannot be loaded")

    assert G.run_step(None, "rnn_fwd", bug, log=io.StringIO())["reason"] == \
        "TypeError: argument 14: wrong type"
    entry = G.run_step(None, "fused_runtime_compiled", skip, log=io.StringIO())
    assert (entry["status"], entry["reason"]) == ("warn", "libnvrtc.so.13 cannot be loaded")


def test_the_fused_step_warns_naming_nvrtc_where_cuDNN_cannot_open_it(tmp_path, monkeypatch):
    # a libcudnn whose cudnnGetCudartVersion says CUDA 99: cuDNN would open libnvrtc.so.99
    lib = build(tmp_path / "libcudnn.so.9", "libcudnn.so.9", work=tmp_path / "w",
                symbol="cudnnGetCudartVersion", value=99000)
    import ctypes

    class FakeGpu:  # the GPU is what this machine lacks; the library is real
        cudnn = ctypes.CDLL(str(lib))

    def no_engine(gpu, out, kept=None, keep=None):
        raise G.ProbeError("no runtime-compiled engine supports a conv+bias+ReLU graph", "plan")

    monkeypatch.setattr(G, "fused_graph", no_engine)
    with pytest.raises(G.Skip) as skip:
        G.fused(FakeGpu(), {})
    assert str(skip.value).startswith("libnvrtc.so.99 cannot be loaded")
    assert "precompiled engines still do" in str(skip.value)
    # where NVRTC loads, the failure stands
    monkeypatch.setattr(G, "nvrtc_missing", lambda gpu: None)
    with pytest.raises(G.ProbeError):
        G.fused(FakeGpu(), {})


def test_the_real_probe_without_a_driver_says_skip(tmp_path):
    lib = layouts.built_set(tmp_path / "cudnn", tmp_path / "w")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LD_")}
    done = run_probe([str(PROBE), str(lib / "libcudnn.so.9")], 60, env)
    answer = done.data
    assert answer is not None, done.stderr
    if "libcuda.so.1 cannot be loaded" not in (answer.get("reason") or ""):
        pytest.skip("this machine has a driver")
    assert answer["status"] == "skip"


def answering(tmp_path, script: str) -> list[str]:
    """A child that answers as the probe would (probes/answer.py, the run's key first): the GPU
    it stands in for is not here. `script` sets ANSWER, or dies before answering."""
    path = tmp_path / "answer.py"
    path.write_text(f"import sys\nsys.path.insert(0, {str(PROBE.parent)!r})\nfrom answer import emit\n"
                    + textwrap.dedent(script) + "\nemit(lambda: ANSWER)\n")
    return [str(path)]


def answer_of(answer: dict) -> str:
    return f"ANSWER = {answer!r}"


def inst(tmp_path):
    return locate.locate(layouts.built_set(tmp_path / "cudnn", tmp_path / "w"))


STEP = {"name": "graph_conv_fwd", "status": "pass", "stage": "compare", "max_rel_error": 1e-7,
        "sublibraries": ["libcudnn_graph", "libcudnn_heuristic", "libcudnn_engines_precompiled"]}


def test_every_step_passing_is_a_pass_naming_each_sub_library(tmp_path):
    steps = [dict(STEP, name=n, sublibraries=G.STEP_LIBS[n]) for n in STEPS]
    answer = {"status": "pass", "gpu": "NVIDIA H200", "compute_capability": "9.0", "steps": steps}
    check = check_gpu_with(inst(tmp_path), {}, probe=answering(tmp_path, answer_of(answer)))
    assert check.status == "pass", check.detail
    for what in ("graph API (heuristics mode A)", "(graph, heuristic, engines_precompiled)",
                 "a batch normalization (ops)", "an RNN (adv)", "(cnn)", "engines_runtime_compiled"):
        assert what in check.detail


def test_a_failed_step_fails_naming_the_sub_library_and_who_would_break(tmp_path):
    bad = dict(STEP, status="fail", stage="heuristics", blamed="libcudnn_heuristic",
               reason="heuristics returned no engine configuration")
    answer = {"status": "fail", "gpu": "NVIDIA H200", "compute_capability": "9.0",
              "steps": [bad, dict(STEP, name="legacy_conv_fwd", sublibraries=["libcudnn_cnn"])]}
    check = check_gpu_with(inst(tmp_path), {}, probe=answering(tmp_path, answer_of(answer)))
    assert check.status == "fail"
    assert ("a convolution through the graph API (heuristics mode A) failed at heuristics: "
            "heuristics returned no engine configuration — points to libcudnn_heuristic; "
            "PyTorch, TensorFlow and JAX convolutions would break") in check.detail


def test_a_failed_legacy_step_of_cudnn_9_names_no_client_that_never_uses_it(tmp_path):
    """Theano 1.0.5 uses no cuDNN 8 or later (facts/theano.py): a stubbed libcudnn_cnn of
    cuDNN 9 breaks ONNX Runtime and code written for cuDNN v7, not Theano, which already runs
    without it. With cuDNN v5 to v7 Theano is the legacy API's first client."""
    bad = dict(STEP, name="legacy_conv_fwd", status="fail", stage="descriptors",
               blamed="libcudnn_cnn", sublibraries=["libcudnn_cnn"],
               reason="cudnnCreateConvolutionDescriptor returned 3009")
    answer = {"status": "fail", "gpu": "NVIDIA H200", "compute_capability": "9.0",
              "steps": [STEP, bad]}
    installed = inst(tmp_path)
    assert installed.major == 9
    check = check_gpu_with(installed, {}, probe=answering(tmp_path, answer_of(answer)))
    assert check.status == "fail"
    assert "points to libcudnn_cnn; ONNX Runtime and other legacy-API clients would break" \
        in check.detail and "Theano" not in check.detail, check.detail
    from cudnn_setup.checks.gpu import callers

    assert callers("legacy_conv_fwd", "7.6.5").startswith("Theano, ONNX Runtime")
    assert callers("legacy_conv_fwd", "8.9.6") == "ONNX Runtime and other legacy-API clients"
    assert callers("rnn_fwd", "9.1.0") == STEPS["rnn_fwd"][1]


def test_a_warned_step_is_a_warn(tmp_path):
    warned = dict(STEP, name="fused_runtime_compiled", status="warn",
                  reason="libnvrtc.so.13 cannot be loaded")
    answer = {"status": "warn", "gpu": "G", "compute_capability": "9.0", "steps": [STEP, warned]}
    check = check_gpu_with(inst(tmp_path), {}, probe=answering(tmp_path, answer_of(answer)))
    assert check.status == "warn" and "libnvrtc.so.13 cannot be loaded" in check.detail


def test_a_probe_that_dies_in_a_step_is_told_which(tmp_path):
    script = """
        import os, signal, sys
        print("gpu-step: graph_conv_fwd", file=sys.stderr, flush=True)
        print("gpu-step: rnn_fwd", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGABRT)
    """
    check = check_gpu_with(inst(tmp_path), {}, probe=answering(tmp_path, script))
    assert check.status == "fail" and check.data["crashed_in"] == "rnn_fwd"
    assert "died (SIGABRT) during an RNN (rnn_fwd; PyTorch's RNN, LSTM and GRU would break)" \
        in check.detail


@pytest.mark.parametrize("answer", [
    {"status": "pass", "gpu": "G", "compute_capability": "9.0"},  # no steps at all
    {"status": "pass", "gpu": "G", "compute_capability": "9.0", "steps": "all good"},
    {"status": "pass", "gpu": "G", "compute_capability": "9.0",
     "steps": [{"name": "made_up", "status": "pass"}, 7, None]},
])
def test_an_answer_without_real_steps_is_no_pass(tmp_path, answer):
    check = check_gpu_with(inst(tmp_path), {}, probe=answering(tmp_path, answer_of(answer)))
    assert check.status == "fail"


def test_hostile_step_fields_are_bounded_and_an_odd_status_is_a_failure(tmp_path):
    step = dict(STEP, status="PASS!!", reason="x" * 100000, blamed="\x1b[31m" * 1000,
                sublibraries=["libcudnn_graph", "../../etc/passwd", 5], mapped=[1, "/x"] * 1000)
    answer = {"status": "pass", "gpu": "G" * 5000, "compute_capability": "9.0", "steps": [step]}
    check = check_gpu_with(inst(tmp_path), {}, probe=answering(tmp_path, answer_of(answer)))
    assert check.status == "fail" and len(check.detail) < 2000
    got = check.data["steps"][0]
    assert got["sublibraries"] == ["libcudnn_graph"] and len(got["mapped"]) <= 16


def _header_enums(text: str) -> dict[str, int]:
    """Every enumerator in NVIDIA's headers (deprecated ones too), with C's rule for one without
    a value: the one before it plus one (cuDNN 9.1's headers number most of theirs that way)."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r"^\s*#[^\n]*", " ", text, flags=re.M)
    values: dict[str, int] = {}
    for body in re.findall(r"\benum\b[^{;]*\{([^}]*)\}", text):
        following = 0
        for item in body.split(","):
            m = re.fullmatch(r"\s*(CUDNN_\w+)\s*(?:CUDNN_DEPRECATED_ENUM\s*)?"
                             r"(?:=\s*(0x[0-9a-fA-F]+|\d+))?\s*", item)
            if m is None:  # empty after a trailing comma, or a value that is an expression
                following = None if item.strip() else following
                continue
            if m[2] is not None:
                following = int(m[2], 0)
            if following is not None:
                values[m[1]] = following
                following += 1
    return values


@pytest.mark.real_cudnn
def test_the_probes_enum_values_are_nvidias():
    cache = os.environ.get("CUDNN_SETUP_WHEEL_CACHE")
    wheel = next(Path(cache).glob("nvidia_cudnn_cu12-9.*.whl"), None) if cache else None
    if wheel is None:
        pytest.skip("set CUDNN_SETUP_WHEEL_CACHE to a directory with an nvidia-cudnn-cu12 9.x wheel")
    with zipfile.ZipFile(wheel) as z:
        text = "".join(z.read(n).decode() for n in z.namelist()
                       if n.startswith("nvidia/cudnn/include/cudnn_") and n.endswith(".h"))
    enums = _header_enums(text)
    expected = {
        "CUDNN_TYPE_HANDLE": G.T_HANDLE, "CUDNN_TYPE_INT64": G.T_INT64, "CUDNN_TYPE_FLOAT": G.T_FLOAT,
        "CUDNN_TYPE_BACKEND_DESCRIPTOR": G.T_DESCRIPTOR, "CUDNN_TYPE_BEHAVIOR_NOTE": G.T_BEHAVIOR_NOTE,
        "CUDNN_TYPE_POINTWISE_MODE": G.T_POINTWISE_MODE, "CUDNN_TYPE_HEUR_MODE": G.T_HEUR_MODE,
        "CUDNN_BACKEND_TENSOR_DESCRIPTOR": G.D_TENSOR, "CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR": G.D_OPGRAPH,
        "CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR": G.D_ENGINEHEUR, "CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR": G.D_PLAN,
        "CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR": G.D_VARIANT_PACK,
        "CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR": G.D_OP_CONV_BWD_DATA,
        "CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR": G.D_OP_POINTWISE,
        "CUDNN_ATTR_OPERATIONGRAPH_HANDLE": G.A_GRAPH_HANDLE, "CUDNN_ATTR_EXECUTION_PLAN_HANDLE": G.A_PLAN_HANDLE,
        "CUDNN_ATTR_ENGINEHEUR_RESULTS": G.A_HEUR_RESULTS, "CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE": G.A_ENGINE_BEHAVIOR,
        "CUDNN_ATTR_TENSOR_IS_VIRTUAL": G.A_T_VIRTUAL, "CUDNN_ATTR_VARIANT_PACK_WORKSPACE": G.A_VP_WORKSPACE,
        "CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY": G.A_OP_BWD_FILTER[5],
        "CUDNN_ATTR_OPERATION_POINTWISE_YDESC": G.A_OP_PW_Y, "CUDNN_HEUR_MODE_A": G.HEUR_MODE_A,
        "CUDNN_POINTWISE_RELU_FWD": G.PW_RELU_FWD, "CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION":
        G.NOTE_RUNTIME_COMPILATION, "CUDNN_DATA_HALF": G.HALF, "CUDNN_RNN_TANH": G.RNN_TANH,
        "CUDNN_BATCHNORM_SPATIAL": G.BATCHNORM_SPATIAL, "CUDNN_FMA_MATH": G.FMA_MATH,
    }
    assert {k: enums.get(k) for k in expected} == expected


def test_a_jit_release_runs_only_the_steps_its_libraries_allow(tmp_path):
    lib = layouts.built_set(tmp_path / "jit", tmp_path / "w", subs=("graph", "engines_runtime_compiled"))
    script = f"""
        import json, sys
        assert sys.argv[1:3] == ["--have", "libcudnn,libcudnn_graph,libcudnn_engines_runtime_compiled"], sys.argv
        steps = [{{"name": n, "status": "skip", "reason": "this release has no libcudnn_ops"}}
                 for n in {list(STEPS)[:-1]!r}]
        steps.append({{"name": "fused_runtime_compiled", "status": "pass", "max_rel_error": 1e-4,
                      "sublibraries": ["libcudnn_graph", "libcudnn_engines_runtime_compiled"]}})
        ANSWER = {{"status": "pass", "gpu": "G", "compute_capability": "9.0", "steps": steps}}
    """
    check = check_gpu_with(locate.locate(lib), {}, probe=answering(tmp_path, script))
    assert check.status == "pass", check.detail
    assert "not part of this release" in check.detail


def test_a_full_release_may_not_have_steps_left_out(tmp_path):
    answer = {"status": "pass", "gpu": "G", "compute_capability": "9.0",
              "steps": [STEP, dict(STEP, name="rnn_fwd", status="skip", reason="no")]}
    check = check_gpu_with(inst(tmp_path), {}, probe=answering(tmp_path, answer_of(answer)))
    assert check.status == "fail" and "the probe left it out" in check.detail


def test_the_probe_leaves_out_steps_a_release_lacks_the_libraries_for():
    class NoGpu:
        version = 91900

    out = {}
    G.check(NoGpu(), out, only={"rnn_fwd", "legacy_conv_fwd"}, have={"libcudnn", "libcudnn_graph"})
    assert [(e["name"], e["status"]) for e in out["steps"]] == [("rnn_fwd", "skip"),
                                                                ("legacy_conv_fwd", "skip")]
    assert out["steps"][0]["reason"] == "this release has no libcudnn_adv"


def test_without_a_driver_the_probe_is_not_started_and_says_what_it_would(tmp_path):
    """No NVIDIA kernel module and no libcuda.so.1 for the probe's loader: the probe could
    only skip, so it is not started (the driver probe's rule), and the check says what the
    probe says here."""
    import shutil

    from cudnn_setup.checks.deps import loader_environment
    from cudnn_setup.probing.driver import PROC_DRIVER

    if PROC_DRIVER.exists():
        pytest.skip("this machine has a driver")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LD_")}
    installed = inst(tmp_path)
    ran = check_gpu_with(installed, env)  # the real probe
    if ran.status != "skip" or "libcuda.so.1 cannot be loaded" not in ran.detail:
        pytest.skip("this machine has a libcuda.so.1")
    never = answering(tmp_path, "raise SystemExit('the probe was started')")
    got = check_gpu_with(installed, env, probe=never, loader=loader_environment(env))
    assert (got.status, got.detail, got.data) == (ran.status, ran.detail, ran.data)
    # a libcuda.so.1 in the library's own directory is the probe's to try
    shutil.copy(installed.lib_dir / "libcudnn.so.9", installed.lib_dir / "libcuda.so.1")
    tried = check_gpu_with(installed, env, probe=never, loader=loader_environment(env))
    assert tried.status == "fail" and "the GPU probe died" in tried.detail, tried.detail


class _Cudnn:
    """What PlanCache reads of a loaded cuDNN: its version and where its file is."""

    def __init__(self, lib_dir: Path, version: int = 91900):
        self.version, self.path = version, str(lib_dir / "libcudnn.so.9")


def _release(lib_dir: Path) -> Path:
    lib_dir.mkdir(parents=True, exist_ok=True)
    for name in ("libcudnn.so.9.19.0", "libcudnn_graph.so.9.19.0",
                 "libcudnn_engines_runtime_compiled.so.9.19.0"):
        (lib_dir / name).write_bytes(b"\x7fELF" + name.encode())
    (lib_dir / "libcudnn.so.9").symlink_to("libcudnn.so.9.19.0")
    return lib_dir


FACTS = {"gpu": "NVIDIA H200", "compute_capability": "9.0", "driver_version": 13000}


def test_a_kept_plan_is_read_back_only_by_the_same_cudnn_gpu_and_driver(tmp_path):
    lib = _release(tmp_path / "lib")
    cache = G.PlanCache(str(tmp_path / "plans"), _Cudnn(lib), FACTS)
    assert cache.load() is None
    assert cache.save("{plan}", {"global_index": 7, "runtime_compiled": True})
    assert G.PlanCache(str(tmp_path / "plans"), _Cudnn(lib), FACTS).load() == \
        ("{plan}", {"global_index": 7, "runtime_compiled": True})
    # the user's own: the directory 0700, the file 0600, whatever the umask
    assert (tmp_path / "plans").stat().st_mode & 0o777 == 0o700
    assert Path(cache.path).stat().st_mode & 0o777 == 0o600
    # another driver, another GPU, another cuDNN build of the same version: not that plan
    for facts in (dict(FACTS, driver_version=12080), dict(FACTS, gpu="NVIDIA H100")):
        assert G.PlanCache(str(tmp_path / "plans"), _Cudnn(lib), facts).load() is None
    engines = lib / "libcudnn_engines_runtime_compiled.so.9.19.0"
    engines.write_bytes(engines.read_bytes() + b"rebuilt")
    assert G.PlanCache(str(tmp_path / "plans"), _Cudnn(lib), FACTS).load() is None


def test_a_kept_plan_that_is_not_the_users_regular_bounded_file_is_not_read(tmp_path):
    lib = _release(tmp_path / "lib")
    cache = G.PlanCache(str(tmp_path / "plans"), _Cudnn(lib), FACTS)
    cache.save("{plan}", {"runtime_compiled": True})
    path = Path(cache.path)
    for text in ("not json", '{"format": 1, "plan": 5, "engine": {}}', "[1]",
                 '{"format": 2, "plan": "x", "engine": {}}'):
        path.write_text(text)
        assert cache.load() is None, text
    path.unlink()
    os.mkfifo(path)  # a FIFO is not opened for reading (it would block)
    assert cache.load() is None
    path.unlink()
    (tmp_path / "elsewhere.json").write_text('{"format": 1, "plan": "x", "engine": {}}')
    path.symlink_to(tmp_path / "elsewhere.json")
    assert cache.load() is None
    path.unlink()
    with open(path, "wb") as f:
        f.truncate(G.PlanCache.LIMIT + 1)
    assert cache.load() is None
    path.write_text('{"format": 1, "plan": "x", "engine": {}}')
    os.chown(path, 65534, 65534)
    assert cache.load() is None


def test_a_kept_plan_that_fails_is_set_aside_and_the_engine_compiled_and_kept_again(
        tmp_path, monkeypatch):
    lib = _release(tmp_path / "lib")
    cache = G.PlanCache(str(tmp_path / "plans"), _Cudnn(lib), FACTS)
    cache.save("{stale}", {"runtime_compiled": True})
    calls = []

    def graph(gpu, out, kept=None, keep=None):
        calls.append(kept)
        if kept is not None:
            raise G.ProbeError("the fused conv+bias+ReLU differs from numpy's by 0.5", "compare")
        out.update(engine={"runtime_compiled": True}, max_rel_error=0.001)
        keep("{fresh}", out["engine"])
        out["plan"] = "compiled; kept for the next run"

    monkeypatch.setattr(G, "fused_graph", graph)
    out = {}
    G.fused(None, out, cache)
    assert calls == [("{stale}", {"runtime_compiled": True}), None]
    assert "differs from numpy" in out["kept_plan_set_aside"]
    assert out["plan"] == "compiled; kept for the next run"
    assert cache.load() == ("{fresh}", {"runtime_compiled": True})
    # the next run takes the fresh plan and compiles nothing
    calls.clear()
    monkeypatch.setattr(G, "fused_graph", lambda gpu, out, kept=None, keep=None:
                        calls.append(kept))
    G.fused(None, {}, cache)
    assert calls == [("{fresh}", {"runtime_compiled": True})]


def test_the_check_hands_the_probe_the_users_plan_cache_and_keeps_its_timings(tmp_path):
    answer = {"status": "pass", "gpu": "NVIDIA H200", "compute_capability": "9.0",
              "timings": {"device": 0.11, "load": 0.1, "bogus": 3},
              "steps": [{"name": "legacy_conv_fwd", "status": "pass", "sublibraries": ["libcudnn_cnn"],
                         "seconds": 0.008, "timings": {"plan": "x"}},
                        {"name": "fused_runtime_compiled", "status": "pass", "seconds": 0.05,
                         "sublibraries": ["libcudnn_graph", "libcudnn_engines_runtime_compiled"],
                         "plan": "kept from an earlier run",
                         "timings": {"graph": 0.002, "plan": 0.01, "execute": 0.03}}]}
    seen = tmp_path / "argv.json"
    probe = answering(tmp_path, f"import json\njson.dump(sys.argv[1:], open({str(seen)!r}, 'w'))\n"
                      + answer_of(answer))
    check = check_gpu_with(inst(tmp_path), {}, probe=probe, cache_dir=tmp_path / "cache")
    argv = json.loads(seen.read_text())
    assert argv[argv.index("--plan-cache") + 1] == str(tmp_path / "cache" / "gpu-plans")
    assert check.status == "pass"
    assert check.data["timings"] == {"device": 0.11, "load": 0.1}
    fused = check.data["steps"][1]
    assert (fused["seconds"], fused["plan"]) == (0.05, "kept from an earlier run")
    assert fused["timings"] == {"graph": 0.002, "plan": 0.01, "execute": 0.03}
    assert check.data["steps"][0]["timings"] == {}


def test_the_json_is_written_from_the_typed_answer_not_the_childs_object(tmp_path):
    """Keys the child adds, and fields of another type, never reach the gpu check's data: it
    holds the documented keys, each of the type it claims."""
    step = dict(STEP, extra="from the child", engine={"global_index": "7", "tensor_core": True,
                                                     "planted": [1] * 100})
    answer = {"status": "pass", "gpu": "NVIDIA H200", "compute_capability": "9.0",
              "gpu_count": True, "cudnn_version_number": "91900", "planted": "x" * 100000,
              "steps": [step]}
    check = check_gpu_with(inst(tmp_path), {}, probe=answering(tmp_path, answer_of(answer)))
    assert check.status == "pass", check.detail
    assert set(check.data) == {"status", "reason", "gpu", "compute_capability", "gpu_count",
                               "driver_version", "cudnn_version_number", "timings", "steps",
                               "kept_plan_set_aside", "supported"}
    assert (check.data["gpu_count"], check.data["cudnn_version_number"]) == (None, None)
    got = check.data["steps"][0]
    assert "extra" not in got
    assert got["engine"] == {"global_index": None, "runtime_compiled": None, "tensor_core": True,
                             "down_converts": None}
    assert check.answer.compute_capability == "9.0"  # what the theano check reads


def test_the_probe_run_without_site_is_handed_numpy_and_says_so_when_it_cannot_be(tmp_path):
    """The probe runs as stdlib_probe runs it (-I -S: no site), and every step is checked
    against numpy: the check hands it numpy's directory. Without it, the probe says numpy
    cannot be imported and skips; it once blamed libcudnn_graph for every step instead, on
    every machine with a GPU. The driver is the stand-in (the GPU is what is not here)."""
    from cudnn_setup.probing.probe import numpy_path, stdlib_probe
    from fixtures import libcuda

    driver = libcuda.build(tmp_path / "driver")
    lib = layouts.built_set(tmp_path / "cudnn", tmp_path / "w")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("LD_")},
           "LD_LIBRARY_PATH": str(driver)}
    bare = run_probe(stdlib_probe("gpu_steps") + [str(lib / "libcudnn.so.9")], 60, env)
    assert bare.data is not None, bare.stderr
    assert bare.data["status"] == "skip", bare.data
    assert "numpy cannot be imported" in bare.data["reason"]
    assert numpy_path()  # this interpreter has numpy: the tool's runs hand it over
    told = run_probe(stdlib_probe("gpu_steps") + numpy_path() + [str(lib / "libcudnn.so.9")], 60,
                     env)
    assert told.data is not None, told.stderr
    assert "numpy" not in json.dumps(told.data), told.data  # past the references' import
    check = check_gpu_with(inst(tmp_path), env)
    assert "numpy" not in check.detail, check.detail
