"""What a person or a log sees while a command works: the steps it takes, the waits, the bytes.

Commands say what they are doing through `Context.status` (one line per step or wait) and
`Context.progress` (bytes done of a total); this module shows both on stderr, never on stdout,
which under `--json` carries only the JSON object.

* On a terminal: rich's live display, a spinner with the current step and a bar for bytes,
  cleared when the command ends (rich is imported only then: it costs start-up time). A bar
  appears with the first bytes counted, not before (a download that never starts shows
  none), and goes when its bytes are done; the step it belongs to stays on the spinner line.
  On a narrow terminal (under NARROW columns) a bar keeps its name and its bytes and drops
  the rest.
* Elsewhere (a pipe, CI, an Ansible log, `| tee`): plain lines, each prefixed `cudnn-setup:`.
  A step gets one line when it starts; anything longer gets another at most every
  `EVERY` seconds (bytes done of the total, or how long the step has lasted), so a log is
  never silent for longer than that while the tool works, and never floods. Bytes that are
  done hand the beat back to the step they belong to: the work after them (staging what was
  read, say) is named again, not left silent.
"""
from __future__ import annotations

import threading
import time
from typing import IO, Callable, Optional

from cudnn_setup.text import printable

EVERY = 5.0  # seconds between two lines about one ongoing step in a log
NARROW = 60  # columns under which a bar shows only its name and its bytes
PREFIX = "cudnn-setup: "


def amount(n: int) -> str:
    """Bytes as a person reads them in a log line (MB = 10**6 bytes, like the download sizes)."""
    if n < 10**6:
        return f"{n / 1000:.0f} kB" if n >= 1000 else f"{n} bytes"
    mb = n / 10**6
    return f"{mb:.1f} MB" if mb < 10 else f"{mb:.0f} MB"


def done_of(done: int, total: Optional[int]) -> str:
    """"120 of 364 MB (33%)", or "120 MB" without a total."""
    if not total:
        return amount(done)
    whole = amount(total)
    unit = whole.split(" ", 1)[1]
    part = amount(done)
    if part.endswith(" " + unit):  # "120 of 364 MB", not "120 MB of 364 MB"
        part = part.rsplit(" ", 1)[0]
    return f"{part} of {whole} ({min(done, total) * 100 // total}%)"


def seconds(took: float) -> str:
    """"0.4 s", "12 s": tenths where they are a large part of the whole."""
    return f"{took:.1f} s" if took < 10 else f"{took:.0f} s"


class Plain:
    """Lines for a log: a step when it starts, then at most one line per `every` seconds."""

    def __init__(self, stream: IO[str], every: float = EVERY,
                 clock: Callable[[], float] = time.monotonic):
        self.stream, self.every, self.clock = stream, every, clock
        self._lock = threading.Lock()
        self._current: Optional[str] = None  # what is being done, for the heartbeat
        self._since = 0.0  # when that started
        self._step: Optional[str] = None  # the last step said with status(), and its start:
        self._step_since = 0.0  # what the heartbeat names again once a byte count is done
        self._last = 0.0  # when a line was last written
        self._moved = False  # a byte count moved since a line was written
        self._stop = threading.Event()
        self._beat: Optional[threading.Thread] = None

    def _write(self, line: str) -> None:
        try:
            self.stream.write(PREFIX + printable(line) + "\n")
            self.stream.flush()
        except (OSError, ValueError):  # a log that is gone does not stop the command
            pass
        self._last, self._moved = self.clock(), False

    def status(self, line: str) -> None:
        with self._lock:
            self._current, self._since = line, self.clock()
            self._step, self._step_since = self._current, self._since
            self._write(line)
        self._start_heartbeat()

    def progress(self, label: str) -> Callable[[int, Optional[int]], None]:
        started: list[Optional[float]] = [None]  # when the first update came
        ended = [False]  # the end was said: one more like it is not said again

        def update(done: int, total: Optional[int]) -> None:
            now = self.clock()
            with self._lock:
                finished = total is not None and done >= total
                if ended[0]:
                    if finished:
                        return
                    started[0], ended[0] = None, False  # counted again from the start
                first = started[0] is None
                if first:
                    started[0] = now
                line = f"{label}: {done_of(done, total)}"
                if finished:
                    ended[0] = True
                    took = now - started[0]
                    if first:  # all at once: said, no more
                        self._write(f"{label}: {amount(done)}")
                    else:  # a count said part-way ("10 bytes of 366 MB (0%)") says it ended
                        self._write(f"{label}: {amount(done)} in {seconds(took)}")
                    # the step these bytes belong to goes on (staging what was read, say)
                    self._current, self._since = self._step, self._step_since
                    self._moved = False
                else:
                    # the count as it stands, for the heartbeat when no update comes first;
                    # one that stands still is said with how long it has not moved
                    if line != self._current:
                        self._current, self._since, self._moved = line, now, True
                    if first or now - self._last >= self.every:
                        self._write(line)
            if first:
                self._start_heartbeat()

        return update

    def _start_heartbeat(self) -> None:
        with self._lock:
            if self._beat is not None:
                return
            beat = self._beat = threading.Thread(target=self._heartbeat, daemon=True,
                                                 name="cudnn-setup-status")
        try:
            beat.start()
        except RuntimeError:  # no thread to be had (a pids limit): the heartbeat goes unsaid,
            pass  # and the command meets the limit where it matters

    def _heartbeat(self) -> None:
        """Nothing said for `every` seconds: a count that moved since it was last said is
        said as it stands; a step that says nothing (a check compiling, a lock held elsewhere,
        a stalled download) is named again with how long it has lasted."""
        while not self._stop.wait(min(0.1, self.every / 5)):
            with self._lock:
                now = self.clock()
                if self._current is None or now - self._last < self.every:
                    continue
                if self._moved:
                    self._write(self._current)
                else:
                    self._write(f"{self._current}; still going after {now - self._since:.0f} s")

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            self._current = self._step = None
        if self._beat is not None and self._beat.ident is not None:  # started
            self._beat.join(timeout=2)


