"""What a log and a terminal see while NVIDIA's real 717 MB wheel is installed: a line within
5 s of the start and then at least every 5 s (plus a loaded machine's grace) until the answer,
piped and on a real pseudo-terminal; never a bar for a download that does not happen.

Opt-in (`real_cudnn`): CUDNN_SETUP_WHEEL_CACHE must hold nvidia-cudnn-cu12 9.28.0.42
(`pip download --no-deps nvidia-cudnn-cu12==9.28.0.42 -d $CUDNN_SETUP_WHEEL_CACHE`)."""
import os
import re
import sys
import time
from pathlib import Path

import pytest

from conftest import clean_env
from cudnn_setup import console
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
