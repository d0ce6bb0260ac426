"""Time what users wait for around an install, each beside its floor, on one machine:

    python bench/wait_speed.py [--runs 7] [--verify-runs N] [--archive CUDNN.tar.gz] [--root ROOT]
                               [--json OUT]

1. start-up: `cudnn-setup --version` and `--help` against Python's own start (`python -c pass`);
   the install's fixed cost (the bundled 2.5 KB sample, --no-verify) against Python's start
   plus NVIDIA's manual steps on the same sample, and the driver probe alone (the child every
   install starts, `python -I -S probes/driver.py`: NVML where there is a driver);
2. verify of a real cuDNN (`--root`, else installed here from `--archive`, given CUDA's
   headers from --cuda-include): `--no-theano --no-frameworks` and the defaults, against the
   same checks made one after another in one process (what verify did before they ran side by
   side) and against the slowest single check alone (the floor of running them side by side);
   verify's CPU time too (user + system, of the tool and every child it waited for); where
   apt's cache is turned off (Docker images), --no-theano --no-frameworks once more with an
   APT_CONFIG that gives it back, as apt is elsewhere;
3. the same archive again (`install ARCHIVE` on the root it is installed in, --no-verify;
   then with --no-frameworks, the install's own work, and with verify, as a user runs it):
   against the fixed cost, and against hashing the archive (sha256), the least that reading
   it again would cost, and decoding it (the old path read and decoded it whole);
4. the same version again (--wheel: an nvidia-cudnn-cuNN wheel, served by a file:// package
   index that publishes its sha256): `install VERSION --from pypi` into a root where that
   wheel is installed, against the fixed cost and the sha256 of the wheel; and, with one
   installed library's bytes changed, that it is still found (exit 5, changed-files).

The load average before and after the run is printed; with --old, so is each start-up figure's
ratio to the old code's, round by round (min and median). Every figure is the median and the
minimum of --runs runs (a shared machine's noise goes one way only: the minimum is the cleaner
figure, the median the fairer one). The tool runs as a user's install does: byte-compiled
(compileall first), PYTHONDONTWRITEBYTECODE unset. Only a run that exits 0 is timed: a verify
that fails a check (exit 1) answered a shorter question, so it is listed under "not counted"
with the checks that failed. Each verify figure's label says which checks ran, read from its
JSON answer (a check that skipped, such as the GPU check on a machine without a GPU, is named
there with its reason), and so do the checks timed alone.
"""
from __future__ import annotations

import argparse
import hashlib
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

from fixtures.generate import make_cuda_root  # noqa: E402

SAMPLE = REPO / "fixtures" / "samples" / "cudnn-10.0-linux-x64-v7.4.2.24.tgz"
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
TOOL = [sys.executable, "-m", "cudnn_setup"]


def timed(cmd: list[str], env: dict | None = None, check: bool = True) -> float:
    return timed_cpu(cmd, env, check)[0]


def timed_cpu(cmd: list[str], env: dict | None = None, check: bool = True,
              cwd: Path = REPO) -> tuple[float, float]:
    """Wall time and CPU time (user + system, of the command and every child it waited for);
    with `check`, anything but exit 0 stops the script."""
    took, cpu, done = run_timed(cmd, env, cwd)
    if check and done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {done.returncode}")
    return took, cpu


def run_timed(cmd: list[str], env: dict | None = None,
              cwd: Path = REPO) -> tuple[float, float, subprocess.CompletedProcess]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=cwd,
                          env=env or ENV, stdin=subprocess.DEVNULL, text=True)
    took = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return took, cpu, done


def checks_of(done: subprocess.CompletedProcess) -> dict[str, tuple[str, str]]:
    """The checks a --json answer reports: {name: (status, detail)}."""
    try:
        answer = json.loads(done.stdout.strip().splitlines()[-1])
        return {c["name"]: (c["status"], str(c.get("detail", ""))) for c in answer["checks"]}
    except (ValueError, IndexError, KeyError, TypeError):
        return {}


