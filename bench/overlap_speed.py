"""Time `install VERSION` with a cold cache against the download alone, from a local server
throttled to a given rate: the download overlapped with the install, measured.

    python bench/overlap_speed.py --archive PATH [--rates 100,1000] [--runs 3] [--json OUT]
    python bench/overlap_speed.py --wheel WHEEL [--rates 100,1000] [--runs 3] [--json OUT]

PATH is a cuDNN archive under NVIDIA's name (cudnn-<platform>-X.Y.Z.B_cudaNN-archive.tar.xz or
.tar.gz); `--gzip` also makes a .tar.gz of the same tar (gzip -1, kept in --work) and times it
too (`--gzip-only`: only that). WHEEL is NVIDIA's nvidia_cudnn_cuNN-X.Y.Z.B-…whl (an --archive of that name is taken as
one): it is served as a PEP 503 index (`--index-url URL`, the sha256 in the link, as PyPI
gives it) and the commands below get VERSION with `--index-url` instead of `--mirror`.
A server in this process serves an archive as a mirror of NVIDIA's tree (one redistrib JSON with
its sha256 and size, Range requests honoured) at each rate of --rates, in MB/s (10**6 bytes).
For each archive and rate, --runs rounds, each alternating, each into a fresh cache and root:

  download  `cudnn-setup download VERSION --mirror URL --cuda N` (the download alone: the same
            requests, hashing and cache writes as install's, nothing decoded)
  install   `cudnn-setup install VERSION --mirror URL --cuda-root R --no-verify --no-theanorc
            --no-frameworks` with a cold cache (the download overlapped with the install)
            (a .tar.gz, which NVIDIA's trees do not hold: by its URL with --sha256, both)
  local     the same install of the archive the download left in the cache (the install
            alone, nothing downloaded: what a download-then-install would add to the download)

and prints min and median of each (wall seconds; CPU seconds of the children), install/download
(the target: at most 1.15), (download + local)/download (what running them one after the other
would cost), max(download, local)/download (the least any overlap can reach: every byte must
arrive, and every byte must be decoded and written), and the load average before and after. Only runs that exited 0 count.
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
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from fixtures.generate import make_cuda_root  # noqa: E402

NAME = re.compile(r"cudnn-(?P<platform>[a-z0-9_-]+?)-(?P<version>\d+\.\d+\.\d+\.\d+)_cuda"
                  r"(?P<cuda>\d+)-archive\.tar\.(?:xz|gz)\Z")
WHEEL = re.compile(r"nvidia_cudnn_cu(?P<cuda>\d+)-(?P<version>\d+\.\d+\.\d+\.\d+)-.*\.whl\Z")
PIECE = 256 << 10


class Throttled:
    """Files served from memory at `rate` bytes a second (a token bucket in 256 KiB pieces)."""

    def __init__(self, files: dict[str, bytes], rate: float):
        self.files, self.rate = files, rate
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_HEAD(self):
                self._answer(False)

            def do_GET(self):
                self._answer(True)

            def _answer(self, body: bool):
                data = server.files.get(self.path.split("?")[0])
                if data is None:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                start = 0
                m = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", ""))
                if m and int(m.group(1)) < len(data):
                    start = int(m.group(1))
                self.send_response(206 if start else 200)
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.send_header("Content-Length", str(len(data) - start))
                if self.path.endswith("/"):  # a page of the index, or the mirror's listing
                    self.send_header("Content-Type", "text/html")
                self.end_headers()
                if not body:
                    return
                view = memoryview(data)
                began, sent = time.monotonic(), 0
                try:
                    for i in range(start, len(data), PIECE):
                        piece = view[i:i + PIECE]
                        ahead = (sent + len(piece)) / server.rate - (time.monotonic() - began)
                        if ahead > 0:
                            time.sleep(ahead)
                        self.wfile.write(piece)
                        sent += len(piece)
                except OSError:
                    self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/"

    def __enter__(self) -> "Throttled":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def mirror_files(archive: Path) -> tuple[dict[str, bytes], str, str]:
    """The mirror's files (index page, manifest, archive) by path; the version; CUDA major."""
    m = NAME.match(archive.name)
    if m is None:
        sys.exit(f"{archive.name} is not named as NVIDIA names cuDNN archives")
    data = archive.read_bytes()
    version, platform, cuda = m.group("version"), m.group("platform"), m.group("cuda")
    label = ".".join(version.split(".")[:3])
    rel = f"cudnn/{platform}/{archive.name}"
    manifest = {"release_date": "2026-01-15", "release_label": label, "release_product": "cudnn",
                "cudnn": {"name": "NVIDIA CUDA Deep Neural Network library", "license": "cudnn",
                          "version": version, "cuda_variant": [cuda],
                          platform: {f"cuda{cuda}": {
                              "relative_path": rel, "sha256": hashlib.sha256(data).hexdigest(),
                              "md5": hashlib.md5(data).hexdigest(), "size": str(len(data))}}}}
    files = {f"/redistrib_{label}.json": json.dumps(manifest).encode(), f"/{rel}": data,
             "/": f'<a href="redistrib_{label}.json">x</a>\n'.encode()}
    return files, version, cuda


