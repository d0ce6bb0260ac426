"""Running another program: a time limit, output read as bytes and capped, nothing inherited
that could keep it alive past the limit.
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Mapping

from cudnn_setup.text import decode_output

OUTPUT_LIMIT = 1 << 20  # bytes of stderr kept per child; the rest is dropped
STDOUT_LIMIT = 4 << 20  # bytes of stdout kept (a probe's JSON line)


@dataclass
class Finished:
    returncode: int | None  # None when it never ran
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    error: str | None = None  # why it could not be started

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    @property
    def out(self) -> str:
        return decode_output(self.stdout)

    @property
    def err(self) -> str:
        return decode_output(self.stderr)

    def text(self) -> str:
        """stdout and stderr together, decoded, for a message."""
        return (self.out + self.err).strip() or (self.error or "")


def run_command(cmd: list[str], timeout: float, env: Mapping[str, str] | None = None,
                cwd: Path | None = None) -> Finished:
    """Run `cmd` to its end or its time limit; its output capped, never decoded here.

    Two threads drain the pipes as the child writes, keeping only the last bytes of each, so a
    child that prints without end costs neither memory nor disk, and cannot block on a full pipe.
    The child leads a process group of its own, killed whole at the time limit.
    """
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, cwd=cwd, start_new_session=True,
                                env=dict(env) if env is not None else None)
    except (OSError, ValueError) as exc:
        return Finished(None, b"", b"", False, f"{cmd[0]}: {getattr(exc, 'strerror', None) or exc}")
    out, err = _Tail(proc.stdout, STDOUT_LIMIT), _Tail(proc.stderr, OUTPUT_LIMIT)
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
        proc.wait()
    except BaseException:
        _kill_group(proc)
        proc.wait()
        raise
    finally:
        _kill_group(proc)  # whatever it left behind still holds the pipes open
        out.join()
        err.join()
    return Finished(proc.returncode, out.data(), err.data(), timed_out)


class _Tail:
    """Reads a pipe to its end on a thread, keeping the last `limit` bytes."""

    def __init__(self, pipe: IO[bytes], limit: int):
        self.pipe, self.limit = pipe, limit
        self.buf = bytearray()
        self.dropped = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while chunk := self.pipe.read1(1 << 16):
                self.buf += chunk
                if len(self.buf) > 2 * self.limit:
                    del self.buf[:-self.limit]
                    self.dropped = True
        except (OSError, ValueError):
            pass

    def join(self) -> None:
        self.thread.join(timeout=5)
        try:
            self.pipe.close()
        except OSError:
            pass

    def data(self) -> bytes:
        kept = bytes(self.buf[-self.limit:])
        return (b"..." + kept) if self.dropped or len(self.buf) > self.limit else kept


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