def what_ran(checks: dict[str, tuple[str, str]]) -> str:
    """'ran: a, b; skipped: gpu (no GPU here)': which checks one answer holds, for a label."""
    ran = [n for n, (status, _) in checks.items() if status in ("pass", "warn")]
    skipped = [f"{n} ({detail[:80]})" for n, (status, detail) in checks.items() if status == "skip"]
    failed = [f"{n} ({detail[:80]})" for n, (status, detail) in checks.items() if status == "fail"]
    parts = [f"ran: {', '.join(ran) or 'none'}"]
    if checks.get("gpu", ("",))[0] != "pass":
        parts.insert(0, "the GPU check did not run to a pass")
    if skipped:
        parts.append(f"skipped: {', '.join(skipped)}")
    if failed:
        parts.append(f"FAILED: {', '.join(failed)}")
    return "; ".join(parts)


def answered(runs: int, cmd: list[str], env: dict, cwd: Path = REPO) -> tuple[str, dict]:
    """`cmd` (with --json) `runs` times; only runs that exit 0 are timed. (what ran, as the
    first counted run's answer says; the figure, with the runs not counted and why)."""
    walls, cpus, label, not_counted = [], [], None, []
    for _ in range(runs):
        took, cpu, done = run_timed(cmd, env, cwd)
        checks = checks_of(done)
        if done.returncode == 0:
            walls.append(took)
            cpus.append(cpu)
            label = label or what_ran(checks)
        else:
            not_counted.append(f"exit {done.returncode} after {took:.2f} s: {what_ran(checks)}")
    figure: dict = dict(stats(walls), cpu=stats(cpus)) if walls else {
        "no run exited 0": True}
    if not_counted:
        figure["not counted"] = not_counted
    return label or "no run exited 0", figure


def stats(values: list[float]) -> dict:
    if not values:
        return {"runs": []}
    return {"median_s": round(statistics.median(values), 3), "min_s": round(min(values), 3),
            "runs": [round(v, 3) for v in values]}


def repeat(runs: int, fn) -> dict:
    return stats([fn(i) for i in range(runs)])


def startup(runs: int, base: Path, old: Path | None = None) -> dict:
    """Each figure as wall and CPU time; with `old`, that checkout's beside this one's, run for
    run (a loaded machine then slows both alike)."""
    trees = [REPO] + ([old] if old else [])
    out: dict = {}

    def measure(label: str, run) -> None:
        """`run(i, tree)` -> (wall, cpu) of one run."""
        took: dict[Path, list] = {t: [] for t in trees}
        for i in range(runs):
            for tree in trees:
                took[tree].append(run(i, tree))
        for tree in trees:
            walls, cpus = zip(*took[tree])
            figure = dict(stats(list(walls)), cpu=stats(list(cpus)))
            if tree == REPO:
                out[label] = figure
            else:
                out.setdefault("old code", {"tree": str(tree)})[label] = figure
                # run for run, so that a slower moment slows both sides of a ratio
                ratios = [a[0] / b[0] for a, b in zip(took[REPO], took[tree]) if b[0] > 0]
                out.setdefault("this over the old code (wall)", {})[label] = {
                    "min": round(min(ratios), 3), "median": round(statistics.median(ratios), 3)}

    def tool(*argv: str):
        return lambda i, tree: timed_cpu([*TOOL, *argv], cwd=tree)

    floor = {"python -c pass (floor)": [sys.executable, "-c", "pass"],
             "driver probe alone (python -I -S probes/driver.py)": [
                 sys.executable, "-I", "-S", str(REPO / "cudnn_setup" / "probes" / "driver.py")]}
    for label, cmd in floor.items():
        walls, cpus = zip(*[timed_cpu(cmd) for _ in range(runs)])
        out[label] = dict(stats(list(walls)), cpu=stats(list(cpus)))
    measure("cudnn-setup --version", tool("--version"))
    measure("cudnn-setup --help", tool("--help"))
    measure("cudnn-setup install --help", tool("install", "--help"))

    def install(i: int, tree: Path):
        root = make_cuda_root(base / f"fixed{i}", "10.0")
        try:
            return timed_cpu([*TOOL, "install", str(SAMPLE), "--cuda-root", str(root),
                              "--no-verify", "--no-theanorc", "--no-frameworks", "--json"],
                             cwd=tree)
        finally:
            shutil.rmtree(root)

    def manual(i: int, tree: Path):
        root, scratch = make_cuda_root(base / f"manual{i}", "10.0"), base / f"x{i}"
        scratch.mkdir()
        try:
            steps = [timed_cpu([sys.executable, "-c", "pass"]), timed_cpu(
                ["sh", "-c", f"tar -xzf {SAMPLE} -C {scratch} && cp -P {scratch}/cuda/include/"
                 f"cudnn*.h {root}/include/ && cp -P {scratch}/cuda/lib64/libcudnn* "
                 f"{root}/lib64/ && chmod a+r {root}/include/cudnn*.h {root}/lib64/libcudnn*"])]
            return tuple(sum(x) for x in zip(*steps))
        finally:
            shutil.rmtree(root)
            shutil.rmtree(scratch)

    measure("install of the 2.5 KB sample, --no-verify (fixed cost)", install)
    trees = [REPO]  # the manual steps are no code of either tree
    measure("python start + manual steps on the sample (floor)", manual)
    return out


