"""Which decoder reads an archive (archive/decoder_choice.py, no I/O), case by case, and the
host facts it is made from (facts/host.py), read from real files."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudnn_setup.archive import decoder_choice as C
from cudnn_setup.facts import host

GiB, MiB = 1 << 30, 1 << 20
ALL = {C.XZ_PARALLEL, C.LIBLZMA, C.RAPIDGZIP, C.ISAL}


@pytest.mark.parametrize("compression, blocks, cores, memory, available, size, expected", [
    # .tar.xz: several blocks (or a count xz could not read) on every core through xz -T0
    (C.XZ, 40, 2, GiB, ALL, 900 * MiB, C.XZ_PARALLEL),
    (C.XZ, None, 2, GiB, ALL, 900 * MiB, C.XZ_PARALLEL),
    (C.XZ, 2, 1, None, {C.XZ_PARALLEL}, 1, C.XZ_PARALLEL),
    # one block decodes sequentially anyway: liblzma into the writer's buffers, no pipe
    (C.XZ, 1, 64, 64 * GiB, ALL, 900 * MiB, C.LIBLZMA),
    (C.XZ, 1, 64, 64 * GiB, {C.XZ_PARALLEL}, 900 * MiB, C.XZ),  # no liblzma.so.5: Python's lzma
    # no xz that decodes in parallel (none at all, or one before 5.4)
    (C.XZ, 40, 64, 64 * GiB, {C.LIBLZMA, C.RAPIDGZIP}, 900 * MiB, C.LIBLZMA),
    (C.XZ, 40, 64, 64 * GiB, set(), 900 * MiB, C.XZ),
    # .tar.gz: rapidgzip only on RAPIDGZIP_MIN_CORES cores and where its memory fits
    (C.GZIP, None, C.RAPIDGZIP_MIN_CORES, 64 * GiB, ALL, 700 * MiB, C.RAPIDGZIP),
    (C.GZIP, None, C.RAPIDGZIP_MIN_CORES - 1, 64 * GiB, ALL, 700 * MiB, C.ISAL),
    (C.GZIP, None, 2, 64 * GiB, ALL, 1, C.ISAL),
    (C.GZIP, None, 16, 2 * GiB, ALL, 700 * MiB, C.ISAL),  # a container with 2 GiB left
    (C.GZIP, None, 16, 4 * GiB, ALL, 100 * MiB, C.RAPIDGZIP),
    (C.GZIP, None, 16, None, ALL, 700 * MiB, C.RAPIDGZIP),  # memory unknown: not a reason
    (C.GZIP, None, 64, 64 * GiB, {C.ISAL}, 1, C.ISAL),  # rapidgzip not installed
    (C.GZIP, None, 64, 64 * GiB, {C.RAPIDGZIP}, GiB * 100, C.ZLIB),  # too big for rapidgzip
    (C.GZIP, None, 64, 64 * GiB, set(), 1, C.ZLIB),
    (C.GZIP, 40, 64, 64 * GiB, {C.XZ_PARALLEL, C.LIBLZMA}, 1, C.ZLIB),  # xz's are not gzip's
    # one decoder each
    (C.BZIP2, None, 64, 64 * GiB, ALL, GiB, C.BZIP2),
    (C.PLAIN_TAR, None, 64, 64 * GiB, ALL, GiB, C.PLAIN_TAR),
])
def test_choose_decoder(compression, blocks, cores, memory, available, size, expected):
    assert C.choose_decoder(compression, blocks, cores, memory, available, size) == expected


def test_rapidgzip_memory_boundary():
    """rapidgzip is chosen exactly while what it may hold fits in a quarter of the memory."""
    size, cores = 300 * MiB, 8
    need = C.rapidgzip_memory(size, cores)
    assert need == size + 256 * MiB + 8 * 16 * MiB
    assert C.gzip_choice(cores, size, 4 * need, {C.RAPIDGZIP}) == C.RAPIDGZIP
    assert C.gzip_choice(cores, size, 4 * need - 1, {C.RAPIDGZIP, C.ISAL}) == C.ISAL


@settings(deadline=None, database=None)  # a busy machine is no failure
@given(st.sampled_from([C.XZ, C.GZIP, C.BZIP2, C.PLAIN_TAR]),
       st.one_of(st.none(), st.integers(0, 10**6)), st.integers(1, 1024),
       st.one_of(st.none(), st.integers(0, 1 << 50)),
       st.sets(st.sampled_from(sorted(ALL))), st.integers(0, 1 << 45))
def test_the_choice_is_always_a_decoder_at_hand(compression, blocks, cores, memory, available,
                                                size):
    got = C.choose_decoder(compression, blocks, cores, memory, available, size)
    always = {C.XZ: {C.XZ}, C.GZIP: {C.ZLIB}, C.BZIP2: {C.BZIP2}, C.PLAIN_TAR: {C.PLAIN_TAR}}
    for_it = {C.XZ: {C.XZ_PARALLEL, C.LIBLZMA}, C.GZIP: {C.RAPIDGZIP, C.ISAL}}.get(compression,
                                                                                 set())
    assert got in always[compression] | (for_it & available)
    if got == C.RAPIDGZIP:
        assert cores >= C.RAPIDGZIP_MIN_CORES


@pytest.mark.parametrize("version, parallel", [
    (50040002, True), (50040000, True), (50060002, True), (50020052, False), (50039999, False),
    (None, False)])
def test_xz_decodes_in_parallel_from_5_4(version, parallel):
    assert C.xz_decodes_in_parallel(version) is parallel


@pytest.mark.parametrize("memory, args", [
    (None, []), (8 * GiB, [f"--memlimit-mt={2 * GiB}"]), (100 * MiB, [f"--memlimit-mt={64 * MiB}"]),
    (0, [f"--memlimit-mt={64 * MiB}"])])
def test_xz_memory_limit(memory, args):
    assert C.xz_memory_limit(memory) == args


# ---- host facts, from real files --------------------------------------------------------

def _meminfo(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "meminfo"
    path.write_text(text)
    return path


@pytest.mark.parametrize("meminfo, cgroup, expected", [
    ("MemTotal: 100 kB\nMemAvailable:  2048 kB\n", None, 2 << 20),
    ("MemAvailable:  2048 kB\n", ("max", "5"), 2 << 20),  # no cgroup limit
    ("MemAvailable:  2048 kB\n", ("1048576", "524288"), 512 << 10),  # the cgroup has less left
    ("MemAvailable:  2048 kB\n", ("99999999999", "0"), 2 << 20),
    ("MemFree: 10 kB\n", ("1048576", "0"), 1 << 20),  # no MemAvailable: the cgroup's
    ("garbage", ("not a number", "0"), None),
    ("MemAvailable: lots kB\n", None, None),
])
def test_available_memory(tmp_path, meminfo, cgroup, expected):
    group = tmp_path / "cgroup"
    group.mkdir()
    if cgroup:
        (group / "memory.max").write_text(cgroup[0] + "\n")
        (group / "memory.current").write_text(cgroup[1] + "\n")
    assert host.available_memory(_meminfo(tmp_path, meminfo), group) == expected


def test_available_memory_of_this_machine():
    free = host.available_memory()
    assert free is not None and 0 < free <= os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def test_usable_cores_is_the_affinity_mask():
    assert host.usable_cores() == len(os.sched_getaffinity(0))


def test_the_choice_imports_nothing_that_does_io():
    import ast

    tree = ast.parse(Path(C.__file__).read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree)
                 if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= {"__future__", "typing"}, imported
    assert "open(" not in Path(C.__file__).read_text()
