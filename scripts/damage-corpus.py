#!/usr/bin/env python3
"""On a machine with an NVIDIA GPU and PyTorch: does `verify` catch what breaks PyTorch?

    python scripts/damage-corpus.py --out DIR [--wheel-lib DIR] [--foreign-lib DIR]
                                    [--cuda /usr/local/cuda] [--work /tmp/corpus] [--jobs 4]
                                    [--only VARIANT,…]

The cuDNN of the installed nvidia-cudnn-cuNN wheel (or --wheel-lib) is repacked in NVIDIA's
archive layout (an uncompressed .tar named like NVIDIA's), intact and damaged: each library in
turn replaced by a library gcc builds with the right SONAME and no code (`stub`), cut to half
its size (`truncated`), left out (`missing`), or replaced by the same library of another
release under this release's file name (`foreign`: --foreign-lib, the distribution's cuDNN in
/lib/x86_64-linux-gnu by default). Each variant is installed with cudnn-setup into a scratch
CUDA root (headers and libcudart copied from --cuda), verified (`verify --no-theano
--no-frameworks`), and PyTorch's own cuDNN paths are run against the same files
(scripts/damage-corpus-torch.py: LD_LIBRARY_PATH and LD_PRELOAD of the copy under test; every
libcudnn* it maps is checked in /proc/self/maps). A variant that install refused is run
through PyTorch from the repacked files.

Writes DIR/damage-corpus.json (everything) and DIR/damage-corpus.md (the table) and prints the
table. `missed` counts the variants that install accepted, verify passed (exit 0), and PyTorch
failed or mapped another copy: the number this corpus exists to keep at 0.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TORCH = REPO / "scripts" / "damage-corpus-torch.py"
WORKLOADS = ("conv_fwd_fp32", "conv_bwd_fp32", "conv_fp16_benchmark", "batchnorm", "lstm",
             "sdpa_cudnn")
DAMAGES = ("stub", "truncated", "missing", "foreign")
_LIB = re.compile(r"^(libcudnn[a-z_]*)\.so\.(\d+)$")
_MACRO = re.compile(r"#define CUDNN_(MAJOR|MINOR|PATCHLEVEL)\s+(\d+)")


def wheel_dir() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("nvidia.cudnn")
    return Path(list(spec.submodule_search_locations)[0])


def version_of(include: Path) -> str:
    found = dict(_MACRO.findall((include / "cudnn_version.h").read_text()))
    return f"{found['MAJOR']}.{found['MINOR']}.{found['PATCHLEVEL']}"


def cuda_major(cuda: Path) -> int:
    text = (cuda / "include" / "cuda.h").read_text(errors="replace")
    return int(re.search(r"#define CUDA_VERSION\s+(\d+)", text).group(1)) // 1000


def stub_library(soname: str, out: Path, work: Path) -> None:
    """A shared object with `soname` and no code at all: what dlopen accepts and nothing uses."""
    work.mkdir(parents=True, exist_ok=True)
    src = work / "empty.c"
    src.write_text("/* no code */\n")
    subprocess.run(["gcc", "-shared", "-fPIC", str(src), "-o", str(out), f"-Wl,-soname,{soname}"],
                   check=True)


def make_archive(variant: str, src_lib: Path, src_include: Path, version: str, major: str,
                 cuda: int, foreign: Path, work: Path) -> tuple[Path, Path]:
    """(archive, directory of its libraries laid out as NVIDIA's) for one variant."""
    name = f"cudnn-linux-x86_64-{version}.0_cuda{cuda}-archive"
    base = work / variant.replace(":", "-")  # ':' would split LD_LIBRARY_PATH and LD_PRELOAD
    shutil.rmtree(base, ignore_errors=True)
    lib = base / "files" / "lib"
    lib.mkdir(parents=True)
    damage, _, target = variant.partition(":")
    for path in sorted(src_lib.iterdir()):
        m = _LIB.match(path.name)
        if not m:
            continue
        stem = m.group(1)
        full = lib / f"{stem}.so.{version}"
        if stem == target and damage == "missing":
            continue
        if stem == target and damage == "stub":
            stub_library(f"{stem}.so.{major}", full, base / "stub")
        elif stem == target and damage == "truncated":
            data = path.read_bytes()
            full.write_bytes(data[:len(data) // 2])
        elif stem == target and damage == "foreign":
            other = foreign / f"{stem}.so.{major}"
            shutil.copyfile(os.path.realpath(other), full)
        else:
            try:
                os.link(path, full)
            except OSError:
                shutil.copyfile(path, full)
        (lib / f"{stem}.so.{major}").symlink_to(full.name)
        (lib / f"{stem}.so").symlink_to(f"{stem}.so.{major}")
    archive = base / f"{name}.tar"
    with tarfile.open(archive, "w", format=tarfile.GNU_FORMAT) as tar:
        tar.add(src_include, arcname=f"{name}/include", filter=_headers_only)
        tar.add(lib, arcname=f"{name}/lib")
    return archive, lib


def _headers_only(info: tarfile.TarInfo):
    base = os.path.basename(info.name)
    return info if info.isdir() or (base.startswith("cudnn") and base.endswith(".h")) else None


def scratch_root(base: Path, cuda: Path) -> Path:
    root = base / "cuda"
    (root / "lib64").mkdir(parents=True)
    shutil.copytree(cuda / "include", root / "include", symlinks=False)
    for f in (cuda / "lib64").glob("libcudart.so*"):
        shutil.copy2(f, root / "lib64" / f.name, follow_symlinks=False)
    return root


def tool(args: list[str], env: dict) -> tuple[int, dict | None, float]:
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "cudnn_setup", *args, "--json"], env=env,
                          capture_output=True, text=True, timeout=600, cwd=REPO)
    took = time.monotonic() - start
    try:
        data = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        data = None
    return done.returncode, data, took


def torch_run(lib: Path, env: dict, shadow: Path) -> dict:
    """Each workload's outcome; a workload that kills the process is `crashed`, the rest are
    run again in a fresh process. PyTorch also dlopens nvidia/cudnn/lib/libcudnn.so.9 by its
    path under sys.path (its wheel's own copy, another file than the one preloaded), so a
    `shadow` nvidia/cudnn/lib of links to the copy under test goes first on PYTHONPATH: the
    loader then finds that file already loaded."""
    sonames = [p for p in sorted(lib.glob("libcudnn*.so.[0-9]")) if p.exists()]
    links = shadow / "nvidia" / "cudnn" / "lib"
    links.mkdir(parents=True, exist_ok=True)
    for p in sonames:
        (links / p.name).symlink_to(p)
    child = dict(env, LD_LIBRARY_PATH=str(lib), LD_PRELOAD=":".join(map(str, sonames)),
                 PYTHONPATH=os.pathsep.join(filter(None, [str(shadow), env.get("PYTHONPATH")])))
    left, out = list(WORKLOADS), {}
    while left:
        done = subprocess.run([sys.executable, str(TORCH), str(lib), *left], env=child,
                              capture_output=True, text=True, timeout=300)
        started = None
        for line in done.stdout.splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("status") == "started":
                started = entry["workload"]
                continue
            out[entry["workload"]] = entry
            started = None
        if started is None and all(w in out for w in left):
            break
        crashed = started or next(w for w in left if w not in out)
        tail = (done.stderr.strip().splitlines() or [""])[-1][:300]
        out[crashed] = {"workload": crashed, "status": "crashed",
                        "error": f"exit {done.returncode}: {tail}"}
        left = [w for w in left if w not in out]
    return out


def failing(data: dict | None) -> list[str]:
    if not data:
        return ["(no JSON)"]
    return [f"{c['name']}: {c['detail'][:600]}" for c in data.get("checks", []) if c["status"] == "fail"]


def run_variant(variant: str, ctx: dict) -> dict:
    work = Path(ctx["work"])
    archive, files = make_archive(variant, ctx["src_lib"], ctx["src_include"], ctx["version"],
                                  ctx["major"], ctx["cuda_major"], ctx["foreign"], work)
    base = archive.parent
    root = scratch_root(base, ctx["cuda"])
    env = ctx["env"]
    row: dict = {"variant": variant}
    rc, data, took = tool(["install", str(archive), "--cuda-root", str(root), "--no-theanorc",
                           "--no-verify", "--no-frameworks"], env)
    row["install"] = {"exit": rc, "seconds": round(took, 2),
                      "error": (data or {}).get("error")}
    lib = files
    if rc == 0:
        lib = root / "lib64"
        how = ["--cuda-root", str(root)]
    else:  # the same files placed by hand: what verify says of them
        how = ["--cuda-root", str(root), "--lib-dir", str(files),
               "--include-dir", str(ctx["src_include"])]
    rc, data, took = tool(["verify", *how, "--no-theano", "--no-frameworks"], env)
    row["verify"] = {"exit": rc, "seconds": round(took, 2), "failing": failing(data),
                     "of": "the install" if lib != files else "the files (--lib-dir)",
                     "checks": {c["name"]: c["status"] for c in (data or {}).get("checks", [])},
                     "gpu": next((c for c in (data or {}).get("checks", []) if c["name"] == "gpu"),
                                 None)}
    row["torch_dir"] = str(lib)
    row["torch"] = torch_run(lib, env, base / "shadow")
    accepted = row["install"]["exit"] == 0 and row.get("verify", {}).get("exit") == 0
    broken = [w for w, e in row["torch"].items() if e["status"] != "pass"]
    row["torch_failed"] = broken
    row["verdict"] = ("missed" if accepted and broken else
                      "passes" if accepted else
                      "caught" if broken else "stricter than torch")
    shutil.rmtree(base, ignore_errors=True)
    return row


def table(rows: list[dict]) -> str:
    head = ("| variant | install | verify | failing checks | " + " | ".join(WORKLOADS)
            + " | verdict |")
    lines = [head, "|" + "---|" * (len(WORKLOADS) + 5)]
    for r in rows:
        inst, v = r["install"], r["verify"]
        if inst["exit"] != 0:
            err = (inst.get("error") or {}).get("message", "")
            install = f"refused (exit {inst['exit']}): {err.split(': ', 1)[-1][:140]}"
            verify = f"--lib-dir: exit {v['exit']}"
        else:
            install, verify = "ok", f"exit {v['exit']}"
        why = "; ".join(f.split(":")[0] for f in v["failing"]) or "—"
        cells = []
        for w in WORKLOADS:
            e = r["torch"].get(w, {})
            s = e.get("status", "?")
            cells.append(s if s == "pass" else f"{s}: {(e.get('error') or ', '.join(e.get('foreign', [])))[:80]}")
        lines.append(f"| {r['variant']} | {install} | {verify} | {why.replace('|', '/')} | "
                     + " | ".join(c.replace("|", "/") for c in cells) + f" | {r['verdict']} |")
    lines += ["", "What each check said (verify's failing checks, first 300 characters each):", ""]
    for r in rows:
        said = r["verify"]["failing"]
        if r["install"]["exit"] != 0:
            said = [f"install: {((r['install'].get('error') or {}).get('message') or '')[:300]}"] + said
        if said:
            lines.append(f"* {r['variant']}: " + " · ".join(x[:300].replace("|", "/") for x in said))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--wheel", type=Path, help="the nvidia/cudnn dir (default: this Python's)")
    ap.add_argument("--foreign-lib", type=Path, default=Path("/lib/x86_64-linux-gnu"))
    ap.add_argument("--cuda", type=Path, default=Path("/usr/local/cuda"))
    ap.add_argument("--work", type=Path, default=Path("/tmp/corpus"))
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--only", default="")
    args = ap.parse_args(argv)
    wheel = args.wheel or wheel_dir()
    src_lib, src_include = wheel / "lib", wheel / "include"
    version = version_of(src_include)
    stems = sorted(_LIB.match(p.name).group(1) for p in src_lib.iterdir() if _LIB.match(p.name))
    major = version.split(".")[0]
    variants = ["intact"] + [f"{d}:{s}" for s in stems for d in DAMAGES
                             if d != "foreign" or (args.foreign_lib / f"{s}.so.{major}").exists()]
    if args.only:
        variants = [v for v in variants if v in args.only.split(",")]
    args.work.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LD_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    ctx = {"work": str(args.work), "src_lib": src_lib, "src_include": src_include,
           "version": version, "major": major, "cuda_major": cuda_major(args.cuda),
           "foreign": args.foreign_lib, "cuda": args.cuda, "env": env}
    start = time.monotonic()
    with cf.ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(lambda v: run_variant(v, ctx), variants))
    summary = {"cudnn": version, "wheel": str(wheel), "foreign": str(args.foreign_lib),
               "variants": len(rows), "seconds": round(time.monotonic() - start, 1),
               "missed": [r["variant"] for r in rows if r["verdict"] == "missed"],
               "stricter": [r["variant"] for r in rows if r["verdict"] == "stricter than torch"]}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "damage-corpus.json").write_text(json.dumps({"summary": summary, "rows": rows},
                                                            indent=1))
    text = table(rows)
    (args.out / "damage-corpus.md").write_text(text + "\n")
    print(text)
    print(json.dumps(summary))
    return 1 if summary["missed"] else 0


if __name__ == "__main__":
    sys.exit(main())
