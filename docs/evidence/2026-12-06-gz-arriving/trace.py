"""Where an overlapped install of a .tar.gz at 1000 MB/s spends the time after the download:
bench/install_trace.py's timeline of `install URL --sha256`, the download's thread and the
decoder's traced too, from bench/overlap_speed.py's throttled server in this process.

    python docs/evidence/2026-12-06-gz-arriving/trace.py ARCHIVE.tar.xz WORK OUT [RUNS]
"""
import hashlib
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from bench.overlap_speed import Throttled, gzip_copy  # noqa: E402
from fixtures.generate import make_cuda_root  # noqa: E402

SPANS = ["cudnn_setup.steps.overlap:Download._body",
         "cudnn_setup.fetch.downloader:Downloader._write",
         "cudnn_setup.archive.decoders:ReadAhead._run",
         "cudnn_setup.archive.decoders:Decoder._arrived_whole",
         "cudnn_setup.archive.reader:read"]


def main() -> int:
    xz, work, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    runs = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    gz = gzip_copy(xz, work)
    data = gz.read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))
    with Throttled({f"/{gz.name}": data}, 1000e6) as server:
        for i in range(runs):
            root = make_cuda_root(work / f"troot{i}", "13.0")
            home = work / f"thome{i}"
            home.mkdir(exist_ok=True)
            spans = [a for s in SPANS for a in ("--span", s)]
            done = subprocess.run(
                [sys.executable, str(REPO / "bench" / "install_trace.py"), *spans, "install",
                 server.url + gz.name, "--sha256", sha, "--cuda-root", str(root), "--no-verify",
                 "--no-theanorc", "--no-frameworks", "--json"],
                env=dict(env, HOME=str(home), XDG_CACHE_HOME=str(home / "cache")),
                capture_output=True, text=True)
            (out / f"trace-{i}.txt").write_text(
                "\n".join(line for line in done.stderr.splitlines()
                          if not line.startswith("cudnn-setup:")) + "\n")
            print(f"run {i}: exit {done.returncode}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