# The checks of verify made in this process, one after another and each alone (children and
# all), with the suite's own arguments: the floors of running them side by side.
CHECKS_ALONE = r"""
import json, sys, time
from pathlib import Path
from cudnn_setup.checks.check_facts import CheckFacts
from cudnn_setup.checks.coherence import check_coherence_with
from cudnn_setup.checks.compile_check import check_compile
from cudnn_setup.checks.cuda_check import check_cuda_with
from cudnn_setup.checks.deps import check_deps_with
from cudnn_setup.checks.elf_check import check_elf
from cudnn_setup.checks.files_check import check_files
from cudnn_setup.checks.frameworks_check import frameworks_of
from cudnn_setup.checks.gpu import check_gpu_with
from cudnn_setup.checks.load_check import load_libcudnn
from cudnn_setup.checks.loader_check import check_loader_with
from cudnn_setup.checks.theano_check import check_theano
from cudnn_setup.checks.versions_check import check_versions
from cudnn_setup.child import Runner
from cudnn_setup.facts.loader import loader_environment
from cudnn_setup.parallel import Done
from cudnn_setup.probing.driver import driver_facts, has_driver
from cudnn_setup.installation.model import find_installation
from cudnn_setup.facts.cuda import find_cuda_root
from cudnn_setup.steps.command_facts import Facts
import os
root, theanorc, theano, frameworks = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] == "1", sys.argv[4] == "1"
env = dict(os.environ)
inst = find_installation(find_cuda_root(env, root))
facts = CheckFacts(Facts(env, Path(env.get("HOME", "/nonexistent")), Runner()), sys.executable,
                   theanorc)
took, status = {}, {}
def t(name, fn):
    s = time.perf_counter(); v = fn(); took[name] = time.perf_counter() - s
    first = v[0] if isinstance(v, tuple) else v
    if hasattr(first, "status"):
        status[name] = first.status
    return v
loader = t("loader environment", lambda: loader_environment(env))
driver = t("driver probe", lambda: driver_facts(env, loader=loader))
t("files", lambda: check_files(inst, facts)); t("elf", lambda: check_elf(inst, facts))
t("versions", lambda: check_versions(inst, facts))
load, data = t("load", lambda: load_libcudnn(inst, env))
t("coherence", lambda: check_coherence_with(inst, env, loader=loader, load_data=data))
t("deps", lambda: check_deps_with(inst, env, load_data=data, loader=loader,
                                  driver_present=True if has_driver(driver) else None))
t("loader", lambda: check_loader_with(inst, env, Path("/etc/ld.so.conf")))
t("cuda", lambda: check_cuda_with(inst, data))
t("compile", lambda: check_compile(inst, facts))
gpu = t("gpu", lambda: check_gpu_with(inst, env))
if frameworks:
    t("frameworks", lambda: frameworks_of(sys.executable, env, search=lambda: loader))
if theano:
    facts.started["gpu"] = Done(gpu)
    t("theano", lambda: check_theano(inst, facts))
print(json.dumps({"took": took, "status": status}))
"""


