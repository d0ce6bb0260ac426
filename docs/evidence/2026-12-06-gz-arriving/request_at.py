"""How long after it is started each command asks a server on 127.0.0.1 for the archive:
`install URL --sha256` (--no-verify --no-theanorc --no-frameworks, a fresh sandbox root) against
`download URL --sha256`, taking turns, each with a fresh HOME; the bundled 2.5 KB sample.

    .venv/bin/python docs/evidence/2026-12-06-gz-arriving/request_at.py [RUNS]
"""
import hashlib
import http.server
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from fixtures.generate import make_cuda_root  # noqa: E402

SAMPLE = REPO / "fixtures" / "samples" / "cudnn-10.0-linux-x64-v7.4.2.24.tgz"


def main() -> int:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    data = SAMPLE.read_bytes()
    asked: list[float] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            asked.append(time.monotonic())
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/{SAMPLE.name}"
    common = [url, "--sha256", hashlib.sha256(data).hexdigest(), "--json"]
    took: dict[str, list[float]] = {"install": [], "download": []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(runs):
            for command in took:
                home, root = Path(tmp) / "home", Path(tmp) / "root"
                shutil.rmtree(home, ignore_errors=True)
                shutil.rmtree(root, ignore_errors=True)
                home.mkdir()
                make_cuda_root(root, "10.0")
                extra = ["--cuda-root", str(root), "--no-verify", "--no-theanorc",
                         "--no-frameworks"] if command == "install" else []
                asked.clear()
                started = time.monotonic()
                done = subprocess.run(
                    [sys.executable, "-m", "cudnn_setup", command, *common, *extra],
                    env=dict(os.environ, HOME=str(home), XDG_CACHE_HOME=str(home / "cache"),
                             PYTHONPATH=str(REPO)), capture_output=True, cwd=REPO)
                if done.returncode != 0:
                    sys.exit(f"{command} failed: {done.stderr[-400:]!r}")
                took[command].append(asked[0] - started)
    server.shutdown()
    for command, values in took.items():
        print(f"{command}: the archive asked for {min(values):.3f} / "
              f"{statistics.median(values):.3f} s after the start (min / median of {runs})")
    print(f"load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
