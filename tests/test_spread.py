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


def test_lanes_take_calls_as_they_are_handed_over_and_stop_at_the_first_error():
    """parallel.Lanes: calls put one at a time run on as many threads as asked; the first
    error tells `on_error` at once (a call blocked elsewhere is woken so), stops the running
    calls, starts no more, and is raised by join."""
    from cudnn_setup.parallel import Lanes

    woken = threading.Event()
    both = threading.Barrier(2, timeout=10)
    ran: list[str] = []
    saw_stop: list[bool] = []

    def waiting(stop: threading.Event):
        both.wait()  # the two lanes run at once, or this fails
        saw_stop.append(stop.wait(10) and woken.is_set())

    def failing(stop: threading.Event):
        both.wait()
        raise ValueError("the second call's fault")

    lanes = Lanes(2, on_error=woken.set)
    lanes.put(waiting)
    lanes.put(failing)
    lanes.put(lambda stop: ran.append("never"))
    with pytest.raises(ValueError, match="second call"):
        lanes.join()
    assert saw_stop == [True] and ran == []
    lanes.join()  # once joined, again is nothing


def test_lanes_run_every_call_put_before_join_in_order_on_one_lane():
    from cudnn_setup.parallel import Lanes

    order: list[int] = []
    lanes = Lanes(1)
    for i in range(5):
        lanes.put(lambda stop, i=i: order.append(i))
    lanes.join()
    assert order == [0, 1, 2, 3, 4]