def verify(runs: int, root: Path, home: Path, old: Path | None = None) -> dict:
    env = dict(ENV, HOME=str(home))
    rc = home / ".theanorc"
    subprocess.run([*TOOL, "theanorc", "--cuda-root", str(root), "--theanorc", str(rc)],
                   env=env, cwd=REPO, capture_output=True)
    out = {}
    for label, extra, theano, frameworks in (
            ("--no-theano --no-frameworks", ["--no-theano", "--no-frameworks"], "0", "0"),
            ("defaults", [], "1", "1")):
        cmd = [*TOOL, "verify", "--cuda-root", str(root), "--theanorc", str(rc), "--json", *extra]
        run_timed(cmd, env)  # warm: Theano's compile cache, the page cache
        trees = [REPO] + ([old] if old else [])
        for tree in trees[1:]:
            run_timed(cmd, env, cwd=tree)
        took: dict[Path, list[tuple[str, dict]]] = {t: [] for t in trees}
        for _ in range(runs):  # the trees one after the other in each round: the same noise
            for tree in trees:
                took[tree].append(answered(1, cmd, env, cwd=tree))
        ran, side_by_side = merged(took[REPO])
        if old:
            old_ran, figure = merged(took[old])
            out.setdefault("old code", {})[label] = dict(figure, tree=str(old), checks=old_ran)
        alone = []
        for _ in range(runs if frameworks == "0" else 1):  # the frameworks alone: seconds each
            got = subprocess.run([sys.executable, "-c", CHECKS_ALONE, str(root), str(rc), theano,
                                  frameworks], env=env, cwd=REPO, capture_output=True, text=True)
            alone.append(json.loads(got.stdout.strip().splitlines()[-1]))
        each = {k: round(statistics.median(a["took"][k] for a in alone), 3)
                for k in alone[0]["took"]}
        status = alone[0]["status"]
        slowest = max(each, key=each.get)
        apt = apt_with_its_cache(home) if frameworks == "0" else None
        if apt is not None:  # this machine's apt rebuilds its cache on every query
            side_by_side["with apt's own cache (APT_CONFIG)"] = answered(
                runs, cmd, dict(env, APT_CONFIG=str(apt)))[1]
        out[label] = {f"verify (checks side by side; {ran})": side_by_side,
                      "one after another, in process (the old order)": round(sum(each.values()), 3),
                      "slowest single check alone (floor)": {
                          "check": slowest, "s": each[slowest], "status": status.get(slowest)},
                      "each check alone (s, status)": {k: (v, status.get(k))
                                                       for k, v in each.items()}}
        if any(st == "fail" for st in status.values()):
            out[label]["the checks alone are no floor: these failed"] = sorted(
                k for k, st in status.items() if st == "fail")
    return out


def merged(rounds: list[tuple[str, dict]]) -> tuple[str, dict]:
    """One figure from rounds of `answered(1, ...)`: the runs that exited 0 and those that did
    not; what ran, as the first counted run said."""
    walls = [r for _, fig in rounds for r in fig.get("runs", [])]
    cpus = [r for _, fig in rounds for r in fig.get("cpu", {}).get("runs", [])]
    skipped = [n for _, fig in rounds for n in fig.get("not counted", [])]
    ran = next((label for label, fig in rounds if fig.get("runs")), "no run exited 0")
    figure: dict = dict(stats(walls), cpu=stats(cpus)) if walls else {"no run exited 0": True}
    if skipped:
        figure["not counted"] = skipped
    return ran, figure


def apt_with_its_cache(home: Path) -> Path | None:
    """An APT_CONFIG under `home` giving apt back the cache files that Docker images turn off
    (/etc/apt/apt.conf.d/docker-clean: Dir::Cache::pkgcache ""), built once: without them
    every `apt-cache policy` (deps' question for the fixes of a missing library) rebuilds the
    cache from the package lists, most of a second; with them it answers in milliseconds, as
    on a machine whose apt keeps its cache. None where apt-cache is absent or keeps its cache."""
    clean = Path("/etc/apt/apt.conf.d/docker-clean")
    if shutil.which("apt-cache") is None or not clean.is_file() or \
            'pkgcache ""' not in clean.read_text(errors="replace"):
        return None
    base = home / "apt"
    (base / "parts").mkdir(parents=True, exist_ok=True)
    conf = base / "apt.conf"
    conf.write_text(f'Dir::Etc::Parts "{base}/parts";\nDir::Cache::pkgcache "{base}/pkgcache.bin";\n'
                    f'Dir::Cache::srcpkgcache "{base}/srcpkgcache.bin";\n')
    done = subprocess.run(["apt-cache", "gencaches"], env=dict(ENV, APT_CONFIG=str(conf)),
                          capture_output=True)
    return conf if done.returncode == 0 else None


