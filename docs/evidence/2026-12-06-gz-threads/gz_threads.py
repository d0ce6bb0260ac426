"""Whether rapidgzip's threads and chunk size change a .tar.gz install on many cores.

    python gz_threads.py ARCHIVE WORK [--rounds N] [--cuda 13.0] [--json OUT]

Each round runs, in turn, the tool's install (`--no-verify --no-theanorc --no-frameworks`, a
fresh CUDA root made by fixtures.generate.make_cuda_root, `sync` before) with rapidgzip given
each (threads, chunk MiB) variant, and rapidgzip writing the same tar into one fsync'd file
(the floor). A variant is the tool's own code with `decoders.usable_cores` and rapidgzip's
`chunk_size` set for that process; only runs that exited 0 are timed.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
VARIANTS = [(16, 4), (12, 4), (8, 4), (16, 8), (14, 4)]  # (threads, chunk MiB); (16, 4) is the tool's

TOOL = """
import sys
import rapidgzip
from cudnn_setup.archive import decoders
threads, chunk = int(sys.argv[1]), int(sys.argv[2]) << 20
decoders.usable_cores = lambda: threads
rapidgzip.open = lambda f, parallelization=0: rapidgzip.RapidgzipFile(
    f, parallelization=parallelization, chunk_size=chunk)
sys.argv = ["cudnn-setup"] + sys.argv[3:]
from cudnn_setup.cli import console_main
console_main()
"""

FLOOR = """
import os, sys, rapidgzip
with rapidgzip.open(sys.argv[1], parallelization=16) as f, open(sys.argv[2], "wb") as out:
    while (piece := f.read(4 << 20)):
        out.write(piece)
    out.flush()
    os.fsync(out.fileno())
"""


def timed(cmd: list[str], env: dict) -> float | None:
    subprocess.run(["sync"])
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    took = time.perf_counter() - start
    if done.returncode != 0:
        sys.stderr.write(f"exit {done.returncode}: {done.stderr.decode()[-400:]}\n")
        return None
    return took


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("archive", type=Path)
    ap.add_argument("work", type=Path)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--cuda", default="13.0", help="the CUDA of the roots made (the archive's)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    from fixtures.generate import make_cuda_root

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))
    args.work.mkdir(parents=True, exist_ok=True)
    times: dict[str, list[float]] = {f"tool {t} threads, {c} MiB": [] for t, c in VARIANTS}
    times["floor"] = []
    load = [round(x, 2) for x in os.getloadavg()]
    for _ in range(args.rounds):
        for threads, chunk in VARIANTS:
            root = args.work / "root"
            shutil.rmtree(root, ignore_errors=True)
            make_cuda_root(root, args.cuda)
            took = timed([sys.executable, "-c", TOOL, str(threads), str(chunk), "install",
                          str(args.archive), "--cuda-root", str(root), "--no-verify",
                          "--no-theanorc", "--no-frameworks"], env)
            if took is not None:
                times[f"tool {threads} threads, {chunk} MiB"].append(took)
        written = args.work / "floor.tar"
        took = timed([sys.executable, "-c", FLOOR, str(args.archive), str(written)], env)
        written.unlink(missing_ok=True)
        if took is not None:
            times["floor"].append(took)
    floor = times["floor"]
    out = {"archive": str(args.archive), "rounds": args.rounds, "cores": os.cpu_count(),
           "load_average_before": load,
           "load_average_after": [round(x, 2) for x in os.getloadavg()],
           "all_s": {k: [round(x, 3) for x in v] for k, v in times.items()},
           "min_s": {k: round(min(v), 3) for k, v in times.items() if v},
           "median_s": {k: round(statistics.median(v), 3) for k, v in times.items() if v},
           "over_floor": {k: {"min": round(min(v) / min(floor), 3),
                              "median": round(statistics.median(v) / statistics.median(floor), 3)}
                          for k, v in times.items() if v and floor and k != "floor"}}
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