class Terminal:
    """rich's live display on a terminal: the current step with a spinner, bars for bytes."""

    def __init__(self, stream: IO[str]):
        self.stream = stream
        self._lock = threading.Lock()
        self._live = None
        self._steps = self._bars = None
        self._step = None

    def _start(self) -> None:
        if self._live is not None:
            return
        from rich.console import Console, Group
        from rich.live import Live
        from rich.progress import (BarColumn, DownloadColumn, Progress, SpinnerColumn,
                                   TextColumn, TimeElapsedColumn, TimeRemainingColumn,
                                   TransferSpeedColumn)

        from rich.table import Column

        console = Console(file=self.stream)
        # A step's words and a bar's name give way (cut with an ellipsis) before the time and
        # the bytes do, at any width: one line each, redrawn in place.
        def words() -> TextColumn:
            return TextColumn("{task.description}", table_column=Column(
                overflow="ellipsis", no_wrap=True, ratio=1))

        self._steps = Progress(SpinnerColumn(), words(), TimeElapsedColumn(), console=console,
                               expand=True)
        name = words()
        rest = [DownloadColumn()] if console.width < NARROW else \
            [BarColumn(bar_width=20), DownloadColumn(), TransferSpeedColumn(),
             TimeRemainingColumn()]
        self._bars = Progress(name, *rest, console=console, expand=True)
        self._live = Live(Group(self._steps, self._bars), console=console, transient=True,
                          refresh_per_second=8)
        self._live.start()

    def status(self, line: str) -> None:
        from rich.markup import escape as markup_escape

        with self._lock:
            self._start()
            text = markup_escape(printable(line))
            if self._step is None:
                self._step = self._steps.add_task(text, total=None)
            else:
                self._steps.reset(self._step, description=text)
            # drawn now, not at the next tick: steps whose results are already there (verify's
            # checks run side by side) follow each other faster than the display refreshes
            self._live.refresh()

    def progress(self, label: str) -> Callable[[int, Optional[int]], None]:
        from rich.markup import escape as markup_escape

        description = markup_escape(printable(label))
        task = [None]  # made with the first bytes: work that never starts shows no bar

        def update(done: int, total: Optional[int]) -> None:
            with self._lock:
                finished = total is not None and done >= total
                if task[0] is None:
                    if finished:
                        return  # all at once: nothing to watch
                    self._start()
                    task[0] = self._bars.add_task(description, total=total)
                self._bars.update(task[0], completed=done, total=total)
                if finished:
                    self._bars.update(task[0], visible=False)

        return update

    def close(self) -> None:
        with self._lock:
            if self._live is not None:
                try:
                    self._live.stop()
                except (OSError, ValueError):
                    pass
                self._live = None


class Quiet:
    """Nothing shown (a stream that is gone)."""

    def status(self, line: str) -> None:
        pass

    def progress(self, label: str):
        return None

    def close(self) -> None:
        pass


def for_stream(stream: IO[str]):
    """Terminal for a terminal, Plain for anything else."""
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError, OSError):
        tty = False
    return Terminal(stream) if tty else Plain(stream)
