"""Where an install's time goes, phase by phase and thread by thread:

    python bench/install_trace.py install ARCHIVE --cuda-root ROOT [install's options]

The command runs in this process, as the console script runs it. Each call of the functions
named in PHASES (and of any given with `--span module:qualname`, repeatable, before the
command) is recorded with its thread and its start and end from the command's start; the
timeline goes to stderr, the command's own output to stdout. On Python 3.12 and later only
those functions' code objects raise events (sys.monitoring), so the rest runs at full speed;
older Pythons use a profile hook on every call, which slows the Python parts.
"""
from __future__ import annotations

import importlib
import resource
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

START = time.perf_counter()

# The install's phases: reading and staging, the libraries' facts, judging, durability, the
# transaction, the frameworks' what-if and verify.
PHASES = [
    "cudnn_setup.archive:read_package",
    "cudnn_setup.archive.wheel:_members",
    "cudnn_setup.archive.wheel:_hash_file",
    "cudnn_setup.archive.staging:stage_pieces",
    "cudnn_setup.archive.library_facts:read_facts",
    "cudnn_setup.archive.staging:consume",
    "cudnn_setup.archive.decoders:Decoder.finish",
    "cudnn_setup.placement.judge:stage",
    "cudnn_setup.placement.judge:stage_and_judge",
    "cudnn_setup.placement.engine:judged_in",
    "cudnn_setup.placement.engine:plan_install",
    "cudnn_setup.durable:make_durable",
    "cudnn_setup.durable:fsync_all",
    "cudnn_setup.durable:sync_dirs",
    "cudnn_setup.state.transaction:Transaction.run",
    "cudnn_setup.state.transaction:finish",
]


def _code(spec: str):
    module, _, qualname = spec.partition(":")
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return getattr(obj, "__code__", None)


def main() -> int:
    argv = sys.argv[1:]
    specs = list(PHASES)
    while len(argv) >= 2 and argv[0] == "--span":
        specs.append(argv[1])
        argv = argv[2:]
    codes = {}
    for spec in specs:
        try:
            code = _code(spec)
        except ImportError:
            code = None
        if code is None:
            print(f"install_trace: {spec} not found; not traced", file=sys.stderr)
        else:
            codes[code] = spec.partition(":")[2]
    open_calls: dict[tuple[int, object], list[float]] = defaultdict(list)
    spans: list[tuple[float, float, str, str]] = []
    lock = threading.Lock()

    def began(code) -> None:
        with lock:
            open_calls[(threading.get_ident(), code)].append(time.perf_counter())

    def ended(code) -> None:
        now = time.perf_counter()
        with lock:
            stack = open_calls.get((threading.get_ident(), code))
            if stack:
                spans.append((stack.pop() - START, now - START, codes[code],
                              threading.current_thread().name))

    monitoring = getattr(sys, "monitoring", None)
    if monitoring is not None:
        tool = monitoring.PROFILER_ID
        monitoring.use_tool_id(tool, "install_trace")
        E = monitoring.events
        monitoring.register_callback(tool, E.PY_START, lambda code, _o: began(code))
        monitoring.register_callback(tool, E.PY_RETURN, lambda code, _o, _r: ended(code))
        monitoring.register_callback(tool, E.PY_UNWIND, lambda code, _o, _e: ended(code))
        monitoring.set_events(tool, E.PY_UNWIND)  # unwinding is global-only
        for code in codes:
            monitoring.set_local_events(tool, code, E.PY_START | E.PY_RETURN)
    else:
        def hook(frame, event, _arg):
            if frame.f_code in codes:
                if event == "call":
                    began(frame.f_code)
                elif event == "return":
                    ended(frame.f_code)
        sys.setprofile(hook)
        threading.setprofile(hook)

    from cudnn_setup.cli import main as cli_main
    try:
        rc = cli_main(argv)
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else 1
    end = time.perf_counter() - START
    if monitoring is not None:
        monitoring.set_events(monitoring.PROFILER_ID, 0)
    else:
        sys.setprofile(None)
        threading.setprofile(None)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    err = sys.stderr
    print(f"\n{'start':>7} {'end':>7} {'took':>6}  thread / function", file=err)
    for s, e, name, thread in sorted(spans):
        print(f"{s:7.3f} {e:7.3f} {e - s:6.3f}  {thread} / {name}", file=err)
    print(f"command: {end:.3f} s wall, {usage.ru_utime + usage.ru_stime:.3f} s CPU in this "
          f"process (user {usage.ru_utime:.3f}, system {usage.ru_stime:.3f}), peak RSS "
          f"{usage.ru_maxrss >> 10} MiB; exit {rc}", file=err)
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
