"""clients: each client on the machine judged by the sub-libraries its calls need, on gcc-built
cuDNN 9 sets of both flavours."""
from cudnn_setup.installation import locate
from cudnn_setup.checks.clients_check import check_clients_with
from cudnn_setup.checks.framework_entry import FrameworkEntry
from cudnn_setup.facts import clients
from fixtures import layouts


def torch():
    return FrameworkEntry(name="torch", version="2.11.0", rule="same major", status="pass",
                          reason="loads this cuDNN", cudnn_built_for="9.1.0")


def test_the_jit_flavour_fails_where_pytorch_loads_it(tmp_path):
    from cudnn_setup.checks.framework_entry import LoadedCopy

    lib = layouts.loading_set9(tmp_path / "jit", tmp_path / "w", subs=layouts.JIT9)
    here = torch()
    here.cudnn_loaded = LoadedCopy(str(lib / "libcudnn.so.9.1.0"), str(lib), "9.1.0",
                                   "ld_library_path", "")
    check = check_clients_with(locate.locate(lib), [here], theano=None)
    assert check.status == "fail", check.detail
    assert "torch needs libcudnn_heuristic, libcudnn_engines_precompiled, libcudnn_ops" \
        in check.detail and "unable to find an engine" in check.detail
    assert check.data["clients"] == [{"client": "torch", "present": True, "loads_this": True,
                                      "works": False, "why": check.detail}]
    # which cuDNN it loads not seen (no GPU here): it is present, and would break with this one
    unseen = check_clients_with(locate.locate(lib), [torch()], theano=None)
    assert unseen.status == "fail" and unseen.detail.endswith(
        "(which cuDNN it loads now was not seen here)")


def test_a_framework_that_loads_its_own_cudnn_would_break_pointed_at_this_one(tmp_path):
    """PyTorch with its wheel's cuDNN works today; the programs this root's cuDNN is installed
    for point it here (LD_LIBRARY_PATH, LD_PRELOAD), and then its fp32 convolution, batch
    normalisation and LSTM fail: on an H200, with the JIT flavour alone, verify passed while
    PyTorch failed so."""
    from cudnn_setup.checks.framework_entry import LoadedCopy

    lib = layouts.loading_set9(tmp_path / "jit", tmp_path / "w", subs=layouts.JIT9)
    wheel = "/opt/venv/site-packages/nvidia/cudnn/lib"
    own = torch()
    own.cudnn_loaded = LoadedCopy(f"{wheel}/libcudnn.so.9", wheel, "9.19.0", "runpath", "")
    check = check_clients_with(locate.locate(lib), [own], theano=None)
    assert check.status == "fail", check.detail
    assert f"it loads the cuDNN in {wheel} now; pointed at this root" in check.detail
    assert check.data["clients"][0]["loads_this"] is False
    # the full flavour serves it wherever it loads from
    full = layouts.loading_set9(tmp_path / "full", tmp_path / "w2")
    assert check_clients_with(locate.locate(full), [own], theano=None).status == "pass"


def test_the_jit_flavour_without_clients_says_what_it_ships_for_whom(tmp_path):
    lib = layouts.loading_set9(tmp_path / "jit", tmp_path / "w", subs=layouts.JIT9)
    check = check_clients_with(locate.locate(lib), [], theano=None)
    assert check.status == "pass", check.detail
    assert check.detail.startswith("no client of cuDNN found on this machine; it ships what these call: "
                                   "PyTorch's fp16 convolution")
    assert "; not: ONNX Runtime and code written for cuDNN v7" in check.detail
    assert "Theano" not in check.detail  # no cuDNN 9 serves Theano 1.0.5
    served = {k["kind"]: k["served"] for k in check.data["kinds"]}
    assert served == {clients.LEGACY: False, clients.GRAPH: False, clients.JIT_ONLY: True}


def test_theano_uses_no_cudnn_9_which_is_a_warn_where_it_is_installed(tmp_path):
    """Theano 1.0.5 calls functions cuDNN 8 removed: no cuDNN 9 serves it, whatever its
    flavour. Under the config the tool writes it runs without cuDNN: a warn with the reason,
    never "theano would work with this cuDNN"."""
    for flavour, subs in (("jit", layouts.JIT9), ("full", None)):
        lib = layouts.loading_set9(tmp_path / flavour, tmp_path / f"w-{flavour}",
                                   **({"subs": subs} if subs else {}))
        absent = check_clients_with(locate.locate(lib), [], theano=False)
        assert absent.status == "pass", absent.detail
        assert "theano is not installed, and would not work: theano would not use this " \
            "cuDNN: Theano 1.0.5 supports cuDNN v5 to v7; this is cuDNN 9.1.0" in absent.detail
        there = check_clients_with(locate.locate(lib), [], theano=True)
        assert there.status == "warn", there.detail
        assert there.detail.startswith("theano would not use this cuDNN: Theano 1.0.5 "
                                       "supports cuDNN v5 to v7"), there.detail
        assert "runs without cuDNN" in there.detail and "would work" not in there.detail
        assert "Theano" not in there.detail.split("it ships what these call: ")[1]
        assert there.data["clients"] == [{"client": "theano", "present": True,
                                          "loads_this": True, "works": False,
                                          "why": there.detail.split("; it ships")[0]}]


