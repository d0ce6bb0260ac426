"""Tar headers that lie about their size, chain without end or describe sparse files: refused
with a problem each, in bounded memory, and nothing written."""
import io
import json
import subprocess
import sys
import tarfile

import pytest

from conftest import REPO, clean_env, run_json, tree_state
from cudnn_setup.archive import reader
from fixtures.generate import GENERATION_SAMPLES, SPECS, Entry, compress, spec_entries
from fixtures.hostile import BASE, HEADER_CASES, build_header_case, damaged

PEAK_RSS_LIMIT = 200 << 20


@pytest.mark.parametrize("case", HEADER_CASES, ids=[c.name for c in HEADER_CASES])
def test_hostile_headers_are_refused(case, tmp_path, home):
    path = build_header_case(case, tmp_path)
    done, out = run_json(["inspect", path], home)
    assert done.returncode == 3, (done.stdout, done.stderr)
    assert out["error"]["exit_code"] == 3 and out["error"]["code"] == "archive-rejected"
    messages = [p["message"] for p in out["package"]["problems"]]
    assert any(case.expect in m for m in messages), messages
    assert "Traceback" not in done.stderr


# `inspect` of each archive in turn in one process of its own, which reports after each the
# high-water mark of its memory (VmHWM), reset before each run (clear_refs): every run's own peak,
# and the interpreter is started and the tool imported once, not once per archive. Not wait4's
# ru_maxrss: Linux counts into it the RSS of the forked copy of the parent (here pytest, a few
# hundred MB) that exec replaced.
MEASURE = """
import io, json, sys
from cudnn_setup.cli import main

for path in sys.argv[1:]:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    out = io.StringIO()
    code = main(["inspect", path, "--json"], stdout=out)
    with open("/proc/self/status") as f:
        peak = next(line.split()[1] for line in f if line.startswith("VmHWM:"))
    print(json.dumps({"exit": code, "peak_kb": int(peak), "stdout": out.getvalue()}), flush=True)
"""


def _peak_rss(paths: list, home) -> list[tuple[int, int, str]]:
    """Exit code, peak RSS in bytes and stdout of `inspect PATH --json` for each of `paths`."""
    done = subprocess.run([sys.executable, "-c", MEASURE, *map(str, paths)], env=clean_env(home),
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(runs) == len(paths), done.stdout
    return [(r["exit"], r["peak_kb"] * 1024, r["stdout"]) for r in runs]


def test_peak_memory_stays_bounded_on_the_whole_corpus(tmp_path, home, archives, record_property):
    """Peak RSS of `inspect`, for every hostile header, the 64 GiB bomb and the largest sample:
    all under 200 MB (tarfile alone took 1 GiB for a 1 GiB claim)."""
    paths = [(build_header_case(c, tmp_path), 3) for c in HEADER_CASES]  # path, its exit code
    paths.append((damaged(archives[GENERATION_SAMPLES["v4-v7"]], tmp_path)["bomb"], 3))
    paths.append((archives[GENERATION_SAMPLES["9.x"]], 0))
    peaks = {}
    for (path, expected), (code, peak, out) in zip(paths, _peak_rss([p for p, _ in paths], home)):
        assert code == expected and (json.loads(out)["error"] is None) == (expected == 0), out
        peaks[path.name] = peak
    worst = max(peaks, key=peaks.get)
    record_property("peak_rss_mb_worst", round(peaks[worst] / 2**20, 1))
    assert peaks[worst] < PEAK_RSS_LIMIT, peaks


@pytest.mark.parametrize("case", HEADER_CASES, ids=[c.name for c in HEADER_CASES])
def test_install_of_a_hostile_header_changes_nothing(case, tmp_path, cuda_root, home):
    root = cuda_root()
    sentinel = tmp_path / "outside" / "sentinel"
    sentinel.parent.mkdir()
    sentinel.write_text("keep")
    before = tree_state(root)
    done, out = run_json(["install", build_header_case(case, tmp_path), "--cuda-root", root,
                          "--no-theanorc", "--no-verify"], home)
    assert done.returncode == 3, done.stderr
    assert tree_state(root) == before and sentinel.read_text() == "keep"


def _tar(entries: list[Entry], fmt: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        for e in entries:
            info = tarfile.TarInfo(e.name)
            info.type, info.mode = e.type, e.mode
            if e.type == tarfile.SYMTYPE:
                info.linkname = e.target
            if e.type == tarfile.REGTYPE:
                info.size = len(e.data)
                tar.addfile(info, io.BytesIO(e.data))
            else:
                tar.addfile(info)
    return buf.getvalue()


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT],
                         ids=["gnu", "pax", "ustar"])
def test_every_tar_format_reads_the_same(fmt, tmp_path, compiler, home):
    """GNU long names and PAX records within the limits are read as tarfile reads them."""
    long_dir = "cuda/" + "/".join(["d" * 40] * 3)  # 128 characters: a long name in every format
    entries = spec_entries(SPECS[BASE], compiler) + [Entry(f"{long_dir}/notes.txt", b"x"),
                                                     Entry.link("cuda/lib64/libcudnn_x.so",
                                                                "libcudnn.so.7.4.2")]
    path = tmp_path / BASE
    path.write_bytes(compress(_tar(entries, fmt), path.name))
    done, out = run_json(["inspect", path], home)
    assert done.returncode == 0, done.stderr
    assert out["package"]["cudnn_version"] == "7.4.2" and out["package"]["installable"]
    listing = reader.read(path, tmp_path / "staging", lambda member: True)
    with tarfile.open(path) as tar:
        expected = [(i.name.rstrip("/"), i.size if i.isreg() else 0, i.linkname or None)
                    for i in tar]
    assert [(m.path, m.size, m.target) for m in listing.members] == expected
    assert not listing.problems
    staged = {m.path: m.staged.read_bytes() for m in listing.members if m.kind == "file"}
    assert staged == {e.name: e.data for e in entries if e.type == tarfile.REGTYPE}
