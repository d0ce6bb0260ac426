"""Malformed ELF files wherever the tool reads one (a --lib-dir, doctor's, a managed root): a
failed check naming the file, every other check still run, never exit 70 or an OSError's exit.
And facts/elf.py and facts/ldresolve/ fuzzed with cut and corrupted real libraries."""
import os
import struct

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import run_json
from cudnn_setup.checks.suite import ORDER
from cudnn_setup.facts import elf as E
from cudnn_setup.facts.ldresolve.ldconfig import registered
from cudnn_setup.facts.ldresolve.loadable import NotLoadable, read_object
from cudnn_setup.facts.ldresolve.runtime_names import runtime_names
from elftools.elf.elffile import ELFFile
from fixtures import layouts
from fixtures.deplibs import build
from fixtures.generate import GENERATION_SAMPLES

V7 = GENERATION_SAMPLES["v4-v7"]


def by_name(out):
    return {c["name"]: c for c in out["checks"]}


def assert_every_check_ran(done, out, failing: str, name: str):
    assert done.returncode == 1, (done.returncode, out["error"], done.stderr[-2000:])
    assert out["error"] is None
    assert [c["name"] for c in out["checks"]] == list(ORDER)
    check = by_name(out)[failing]
    assert check["status"] == "fail" and name in check["detail"], check


def test_a_four_byte_library_in_a_lib_dir_is_a_failed_elf_check(tmp_path, compiler, cuda_root, home):
    lib = layouts.wheel(tmp_path / "site", compiler)
    (lib / "libcudnn.so.9").write_bytes(b"\x7fELF")
    root = cuda_root(version="12.4")
    done, out = run_json(["verify", "--lib-dir", lib, "--cuda-root", root, "--no-theano"], home)
    assert_every_check_ran(done, out, "elf", "libcudnn.so.9")
    assert by_name(out)["load"]["status"] == "fail"
    done, out = run_json(["doctor", "--lib-dir", lib, "--cuda-root", root], home)
    assert done.returncode == 1 and out["error"] is None, out["error"]
    assert any("libcudnn.so.9" in p["message"] and p["check"] == "elf" for p in out["problems"]), \
        out["problems"]


def test_a_four_byte_library_in_a_managed_root(archives, cuda_root, home):
    root = cuda_root()
    done, _ = run_json(["install", archives[V7], "--cuda-root", root, "--no-theanorc",
                        "--no-verify"], home)
    assert done.returncode == 0, done.stderr
    (root / "lib64" / "libcudnn.so.7.4.2").write_bytes(b"\x7fELF")
    done, out = run_json(["verify", "--cuda-root", root, "--no-theano"], home)
    assert_every_check_ran(done, out, "elf", "libcudnn.so.7.4.2")
    assert by_name(out)["files"]["status"] == "fail"  # changed since it was installed


def _with_rodata_offset(data: bytes, offset: int) -> bytes:
    """The library with its .rodata section header's sh_offset set to `offset`."""
    import io
    elf = ELFFile(io.BytesIO(data))
    index = next(i for i, s in enumerate(elf.iter_sections()) if s.name == ".rodata")
    at = elf.header["e_shoff"] + index * elf.header["e_shentsize"] + 24  # Elf64_Shdr.sh_offset
    return data[:at] + struct.pack("<Q", offset) + data[at + 8:]


@pytest.mark.parametrize("offset", [2 ** 63, 2 ** 62])
def test_a_section_placed_past_any_file_is_a_failed_elf_check(offset, tmp_path, compiler,
                                                            cuda_root, home):
    lib = layouts.wheel(tmp_path / "site", compiler)
    real = build(tmp_path / "real" / "libcudnn.so.9", "libcudnn.so.9", work=tmp_path / "w",
                 version=90300, runtime="libz.so.1")
    (lib / "libcudnn.so.9").write_bytes(_with_rodata_offset(real.read_bytes(), offset))
    root = cuda_root(version="12.4")
    done, out = run_json(["verify", "--lib-dir", lib, "--cuda-root", root, "--no-theano"], home)
    assert_every_check_ran(done, out, "elf", "libcudnn.so.9")
    assert "past the file's end" in by_name(out)["elf"]["detail"]
    assert by_name(out)["load"]["status"] == "pass"  # the loader reads no section headers
    assert runtime_names(lib / "libcudnn.so.9") == []