def sha256_seconds(path: Path) -> float:
    """The time to hash `path` with sha256: the least a re-read of it costs."""
    start = time.perf_counter()
    with open(path, "rb") as f:
        hashlib.file_digest(f, "sha256") if hasattr(hashlib, "file_digest") else \
            hashlib.sha256(f.read())
    return time.perf_counter() - start


def again(runs: int, archive: Path, root: Path, home: Path) -> dict:
    env = dict(ENV, HOME=str(home))
    cmd = [*TOOL, "install", str(archive), "--cuda-root", str(root), "--no-verify",
           "--no-theanorc", "--json"]
    timed(cmd, env)
    changed = json.loads(subprocess.run(cmd, env=env, cwd=REPO, capture_output=True,
                                        text=True).stdout)["changed"]

    def sha(i: int) -> float:
        return sha256_seconds(archive)

    lib_dir = next((root / d for d in ("lib64", "lib") if (root / d).is_dir()), root / "lib64")
    decode = ["sh", "-c", f"gzip -dc {archive} >/dev/null" if archive.name.endswith("gz")
              else f"xz -dc -T0 {archive} >/dev/null"]
    return {"archive": str(archive), "size_mib": round(archive.stat().st_size / 2**20, 1),
            "changed": changed,
            "install of the same archive again, --no-verify": repeat(runs, lambda i: timed(cmd, env)),
            # the advice taken: its lib dir first on LD_LIBRARY_PATH, so the frameworks what-if
            # has no change to try (the frameworks imported once, not twice)
            "the same, its lib dir already first on LD_LIBRARY_PATH": repeat(
                runs, lambda i: timed(cmd, dict(env, LD_LIBRARY_PATH=str(lib_dir)))),
            # the install's own work: no framework imported for the loader advice
            "the same with --no-frameworks": repeat(
                runs, lambda i: timed([*cmd, "--no-frameworks"], env)),
            # as a user runs it: verify too, beside the what-if's imports
            **with_verify(runs, [c for c in cmd if c != "--no-verify"], env),
            "sha256 of the archive (the least a re-read costs)": repeat(runs, sha),
            "decoding the archive to nowhere (what the old path did, and more)": repeat(
                1, lambda i: timed(decode))}


def with_verify(runs: int, cmd: list[str], env: dict) -> dict:
    ran, figure = answered(runs, cmd, env)
    return {f"the same with verify (defaults but --no-theanorc; {ran})": figure}