def index_files(wheel: Path) -> tuple[dict[str, bytes], str, str]:
    """A PEP 503 index holding the wheel (its page, the wheel) by path; the version; CUDA
    major."""
    from fixtures.wheels import IndexFile, project_html

    m = WHEEL.match(wheel.name)
    if m is None:
        sys.exit(f"{wheel.name} is not named as NVIDIA names its cuDNN wheels")
    data = wheel.read_bytes()
    project = f"nvidia-cudnn-cu{m['cuda']}"
    page = project_html(project, [IndexFile(wheel.name, f"/files/{wheel.name}",
                                            hashlib.sha256(data).hexdigest())])
    return ({f"/simple/{project}/": page, f"/files/{wheel.name}": data}, m["version"],
            m["cuda"])


def gzip_copy(archive: Path, work: Path) -> Path:
    out = work / archive.name.replace(".tar.xz", ".tar.gz")
    if not out.exists():
        with open(out.with_suffix(".tmp"), "wb") as f:
            xz = subprocess.Popen(["xz", "-dc", "-T0", str(archive)], stdout=subprocess.PIPE)
            subprocess.run(["gzip", "-1", "-n", "-c"], stdin=xz.stdout, stdout=f, check=True)
            if xz.wait() != 0:
                sys.exit(f"xz could not decode {archive}")
        os.replace(out.with_suffix(".tmp"), out)
    return out


