"""Which decoder reads an archive (archive/decoder_choice.py, no I/O), case by case; the host
facts it is made from (facts/host.py), read from real files and real programs; and the xz
program, the rapidgzip feeder and nvcc run in the command's environment, not this process's."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cudnn_setup.archive import decoder_choice as C
from cudnn_setup.archive import decoders
from cudnn_setup.facts import host
from cudnn_setup.facts.cuda import cuda_version

XZ = shutil.which("xz")
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


# ---- programs run in the command's environment --------------------------------------------

def _fake_xz(tmp_path: Path) -> Path:
    """An xz that says it is 5.4 only where the command's environment marks it, 5.2 otherwise
    (or when XZ_OPT reached it), and is the real xz for everything else."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "xz"
    fake.write_text("#!/bin/sh\n"
                    'if [ "$1 $2" = "--robot --version" ]; then\n'
                    '  if [ "$CUDNN_SETUP_TEST_MARK" = yes ] && [ -z "$XZ_OPT$XZ_DEFAULTS" ]; then\n'
                    "    echo XZ_VERSION=50040002; else echo XZ_VERSION=50020052; fi; exit 0\n"
                    "fi\n"
                    f'exec {XZ} "$@"\n')
    fake.chmod(0o755)
    return fake


@pytest.fixture
def blocks(tmp_path) -> Path:
    path = tmp_path / "blocks.tar.xz"
    with open(path, "wb") as f:
        subprocess.run([XZ, "-T2", "-0", "--block-size=64KiB", "-c"], input=os.urandom(1 << 20),
                       stdout=f, check=True)
    return path


@pytest.mark.skipif(XZ is None, reason="no xz program")
def test_xz_version_is_asked_in_the_given_environment(tmp_path, monkeypatch):
    fake = str(_fake_xz(tmp_path))
    monkeypatch.setenv("CUDNN_SETUP_TEST_MARK", "yes")  # this process's: must not count
    assert host.xz_version(fake, {}) == 50020052
    assert host.xz_version(fake, {"CUDNN_SETUP_TEST_MARK": "yes"}) == 50040002
    # the variables that add options to xz's own never reach it
    assert host.xz_version(fake, {"CUDNN_SETUP_TEST_MARK": "yes", "XZ_OPT": "-T1"}) == 50040002
    assert host.xz_version(fake, {"CUDNN_SETUP_TEST_MARK": "yes", "XZ_DEFAULTS": "-T1"}) == 50040002
    assert host.xz_version(str(tmp_path / "missing"), {}) is None
    assert host.xz_version(XZ, {}) >= 50000000


@pytest.mark.skipif(XZ is None, reason="no xz program")
def test_the_decoder_runs_xz_in_the_commands_environment(tmp_path, blocks, monkeypatch):
    fake = str(_fake_xz(tmp_path))
    monkeypatch.setenv("CUDNN_SETUP_TEST_MARK", "yes")
    mine = decoders.Decoder(blocks, decoders.XZ, None, fake, env={})
    theirs = decoders.Decoder(blocks, decoders.XZ, None, fake,
                              env={"CUDNN_SETUP_TEST_MARK": "yes", "XZ_OPT": "-T1"})
    try:
        assert mine.proc is None and mine.name != C.XZ_PARALLEL
        assert theirs.name == C.XZ_PARALLEL and theirs.proc is not None
        assert theirs.proc.args[:3] == [fake, "-dc", "-T0"]
        data = theirs.stream.read()
        assert len(data) == 1 << 20
    finally:
        mine.finish(False)
        assert theirs.finish(True) is None


def test_the_rapidgzip_feeder_is_a_script_that_hashes_what_it_passes(tmp_path):
    data = os.urandom(3 << 20) + b"TAIL"
    path = tmp_path / "in.gz"
    path.write_bytes(data)
    assert decoders.TEE_SCRIPT.is_file()
    with open(path, "rb") as f:
        done = subprocess.run([sys.executable, "-I", "-S", str(decoders.TEE_SCRIPT)], stdin=f,
                              capture_output=True, env={}, timeout=60)
    assert done.returncode == 0
    assert done.stdout == data
    assert done.stderr.decode() == f"{hashlib.sha256(data).hexdigest()} {len(data)} {b'TAIL'.hex()}"


def test_nvcc_runs_in_the_commands_environment(tmp_path, monkeypatch):
    """A toolkit whose only version source is nvcc, a wrapper that needs the command's PATH."""
    root = tmp_path / "cuda"
    (root / "bin").mkdir(parents=True)
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "real-nvcc").write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.4, "
                                     "V12.4.131'\n")
    (tools / "real-nvcc").chmod(0o755)
    (root / "bin" / "nvcc").write_text("#!/bin/sh\nexec real-nvcc \"$@\"\n")
    (root / "bin" / "nvcc").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:{os.environ.get('PATH', '')}")  # this process's only
    assert cuda_version(root, {"PATH": "/usr/bin:/bin"}) == (None, None)
    assert cuda_version(root, {"PATH": f"{tools}:/usr/bin:/bin"}) == \
        ("12.4", f"{root / 'bin' / 'nvcc'} --version")
