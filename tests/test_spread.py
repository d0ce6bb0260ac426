"""parallel.spread: CPU work on a fixed number of threads, results in the order given, the
first error stopping the rest (a wheel's members are decoded so)."""
import threading
import time

import pytest

from cudnn_setup.parallel import Cancelled, spread


def test_results_come_back_in_the_order_given_from_as_many_threads_as_asked():
    seen: set[int] = set()
    both = threading.Barrier(2, timeout=10)

    def call(i: int, wait: float):
        def run(stop: threading.Event) -> int:
            seen.add(threading.get_ident())
            if i < 2:
                both.wait()  # the first two calls run at once, or this fails
            time.sleep(wait)
            return i
        return run

    calls = [call(0, 0.2), call(1, 0.0), call(2, 0.0), call(3, 0.0)]
    assert spread(calls, 2) == [0, 1, 2, 3]
    assert len(seen) == 2


def test_the_first_error_stops_the_running_calls_and_starts_no_more():
    b_started = threading.Event()
    ran: list[str] = []
    b_saw_stop: list[bool] = []

    def a(stop: threading.Event):
        assert b_started.wait(10)
        raise ValueError("a's fault")

    def b(stop: threading.Event):
        b_started.set()
        b_saw_stop.append(stop.wait(10))
        raise Cancelled()

    def c(stop: threading.Event):
        ran.append("c")

    with pytest.raises(ValueError, match="a's fault"):
        spread([a, b, c], 2)
    assert b_saw_stop == [True]
    assert ran == []