def timed(args: list[str], env: dict) -> tuple[float, float, dict]:
    """(wall seconds, CPU seconds of the children, the JSON answer) of one run of the tool."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "cudnn_setup", *args, "--json"], env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    try:
        answer = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        answer = {}
    if done.returncode != 0 or not answer.get("ok"):
        print(f"  run failed (exit {done.returncode}): {done.stderr.strip()[-400:]}",
              file=sys.stderr)
        return float("nan"), cpu, answer
    return wall, cpu, answer


def summary(values: list[float]) -> dict:
    ok = [v for v in values if v == v]
    return {"runs": len(ok), "min": round(min(ok), 3) if ok else None,
            "median": round(statistics.median(ok), 3) if ok else None,
            "all": [round(v, 3) for v in values]}


def bench(archive: Path, rate_mb: float, runs: int, work: Path, env: dict) -> dict:
    is_wheel = archive.name.endswith(".whl")
    if is_wheel:
        files, version, cuda = index_files(archive)
        rel = f"files/{archive.name}"
    else:
        files, version, cuda = mirror_files(archive)
        rel = f"cudnn/{NAME.match(archive.name)['platform']}/{archive.name}"  # type: ignore[index]
    size = len(files[f"/{rel}"])
    sha256 = hashlib.sha256(files[f"/{rel}"]).hexdigest()
    walls: dict[str, list[float]] = {"download": [], "install": [], "local": []}
    cpus: dict[str, list[float]] = {k: [] for k in walls}
    with Throttled(files, rate_mb * 1e6) as server:
        # NVIDIA's trees hold .tar.xz only: a .tar.gz is installed by its URL and --sha256
        source = ([version, "--index-url", server.url + "simple/"] if is_wheel else
                  [version, "--mirror", server.url] if archive.name.endswith(".tar.xz") else
                  [server.url + rel, "--sha256", sha256])
        for i in range(runs):
            scratch = Path(tempfile.mkdtemp(prefix="overlap-", dir=work))
            try:
                cache = scratch / "cache"
                wall, cpu, got = timed(["download", *source, *(
                    ["--cuda", cuda] if source[0] == version else []),
                    "--cache-dir", str(cache)], env)
                walls["download"].append(wall)
                cpus["download"].append(cpu)
                cached = Path(got.get("download", {}).get("path", cache / archive.name))
                root = make_cuda_root(scratch / "root", f"{cuda}.0")
                wall, cpu, _ = timed(["install", *source,
                                      "--cuda-root", str(root), "--cache-dir",
                                      str(scratch / "cold"), "--no-verify", "--no-theanorc",
                                      "--no-frameworks"], env)
                walls["install"].append(wall)
                cpus["install"].append(cpu)
                shutil.rmtree(scratch / "cold", ignore_errors=True)  # disk for the next one
                local = make_cuda_root(scratch / "local", f"{cuda}.0")
                wall, cpu, _ = timed(["install", str(cached), "--cuda-root", str(local),
                                      "--no-verify", "--no-theanorc", "--no-frameworks"], env)
                walls["local"].append(wall)
                cpus["local"].append(cpu)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            print(f"  {archive.name} at {rate_mb:g} MB/s, run {i + 1}: " + ", ".join(
                f"{k} {v[-1]:.2f} s" for k, v in walls.items()), file=sys.stderr)
    out = {"archive": archive.name, "bytes": size, "rate_mb_s": rate_mb,
           "wire_floor_s": round(size / (rate_mb * 1e6), 3),
           **{k: summary(v) for k, v in walls.items()},
           "cpu_s": {k: summary(v) for k, v in cpus.items()}}
    pairs = [(i, d) for i, d in zip(walls["install"], walls["download"]) if i == i and d == d]
    if pairs:
        ratios = [i / d for i, d in pairs]
        out["install_over_download"] = {"min": round(min(ratios), 3),
                                        "median": round(statistics.median(ratios), 3)}
        seq = [(d + loc) / d for d, loc in zip(walls["download"], walls["local"])
               if d == d and loc == loc]
        if seq:
            out["one_after_the_other_over_download"] = {"min": round(min(seq), 3),
                                                        "median": round(statistics.median(seq), 3)}
        # The least an overlapped install can take: every byte must arrive (the download) and
        # every byte must be decoded and written (the local install of the same file, which
        # starts up once as well). Where the local install is the longer, 1.15 × the download is
        # out of reach whatever the overlap.
        bound = [max(d, loc) / d for d, loc in zip(walls["download"], walls["local"])
                 if d == d and loc == loc]
        if bound:
            out["bound_over_download"] = {"min": round(min(bound), 3),
                                          "median": round(statistics.median(bound), 3)}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--archive", type=Path)
    what.add_argument("--wheel", type=Path, help="NVIDIA's cuDNN wheel, served as an index")
    parser.add_argument("--rates", default="100,1000", help="MB/s, comma-separated")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--gzip", action="store_true", help="also a .tar.gz of the same tar")
    parser.add_argument("--gzip-only", action="store_true",
                        help="only the .tar.gz of --gzip, not the .tar.xz itself")
    parser.add_argument("--work", type=Path, default=None, help="scratch space (default: a "
                        "temporary dir on the filesystem of --archive's copy)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="overlap-speed-"))
    work.mkdir(parents=True, exist_ok=True)
    archive = args.archive or args.wheel
    archives = [archive] + ([gzip_copy(archive, work)] if args.gzip and archive.name.endswith(
        ".tar.xz") else [])
    if args.gzip_only:
        archives = archives[1:]
    home = work / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CUDA_", "CUDNN_SETUP_", "XDG_", "THEANO"))}
    # the tree first, then whatever path the caller's dependencies come from (a machine where
    # they are installed with --target, not into the interpreter)
    env.update({"HOME": str(home), "PYTHONPATH": os.pathsep.join(
        [str(REPO)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))})
    load_before = os.getloadavg()
    results = []
    for archive in archives:
        for rate in (float(r) for r in args.rates.split(",")):
            results.append(bench(archive, rate, args.runs, work, env))
    load_after = os.getloadavg()
    report = {"cores": os.cpu_count(), "load_before": [round(x, 2) for x in load_before],
              "load_after": [round(x, 2) for x in load_after], "runs": args.runs,
              "python": sys.version.split()[0], "results": results}
    for r in results:
        print(f"{r['archive']} at {r['rate_mb_s']:g} MB/s ({r['bytes']} bytes, "
              f"{r['wire_floor_s']} s on the wire): download {r['download']['min']} / "
              f"{r['download']['median']} s, install {r['install']['min']} / "
              f"{r['install']['median']} s, local install {r['local']['min']} / "
              f"{r['local']['median']} s; install/download "
              f"{r.get('install_over_download')}, one after the other/download "
              f"{r.get('one_after_the_other_over_download')}, the bound (the longer of the "
              f"download and the local install)/download {r.get('bound_over_download')}")
    print(f"load average before {report['load_before']}, after {report['load_after']}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
