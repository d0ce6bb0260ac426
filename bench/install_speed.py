"""Time `cudnn-setup install` against NVIDIA's manual steps and against plain decompression.

    python bench/install_speed.py [--size-mib 1100] [--runs 3] [--archive PATH ...] [--json OUT]

Without --archive it generates a cuDNN 9.x-shaped archive holding --size-mib of incompressible
library payload, as multi-block .tar.xz, single-block .tar.xz and .tgz (cached in --work). For
each archive, each of --runs rounds times, into fresh CUDA roots on the same filesystem:
  (a) manual: tar -xf into a temp dir, cp -P headers and libraries, chmod a+r
  (b) floor:  decompress to /dev/null with the fastest decoder at hand: `xz -dc -T0` for .xz;
              for gzip the faster of ISA-L (one thread) and rapidgzip on every usable core,
              each timed (zlib where neither is installed)
  (c) tool:   cudnn-setup install --no-verify --no-theanorc --no-frameworks
and reports medians, c/a and c/b, and "decode_and_write": the fastest decoder writing the tar
into one file on the roots' filesystem, fsync'd (the floor when the disk is slower than the
decoder), and which decoder the tool picks on this machine. For .gz
archives, --gzip-sweep also times rapidgzip at 1, 2, 4… usable cores against ISA-L: the data
behind the tool's choice (cudnn_setup/archive/decoder_choice.py, RAPIDGZIP_MIN_CORES). "fixed_s" is the
tool installing the bundled 2.5 KB sample: start-up, locking, journal, fsync and manifest, the
part of (c) that does not grow with the archive. Peak memory is measured in one more, untimed run of (c): the
RSS of the tool and of its child processes (xz), summed, sampled every 10 ms; sampling during
the timed runs would take CPU from them; the tree's largest summed RSS, and the largest
single process's (getrusage of the children, as /usr/bin/time -v reports it). That run's root (given CUDA's own headers from
--cuda-include, so that the compile check can build against cudnn.h) is then verified: `verify
--no-theano` --runs times, and `verify` with the Theano check once to warm Theano's compile cache
(under a scratch HOME) and --runs times more.

--tool-and-floor times only (c) and (b), alternated, --runs times each (for a shared machine:
min and median of each, c/b of both, the load average before and after), each decoder of (b)
also writing the tar into one fsync'd file ("write:" floors, decode-and-write), then the peak
memory.
"""
from __future__ import annotations

import argparse
import importlib.util
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
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cudnn_setup.archive.decoders import usable_cores as cores  # noqa: E402
from fixtures.generate import SPECS, Compiler, make_cuda_root, spec_entries, tar_bytes  # noqa: E402

NAME = "cudnn-linux-x86_64-9.3.0.99_cuda12-archive"
# How a real cuDNN 9 spreads its bytes over the libraries (roughly, by file size).
SHARES = {"libcudnn_engines_precompiled": 0.55, "libcudnn_adv": 0.2,
          "libcudnn_engines_runtime_compiled": 0.1, "libcudnn_heuristic": 0.05,
          "libcudnn_ops": 0.05, "libcudnn_graph": 0.03, "libcudnn_cnn": 0.015, "libcudnn": 0.005}


def generate(work: Path, size_mib: int) -> list[Path]:
    work.mkdir(parents=True, exist_ok=True)
    raw = work / f"{NAME}-{size_mib}MiB.tar"
    outs = {"xz-multi": work / f"multi-{size_mib}" / f"{NAME}.tar.xz",
            "xz-single": work / f"single-{size_mib}" / f"{NAME}.tar.xz",
            "tgz": work / f"gz-{size_mib}" / f"{NAME}.tgz"}
    if all(p.exists() for p in outs.values()):
        return list(outs.values())
    total = size_mib << 20
    pad = {stem: int(total * share) for stem, share in SHARES.items()}
    with tempfile.TemporaryDirectory() as tmp:
        entries = spec_entries(SPECS[f"{NAME}.tar.xz"], Compiler(Path(tmp)), pad)
        raw.write_bytes(tar_bytes(entries))
    for key, cmd in (("xz-multi", ["xz", "-T0", "-0", "--block-size=16MiB", "-c"]),
                     ("xz-single", ["xz", "-T1", "-0", "-c"]),
                     ("tgz", ["gzip", "-1", "-n", "-c"])):
        outs[key].parent.mkdir(exist_ok=True)
        if not outs[key].exists():
            with open(outs[key], "wb") as f:
                subprocess.run([*cmd, str(raw)], stdout=f, check=True)
    raw.unlink()
    return list(outs.values())