def test_pytorch_needs_the_runtime_compiled_engines_too(tmp_path):
    lib = layouts.loading_set9(tmp_path / "full", tmp_path / "w")
    for name in ("libcudnn_engines_runtime_compiled.so.9", "libcudnn_engines_runtime_compiled.so.9.1.0"):
        (lib / name).unlink()
    check = check_clients_with(locate.locate(lib), [torch()], theano=None)
    assert check.status == "fail" and check.detail.startswith(
        "torch needs libcudnn_engines_runtime_compiled, which this cuDNN lacks: NVRTC")


def test_the_full_flavour_serves_pytorch_not_theano_1_0_5(tmp_path):
    lib = layouts.loading_set9(tmp_path / "full", tmp_path / "w")
    check = check_clients_with(locate.locate(lib), [torch()], theano=None)
    assert check.status == "pass", check.detail
    assert check.detail.startswith("torch would work with this cuDNN")
    assert "; not:" not in check.detail
    with_theano = check_clients_with(locate.locate(lib), [torch()], theano=True)
    assert with_theano.status == "warn", with_theano.detail
    assert "torch would work with this cuDNN" in with_theano.detail
    assert "theano would work" not in with_theano.detail


def test_a_full_set_without_libcudnn_cnn_breaks_onnxruntime_not_pytorch(tmp_path):
    lib = layouts.loading_set9(tmp_path / "full", tmp_path / "w")
    (lib / "libcudnn_cnn.so.9").unlink()
    (lib / "libcudnn_cnn.so.9.1.0").unlink()
    ort = FrameworkEntry(name="onnxruntime", version="1.22.0", rule="same major",
                         status="pass", reason="loads this cuDNN", cudnn_built_for="9.1.0")
    check = check_clients_with(locate.locate(lib), [torch(), ort], theano=None)
    assert check.status == "fail" and check.detail.startswith(
        "onnxruntime needs libcudnn_cnn"), check.detail
    # PyTorch never opens libcudnn_cnn (LD_DEBUG on the H200): it is not named
    assert check.data["clients"][0] == {"client": "torch", "present": True, "loads_this": None,
                                        "works": True, "why": (
        "has what torch calls (libcudnn, libcudnn_graph, libcudnn_heuristic, "
        "libcudnn_engines_precompiled, libcudnn_ops, libcudnn_adv, "
        "libcudnn_engines_runtime_compiled)")}


def test_installing_the_jit_flavour_where_torch_is_says_so_before_writing(tmp_path, home, site):
    from conftest import run_json, tree_state
    from fixtures.generate import make_cuda_root
    from test_composition import JIT_NAME, archive_of, headers, jit_set
    from test_frameworks_cli import env_with

    lib = jit_set(tmp_path)
    archive = archive_of(lib, headers(lib.parent / "include"), tmp_path / "a", JIT_NAME)
    root = make_cuda_root(tmp_path / "cuda", "12.4")
    before = tree_state(root)
    args = ["install", archive, "--cuda-root", root, "--no-theanorc", "--no-verify",
            "--python", site["python"]]
    done, out = run_json([*args, "--dry-run"], home, env_with(site))
    assert done.returncode == 0, out["error"]
    assert tree_state(root) == before
    said = [n for n in out["install"]["notes"] if "does not serve all of torch" in n]
    assert said and "torch needs libcudnn_heuristic" in said[0], out["install"]["notes"]
    assert "the JIT flavour does not serve all of torch here" in done.stderr
    # --no-frameworks: nothing asked, nothing said
    done, out = run_json([*args, "--dry-run", "--no-frameworks"], home, env_with(site))
    assert not [n for n in out["install"]["notes"] if "JIT flavour" in n]


from test_frameworks_cli import site  # noqa: E402,F401  (the torch stand-in's fixture)


def test_a_framework_that_never_opens_cudnn_is_no_client(tmp_path):
    """A CPU build of ONNX Runtime, or CuPy 14 (no cuDNN module): built for no cuDNN and
    loading none, nothing this cuDNN lacks can break it."""
    lib = layouts.loading_set9(tmp_path / "jit", tmp_path / "w", subs=layouts.JIT9)
    cpu = FrameworkEntry(name="onnxruntime", version="1.30.0", rule="same major", status="skip",
                         reason="cuDNN not loaded: a CPU build of ONNX Runtime, no cuDNN")
    check = check_clients_with(locate.locate(lib), [cpu], theano=None)
    assert check.status == "pass", check.detail
    assert check.detail.startswith("no client of cuDNN found on this machine")


def test_a_changed_library_names_the_clients_that_call_it(archives, cuda_root, home):
    """Bits flipped in a kernel library's bytes: verify fails the files check where PyTorch may
    not happen to run those kernels; the finding says whose calls go through that library."""
    from conftest import run_json
    from fixtures.generate import GENERATION_SAMPLES

    root = cuda_root(version="12.4", layout="lib")
    done, _ = run_json(["install", archives[GENERATION_SAMPLES["9.x"]], "--cuda-root", root,
                        "--no-verify", "--no-theanorc"], home)
    assert done.returncode == 0, done.stderr
    lib = next((root / "lib").glob("libcudnn_engines_precompiled.so.9.*"))
    data = bytearray(lib.read_bytes())
    data[len(data) // 2] ^= 0xFF
    lib.write_bytes(bytes(data))
    done, out = run_json(["verify", "--cuda-root", root, "--no-theano", "--no-frameworks"], home)
    files = next(c for c in out["checks"] if c["name"] == "files")
    assert files["status"] == "fail", files
    assert f"lib/{lib.name} (called by PyTorch's fp32 convolution" in files["detail"], files
