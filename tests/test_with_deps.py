"""`install --with-deps` and the wheels it reads: only libraries the root lacks are added (a
cuBLAS wheel's libcudart.so.12 never replaces the toolkit's runtime), dependency builds for the
root's CUDA minor are taken where the index has them, NVRTC is placed though the cuDNN wheel does
not declare it, and every hostile wheel (not a zip, bad CRC, names that are not UTF-8, markers
packaging cannot compare) is its documented refusal, never exit 70. Real wheels with gcc-built
libraries, a real index on 127.0.0.1."""
import zipfile
from pathlib import Path

import pytest

from conftest import run_json, tree_state
from cudnn_setup.probing.load_answer import LoadAnswer
from cudnn_setup.errors import ARCHIVE_REJECTED
from fixtures.generate import SUB_C
from fixtures.wheels import IndexFile, build_wheel, project_json, sha256, wheel_name
from httpserver import IndexServer

JSON = "application/vnd.pypi.simple.v1+json"
CUDNN = "9.1.7.99"
NO_FLAGS = ["--no-theanorc", "--no-frameworks", "--no-verify"]


def dep_wheel(out: Path, project: str, version: str, libs: dict[str, str], compiler,
              package: str) -> Path:
    """A dependency wheel (nvidia/<package>/lib/<soname> for each soname, gcc-built ELF)."""
    dist = project.replace("-", "_")
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{dist}-{version}-py3-none-manylinux_2_27_x86_64.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for soname, symbol in libs.items():
            z.writestr(f"nvidia/{package}/lib/{soname}",
                       compiler.build(SUB_C, {"FIX_SYMBOL": symbol}, soname))
        z.writestr(f"{dist}-{version}.dist-info/METADATA",
                   f"Metadata-Version: 2.1\nName: {project}\nVersion: {version}\n")
    return path


def cublas(out, compiler, version="12.4.5.8", runtime=False):
    libs = {"libcublas.so.12": "cublasCreate", "libcublasLt.so.12": "cublasLtCreate"}
    if runtime:  # what some cuBLAS wheels carry besides
        libs["libcudart.so.12"] = "cudartFromTheWheel"
    return dep_wheel(out / version, "nvidia-cublas-cu12", version, libs, compiler, "cublas")


def nvrtc(out, compiler, version="12.4.127"):
    return dep_wheel(out / version, "nvidia-cuda-nvrtc-cu12", version,
                     {"libnvrtc.so.12": "nvrtcCreateProgram"}, compiler, "cuda_nvrtc")


def serve(server: IndexServer, cudnn: Path, deps: dict[str, list[Path]]) -> str:
    projects = {"nvidia-cudnn-cu12": [cudnn], **deps}
    for project, wheels in projects.items():
        server.routes[f"/simple/{project}/"] = (JSON, project_json(project, [
            IndexFile(w.name, f"{server.base}/files/{w.name}", sha256(w)) for w in wheels]))
        for w in wheels:
            server.routes[f"/files/{w.name}"] = ("application/octet-stream", w.read_bytes())
    return server.base + "/simple/"


def install(root, home, index, *extra):
    return run_json(["install", CUDNN, "--from", "pypi", "--index-url", index, "--cuda-root",
                     root, "--with-deps", *NO_FLAGS, *extra], home)


@pytest.fixture(scope="module")
def cudnn(tmp_path_factory, compiler):
    return build_wheel(tmp_path_factory.mktemp("cudnn"), CUDNN, "12", compiler)


# --- only what the root lacks ---------------------------------------------------------------

def test_a_cublas_wheel_that_ships_the_runtime_never_replaces_the_roots(cudnn, cuda_root, home,
                                                                        tmp_path, compiler):
    root = cuda_root("12.4", "lib")
    runtime = {p.name: p.read_bytes() for p in (root / "lib").glob("libcudart.so*")
               if not p.is_symlink()}
    assert runtime
    with IndexServer() as server:
        index = serve(server, cudnn, {"nvidia-cublas-cu12": [cublas(tmp_path, compiler,
                                                                    runtime=True)]})
        done, out = install(root, home, index)
    assert done.returncode == 0, done.stderr
    assert {p.name: p.read_bytes() for p in (root / "lib").glob("libcudart.so*")
            if not p.is_symlink()} == runtime
    assert (root / "lib" / "libcublasLt.so.12").is_file()
    assert any("libcudart.so.12 not placed" in n for n in out["install"]["notes"]), \
        out["install"]["notes"]


# --- builds that fit the root's CUDA minor ------------------------------------------------------

