"""Running another program: a time limit, output read as bytes and capped, nothing it starts able
to keep the tool waiting past that limit, and a memo of what hung, for one command.

Every child leads a session of its own (so a terminal's Ctrl-C reaches only the tool, which then
ends it) and runs in a fresh scratch directory (whatever it writes into its working directory is
removed with it). The tool reads its stdout and stderr itself, from a poll loop on the calling
thread, never blocking on either: when the child exits, what is left in the pipes is read for
a moment and then the pipes are closed, so a daemon the child started (a library constructor or
a framework import may fork one that leaves the process group) cannot keep the tool waiting;
such a daemon is re-parented to the tool while a command runs and ended with it (orphans.py).
At the time limit, at the child's exit, at a signal and at `Runner.cancel` the child's whole
process group is killed. A SIGTERM or Ctrl-C, raised by the CLI's handler in the main thread,
interrupts the loop at once.

A `Runner` is made by each command and passed down to whatever runs children for it. It
remembers, under a key the caller names ("loads <library>", "imports <framework>"), what did not
finish in its time: the next child with that key is not started and its Finished says why
(`known`), so one library whose constructor hangs or one framework whose import hangs costs one
time limit per command, not one per step that meets it. Nor is a child started whose
LD_LIBRARY_PATH holds a FIFO or a device named like a library (loader_traps.py): the loader
would wait on it before the child ran a line, so it could only use up its time limit.
"""
from __future__ import annotations

import os
import selectors
import signal
import subprocess
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping

from msgspec import Struct

from cudnn_setup import loader_traps
from cudnn_setup.text import decode_output, escape
from cudnn_setup.trees import remove_tree_quietly

OUTPUT_LIMIT = 1 << 20  # bytes of stderr kept per child; the rest is dropped
STDOUT_LIMIT = 4 << 20  # bytes of stdout kept (a probe's JSON line)
DRAIN_S = 0.5  # after the child exits, how long what is still in its pipes is read
_POLL_S = 0.05  # how often the child's exit is checked where no pidfd tells it
END_WAIT_S = 2.0  # how long a command's end waits for the threads of killed children
ENDED = "not run: the command had ended"  # said of a child asked for after the end

_waited: set[int] = set()  # the pids some Runner of this process has started and not yet reaped
_waited_lock = threading.Lock()


def waited_for() -> set[int]:
    """The children every Runner of this process still waits for (orphans.Subreaper leaves
    them to their Runner, which reaps them)."""
    with _waited_lock:
        return set(_waited)


class CommandEnded(Exception):
    """Raised by `Runner.scratch` once the command has ended: nothing new is started."""


def signal_name(returncode: int | None) -> str | None:
    """The signal's name when a child died of one (a negative returncode): SIGSEGV, SIGABRT."""
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def ended(returncode: int) -> str:
    """How a child that ran ended, in words: "exited with status 3", "died of SIGSEGV" (never
    "status -11", which reads as an exit status no program can give)."""
    name = signal_name(returncode)
    return f"died of {name}" if name else f"exited with status {returncode}"


class Finished(Struct):
    returncode: int | None  # None when it never ran
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    error: str | None = None  # why it could not be started (or was not: see `known`)
    known: str | None = None  # not started: what happened earlier under its key
    interrupted: bool = False  # ended by Runner.cancel

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    @property
    def answered(self) -> bool:
        """Whether the child ran to its own end: started, in time, not interrupted. Only then
        is what it said, or did not say, an answer; any other end is no "no"."""
        return (self.returncode is not None and not self.timed_out and not self.interrupted
                and self.known is None)

    def unanswered(self) -> str:
        """How a child that gave no answer ended, for a message ("… could not be asked: it
        could not be started: …")."""
        if self.known is not None:
            return f"it was not run: {self.known}"
        if self.returncode is None:
            return f"it could not be started: {self.error}"
        if self.timed_out:
            return "it did not finish in time"
        if self.interrupted:
            return "it was interrupted"
        last = next((line.strip() for line in reversed(self.err.splitlines()) if line.strip()),
                    "")
        return f"it {ended(self.returncode)}" + (f" ({escape(last[:200])})" if last else "")

    @property
    def out(self) -> str:
        return decode_output(self.stdout)

    @property
    def err(self) -> str:
        return decode_output(self.stderr)

    def text(self) -> str:
        """stdout and stderr together, decoded, for a message."""
        return (self.out + self.err).strip() or (self.error or "")