def test_a_section_past_the_end_is_named_once(tmp_path):
    real = build(tmp_path / "libreal.so.1", "libreal.so.1", work=tmp_path / "w",
                 runtime="libz.so.1")
    lib = tmp_path / "libforged.so.1"
    lib.write_bytes(_with_rodata_offset(real.read_bytes(), 2 ** 63))
    with pytest.raises(E.NotElf) as caught:
        E.read_elf(lib)
    assert str(caught.value) == (f"a damaged ELF file (section .rodata at offset {2 ** 63} runs "
                                 f"past the file's end ({lib.stat().st_size} bytes))")
    assert caught.value.stage == E.DAMAGED

# --- fuzzing --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def real_library(tmp_path_factory):
    work = tmp_path_factory.mktemp("fuzz")
    dep = build(work / "libdep.so.1", "libdep.so.1", work=work / "d")
    return build(work / "libfuzz.so.1", "libfuzz.so.1", work=work / "w", needed=[dep],
                 runpath="$ORIGIN:/x", runtime="libz.so.1", version=90300).read_bytes()


def _headers_end(data: bytes) -> int:
    """Bytes from the start that hold the ELF, program and section headers' first parts."""
    return min(len(data), 4096)


@st.composite
def damaged(draw, data: bytes):
    how = draw(st.sampled_from(["cut", "flip", "shdrs", "both"]))
    out = bytearray(data)
    if how in ("flip", "both"):
        for _ in range(draw(st.integers(1, 16))):
            at = draw(st.integers(0, _headers_end(data) - 1))
            out[at] = draw(st.integers(0, 255))
    if how == "shdrs":  # fields of the section header table, where offsets and sizes live
        shoff, = struct.unpack_from("<Q", data, 0x28)
        shnum, = struct.unpack_from("<H", data, 0x3C)
        for _ in range(draw(st.integers(1, 4))):
            at = shoff + 64 * draw(st.integers(0, shnum - 1)) + draw(st.sampled_from([24, 32, 56]))
            struct.pack_into("<Q", out, at, draw(st.sampled_from(
                [0, 1, 2 ** 31, 2 ** 32 - 1, 2 ** 62, 2 ** 63, 2 ** 64 - 1, len(data)])))
    if how in ("cut", "both"):
        out = out[:draw(st.one_of(st.integers(0, 64), st.integers(0, len(out))))]
    return bytes(out)


# A plain run takes 100 damaged libraries; CI (`slow`) 300.
@pytest.mark.parametrize("examples", [100, pytest.param(300, marks=pytest.mark.slow)])
def test_fuzzed_libraries_raise_only_the_tools_own_errors(examples, real_library, tmp_path):
    path = tmp_path / "lib.so"

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(damaged(real_library))
    def one(data):
        path.write_bytes(data)
        try:
            E.read_elf(path)
        except E.NotElf:
            pass
        try:
            read_object(path)
        except NotLoadable:
            pass
        assert isinstance(runtime_names(path), list)
        assert isinstance(registered(tmp_path), list)

    one()


def test_a_fifo_or_a_directory_is_not_read_as_an_elf(tmp_path):
    os.mkfifo(tmp_path / "libfifo.so.1")
    (tmp_path / "libdir.so.1").mkdir()
    for name in ("libfifo.so.1", "libdir.so.1"):
        with pytest.raises(E.NotElf, match="not readable"):
            E.read_elf(tmp_path / name)
        with pytest.raises(NotLoadable) as caught:
            read_object(tmp_path / name)
        assert caught.value.fatal
        assert runtime_names(tmp_path / name) == []
