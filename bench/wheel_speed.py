"""Time `cudnn-setup install WHEEL` against pip and uv installing the same wheel.

    python bench/wheel_speed.py WHEEL [--runs 3] [--uv UV] [--work DIR] [--json OUT] [--old DIR]

With --old DIR, the tool of another checkout runs too, as `old`, alternated with this one.
WHEEL is NVIDIA's nvidia-cudnn-cuNN wheel (`pip download --no-deps nvidia-cudnn-cu12==9.28.0.42`).
Each of --runs rounds runs, in an order that rotates from round to round, into fresh targets
on the --work filesystem, each run followed by `sync` inside its timing (the tool fsyncs what
it installs, pip and uv do not):
  tool: cudnn-setup install WHEEL --cuda-root ROOT --no-verify --no-theanorc --no-frameworks
  pip:  python -m pip install --no-deps --no-index --target DIR WHEEL
  uv:   uv pip install --no-deps --no-cache --offline --python PYTHON --target DIR WHEEL
  floor: bench/inflate_floor.py WHEEL DIR (every member inflated and written on every core)
uv is the one on PATH, else the `uv` package's binary (`pip install uv-*.whl --target DIR` and
DIR on PYTHONPATH); an installer that is not there (no uv, no pip) is left out and named under
"skipped", and the other ratios are still printed. The floor inflates with ISA-L where `isal`
is installed, else zlib ("floor_inflater" says which).
A run counts only when it exited 0 and left what it names: the tool's JSON says ok and the
wheel's version, and every cuDNN library of the wheel is in the root (under its full version)
or the target, at the size the wheel declares. A run that does not is reported and not timed;
the script then exits 1. It prints min and median of each, tool/uv, tool/pip and tool/floor
by both, the CPU seconds of each, and the load average before, after and at each run's start
(on a shared machine the minimum is the cleaner figure, the median the fairer one).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from fixtures.generate import make_cuda_root  # noqa: E402

ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(
    [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))
CUDA = {"11": "11.8", "12": "12.4", "13": "13.0"}  # a root for the wheel's CUDA major


def libraries(wheel: Path) -> dict[str, int]:
    """The wheel's cuDNN libraries, by SONAME file name, with their sizes."""
    with zipfile.ZipFile(wheel) as z:
        return {i.filename.rsplit("/", 1)[1]: i.file_size for i in z.infolist()
                if re.fullmatch(r"nvidia/cudnn/lib/libcudnn[a-z0-9_]*\.so\.\d+", i.filename)}


def version_of(wheel: Path) -> str:
    return wheel.name.split("-")[1]


def check_tool(done: subprocess.CompletedProcess, root: Path, wheel: Path) -> str | None:
    """Why the tool's run does not count, or None."""
    if done.returncode != 0:
        return f"exit {done.returncode}: {done.stdout[-300:]}{done.stderr[-300:]}"
    try:
        answer = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return f"no JSON answer: {done.stdout[-300:]!r}"
    full = ".".join(version_of(wheel).split(".")[:3])
    if not answer.get("ok") or answer.get("cudnn_version") != full:
        return f"the answer is not an install of {full}: {json.dumps(answer)[:300]}"
    lib = next(d for d in (root / "lib64", root / "lib") if d.is_dir())
    for soname, size in libraries(wheel).items():
        placed = lib / f"{soname.rsplit('.so.', 1)[0]}.so.{full}"
        if not placed.is_file() or placed.stat().st_size != size:
            return f"{placed} is missing or not {size} bytes"
    return None


def check_target(done: subprocess.CompletedProcess, target: Path, wheel: Path) -> str | None:
    if done.returncode != 0:
        return f"exit {done.returncode}: {done.stdout[-300:]}{done.stderr[-300:]}"
    for soname, size in libraries(wheel).items():
        placed = target / "nvidia" / "cudnn" / "lib" / soname
        if not placed.is_file() or placed.stat().st_size != size:
            return f"{placed} is missing or not {size} bytes"
    return None


def find_uv(given: str | None) -> str | None:
    """uv as given, else on PATH, else the binary of the `uv` package (its wheel installed with
    `pip install --target`); None when there is none."""
    if given:
        return given
    if found := shutil.which("uv"):
        return found
    try:
        from uv import find_uv_bin  # the uv wheel's own locator
    except ImportError:
        return None
    try:
        return find_uv_bin()
    except FileNotFoundError:
        return None


def missing(uv: str | None) -> dict[str, str]:
    """The installers that cannot run here, and why."""
    out = {}
    if uv is None:
        out["uv"] = "no uv on PATH and no uv package (give --uv)"
    elif subprocess.run([uv, "--version"], capture_output=True).returncode != 0:
        out["uv"] = f"{uv} --version failed"
    if subprocess.run([sys.executable, "-m", "pip", "--version"],
                      capture_output=True).returncode != 0:
        out["pip"] = f"{sys.executable} has no pip"
    return out


def floor_inflater() -> str:
    try:
        import isal  # noqa: F401
    except ImportError:
        return "zlib"
    return "isal"