def by_version(runs: int, wheel: Path, base: Path, home: Path) -> dict:
    """`install VERSION --from pypi` of the wheel installed, from a file:// index of it."""
    found = re.match(r"(nvidia_cudnn_cu(\d+))-(\d+\.\d+\.\d+)", wheel.name)
    if found is None:
        raise SystemExit(f"{wheel.name} is not an nvidia_cudnn_cuNN wheel")
    project, major, version = found.group(1).replace("_", "-"), found.group(2), found.group(3)
    index = base / "index"
    (index / project).mkdir(parents=True)
    with open(wheel, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest() if hasattr(hashlib, "file_digest") \
            else hashlib.sha256(f.read()).hexdigest()
    (index / project / "index.html").write_text(
        f'<html><body><a href="{wheel.resolve().as_uri()}#sha256={digest}">{wheel.name}</a>'
        "</body></html>\n")
    root = make_cuda_root(base / "by-version", {"11": "11.8", "13": "13.0"}.get(major, "12.4"))
    env = dict(ENV, HOME=str(home))
    cmd = [*TOOL, "install", version, "--from", "pypi", "--index-url", index.as_uri(),
           "--cuda-root", str(root), "--no-verify", "--no-theanorc", "--no-frameworks", "--json"]

    def answer() -> dict:
        done = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True)
        return {"exit_code": done.returncode, **json.loads(done.stdout)}

    first = answer()
    if first["exit_code"] != 0:
        raise SystemExit(f"installing {wheel.name} failed: {first.get('error')}")
    again = answer()
    times = repeat(runs, lambda i: timed(cmd, env))
    lib = next(p for p in sorted((root / "lib64").glob("libcudnn_ops.so.*")) if not p.is_symlink())
    with open(lib, "r+b") as f:  # one byte of one library changed, its stat with it
        f.seek(4096)
        byte = f.read(1)
        f.seek(4096)
        f.write(bytes([byte[0] ^ 1]))
    changed = answer()
    shutil.rmtree(root)

    def sha(i: int) -> float:
        return sha256_seconds(wheel)

    return {"wheel": str(wheel), "size_mib": round(wheel.stat().st_size / 2**20, 1),
            "version": version, "changed": again["changed"], "notes": again["install"]["notes"],
            f"install {version} --from pypi again, --no-verify": times,
            "sha256 of the wheel (the least a re-read costs)": repeat(runs, sha),
            "with one library changed since": {"exit_code": changed["exit_code"],
                                               "error": (changed.get("error") or {}).get("code")}}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--verify-runs", type=int, help="runs of each verify (default: --runs)")
    p.add_argument("--archive", type=Path, help="a real cuDNN archive (e.g. fixtures.repack of "
                   "an nvidia-cudnn wheel) for verify and the same archive again")
    p.add_argument("--root", type=Path, help="a root that archive is installed in (default: "
                   "installed here, in a temporary root)")
    p.add_argument("--cuda-include", type=Path, default=Path("/usr/local/cuda/include"))
    p.add_argument("--wheel", type=Path, help="an nvidia-cudnn-cuNN wheel: time installing its "
                   "version again from a file:// index of it (--from pypi)")
    p.add_argument("--skip", action="append", default=[],
                   choices=["startup", "verify", "again", "by-version"])
    p.add_argument("--json", type=Path)
    p.add_argument("--old", type=Path, help="an older checkout whose start-up, fixed cost and "
                   "verify are timed beside this one's, run for run")
    args = p.parse_args()
    for tree in [REPO] + ([args.old] if args.old else []):
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "cudnn_setup")],
                       stdout=subprocess.DEVNULL, env=ENV)
    result = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0],
                          "uname": os.uname().release},
              "load_average": {"before": [round(x, 2) for x in os.getloadavg()]}}
    with tempfile.TemporaryDirectory(prefix="cudnn-wait-") as tmp:
        base = Path(tmp)
        home = base / "home"
        home.mkdir()
        if "startup" not in args.skip:
            result["startup"] = startup(args.runs, base, args.old)
            print(json.dumps(result["startup"], indent=1), flush=True)
        if args.archive or args.root:
            root = args.root
            if root is None:
                found = re.search(r"_cuda(\d+)", args.archive.name)
                root = make_cuda_root(base / "root", {"11": "11.8", "13": "13.0"}.get(
                    found.group(1), "12.4") if found else "12.4")
                if args.cuda_include.is_dir():
                    shutil.copytree(args.cuda_include, root / "include", dirs_exist_ok=True)
                subprocess.run([*TOOL, "install", str(args.archive), "--cuda-root", str(root),
                                "--no-verify", "--no-theanorc", "--no-frameworks"], check=True,
                               env=dict(ENV, HOME=str(home)), cwd=REPO, capture_output=True)
            if "verify" not in args.skip:
                result["verify"] = verify(args.verify_runs or args.runs, root, home, args.old)
                print(json.dumps(result["verify"], indent=1), flush=True)
            if "again" not in args.skip and args.archive:
                result["again"] = again(args.runs, args.archive, root, home)
                print(json.dumps(result["again"], indent=1), flush=True)
        if args.wheel and "by-version" not in args.skip:
            result["by_version"] = by_version(args.runs, args.wheel, base, home)
            print(json.dumps(result["by_version"], indent=1), flush=True)
    result["load_average"]["after"] = [round(x, 2) for x in os.getloadavg()]
    print(f"load average before {result['load_average']['before']}, "
          f"after {result['load_average']['after']}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
