"""The judge's reading of each staged library (archive/library_facts.py), done while the rest of
the archive decodes, and code_problem's one-read scan of the dynamic symbol table; on real
gcc-built libraries in real .tar.xz and .tar.gz streams."""
import gzip
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from cudnn_setup.archive import package, reader
from cudnn_setup.archive.listing import Listing
from cudnn_setup.facts import elf as E
from elftools.elf.elffile import ELFFile
from fixtures import layouts

TOP = "cudnn-linux-x86_64-9.1.9.99_cuda12-archive"


def archive(lib: Path, out: Path, compression: str = "xz") -> Path:
    """NVIDIA's layout of the libraries in `lib`, as a real compressed tar."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{TOP}.tar.{compression}"
    include = lib.parent / "include"
    (include / "cudnn.h").write_text('#include "cudnn_version.h"\n')
    with tarfile.open(path, f"w:{compression}") as tar:
        for h in sorted(include.iterdir()):
            tar.add(h, f"{TOP}/include/{h.name}")
        for f in sorted(lib.iterdir()):
            stem = f.name.split(".so")[0]
            tar.add(f, f"{TOP}/lib/{stem}.so.9.1.9")
            for link, target in ((f"{stem}.so.9", f"{stem}.so.9.1.9"), (f"{stem}.so", f"{stem}.so.9")):
                info = tarfile.TarInfo(f"{TOP}/lib/{link}")
                info.type, info.linkname = tarfile.SYMTYPE, target
                tar.addfile(info)
    return path


def judged(path: Path, staging: Path, early: bool) -> dict:
    staging.mkdir()
    listing = reader.read(path, staging, package.wanted)
    if not early:  # the judge reads every file itself, as for a wheel
        listing.facts.close()
        listing = Listing(listing.compression, listing.sha256, listing.size, listing.members,
                          listing.problems)
    pkg = package.judge(listing, path.name, "x86_64")
    if listing.facts:
        listing.facts.close()
    return pkg.to_dict()


@pytest.mark.parametrize("compression", ["xz", "gz"])
def test_facts_read_while_decoding_are_what_the_judge_reads_after(tmp_path, compression):
    lib = layouts.built_set(tmp_path / "cudnn", tmp_path / "w")
    # one library that holds no code, one cut short: the judge's complaints come from the facts
    stub = lib / "libcudnn_heuristic.so.9"
    src = tmp_path / "empty.c"
    src.write_text("/* no code */\n")
    stub.unlink()
    subprocess.run(["gcc", "-shared", "-fPIC", str(src), "-o", str(stub),
                    "-Wl,-soname,libcudnn_heuristic.so.9"], check=True)
    cut = lib / "libcudnn_adv.so.9"
    cut.write_bytes(cut.read_bytes()[:3000])
    path = archive(lib, tmp_path / "a", compression)
    staging = tmp_path / "s"
    staging.mkdir()
    listing = reader.read(path, staging, package.wanted)
    try:
        libraries = sorted(Path(p).name for p in listing.facts.futures)
        assert libraries == sorted(f"{f.name.split('.so')[0]}.so.9.1.9" for f in lib.iterdir())
    finally:
        listing.facts.close()
    early, late = judged(path, tmp_path / "e", True), judged(path, tmp_path / "l", False)
    assert early == late
    codes = {p["code"] for p in early["problems"]}
    assert {"no-code", "damaged-library"} <= codes, early["problems"]


def test_a_pass_that_fails_stops_reading_the_staged_files(tmp_path):
    lib = layouts.built_set(tmp_path / "cudnn", tmp_path / "w")
    whole = archive(lib, tmp_path / "a", "gz").read_bytes()
    raw = gzip.decompress(whole)
    path = tmp_path / "cut" / f"{TOP}.tar.gz"
    path.parent.mkdir()
    path.write_bytes(gzip.compress(raw[:len(raw) - 20000], 1))  # the last member cut short
    staging = tmp_path / "s"
    staging.mkdir()
    listing = reader.read(path, staging, package.wanted)
    assert any(p.code == "corrupt" for p in listing.problems)
    listing.facts.close()
    assert listing.facts.pool is None and not listing.facts.futures
    shutil.rmtree(staging)


# --- code_problem's scan of the dynamic symbol table ----------------------------------------

def _exports(path: Path, decide) -> bool | str:
    """`decide(elf, dynsym)` on the library's dynamic symbol table, or why there is none."""
    try:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            dynsym = elf.get_section_by_name(".dynsym")
            if dynsym is None or not hasattr(dynsym, "iter_symbols"):
                return "no table"
            return decide(elf, dynsym)
    except Exception:
        return "damaged"