class Unanswered(Exception):
    """A child asked a question ended without answering it (Finished.unanswered says how): the
    caller says it could not tell, never takes it for a no."""


class Runner:
    """Runs the children of one command; thread-safe, so checks may run side by side.

    `with Runner() as runner:` kills whatever is still running when the block is left, an
    exception or a signal included."""

    def __init__(self, scratch_parent: Path | None = None):
        self.scratch_parent = scratch_parent  # where scratch dirs go (None: the temp dir)
        self._lock = threading.Lock()
        self._scratch_done = threading.Condition(self._lock)
        self._known: dict[str, str] = {}
        self._live: dict[int, subprocess.Popen] = {}
        # the scratch dirs in use, by the thread using each (see `end`)
        self._scratch: dict[Path, int] = {}
        self._cancelled = False
        self._ended = False  # the command ended: a thread it left behind starts no child
        self._traps: dict[str, str | None] = {}  # LD_LIBRARY_PATH: what on it would hang a child

    def temp_dir(self) -> Path:
        """Where scratch dirs go by default."""
        return self.scratch_parent or Path(tempfile.gettempdir())

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *exc) -> None:
        self.cancel()

    def known(self, key: str | None) -> str | None:
        """What happened earlier in this command to a child with `key`, if it failed so."""
        if key is None:
            return None
        with self._lock:
            return self._known.get(key)

    def remember(self, key: str, why: str) -> None:
        """Children with `key` are not started from now on; they are `known` by `why`."""
        with self._lock:
            self._known.setdefault(key, why)

    def _trapped(self, env: Mapping[str, str] | None) -> str | None:
        """Why a child started with `env` would hang in the loader before running a line, once
        per LD_LIBRARY_PATH in a command (loader_traps.py); None when nothing there blocks."""
        if env is None:  # the tool's own: the program left every trap behind as it started
            return None
        value = env.get("LD_LIBRARY_PATH")
        if not value:
            return None
        with self._lock:
            if value in self._traps:
                return self._traps[value]
        found = loader_traps.traps(value)
        why = loader_traps.say(found) if found else None
        with self._lock:
            self._traps[value] = why
        return why

    def cancel(self) -> None:
        """Kill every running child's group; children asked for later are not started."""
        with self._lock:
            self._cancelled = True
        self.end()

    def begin(self) -> None:
        """A command starts with this runner (a Context may serve more than one)."""
        with self._lock:
            self._ended = False

    def end(self) -> None:
        """Kill every running child's group, then wait (at most END_WAIT_S) for the threads
        that ran them to remove their scratch dirs, and remove what is left. For a command's
        end: a child still running then is one no step waits for, and a thread that would
        start another after it (the driver probe's second step, once the first was killed) or
        make another scratch dir is refused until the next command begins. So when the command
        returns, nothing it started still writes or removes files: a caller that looks at the
        disk next (a test, the next command in the same process) sees the command's result,
        not a removal under way, and a process that leaves at once leaves no scratch dir."""
        with self._lock:
            self._ended = True
            live = list(self._live.values())
        for proc in live:
            _kill_group(proc)
        me = threading.get_ident()
        deadline = time.monotonic() + END_WAIT_S
        with self._scratch_done:
            # not the caller's own: it removes those itself once `end` returns to it
            while any(t != me for t in self._scratch.values()) and \
                    (left := deadline - time.monotonic()) > 0:
                self._scratch_done.wait(left)
            stuck = [p for p, t in self._scratch.items() if t != me]
        for path in stuck:
            remove_tree_quietly(path)

    @contextmanager
    def scratch(self, prefix: str = "cudnn-setup-child-",
                parent: Path | None = None) -> Iterator[Path]:
        """A fresh directory for a child's files (in `parent`, else the runner's), removed when
        the block is left and waited for by `end`. Raises CommandEnded once the command has
        ended."""
        with self._lock:
            if self._ended:
                raise CommandEnded(ENDED)
            path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent or self.scratch_parent))
            self._scratch[path] = threading.get_ident()
        try:
            yield path
        finally:
            remove_tree_quietly(path)
            with self._scratch_done:
                self._scratch.pop(path, None)
                self._scratch_done.notify_all()

    def run(self, cmd: list[str], timeout: float, env: Mapping[str, str] | None = None,
            cwd: Path | None = None, *, key: str | None = None, what: str | None = None,
            remember: bool = True, stdin: bytes | None = None,
            reply: tuple[bytes, bytes] | None = None) -> Finished:
        """Run `cmd` to its end or its time limit; its output capped, never decoded here.

        `key`: what the child exercises; when a child with that key did not finish in its time
        earlier in this command (and `remember` was set), this one is not started. `what`: how
        the memo words it ("loading libcudnn.so.9"). `stdin`: bytes written to the child's
        stdin, which is then closed (else it reads /dev/null). `reply`: (line, bytes): the bytes
        are written to stdin only once the child has printed that line on stdout, so nothing it
        ran before saying so can read them. `cwd`: else a scratch dir of its own."""
        earlier = self.known(key)
        if earlier is not None:
            return Finished(None, b"", b"", error=earlier, known=earlier)
        with self._lock:
            if self._ended:
                return Finished(None, b"", b"", error=ENDED,
                                interrupted=True)
        trapped = self._trapped(env)
        if trapped is not None:
            return Finished(None, b"", b"", error=f"was not run: {trapped}", known=trapped)
        if cwd is not None:
            done = self._run(cmd, timeout, env, cwd, stdin, reply)
        else:
            try:
                with self.scratch() as scratch:
                    done = self._run(cmd, timeout, env, scratch, stdin, reply)
            except CommandEnded as ended:
                return Finished(None, b"", b"", error=str(ended), interrupted=True)
        if done.timed_out and key is not None and remember:
            self.remember(key, f"{what or ' '.join(cmd[:2])} did not finish in {timeout:.0f} s "
                          "earlier in this run; not tried again")
        return done

    def _run(self, cmd, timeout, env, cwd, stdin, reply) -> Finished:
        with self._lock:
            if self._cancelled:
                return Finished(None, b"", b"", error="interrupted", interrupted=True)
        feed = stdin is not None or reply is not None
        try:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    stdin=subprocess.PIPE if feed else subprocess.DEVNULL,
                                    cwd=cwd, start_new_session=True, bufsize=0,
                                    env=dict(env) if env is not None else None)
        except (OSError, ValueError) as exc:
            return Finished(None, b"", b"", False, f"{cmd[0]}: {getattr(exc, 'strerror', None) or exc}")
        with self._lock:
            self._live[proc.pid] = proc
            # started while `end` or `cancel` killed the others: it goes as they did
            late = ("interrupted" if self._cancelled else
                    ENDED if self._ended else None)
        with _waited_lock:
            _waited.add(proc.pid)
        out, err = _Tail(STDOUT_LIMIT), _Tail(OUTPUT_LIMIT)
        timed_out = interrupted = False
        try:
            if late is not None:
                return Finished(None, b"", b"", error=late, interrupted=True)
            if stdin is not None:
                _feed(proc, stdin, close=reply is None)
            timed_out, interrupted = self._wait(proc, timeout, out, err, reply)
        finally:
            _kill_group(proc)  # what it left behind in its group goes with it
            for pipe in (proc.stdout, proc.stderr, proc.stdin):
                _close(pipe)
            proc.wait()
            with self._lock:
                self._live.pop(proc.pid, None)
            with _waited_lock:
                _waited.discard(proc.pid)
        return Finished(proc.returncode, out.data(), err.data(), timed_out,
                        "interrupted" if interrupted else None, interrupted=interrupted)

    def _wait(self, proc: subprocess.Popen, timeout: float, out: "_Tail", err: "_Tail",
              reply: tuple[bytes, bytes] | None) -> tuple[bool, bool]:
        """Read the pipes until the child has exited and they are drained (or DRAIN_S has
        passed since), or the time limit. (timed out, cancelled)."""
        deadline = time.monotonic() + timeout
        exited_at: float | None = None
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout.fileno(), selectors.EVENT_READ, out)
            sel.register(proc.stderr.fileno(), selectors.EVENT_READ, err)
            pidfd = _pidfd(proc.pid)
            if pidfd is not None:
                sel.register(pidfd, selectors.EVENT_READ, None)
            try:
                while True:
                    now = time.monotonic()
                    if self._cancelled:
                        return False, True
                    if exited_at is None and _exited(proc.pid):
                        exited_at = now
                    # done once it has exited and both pipes are at their end (the pidfd, if
                    # still registered, does not count: it is unregistered when it fires)
                    drained = not any(k.data is not None for k in sel.get_map().values())
                    if exited_at is not None and (drained or now - exited_at >= DRAIN_S):
                        return False, False
                    if now >= deadline:
                        return True, False
                    wait = deadline - now
                    if exited_at is not None:
                        wait = min(wait, exited_at + DRAIN_S - now)
                    elif pidfd is None:
                        wait = min(wait, _POLL_S)
                    else:
                        wait = min(wait, 1.0)  # and look at `_cancelled` now and then
                    for key, _ in sel.select(max(wait, 0.0)):
                        if key.data is None:  # the pidfd: the child has exited
                            sel.unregister(key.fd)
                            continue
                        chunk = _read(key.fd)
                        if chunk is None:
                            continue
                        if not chunk:
                            sel.unregister(key.fd)
                            if reply is not None and key.data is out:
                                # the line can no longer come: a child waiting for the reply
                                # reads the end of its stdin now, not at its time limit
                                _close(proc.stdin)
                                reply = None
                            continue
                        key.data.add(chunk)
                        if reply is not None and key.data is out and out.has_line(reply[0]):
                            _feed(proc, reply[1], close=True)
                            reply = None
            finally:
                if pidfd is not None:
                    os.close(pidfd)