def cuda_of(archive: Path) -> str:
    """The CUDA version of a fresh root for this archive: its `_cudaNN` major, else 12.4."""
    found = re.search(r"_cuda(\d+)", archive.name)
    return {"11": "11.8", "13": "13.0"}.get(found.group(1), "12.4") if found else "12.4"


def fresh_root(base: Path, i: int, cuda: str = "12.4") -> Path:
    return make_cuda_root(base / f"root{i}", cuda)


def manual(archive: Path, root: Path, scratch: Path) -> None:
    """NVIDIA's documented steps: extract, copy with -P, make readable."""
    scratch.mkdir()
    subprocess.run(["tar", "-xf", str(archive), "-C", str(scratch)], check=True)
    top = next(scratch.iterdir())
    inc = top / ("include" if (top / "include").exists() else "")
    lib = top / ("lib" if (top / "lib").exists() else "lib64")
    subprocess.run(f"cp -P {inc}/cudnn*.h {root}/include/ && cp -P {lib}/libcudnn* {root}/lib64/ "
                   f"&& chmod a+r {root}/include/cudnn*.h {root}/lib64/libcudnn*",
                   shell=True, check=True)
    shutil.rmtree(scratch)


# Decode a gzip file to nowhere: argv[1] the file, argv[2] "isal", "zlib" or rapidgzip's thread count.
FLOOR_GZ = """import os, sys
buf = bytearray(1 << 20)
out = open(sys.argv[3], "wb") if len(sys.argv) > 3 else None
if sys.argv[2] == "isal":
    from isal import igzip
    f = igzip.open(sys.argv[1], "rb")
elif sys.argv[2] == "zlib":
    import gzip
    f = gzip.open(sys.argv[1], "rb")
else:
    import rapidgzip
    f = rapidgzip.open(sys.argv[1], parallelization=int(sys.argv[2]))
with f:
    while n := f.readinto(buf):
        if out:
            out.write(memoryview(buf)[:n])
if out:
    out.flush()
    os.fsync(out.fileno())
"""


def gzip_floors() -> list[str]:
    """The gzip decoders to time as the floor: ISA-L, rapidgzip on every usable core; else zlib."""
    have = [m for m in ("isal", "rapidgzip") if importlib.util.find_spec(m) is not None]
    out = ["isal"] if "isal" in have else ["zlib"]
    return out + ([str(cores())] if "rapidgzip" in have else [])


def decode(archive: Path, how: str, to: Path | None = None) -> None:
    """Decode to nowhere, or into the file `to`, fsync'd (the floor of decoding and writing)."""
    if how == "xz":
        with open(to or os.devnull, "wb") as out:
            subprocess.run(["xz", "-dc", "-T0", str(archive)], stdout=out, check=True)
            if to:
                os.fsync(out.fileno())
    else:
        subprocess.run([sys.executable, "-c", FLOOR_GZ, str(archive), how,
                        *([str(to)] if to else [])], check=True)


def floor_ways(archive: Path) -> list[str]:
    return ["xz"] if archive.name.endswith(".xz") else gzip_floors()


def tool_decoder(archive: Path) -> str:
    """The decoder `install` picks for this archive on this machine."""
    from cudnn_setup.archive import decoders

    d = decoders.Decoder(archive, decoders.sniff(archive), None, shutil.which("xz"))
    try:
        return d.name
    finally:
        d.finish(False)


def tool_command(archive: Path, root: Path) -> list[str]:
    return [sys.executable, "-m", "cudnn_setup", "install", str(archive), "--cuda-root", str(root),
            "--no-verify", "--no-theanorc", "--no-frameworks", "--json"]


TOOL_ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(
    [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))