def tool_in(tree: Path, wheel: Path, root: Path, template: Path) -> tuple:
    """The tool of the checkout `tree`: (prepare, command, check), its env naming the tree."""
    env = dict(ENV, PYTHONPATH=os.pathsep.join([str(tree), ENV["PYTHONPATH"]]))
    return (lambda: shutil.copytree(template, root, symlinks=True),
            [sys.executable, "-m", "cudnn_setup", "install", str(wheel), "--cuda-root",
             str(root), "--no-verify", "--no-theanorc", "--no-frameworks", "--json"],
            lambda done: check_tool(done, root, wheel), env)


def commands(wheel: Path, uv: str | None, scratch: Path, template: Path,
             old: Path | None = None) -> dict:
    """Each installer: (prepare a fresh target, its command, the check of what it left[, env])."""
    root, target = scratch / "root", scratch / "target"
    return {
        "tool": tool_in(REPO, wheel, root, template),
        **({"old": tool_in(old, wheel, root, template)} if old else {}),
        "pip": (lambda: None,
                [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index",
                 "--disable-pip-version-check", "--target", str(target), str(wheel)],
                lambda done: check_target(done, target, wheel)),
        "floor": (lambda: None,
                  [sys.executable, str(REPO / "bench" / "inflate_floor.py"), str(wheel),
                   str(target)],
                  lambda done: check_target(done, target, wheel)),
        "uv": (lambda: None,
               [str(uv), "pip", "install", "--no-deps", "--no-cache", "--offline", "--python",
                sys.executable, "--target", str(target), str(wheel)],
               lambda done: check_target(done, target, wheel)),
    }


def one_run(prepare, cmd: list[str], check, scratch: Path, home: Path,
            env: dict | None = None) -> tuple[float, float, str | None]:
    """(wall seconds including the sync after, CPU seconds of the children, why it does not count)."""
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    prepare()
    subprocess.run(["sync"], check=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, env=dict(env or ENV, HOME=str(home)), capture_output=True,
                          text=True)
    subprocess.run(["sync"], check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    why = check(done)
    shutil.rmtree(scratch, ignore_errors=True)
    return wall, cpu, why


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("wheel", type=Path)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--uv", default=None, help="the uv binary (default: on PATH, else the "
                    "uv package's)")
    ap.add_argument("--work", type=Path, default=None,
                    help="where the targets go (default: the system temporary dir)")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    ap.add_argument("--old", type=Path, default=None, help="another checkout of the tool, timed "
                    "as `old` beside this one, run for run")
    args = ap.parse_args()
    wheel = args.wheel.resolve()
    tool = subprocess.run([sys.executable, "-c", "import cudnn_setup.commands.install"],
                          env=ENV, capture_output=True, text=True)
    if tool.returncode != 0:  # its dependencies missing: nothing of the tool's to time
        print(f"cudnn-setup does not start under {sys.executable}: {tool.stderr[-400:]}\n"
              "install its dependencies first (pip install -e . or their wheels with "
              "--target DIR and DIR on PYTHONPATH)", file=sys.stderr)
        return 2
    base = Path(tempfile.mkdtemp(prefix="wheel-speed-", dir=args.work))
    home = base / "home"
    home.mkdir()
    uv = find_uv(args.uv)
    skipped = missing(uv)
    template = base / "cuda-root"  # built once (gcc compiles its libcudart), copied per run
    cuda = CUDA.get(re.search(r"cu(\d+)", wheel.name)[1], "12.4")
    make_cuda_root(template, cuda)
    ways = {name: way for name, way in commands(wheel, uv, base / "scratch", template,
                                                args.old and args.old.resolve()).items()
            if name not in skipped}
    names = list(ways)
    wall: dict[str, list[float]] = {n: [] for n in names}  # only the installers that run here
    cpu: dict[str, list[float]] = {n: [] for n in names}
    failed: list[str] = []
    at_start: list[dict] = []
    load_before = loadavg()
    try:
        for i in range(args.runs):
            order = names[i % len(names):] + names[:i % len(names)]
            for name in order:
                load = loadavg()
                prepare, cmd, check, *env = ways[name]
                w, c, why = one_run(prepare, cmd, check, base / "scratch", home, *env)
                at_start.append({"run": i, "way": name, "load": load, "s": round(w, 3)})
                if why is None:
                    wall[name].append(w)
                    cpu[name].append(c)
                else:
                    failed.append(f"{name}, round {i}: {why}")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    out = {"wheel": wheel.name, "compressed_mib": round(wheel.stat().st_size / 2**20, 1),
           "decoded_mib": round(sum(libraries(wheel).values()) / 2**20, 1),
           "cores": len(os.sched_getaffinity(0)), "python": sys.version.split()[0],
           "runs": args.runs,
           "uv": uv, "floor_inflater": floor_inflater(), "skipped": skipped,
           "load_average_before": load_before, "load_average_after": loadavg(),
           "min_s": {n: round(min(v), 3) for n, v in wall.items() if v},
           "median_s": {n: round(statistics.median(v), 3) for n, v in wall.items() if v},
           "median_cpu_s": {n: round(statistics.median(v), 3) for n, v in cpu.items() if v},
           "runs_s": at_start, "failed": failed}
    for other in ("uv", "pip", "floor", "old"):
        if wall.get("tool") and wall.get(other):
            out[f"tool/{other}"] = {
                "min": round(min(wall["tool"]) / min(wall[other]), 2),
                "median": round(statistics.median(wall["tool"]) / statistics.median(wall[other]), 2)}
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    for line in failed:
        print(f"not counted: {line}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
