"""Programs the tool runs below the CLI start from the command's environment (ctx.env), never
from this process's own: xz (less XZ_OPT and XZ_DEFAULTS), the rapidgzip feeder, nvcc, the
interpreter asked whether Theano is there. Each test sets a marker in this process's
environment that must not count, and one in the command's that must."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from cudnn_setup.archive import decoder_choice as C
from cudnn_setup.archive import decoders
from cudnn_setup.checks.theano_check import has_theano
from cudnn_setup.facts import host
from cudnn_setup.facts.cuda import cuda_version

XZ = shutil.which("xz")
SYSTEM_PYTHON = Path("/usr/bin/python3")


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


@pytest.mark.skipif(not SYSTEM_PYTHON.exists(), reason="no system python3")
def test_theano_is_looked_for_with_the_commands_pythonpath(tmp_path, monkeypatch):
    site = tmp_path / "site"
    (site / "theano").mkdir(parents=True)
    (site / "theano" / "__init__.py").write_text("raise SystemExit('never imported')\n")
    if has_theano(str(SYSTEM_PYTHON), {}):
        pytest.skip("the system python3 has a Theano of its own")
    monkeypatch.setenv("PYTHONPATH", str(site))  # this process's: must not count
    assert not has_theano(str(SYSTEM_PYTHON), {})
    assert has_theano(str(SYSTEM_PYTHON), {"PYTHONPATH": str(site)})