def run_command(cmd: list[str], timeout: float, env: Mapping[str, str] | None = None,
                cwd: Path | None = None, runner: Runner | None = None) -> Finished:
    """One child run to its end or its limit: through `runner`, the command's (so that the
    command's end kills it), else a Runner of its own (nothing remembered)."""
    return (runner or Runner()).run(cmd, timeout, env, cwd)


class _Tail:
    """What was read from one pipe, keeping the last `limit` bytes."""

    def __init__(self, limit: int):
        self.limit = limit
        self.buf = bytearray()
        self.dropped = False

    def add(self, chunk: bytes) -> None:
        self.buf += chunk
        if len(self.buf) > 2 * self.limit:
            del self.buf[:-self.limit]
            self.dropped = True

    def has_line(self, line: bytes) -> bool:
        return (line + b"\n") in self.buf

    def data(self) -> bytes:
        kept = bytes(self.buf[-self.limit:])
        return (b"..." + kept) if self.dropped or len(self.buf) > self.limit else kept


def _read(fd: int) -> bytes | None:
    """What one read of a ready pipe gives: b"" at its end, None when nothing was there."""
    try:
        return os.read(fd, 1 << 16)
    except BlockingIOError:
        return None
    except OSError:
        return b""


def _feed(proc: subprocess.Popen, data: bytes, close: bool) -> None:
    """Write `data` to the child's stdin (a few bytes: they fit the pipe, so this never
    blocks); a child that has already closed its stdin or exited does not get them."""
    try:
        proc.stdin.write(data)
    except (OSError, ValueError):
        pass
    if close:
        _close(proc.stdin)


def _close(pipe) -> None:
    if pipe is None:
        return
    try:
        pipe.close()
    except OSError:
        pass


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _exited(pid: int) -> bool:
    """Whether the child has exited, without reaping it: its pid (and so its process group's
    id) stays taken until the group has been killed."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
