"""What a log and a terminal see while NVIDIA's real 717 MB wheel is installed: a line within
5 s of the start and then at least every 5 s (plus a loaded machine's grace) until the answer,
piped and on a real pseudo-terminal; never a bar for a download that does not happen. The same
for a one-block .tar.xz of the wheel's files in NVIDIA's layout (made once, kept beside the
wheel), whose reading count must move at every beat.

Opt-in (`real_cudnn`): CUDNN_SETUP_WHEEL_CACHE must hold nvidia-cudnn-cu12 9.28.0.42
(`pip download --no-deps nvidia-cudnn-cu12==9.28.0.42 -d $CUDNN_SETUP_WHEEL_CACHE`)."""
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from conftest import clean_env
from cudnn_setup import console
from cudnn_setup.archive import wheel as W
from cudnn_setup.archive.rules import Limits
from test_progress import GRACE, _on_a_pty, _piped

pytestmark = pytest.mark.real_cudnn


@pytest.fixture(scope="module")
def wheel() -> Path:
    cache = os.environ.get("CUDNN_SETUP_WHEEL_CACHE")
    found = next(Path(cache).glob("nvidia_cudnn_cu12-9.28.0.42-*.whl"), None) if cache else None
    if found is None:
        pytest.skip("set CUDNN_SETUP_WHEEL_CACHE to a directory holding nvidia-cudnn-cu12 9.28.0.42")
    return found


def _argv(wheel: Path, root: Path) -> list[str]:
    return [sys.executable, "-m", "cudnn_setup", "install", str(wheel), "--cuda-root", str(root),
            "--no-verify", "--no-theanorc", "--no-frameworks"]


def test_a_log_hears_from_the_install_of_the_real_wheel_every_beat(wheel, cuda_root, home):
    root = cuda_root(version="12.4", layout="lib")
    code, out, lines, gaps = _piped(_argv(wheel, root), clean_env(home), timeout=900)
    said = [line for _, line in lines]
    assert code == 0, out + "\n".join(said)
    assert max(gaps) <= console.EVERY + GRACE, list(zip(gaps, ["(start)"] + said))
    assert any(line.startswith("cudnn-setup: staging nvidia_cudnn_cu12-9.28.0.42") for line in said)
    assert not any("downloading" in line for line in said), said  # a local file: no download


def test_a_terminal_shows_the_step_and_only_bars_that_move(wheel, cuda_root, home):
    root = cuda_root(version="12.4", layout="lib")
    started = time.monotonic()
    code, data, chunks = _on_a_pty(_argv(wheel, root), clean_env(home), timeout=900)
    text = data.decode("utf-8", "replace")
    assert code == 0, text[-3000:]
    times = [started] + chunks
    assert max(b - a for a, b in zip(times, times[1:])) <= console.EVERY + GRACE
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
    assert "staging nvidia_cudnn_cu12-9.28.0.42" in shown
    assert "downloading" not in shown and "0/?" not in shown


TAR_XZ = "cudnn-linux-x86_64-9.28.0.42_cuda12-repack.tar.xz"


@pytest.fixture(scope="module")
def tar_xz(wheel) -> Path:
    """The wheel's files as NVIDIA's archive lays them out, in one xz block as NVIDIA's are
    (`xz -T1`; preset 0, to be made in about a minute), kept beside the wheel for the next run.
    Not NVIDIA's name: no published checksum speaks for these bytes."""
    made = wheel.parent / TAR_XZ
    if made.exists():
        return made
    name = W.parse_name(wheel.name)
    top = TAR_XZ.removesuffix(".tar.xz")
    part = made.with_name(made.name + f".{os.getpid()}.part")
    with open(part, "wb") as out:
        xz = subprocess.Popen([shutil.which("xz"), "-T1", "-0", "-c"], stdin=subprocess.PIPE,
                              stdout=out)
        with open(wheel, "rb") as f, tarfile.open(fileobj=xz.stdin, mode="w|",
                                                  format=tarfile.GNU_FORMAT) as tar:
            z = W.open_zip(f, Limits())
            for info, entry in W.layout(z, name):
                info.name = top + "/" + info.name.split("/", 1)[1]
                if entry is None:
                    tar.addfile(info)
                else:
                    with z.open(entry) as data:
                        tar.addfile(info, data)
        xz.stdin.close()
        assert xz.wait() == 0
    os.replace(part, made)
    return made


def _reading_counts(lines: list[str]) -> list[int]:
    """The MB counted in each "reading …: N of M MB" line, in order."""
    return [int(m.group(1)) for line in lines
            if (m := re.search(r"reading \S+\.tar\.xz: (\d+) of \d+ MB", line))]


def test_a_log_sees_a_tar_xz_read_move_at_every_beat(tar_xz, cuda_root, home):
    root = cuda_root(version="12.4", layout="lib")
    code, out, lines, gaps = _piped(_argv(tar_xz, root), clean_env(home), timeout=900)
    said = [line for _, line in lines]
    assert code == 0, out + "\n".join(said)
    assert max(gaps) <= console.EVERY + GRACE, list(zip(gaps, ["(start)"] + said))
    counts = _reading_counts(said)
    assert len(counts) >= 3, said  # a read long enough to need beats
    assert counts == sorted(counts) and len(set(counts)) == len(counts), said
    assert not any("still going" in line for line in said if "reading" in line), said


def test_a_terminal_sees_a_tar_xz_read_in_decoded_bytes(tar_xz, cuda_root, home):
    root = cuda_root(version="12.4", layout="lib")
    started = time.monotonic()
    code, data, chunks = _on_a_pty(_argv(tar_xz, root), clean_env(home), timeout=900)
    text = data.decode("utf-8", "replace")
    assert code == 0, text[-3000:]
    times = [started] + chunks
    assert max(b - a for a, b in zip(times, times[1:])) <= console.EVERY + GRACE
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
    # the bar's total is what the index records the tar decodes to, not the file's size
    assert re.search(r"reading cudnn-linux-x86_64-9\.28\.0\.42_cuda12-repack\.tar\.xz.*/1\.2 GB",
                     shown)
