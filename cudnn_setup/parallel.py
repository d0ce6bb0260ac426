"""Work that waits on child processes, started at once and collected in the caller's order.

verify's checks and the framework probes spend their time waiting on children (a loader probe,
a compiler, Theano, an interpreter importing torch), so they run side by side on threads and
their results are taken in the order the caller documents. The threads are daemons: unlike a
ThreadPoolExecutor's, they hold up neither an error nor the interpreter's exit (Ctrl-C while a
child runs ends the command; each child still has its own time limit).
"""
from __future__ import annotations

import threading
from typing import Callable, Generic, Iterable, TypeVar

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