def tool(archive: Path, root: Path) -> None:
    done = subprocess.run(tool_command(archive, root), env=TOOL_ENV, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"install failed: {done.stdout}{done.stderr}")


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass  # the process has just ended
    return 0


def _descendants(pid: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo.extend(parents.get(found[-1], []))
    return found


def peak_memory(archive: Path, root: Path) -> dict:
    """Largest summed RSS of the tool's process tree (sampled every 10 ms), and of the tool's
    own process, in MiB; with /usr/bin/time, also the peak RSS the kernel counted for the tool
    and the children it waited for (`time -v`'s "Maximum resident set size", which is of the
    largest one, not their sum)."""
    gnu_time = Path("/usr/bin/time")
    wrap = [str(gnu_time), "-f", "maxrss_kib=%M"] if gnu_time.exists() else []
    proc = subprocess.Popen([*wrap, *tool_command(archive, root)], env=TOOL_ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    tree = own = 0
    while proc.poll() is None:
        tools = _descendants(proc.pid)[1 if wrap else 0:]  # time's one child: the tool
        if tools:
            own = max(own, _rss_kib(tools[0]))
            tree = max(tree, sum(_rss_kib(p) for p in tools))
        time.sleep(0.01)
    err = proc.stderr.read()
    if proc.returncode != 0:
        raise SystemExit(f"install failed with status {proc.returncode}: {err[-500:]}")
    found = re.findall(r"maxrss_kib=(\d+)", err)
    return {"tree_mib": round(tree / 1024, 1), "tool_process_mib": round(own / 1024, 1),
            "time_v_maxrss_mib": round(int(found[-1]) / 1024, 1) if found else None}


def verify_times(root: Path, work: Path, runs: int) -> dict:
    home = work / "home"
    home.mkdir(parents=True)
    env = dict(TOOL_ENV, HOME=str(home))
    rc = work / "theanorc"
    cli = [sys.executable, "-m", "cudnn_setup"]
    subprocess.run([*cli, "theanorc", "--cuda-root", str(root), "--theanorc", str(rc), "--json"],
                   env=env, check=True, capture_output=True)
    statuses: dict[str, dict] = {}

    def run(key: str, *extra: str) -> float:
        cmd = [*cli, "verify", "--cuda-root", str(root), "--theanorc", str(rc), "--json", *extra]
        start = time.perf_counter()
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        took = time.perf_counter() - start
        statuses[key] = {c["name"]: c["status"] for c in json.loads(done.stdout)["checks"]}
        return took

    no_theano = [run("no_theano", "--no-theano") for _ in range(runs)]
    cold = run("theano")
    warm = [run("theano") for _ in range(runs)]
    return {"no_theano_s": round(statistics.median(no_theano), 2),
            "theano_cold_s": round(cold, 2), "theano_warm_s": round(statistics.median(warm), 2),
            "checks": statuses}


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(archive: Path, runs: int, base: Path, cuda_include: Path | None,
            with_verify: bool) -> dict:
    ways = floor_ways(archive)
    times: dict[str, list[float]] = {"manual": [], "tool": [], **{f"floor:{w}": [] for w in ways}}
    for i in range(runs):
        root_a, root_c = (fresh_root(base, 2 * i, cuda_of(archive)),
                          fresh_root(base, 2 * i + 1, cuda_of(archive)))
        subprocess.run(["sync"])
        times["manual"].append(timed(lambda: manual(archive, root_a, base / f"x{i}")))
        for way in ways:
            subprocess.run(["sync"])
            times[f"floor:{way}"].append(timed(lambda: decode(archive, way)))
        subprocess.run(["sync"])
        written = base / f"written{i}.tar"
        times.setdefault("decode_and_write", []).append(
            timed(lambda: decode(archive, best_way(ways, times), written)))
        written.unlink()
        subprocess.run(["sync"])
        times["tool"].append(timed(lambda: tool(archive, root_c)))
        shutil.rmtree(root_a)
        shutil.rmtree(root_c)
    med = {k: statistics.median(v) for k, v in times.items()}
    best = best_way(ways, times)
    med["floor"] = med[f"floor:{best}"]
    root_m = fresh_root(base, 2 * runs, cuda_of(archive))
    if cuda_include and cuda_include.is_dir():
        shutil.copytree(cuda_include, root_m / "include", dirs_exist_ok=True)
    peak = peak_memory(archive, root_m)
    verify = verify_times(root_m, base / "verify", runs) if with_verify else None
    shutil.rmtree(root_m)
    shutil.rmtree(base / "verify", ignore_errors=True)
    return {"archive": str(archive), "compressed_mib": round(archive.stat().st_size / 2**20, 1),
            "runs": runs, "tool_decoder": tool_decoder(archive),
            "floor_decoder": {"xz": "xz -dc -T0", "isal": "ISA-L", "zlib": "zlib"}.get(
                best, f"rapidgzip -P {best}"),
            "median_s": {k: round(v, 2) for k, v in med.items()},
            "all_s": {k: [round(x, 2) for x in v] for k, v in times.items()},
            "tool_vs_manual": round(med["tool"] / med["manual"], 3),
            "tool_vs_floor": round(med["tool"] / med["floor"], 3),
            "tool_peak_rss_mib": peak, "verify": verify}


def tool_and_floor(archive: Path, runs: int, base: Path) -> dict:
    """(b) and (c) alone, alternated, `runs` times each: min and median, for a shared machine
    where the minimum is the cleaner figure and the median the fairer one."""
    ways = floor_ways(archive)
    times: dict[str, list[float]] = {"tool": [], **{f"floor:{w}": [] for w in ways},
                                     **{f"floor:write:{w}": [] for w in ways}}
    cpu: dict[str, list[float]] = {k: [] for k in times}
    load = [round(x, 2) for x in os.getloadavg()]

    def run(key: str, fn) -> None:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        times[key].append(timed(fn))
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu[key].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)

    written = base / "floor.tar"
    for i in range(runs):
        for way in ways:
            subprocess.run(["sync"])
            run(f"floor:{way}", lambda: decode(archive, way))
            # decode-and-write: the same decoder writing the tar into one file beside the
            # roots, fsync'd, as the tool must write and fsync what it decodes
            subprocess.run(["sync"])
            run(f"floor:write:{way}", lambda: decode(archive, way, written))
            written.unlink()
        root = fresh_root(base, i, cuda_of(archive))
        subprocess.run(["sync"])
        run("tool", lambda: tool(archive, root))
        shutil.rmtree(root)
    root = fresh_root(base, runs, cuda_of(archive))
    peak = peak_memory(archive, root)
    shutil.rmtree(root)
    out = {"archive": str(archive), "compressed_mib": round(archive.stat().st_size / 2**20, 1),
           "runs": runs, "tool_decoder": tool_decoder(archive),
           "load_average_before": load, "load_average_after": [round(x, 2) for x in os.getloadavg()],
           "min_s": {k: round(min(v), 3) for k, v in times.items()},
           "median_s": {k: round(statistics.median(v), 3) for k, v in times.items()},
           "all_s": {k: [round(x, 3) for x in v] for k, v in times.items()},
           # user + system time of each (its children included): what a loaded machine moves
           # least
           "cpu_median_s": {k: round(statistics.median(v), 3) for k, v in cpu.items()},
           "tool_peak_rss_mib": peak}
    for way in [*ways, *(f"write:{w}" for w in ways)]:
        for stat in ("min_s", "median_s"):
            out.setdefault("tool_vs_floor", {})[f"{way} ({stat[:-2]})"] = round(
                out[stat]["tool"] / out[stat][f"floor:{way}"], 3)
    return out


def best_way(ways: list[str], times: dict) -> str:
    """The decoder that has been fastest so far in this measurement."""
    return min(ways, key=lambda w: statistics.median(times[f"floor:{w}"]))


def gzip_sweep(archive: Path, runs: int) -> dict:
    """ISA-L against rapidgzip at 1, 2, 4… cores, decoding to nowhere: medians in seconds."""
    ways = ["isal"] if importlib.util.find_spec("isal") else []
    if importlib.util.find_spec("rapidgzip"):
        p = 1
        while p < cores():
            ways.append(str(p))
            p *= 2
        ways.append(str(cores()))
    out = {}
    for way in ways:
        out["ISA-L" if way == "isal" else f"rapidgzip -P {way}"] = round(statistics.median(
            timed(lambda: decode(archive, way)) for _ in range(runs)), 3)
    return out


def fixed_cost(base: Path, runs: int) -> float:
    """The tool installing the bundled 2.5 KB sample: what (c) costs whatever the archive."""
    sample = REPO / "fixtures" / "samples" / "cudnn-10.0-linux-x64-v7.4.2.24.tgz"
    took = []
    for i in range(runs):
        root = make_cuda_root(base / f"fixed{i}", "10.0")
        took.append(timed(lambda: tool(sample, root)))
        shutil.rmtree(root)
    return round(statistics.median(took), 3)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--size-mib", type=int, default=1100)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--archive", type=Path, action="append")
    p.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "cudnn-setup-bench")
    p.add_argument("--json", type=Path)
    p.add_argument("--cuda-include", type=Path, default=Path("/usr/local/cuda/include"),
                   help="CUDA headers for the verify runs' compile check (read, never written)")
    p.add_argument("--no-verify-times", action="store_true",
                   help="skip timing `verify` on the installed root")
    p.add_argument("--tool-and-floor", action="store_true",
                   help="time only (c) and (b), alternated; min and median (a shared machine)")
    p.add_argument("--gzip-sweep", action="store_true",
                   help="also time ISA-L against rapidgzip at 1, 2, 4… cores on each .gz archive")
    args = p.parse_args()
    archives = args.archive or generate(args.work, args.size_mib)
    results = []
    machine = {"cpus": os.cpu_count(), "usable_cores": cores(), "uname": os.uname().release}
    with tempfile.TemporaryDirectory(dir=args.work.parent if args.work.exists() else None) as tmp:
        machine["tool_fixed_s"] = fixed_cost(Path(tmp), args.runs)
        print(f"{cores()} usable cores; the tool on the 2.5 KB sample: {machine['tool_fixed_s']} s",
              flush=True)
        for archive in archives:
            if args.tool_and_floor:
                r = tool_and_floor(archive, args.runs, Path(tmp))
                results.append(r)
                print(f"{archive.name} ({r['compressed_mib']} MiB): tool {r['min_s']['tool']} / "
                      f"{r['median_s']['tool']} s (min / median, {r['tool_decoder']}); floors "
                      + ", ".join(f"{k[6:]} {r['min_s'][k]} / {r['median_s'][k]} s"
                                  for k in r["min_s"] if k.startswith("floor:"))
                      + f"; c/b {r['tool_vs_floor']}; CPU (user + sys) {r['cpu_median_s']}; "
                      f"peak RSS {r['tool_peak_rss_mib']}; load "
                      f"{r['load_average_before']} -> {r['load_average_after']}", flush=True)
                continue
            r = measure(archive, args.runs, Path(tmp), args.cuda_include,
                        not args.no_verify_times)
            if args.gzip_sweep and not archive.name.endswith(".xz"):
                r["gzip_sweep_s"] = gzip_sweep(archive, args.runs)
            results.append(r)
            verify = r["verify"]
            print(f"{archive.name} ({r['compressed_mib']} MiB, {archive.parent.name}): "
                  f"manual {r['median_s']['manual']} s, floor {r['median_s']['floor']} s "
                  f"({r['floor_decoder']}), decode+write {r['median_s']['decode_and_write']} s, "
                  f"tool {r['median_s']['tool']} s ({r['tool_decoder']}); "
                  f"tool/manual {r['tool_vs_manual']}, tool/floor {r['tool_vs_floor']}; peak RSS "
                  f"{r['tool_peak_rss_mib']['tree_mib']} MiB (tool process "
                  f"{r['tool_peak_rss_mib']['tool_process_mib']} MiB)"
                  + (f"; verify --no-theano {verify['no_theano_s']} s, with Theano "
                     f"{verify['theano_warm_s']} s warm ({verify['theano_cold_s']} s cold)"
                     if verify else "")
                  + (f"; gzip sweep {r['gzip_sweep_s']}" if "gzip_sweep_s" in r else ""),
                  flush=True)
    if args.json:
        args.json.write_text(json.dumps({"machine": machine, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
