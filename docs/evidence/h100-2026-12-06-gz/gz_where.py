"""Where a .tar.gz install's stream spends its time on many cores: the stages of the tool's
reading pipeline one by one, alternated in rounds, in this process (imports done first).

    python gz_where.py ARCHIVE.tar.gz WORKDIR [--rounds N] [--json OUT]

Each figure is the wall time of one stage set, min and median over the rounds:
  rg-file      rapidgzip reading the archive by path, output read in 1 MiB pieces, dropped
  rg-tee       the tool's decoder: rapidgzip fed by the hashing feeder child (as installs run)
  rg-tee-b3    the same, each piece also hashed with BLAKE3 on the reading thread
  walk         the tool's whole read (reader.read): members judged, hashed and written to a
               staging dir as the tool chooses (direct I/O where allowed), then sync
  walk-cached  the same with every write through the page cache, then sync
  rg-child     rapidgzip in a child of its own, between the hashing feeder and this process,
               its output read from a pipe (this process's GIL is then free while it waits)
  walk-child   the tool's whole read with that decoding child
  floor        rapidgzip by path writing the tar into one file, fsync'd
  sha256       the archive's sha256 alone;  b3  its BLAKE3 alone (one thread)
"""
import argparse
import hashlib
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import rapidgzip  # noqa: E402
from blake3 import blake3  # noqa: E402

from cudnn_setup.archive import decoders, reader, staging  # noqa: E402
from cudnn_setup.digest import BLAKE3  # noqa: E402

MIB = 1 << 20


def drain(stream, hash_it=None) -> int:
    buf = bytearray(MIB)
    view, total = memoryview(buf), 0
    while n := stream.readinto(buf):
        total += n
        if hash_it is not None:
            hash_it.update(view[:n])
    return total


def rg_file(a, w):
    with rapidgzip.open(str(a), parallelization=decoders.usable_cores()) as f:
        return drain(f)


def rg_tee(a, w, b3=False):
    d = decoders.Decoder(a, decoders.GZIP, None, gzip=decoders.RAPIDGZIP, env=dict(os.environ))
    n = drain(d.stream, blake3() if b3 else None)
    complaint = d.finish(True)
    assert complaint is None and len(d.sha256) == 64, complaint
    return n


DECODE_CHILD = (
    "import os, sys, rapidgzip\n"
    "buf = bytearray(4 << 20); view = memoryview(buf)\n"
    "with rapidgzip.open(0, parallelization=int(sys.argv[1])) as f:\n"
    "    while n := f.readinto(buf):\n"
    "        out = view[:n]\n"
    "        while out: out = out[os.write(1, out):]\n")


class _ChildOut(io.RawIOBase):
    """The decoding child's stdout; closing it waits for the child."""

    def __init__(self, proc):
        self.proc = proc

    def readable(self):
        return True

    def readinto(self, b):
        return self.proc.stdout.readinto(b)

    def close(self):
        if not self.closed:
            self.proc.stdout.close()
            assert self.proc.wait() == 0
        super().close()


def _rapidgzip_child(self, on_read):
    self.proc = subprocess.Popen([sys.executable, "-I", "-S", str(decoders.TEE_SCRIPT)],
                                 stdin=self.raw.file, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, bufsize=0, env=dict(self.env))
    decodes = subprocess.Popen([sys.executable, "-c", DECODE_CHILD, str(decoders.usable_cores())],
                               stdin=self.proc.stdout, stdout=subprocess.PIPE, bufsize=0,
                               env=dict(self.env))
    decoders._widen_pipe(self.proc.stdout)
    decoders._widen_pipe(decodes.stdout)
    return decoders._Progress(_ChildOut(decodes), self.raw.file.fileno(), on_read)


def rg_child(a, w, through=None):
    saved = decoders.Decoder._rapidgzip
    decoders.Decoder._rapidgzip = _rapidgzip_child
    try:
        return (through or rg_tee)(a, w)
    finally:
        decoders.Decoder._rapidgzip = saved


def walk(a, w, cached=False):
    out = w / "staging"
    out.mkdir()
    saved = staging.direct_io_allowed
    if cached:
        staging.direct_io_allowed = lambda p: False
    try:
        listing = reader.read(a, out, lambda m: True, content_hash=BLAKE3, env=dict(os.environ),
                              gzip=decoders.RAPIDGZIP)
    finally:
        staging.direct_io_allowed = saved
    assert not listing.problems, listing.problems
    os.sync()
    return listing.size


def floor(a, w):
    with rapidgzip.open(str(a), parallelization=decoders.usable_cores()) as f, \
            open(w / "floor.tar", "wb") as out:
        shutil.copyfileobj(f, out, 4 * MIB)
        out.flush()
        os.fsync(out.fileno())
    return 0


def hash_file(a, w, h):
    with open(a, "rb") as f:
        while chunk := f.read(MIB):
            h.update(chunk)
    return 0


STAGES = {
    "rg-file": rg_file, "rg-tee": rg_tee, "rg-tee-b3": lambda a, w: rg_tee(a, w, True),
    "rg-child": rg_child, "walk-child": lambda a, w: rg_child(a, w, walk),
    "walk": walk, "walk-cached": lambda a, w: walk(a, w, True), "floor": floor,
    "sha256": lambda a, w: hash_file(a, w, hashlib.sha256()),
    "b3": lambda a, w: hash_file(a, w, blake3()),
}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("archive", type=Path)
    p.add_argument("work", type=Path)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    times = {k: [] for k in STAGES}
    load = [os.getloadavg()]
    for _ in range(args.rounds):
        for name, stage in STAGES.items():
            w = args.work / name
            shutil.rmtree(w, ignore_errors=True)
            w.mkdir(parents=True)
            os.sync()
            t = time.perf_counter()
            stage(args.archive, w)
            times[name].append(time.perf_counter() - t)
            shutil.rmtree(w)
    load.append(os.getloadavg())
    out = {"archive": str(args.archive), "bytes": args.archive.stat().st_size,
           "cores": decoders.usable_cores(), "lanes": staging.hash_lanes(decoders.usable_cores()),
           "writers": staging.write_threads(decoders.usable_cores()),
           "direct": staging.direct_io_allowed(args.work), "load": load,
           "stages": {k: {"min": round(min(v), 3), "median": round(statistics.median(v), 3),
                          "all": [round(x, 3) for x in v]} for k, v in times.items()}}
    for k, v in out["stages"].items():
        print(f"{k:12s} {v['min']:.3f} / {v['median']:.3f} s")
    print(json.dumps({k: v for k, v in out.items() if k != "stages"}))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
