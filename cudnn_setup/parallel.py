"""Work that waits on child processes, started at once and collected in the caller's order.

verify's checks and the framework probes spend their time waiting on children (a loader probe,
a compiler, Theano, an interpreter importing torch), so they run side by side on threads and
their results are taken in the order the caller documents. The threads are daemons: unlike a
ThreadPoolExecutor's, they hold up neither an error nor the interpreter's exit (Ctrl-C while a
child runs ends the command; each child still has its own time limit).

`spread` runs CPU work that releases the GIL (a wheel's members inflated and hashed) on as many
threads as there are cores, stopping them all at the first error; `Lanes` does the same for
work handed over as it becomes known (members of a wheel as their bytes arrive).
"""
from __future__ import annotations

import queue
import threading
from typing import Callable, Generic, Iterable, Sequence, TypeVar

T = TypeVar("T")


class Later(Generic[T]):
    """`fn(*args, **kwargs)` started now on a thread of its own; `result()` waits for it and
    returns its value or raises its exception, as a plain call would have."""

    def __init__(self, fn: Callable[..., T], *args, **kwargs):
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn, args, kwargs), daemon=True,
                                        name=f"later-{getattr(fn, '__name__', 'call')}")
        self._thread.start()

    def _run(self, fn, args, kwargs) -> None:
        try:
            self._value = fn(*args, **kwargs)
        except BaseException as exc:  # raised where the result is asked for
            self._error = exc

    def result(self) -> T:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


class Done(Generic[T]):
    """A value already known, with Later's interface."""

    def __init__(self, value: T):
        self._value = value

    def result(self) -> T:
        return self._value


def at_once(calls: Iterable[Callable[[], T]]) -> list[T]:
    """Every call started at once; their results in the order given (the first error raised
    once all have finished, so no child is left behind unwaited)."""
    started = [Later(call) for call in calls]
    results, first = [], None
    for later in started:
        try:
            results.append(later.result())
        except BaseException as exc:
            first = first or exc
    if first is not None:
        raise first
    return results


class Cancelled(Exception):
    """Raised by a call of `spread` that saw its stop event set: another call failed."""


def spread(calls: Sequence[Callable[[threading.Event], T]], threads: int) -> list[T]:
    """CPU work that releases the GIL (decoding, hashing) on `threads` threads: each call is
    taken, in the order given, by the first thread free, and gets a stop event it is expected
    to check between pieces of its work. Results come back in the order given. After the first
    error no call is started and the running ones are asked to stop; that error is raised
    once every thread has finished, so nothing is left writing behind the caller's back."""
    results: list = [None] * len(calls)
    stop = threading.Event()
    lock = threading.Lock()
    taken = iter(range(len(calls)))
    first: list[BaseException] = []

    def work() -> None:
        while not stop.is_set():
            with lock:
                i = next(taken, None)
            if i is None:
                return
            try:
                results[i] = calls[i](stop)
            except BaseException as exc:  # raised on the caller's thread below
                with lock:
                    if not first and not isinstance(exc, Cancelled):
                        first.append(exc)
                stop.set()

    workers = [threading.Thread(target=work, daemon=True, name=f"spread-{n}")
               for n in range(max(1, min(threads, len(calls))))]
    started: list[threading.Thread] = []
    try:
        for t in workers:
            t.start()  # may fail at a process limit: those running are stopped below
            started.append(t)
        for t in started:
            t.join()
    finally:  # interrupted while waiting, or short of threads: the calls stop at their next piece
        stop.set()
        for t in started:
            t.join()
    if first:
        raise first[0]
    return results


class Lanes:
    """`threads` threads taking calls in the order they are `put`, each given a stop event to
    check between pieces of its work. After the first error no call starts, the running ones
    are asked to stop and `on_error` is told at once (to end waits a call may be blocked in);
    `join` raises that error once every thread has finished."""

    def __init__(self, threads: int, on_error: Callable[[], None] | None = None):
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self._on_error = on_error
        self._lock = threading.Lock()
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        for n in range(max(1, threads)):
            t = threading.Thread(target=self._work, daemon=True, name=f"lane-{n}")
            try:
                t.start()
            except BaseException:  # short of threads: those started end before this is said
                self.stop.set()
                for _ in self._threads:
                    self._calls.put(None)
                for started in self._threads:
                    started.join()
                raise
            self._threads.append(t)

    def put(self, call: Callable[[threading.Event], object]) -> None:
        self._calls.put(call)

    def _work(self) -> None:
        while (call := self._calls.get()) is not None:
            if self.stop.is_set():
                continue
            try:
                call(self.stop)
            except BaseException as exc:  # raised on the joining thread
                with self._lock:
                    first = self.error is None and not isinstance(exc, Cancelled)
                    if first:
                        self.error = exc
                self.stop.set()
                if first and self._on_error is not None:
                    self._on_error()

    def join(self, quiet: bool = False) -> None:
        """Once every call put so far has run (or was skipped after an error); the first
        error raised unless `quiet` (the caller is already failing). Only once."""
        if not self._threads:
            return
        if quiet:
            self.stop.set()
        for _ in self._threads:
            self._calls.put(None)
        try:
            for t in self._threads:
                while t.is_alive():
                    t.join(1.0)  # in slices, so that a signal is seen
        finally:
            self.stop.set()
            for t in self._threads:
                t.join()
            self._threads = []
        if self.error is not None and not quiet:
            raise self.error