def pyelftools_exports(path: Path) -> bool | str:
    """The scan as pyelftools iterates it, symbol by symbol (what code_problem did before)."""
    return _exports(path, lambda elf, dynsym: any(
        s["st_shndx"] != "SHN_UNDEF" and s.name and s.name not in E._TRIVIAL_SYMBOLS and
        s["st_info"]["bind"] in ("STB_GLOBAL", "STB_WEAK") and
        s["st_info"]["type"] in ("STT_FUNC", "STT_OBJECT", "STT_GNU_IFUNC")
        for s in dynsym.iter_symbols()))


def one_read_exports(path: Path) -> bool | str:
    return _exports(path, E._exports_code)


@pytest.fixture(scope="module")
def importer(tmp_path_factory):
    """A library that imports 3000 functions and defines one, listed after them all (as the
    GNU hash table orders a real library's table: undefined symbols first)."""
    work = tmp_path_factory.mktemp("importer")
    calls = "".join(f"extern void imported_{i}(void);\n" for i in range(3000))
    body = "".join(f"  imported_{i}();\n" for i in range(3000))
    (work / "lib.c").write_text(f"{calls}void cudnnGetVersion(void) {{\n{body}}}\n")
    out = work / "libcudnn_ops.so.9"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O0", str(work / "lib.c"), "-o", str(out),
                    "-Wl,-soname,libcudnn_ops.so.9"], check=True)
    return out


def test_the_one_read_scan_finds_the_one_export_after_thousands_of_imports(importer, tmp_path):
    assert pyelftools_exports(importer) is True and one_read_exports(importer) is True
    assert E.code_problem(importer) is None
    # the same library with its one export made undefined: nothing to call
    data = bytearray(importer.read_bytes())
    with open(importer, "rb") as f:
        elf = ELFFile(f)
        dynsym = elf.get_section_by_name(".dynsym")
        at = next(i for i, s in enumerate(dynsym.iter_symbols()) if s.name == "cudnnGetVersion")
        off = dynsym["sh_offset"] + at * dynsym["sh_entsize"] + 6
    data[off:off + 2] = b"\0\0"
    gone = tmp_path / "libcudnn_ops.so.9"
    gone.write_bytes(bytes(data))
    assert pyelftools_exports(gone) is False and one_read_exports(gone) is False
    assert E.code_problem(gone) == "exports no symbols: a library with this name but no code to call"


def _corrupted_tables(examples: int):
    """The scans compared over `examples` random corruptions (a fresh hypothesis test each)."""

    @settings(max_examples=examples, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.lists(st.tuples(st.integers(0, 10**9), st.integers(0, 255)), min_size=1,
                    max_size=12), st.booleans())
    @example(edits=[(9, 8)], in_header=True)  # the table's section flagged SHF_COMPRESSED
    @example(edits=[(36, 45)], in_header=True)  # a table size of 193 GB, far past the file's end
    def test(importer, tmp_path, edits, in_header):
        """Bytes of the symbol table (or of the section headers that place it) changed at random:
        both scans say the same, whatever they say."""
        data = bytearray(importer.read_bytes())
        with open(importer, "rb") as f:
            elf = ELFFile(f)
            dynsym = elf.get_section_by_name(".dynsym")
            start, size = dynsym["sh_offset"], dynsym["sh_size"]
            if in_header:
                start = elf.header["e_shoff"] + elf.get_section_index(".dynsym") * \
                    elf.header["e_shentsize"]
                size = elf.header["e_shentsize"]
        for at, value in edits:
            data[start + at % size] = value
        bad = tmp_path / "libcudnn_bad.so.9"
        bad.write_bytes(bytes(data))
        assert one_read_exports(bad) == pyelftools_exports(bad)

    return test


# A plain run takes 20 corruptions and the two examples; CI (`slow`) 60.
test_the_one_read_scan_agrees_with_pyelftools_on_corrupted_tables = _corrupted_tables(20)
test_the_one_read_scan_agrees_with_pyelftools_on_many_corrupted_tables = \
    pytest.mark.slow(_corrupted_tables(60))
