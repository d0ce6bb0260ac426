"""A SIGTERM that lands while a file object is being closed by the garbage collector is not
lost: io's finalizer drops whatever close() raises, so the CLI's handler raises it again once
out of the close (before, the command went on as if nothing had been asked: an install waiting
for bytes a held connection never sent ran until the download's own timeout)."""
import io
import signal
import sys
import time
from pathlib import Path

import pytest

from cudnn_setup import cli
from cudnn_setup.errors import Interrupted


class _SignalledWhileClosing(io.RawIOBase):
    """A file object whose close() is where the signal's handler runs (as if SIGTERM arrived
    then); it is never closed explicitly: the finalizer closes it."""

    def close(self):
        if not self.closed:
            cli._on_signal(signal.SIGTERM, sys._getframe())
        super().close()


@pytest.fixture
def handler():
    previous = signal.signal(signal.SIGTERM, cli._on_signal)
    cli._deferred[0] = 0
    yield
    signal.signal(signal.SIGTERM, previous)


def test_a_signal_in_a_finalized_close_is_raised_again_once_out_of_it(handler):
    with pytest.raises(Interrupted):
        _SignalledWhileClosing()  # dropped at once: io's finalizer closes it
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # the program goes on: the signal reaches it here
            time.sleep(0.01)


class _InterruptedWhileClosing(io.RawIOBase):
    """As _SignalledWhileClosing, for Ctrl-C."""

    def close(self):
        if not self.closed:
            cli._on_signal(signal.SIGINT, sys._getframe())
        super().close()


def test_a_ctrl_c_in_a_finalized_close_is_raised_again_once_out_of_it():
    """Python's own SIGINT handler raises KeyboardInterrupt where the signal lands: in a close
    run by io's finalizer, it was dropped like SIGTERM's Interrupted, and Ctrl-C did nothing."""
    previous = signal.signal(signal.SIGINT, cli._on_signal)
    cli._deferred[0] = 0
    try:
        with pytest.raises(KeyboardInterrupt):
            _InterruptedWhileClosing()
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                time.sleep(0.01)
    finally:
        signal.signal(signal.SIGINT, previous)


def test_the_command_takes_ctrl_c_only_where_python_would_raise_it(monkeypatch):
    """An ignored SIGINT (a background job's) stays ignored while a command runs, and Python's
    own handler becomes the command's; both are as they were after it."""
    import io as _io

    seen = {}

    def context(self, *args, **kwargs):  # made once the command's handlers are in place
        seen["handler"] = signal.getsignal(signal.SIGINT)
        return original(self, *args, **kwargs)

    original = cli._Session.context
    monkeypatch.setattr(cli._Session, "context", context)
    for before, during in ((signal.SIG_IGN, signal.SIG_IGN),
                           (signal.default_int_handler, cli._on_signal)):
        previous = signal.signal(signal.SIGINT, before)
        try:
            cli.main(["list", "--json"], env={"HOME": "/nonexistent"}, home=Path("/nonexistent"),
                     stdout=_io.StringIO(), stderr=_io.StringIO())
            assert seen.pop("handler") is during
            assert signal.getsignal(signal.SIGINT) is before
        finally:
            signal.signal(signal.SIGINT, previous)


def test_a_close_that_outlasts_the_deferrals_gets_the_signal_where_it_is(handler):
    cli._deferred[0] = cli.MAX_DEFERRALS
    with pytest.raises(Interrupted):
        cli._on_signal(signal.SIGTERM, sys._getframe())  # no close here: raised at once
    frames = []

    class Closing(io.RawIOBase):
        def close(self):
            frames.append(sys._getframe())
            super().close()

    Closing().close()
    with pytest.raises(Interrupted):  # in a close, but the deferrals are spent
        cli._on_signal(signal.SIGTERM, frames[0])


def test_a_signal_while_the_command_ends_finishes_the_clean_up_and_says_what_stands(
        tmp_path, cuda_root, monkeypatch):
    """The command's end now waits (up to seconds) for the threads of killed children, so a
    SIGTERM may land there, after the change was committed. Before, it escaped the wrapper:
    the clean-up stopped half-way (no orphan reaped) and the CLI said the change was rolled
    back. Now the clean-up is finished and the answer says the committed change stands."""
    import io as _io
    import json

    from cudnn_setup.child import Runner
    from conftest import REPO

    ends = []
    real_end = Runner.end

    def end(self):
        ends.append(1)
        if len(ends) == 1:
            raise Interrupted()
        real_end(self)

    monkeypatch.setattr(Runner, "end", end)
    root, home = cuda_root(), tmp_path / "home"
    home.mkdir()
    sample = REPO / "fixtures" / "samples" / "cudnn-10.0-linux-x64-v7.4.2.24.tgz"
    out = _io.StringIO()
    code = cli.main(["install", str(sample), "--cuda-root", str(root), "--no-verify",
                     "--no-theanorc", "--no-frameworks", "--json"], env={"HOME": str(home)},
                    home=home, stdout=out, stderr=_io.StringIO())
    answer = json.loads(out.getvalue())
    assert answer["changed"] and answer["error"]["code"] == "interrupted", answer["error"]
    assert "committed" in answer["error"]["message"] and code != 5, answer["error"]
    assert len(ends) == 2 and (root / "lib64" / "libcudnn.so.7.4.2").is_file()
