"""Where verify's time goes: every child it starts, when (from the start of the command) and
for how long, and the CPU time of the tool and of its children:

    python bench/verify_trace.py verify --cuda-root ROOT [verify's options]

The command runs in this process, as the console script runs it; each child the command's
runner starts (probes, the compiler, the package manager, ldconfig) is timed around
child.Runner._run. Its own output goes to stdout; the timeline goes to stderr.
"""
from __future__ import annotations

import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

START = time.perf_counter()

from cudnn_setup import child  # noqa: E402
from cudnn_setup.cli import main  # noqa: E402

TIMELINE: list[tuple[float, float, str]] = []
_run = child.Runner._run


def _timed(self, cmd, *args, **kwargs):
    began = time.perf_counter()
    try:
        return _run(self, cmd, *args, **kwargs)
    finally:
        what = " ".join(os.path.basename(str(c)) for c in cmd[:3])[:70]
        TIMELINE.append((began - START, time.perf_counter() - START, what))


def report() -> None:
    took = time.perf_counter() - START
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(" start    end   took  child", file=sys.stderr)
    for began, ended, what in sorted(TIMELINE):
        print(f"{began:6.2f} {ended:6.2f} {ended - began:6.2f}  {what}", file=sys.stderr)
    print(f"wall {took:.2f} s; CPU: the tool {me.ru_utime + me.ru_stime:.2f} s, its children "
          f"{kids.ru_utime + kids.ru_stime:.2f} s", file=sys.stderr)


if __name__ == "__main__":
    child.Runner._run = _timed
    try:
        code = main(sys.argv[1:])
    except SystemExit as exc:
        code = exc.code
    report()
    sys.exit(code)
