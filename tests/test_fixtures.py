"""The sample archives are real, deterministic, and the committed README sample is current."""
import os
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from fixtures import buildcache
from fixtures.generate import GENERATION_SAMPLES, SAMPLE_NAME, SAMPLES, SPECS, build, make_cuda_root


def test_build_is_deterministic(tmp_path, archives, compiler):
    with buildcache.bypassed():  # a fresh compiler and gcc run for each: nothing cached
        again = build(tmp_path, cc=None)
    for path in again:
        assert path.read_bytes() == archives[path.name].read_bytes(), path.name


def test_committed_sample_is_what_the_generator_makes(archives):
    committed = SAMPLES / SAMPLE_NAME
    assert committed.read_bytes() == archives[SAMPLE_NAME].read_bytes(), (
        "run `python -m fixtures.generate sample` and commit the result")


def _members(path):
    with tarfile.open(path) as tar:
        return {m.name: (m, tar.extractfile(m).read() if m.isreg() else None)
                for m in tar.getmembers()}


def test_libraries_are_real_elf_with_sonames_and_exports(archives, tmp_path):
    for generation, name in GENERATION_SAMPLES.items():
        spec = SPECS[name]
        members = _members(archives[name])
        libs = {n: data for n, (m, data) in members.items() if m.isreg() and ".so." in n}
        assert len(libs) == len(spec.stems()), (generation, sorted(libs))
        for member_name, data in libs.items():
            path = tmp_path / member_name.replace("/", "_")
            path.write_bytes(data)
            with open(path, "rb") as f:
                elf = ELFFile(f)
                assert elf.header["e_type"] == "ET_DYN"
                dyn = elf.get_section_by_name(".dynamic")
                sonames = [t.soname for t in dyn.iter_tags("DT_SONAME")]
                stem = member_name.rsplit("/", 1)[-1].split(".so")[0]
                assert sonames == [f"{stem}.so.{spec.soname_version}"]
                symbols = {s.name for s in elf.get_section_by_name(".dynsym").iter_symbols()}
            if stem == "libcudnn":
                assert {"cudnnGetVersion", "cudnnGetCudartVersion", "cudnnGetErrorString",
                        "cudnnCreate", "cudnnDestroy"} <= symbols


def test_links_only_where_the_generation_shipped_them(archives):
    v2 = _members(archives["cudnn-6.5-linux-x64-v2.tgz"])
    assert not any(m.issym() for m, _ in v2.values())
    v9 = _members(archives["cudnn-linux-x86_64-9.3.0.99_cuda12-archive.tar.xz"])
    top = "cudnn-linux-x86_64-9.3.0.99_cuda12-archive/lib/"
    assert v9[top + "libcudnn_ops.so.9"][0].linkname == "libcudnn_ops.so.9.3.0"
    assert v9[top + "libcudnn_ops.so"][0].linkname == "libcudnn_ops.so.9"
    assert top + "libcudnn_ops_static.a" in v9


def test_static_libraries_are_ar_archives(archives):
    members = _members(archives["cudnn-7.0-linux-x64-v3.0-prod.tgz"])
    assert members["cuda/lib64/libcudnn_static.a"][1].startswith(b"!<arch>\n")


def _compiles(root, include_dirs, tmp_path) -> subprocess.CompletedProcess:
    src = tmp_path / "uses_cudnn.c"
    src.write_text("#include <cudnn.h>\n#include <stdio.h>\n"
                   "int main(void) { cudaStream_t s = 0; (void)s;\n"
                   "  printf(\"%d\\n\", (int)CUDNN_VERSION); return 0; }\n")
    flags = [f"-I{d}" for d in [*include_dirs, root / "include"]]
    return subprocess.run(["gcc", "-Wall", "-Werror", "-fsyntax-only", *flags, str(src)],
                          capture_output=True, text=True)


def test_cuda_root_headers_carry_what_cudnn_headers_use(tmp_path, compiler, archives):
    """The fixture root's CUDA headers keep CUDA's include guards and type names, so a header
    that tests __LIBRARY_TYPES_H__ (cuDNN 8) or includes <cuda_runtime_api.h> (cuDNN 9) builds."""
    root = make_cuda_root(tmp_path / "cuda", "12.4", "lib", cc=compiler)
    text = (root / "include" / "library_types.h").read_text()
    assert "#if" in text and "__LIBRARY_TYPES_H__" in text and "libraryPropertyType" in text
    assert "cudaStream_t" in (root / "include" / "driver_types.h").read_text()
    done = _compiles(root, [], tmp_path)  # no cudnn.h yet: the compiler must say so
    assert done.returncode != 0 and "cudnn.h" in done.stderr


@pytest.mark.real_cudnn
@pytest.mark.parametrize("wheel", ["nvidia_cudnn_cu11-8.9.6.99", "nvidia_cudnn_cu12-9.1.0.70"])
def test_nvidia_headers_compile_against_a_fixture_root(wheel, tmp_path, compiler):
    """NVIDIA's own cuDNN headers (from the pip wheel) compile against a generated CUDA root."""
    cache = os.environ.get("CUDNN_SETUP_WHEEL_CACHE")
    if not cache:
        pytest.skip("set CUDNN_SETUP_WHEEL_CACHE to a directory holding NVIDIA's cuDNN wheels")
    found = sorted(Path(cache).glob(f"{wheel}-*.whl"))
    if not found:
        pytest.skip(f"no {wheel} wheel in {cache}")
    with zipfile.ZipFile(found[0]) as z:
        for name in z.namelist():
            if name.startswith("nvidia/cudnn/include/") and name.endswith(".h"):
                z.extract(name, tmp_path / "wheel")
    root = make_cuda_root(tmp_path / "cuda", "12.4" if "cu12" in wheel else "11.8", "lib",
                          cc=compiler)
    done = _compiles(root, [tmp_path / "wheel" / "nvidia" / "cudnn" / "include"], tmp_path)
    assert done.returncode == 0, done.stderr


def test_two_workers_asking_for_one_library_build_it_once(tmp_path):
    """Both xdist workers start by asking for the same libraries: the second waits for the
    first's entry instead of running the same gcc beside it."""
    import sys

    from conftest import REPO

    builds = tmp_path / "builds"
    code = ("import sys, time; from pathlib import Path; from fixtures import buildcache; "
            "buildcache.use(Path(sys.argv[1])); "
            "make = lambda: (open(sys.argv[2], 'a').write('x'), time.sleep(1), b'lib')[2]; "
            "assert buildcache.built('k', make) == b'lib'")
    workers = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "cache"), str(builds)],
                                cwd=REPO) for _ in range(2)]
    assert [w.wait(timeout=60) for w in workers] == [0, 0]
    assert builds.read_text() == "x"