def test_the_dependency_build_for_the_roots_cuda_minor_is_taken(cudnn, cuda_root, home, tmp_path,
                                                                compiler):
    root = cuda_root("12.4", "lib")
    builds = [cublas(tmp_path, compiler, "12.4.5.8"), cublas(tmp_path, compiler, "12.9.1.4")]
    with IndexServer() as server:
        index = serve(server, cudnn, {"nvidia-cublas-cu12": builds})
        done, out = install(root, home, index)
    assert done.returncode == 0, done.stderr
    assert [d["wheel"] for d in out["provenance"]["with_deps"]] == [builds[0].name]
    assert "a build for the root's CUDA 12.4" in done.stderr


def test_without_a_build_for_the_roots_minor_the_newest_is_taken_and_said(cudnn, cuda_root, home,
                                                                         tmp_path, compiler):
    root = cuda_root("12.4", "lib")
    newer = cublas(tmp_path, compiler, "12.9.1.4")
    with IndexServer() as server:
        done, out = install(root, home, serve(server, cudnn, {"nvidia-cublas-cu12": [newer]}))
    assert done.returncode == 0, done.stderr
    assert [d["wheel"] for d in out["provenance"]["with_deps"]] == [newer.name]
    assert "no nvidia-cublas-cu12 build for the root's CUDA 12.4" in done.stderr


# --- NVRTC, which the cuDNN wheel does not declare ---------------------------------------------

def test_nvrtc_is_placed_though_the_wheel_does_not_declare_it(cudnn, cuda_root, home, tmp_path,
                                                              compiler):
    root = cuda_root("12.4", "lib")
    before = tree_state(root)
    compiler_wheel = nvrtc(tmp_path, compiler)
    with IndexServer() as server:
        index = serve(server, cudnn, {"nvidia-cublas-cu12": [cublas(tmp_path, compiler)],
                                      "nvidia-cuda-nvrtc-cu12": [compiler_wheel]})
        done, out = install(root, home, index)
    assert done.returncode == 0, done.stderr
    assert compiler_wheel.name in [d["wheel"] for d in out["provenance"]["with_deps"]]
    assert (root / "lib" / "libnvrtc.so.12").is_file()
    assert "does not declare nvidia-cuda-nvrtc-cu12" in done.stderr
    done, _ = run_json(["uninstall", "--cuda-root", root], home)
    assert done.returncode == 0 and tree_state(root) == before


# --- hostile wheels: judged, refused, never exit 70 -----------------------------------------------

def _bad_utf8_names(path: Path) -> Path:
    """`path` with a member whose name, under the UTF-8 flag, is not UTF-8."""
    with zipfile.ZipFile(path, "a") as z:
        z.writestr("nvidia/cudnn/Xé.txt", b"x")  # non-ASCII: written with the UTF-8 flag
    data = path.read_bytes().replace("Xé".encode(), b"X\xff\xfe")  # same length, not UTF-8
    path.write_bytes(data)
    return path


def _bad_crc(path: Path) -> Path:
    payload = b"stored payload " * 8
    with zipfile.ZipFile(path, "a") as z:
        z.writestr(zipfile.ZipInfo("nvidia/cublas/lib/libcublasXt.so.12"), payload)
    data = path.read_bytes()
    at = data.index(payload)
    path.write_bytes(data[:at] + b"S" + data[at + 1:])
    return path


@pytest.mark.parametrize("how", ["not-a-zip", "bad-utf8-names", "marker"])
def test_a_hostile_cudnn_wheel_with_the_right_sha256_is_refused(how, cuda_root, home, tmp_path,
                                                                compiler):
    root = cuda_root("12.4", "lib")
    before = tree_state(root)
    if how == "marker":
        wheel = build_wheel(tmp_path, CUDNN, "12", compiler,
                            requires=("nvidia-cublas-cu{cuda}; python_full_version ~= '3'",))
    elif how == "bad-utf8-names":
        wheel = _bad_utf8_names(build_wheel(tmp_path, CUDNN, "12", compiler))
    else:
        wheel = tmp_path / wheel_name(CUDNN)
        wheel.write_bytes(b"not a zip at all " * 100)
    with IndexServer() as server:
        done, out = install(root, home, serve(server, wheel, {}))
    assert done.returncode == ARCHIVE_REJECTED, done.stderr
    assert "Traceback" not in done.stderr and tree_state(root) == before


