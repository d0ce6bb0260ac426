"""What the code run in children leaves behind: a library's constructor or a framework's import
may double-fork and `setsid` a daemon out of the child's process group and session, where
killing the group does not reach it. While a command runs, the tool is a child subreaper
(prctl PR_SET_CHILD_SUBREAPER, Linux 3.4 on), so such a process, orphaned at any depth below
it, is re-parented to the tool instead of to init: its parent pid is the tool's, and the tool
can end it. As the command ends, every child of the tool that no Runner is waiting for and
that was not there when the command began is killed with all its descendants, and reaped.

Only children of the tool are signalled by pid: an unreaped child's pid cannot be reused. A
descendant further down is signalled through a pidfd opened and then checked against the start
time seen in the walk of /proc (a pid freed and reused in between is another process's).

Commands run side by side in one process (an embedding program's threads) share the one
subreaper: what they inherited is ended when the last of them ends. A process that is a
subreaper already (a supervisor calling `main()`) keeps its own policy: nothing is ended for it.
"""
from __future__ import annotations

import ctypes
import functools
import os
import signal
import threading
import time
from typing import Callable, Iterable

PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37
END_S = 2.0  # at most this long spent ending what was inherited (a process stuck in the kernel)
_REAP_POLL_S = 0.005

_lock = threading.Lock()
_depth = 0  # commands running in this process now
_before: frozenset[int] = frozenset()  # the process's children when the first of them began
_previous = 0  # whether the process was a subreaper already
_set = False  # whether this module made it one


class Subreaper:
    """From `start()` to `end()` (or through a `with` block) the process is a child subreaper;
    `end()` ends what was inherited. `live()`: the pids some Runner still waits for, which
    are left to it."""

    def __init__(self, live: Callable[[], Iterable[int]] = tuple):
        self.live = live

    def __enter__(self) -> "Subreaper":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.end()

    def start(self) -> "Subreaper":
        global _depth, _before, _previous, _set
        with _lock:
            _depth += 1
            if _depth == 1:
                _before = frozenset(children())
                _previous = _get()
                # a host that is a subreaper already reaps its own orphans: left to it
                _set = _previous != 1 and _prctl(PR_SET_CHILD_SUBREAPER, 1)
        return self

    def end(self) -> None:
        global _depth, _set
        with _lock:
            _depth -= 1
            if _depth:
                return
            try:
                if _set:
                    end_inherited(keep=_before | set(self.live()))
            finally:
                if _set:
                    _prctl(PR_SET_CHILD_SUBREAPER, 0)
                _set = False


def end_inherited(keep: Iterable[int] = (), budget: float = END_S) -> list[int]:
    """Kill every child of this process not in `keep`, and its descendants, then reap them;
    repeated while killing re-parents more to this process, for `budget` seconds at most.
    The pids killed that were this process's children."""
    keep = set(keep)
    deadline = time.monotonic() + budget
    ended: list[int] = []
    while True:
        mine = [pid for pid in children() if pid not in keep]
        if not mine:
            return ended
        for pid in mine:
            _kill(pid)
        for pid, start in _descendants(mine):
            _kill_checked(pid, start)
        for pid in mine:
            if _reap(pid, deadline):
                ended.append(pid)
            else:
                keep.add(pid)  # stuck in the kernel: left to init when the process leaves
        if time.monotonic() >= deadline:
            return ended


def children() -> list[int]:
    """The pids whose parent is this process (any of its threads)."""
    pids: list[int] = []
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return pids
    listed = False
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/children", "rb") as f:
                pids += [int(p) for p in f.read().split()]
            listed = True
        except (OSError, ValueError):
            continue
    if listed:
        return pids
    me = os.getpid()  # a kernel without CONFIG_PROC_CHILDREN: the whole table
    return [pid for pid, (ppid, _) in _table().items() if ppid == me]


def _table() -> dict[int, tuple[int, int]]:
    """pid: (parent pid, start time in clock ticks) of every process that can be seen."""
    table = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if name.isdigit():
            got = _stat(int(name))
            if got is not None:
                table[int(name)] = got
    return table


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time) from /proc/PID/stat; the command name may hold anything, so the
    fields are counted from its closing parenthesis."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read(4096)
        fields = raw[raw.rindex(b")") + 2:].split()
        return int(fields[1]), int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def _descendants(roots: list[int]) -> list[tuple[int, int]]:
    """(pid, start time) of every process below `roots`, from one walk of /proc."""
    table = _table()
    below: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        below.setdefault(ppid, []).append(pid)
    found, todo, seen = [], list(roots), set(roots)
    while todo:
        for pid in below.get(todo.pop(), ()):
            if pid not in seen:
                seen.add(pid)
                found.append((pid, table[pid][1]))
                todo.append(pid)
    return found


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def _kill_checked(pid: int, start: int) -> None:
    """SIGKILL to `pid` only while it is still the process that started at `start`."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    try:
        now = _stat(pid)
        if now is None or now[1] != start:
            return  # gone, or its pid reused since the walk
        if fd is not None:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
    finally:
        if fd is not None:
            os.close(fd)


def _reap(pid: int, deadline: float) -> bool:
    """Wait for the killed child `pid` until `deadline`; whether it was reaped."""
    while True:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return True  # reaped by someone else
        if done:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(_REAP_POLL_S)


@functools.lru_cache(maxsize=1)
def _libc_prctl():
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _prctl(option: int, value: int) -> bool:
    prctl = _libc_prctl()
    return prctl is not None and prctl(ctypes.c_int(option), ctypes.c_ulong(value),
                                       ctypes.c_ulong(0), ctypes.c_ulong(0),
                                       ctypes.c_ulong(0)) == 0


def _get() -> int:
    """Whether this process is a child subreaper already (0 where that cannot be asked)."""
    prctl = _libc_prctl()
    flag = ctypes.c_int(0)
    if prctl is None or prctl(ctypes.c_int(PR_GET_CHILD_SUBREAPER), ctypes.byref(flag),
                              ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        return 0
    return 1 if flag.value else 0