@pytest.mark.parametrize("how", ["not-a-zip", "bad-crc"])
def test_a_hostile_cublas_wheel_is_refused(how, cudnn, cuda_root, home, tmp_path, compiler):
    root = cuda_root("12.4", "lib")
    before = tree_state(root)
    dep = cublas(tmp_path, compiler)
    if how == "bad-crc":
        _bad_crc(dep)
    else:
        dep.write_bytes(b"PK\x03\x04 not really a zip " * 50)
    with IndexServer() as server:
        done, out = install(root, home, serve(server, cudnn, {"nvidia-cublas-cu12": [dep]}))
    assert done.returncode == ARCHIVE_REJECTED, done.stderr
    assert "Traceback" not in done.stderr and tree_state(root) == before


def test_mirror_of_a_wheel_whose_names_are_not_utf8_is_refused(tmp_path, home, compiler):
    wheel = _bad_utf8_names(build_wheel(tmp_path / "w", CUDNN, "12", compiler))
    out = tmp_path / "fleet"
    with IndexServer() as server:
        index = serve(server, wheel, {})
        done, res = run_json(["mirror", out, "9.1", "--cuda", "12", "--from", "pypi",
                              "--index-url", index], home)
    assert done.returncode == ARCHIVE_REJECTED, done.stderr
    assert "utf-8" in done.stderr.lower()
    assert not list(out.rglob("*.tar.gz"))


# --- the deps check names --with-deps where it helps ---------------------------------------------

def test_deps_fixes_name_with_deps_for_a_managed_root(cudnn, cuda_root, home, tmp_path):
    import dataclasses

    from cudnn_setup.installation import locate
    from cudnn_setup.checks.deps import check_deps_with
    from cudnn_setup.installation.model import find_installation
    from cudnn_setup.facts.ldresolve.environment import Environment
    from cudnn_setup.facts.ldresolve.ldconfig import read_cache
    from cudnn_setup.facts.ldresolve.loader_facts import probe_loader
    from cudnn_setup.facts.cuda import find_cuda_root
    from fixtures import layouts

    root = cuda_root("12.4", "lib")
    with IndexServer() as server:
        done, _ = run_json(["install", CUDNN, "--from", "pypi", "--index-url",
                            serve(server, cudnn, {}), "--cuda-root", root, *NO_FLAGS], home)
    assert done.returncode == 0, done.stderr
    managed = find_installation(find_cuda_root({}, root))
    assert managed.manifest is not None
    # a cuDNN whose adv library opens cuBLASLt at run time, in that managed root's place
    lib = layouts.built_set(tmp_path / "cudnn", tmp_path / "w",
                            options={"adv": {"runtime": "libcublasLt.so.12"}})
    inst = dataclasses.replace(locate.locate(lib), manifest=managed.manifest, root=managed.root)
    loader = Environment(ld_library_path=None, cache=read_cache(), facts=probe_loader())
    check = check_deps_with(inst, {"PATH": "/nonexistent"}, loader=loader, driver_present=False,
                       distro_id=("ubuntu", "debian"), search_dirs=[],
                       load_data=LoadAnswer(version=90107, cudart_version=12040))
    (blas,) = [d for d in check.data["dependencies"] if d["name"] == "libcublasLt.so.12"]
    assert blas["fixes"][0]["how"] == "with-deps"
    assert blas["fixes"][0]["text"] == (f"cudnn-setup install 9.1.7 --from pypi --with-deps "
                                        f"--cuda-root {root}")
    assert "--with-deps" in check.detail


def test_a_dependency_library_for_another_machine_is_refused(cudnn, cuda_root, home, tmp_path,
                                                              compiler):
    """An aarch64 libcublas.so.12 in the cuBLAS wheel was placed into an x86_64 root (exit 0),
    to fail only when a program loaded it: judged now like cuDNN's own libraries."""
    from fixtures.generate import EM_AARCH64, patch_machine
    good = cublas(tmp_path, compiler)
    foreign = tmp_path / "foreign" / good.name
    foreign.parent.mkdir()
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(foreign, "w", zipfile.ZIP_DEFLATED) as z:
        for info in src.infolist():
            data = src.read(info)
            z.writestr(info, patch_machine(data, EM_AARCH64)
                       if info.filename.endswith("libcublas.so.12") else data)
    root = cuda_root("12.4", "lib")
    before = tree_state(root)
    with IndexServer() as server:
        index = serve(server, cudnn, {"nvidia-cublas-cu12": [foreign]})
        done, out = install(root, home, index)
    assert done.returncode == ARCHIVE_REJECTED, out["error"]
    assert "AARCH64" in out["error"]["message"], out["error"]
    assert tree_state(root) == before
