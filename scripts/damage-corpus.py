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

Beside the damaged libraries, the ways people really run cuDNN (SITUATIONS):
  umask077:nobody        installed by root under `umask 077`; verify and PyTorch run as an
                         ordinary user (uid 65534, through setpriv)
  link-deleted:STEM      the installed STEM.so.N link deleted
  link-repointed:STEM    the installed STEM.so.N link pointed at --foreign-lib's STEM.so.N
  jit:beside-system      the JIT flavour (libcudnn, graph, engines_runtime_compiled) alone in
                         the root, the distribution's cuDNN on the ldconfig path
  jit:alone              the same with the distribution's cuDNN moved aside (and ldconfig
                         run): no other cuDNN on the machine; run after the others, alone
  header-foreign         cudnn_version.h saying another release (the minor of --foreign-lib's)
  bitflip:STEM           16 bytes flipped in the .nv_fatbin section of the installed STEM;
                         then `repair`, and verify again
The JIT rows run verify with its frameworks check (the frameworks on the machine decide which
clients must work); the others with --no-frameworks, as before.

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
SITUATIONS = ("umask077:nobody", "link-deleted:libcudnn_graph",
              "link-repointed:libcudnn_heuristic", "jit:beside-system", "header-foreign",
              "bitflip:libcudnn_engines_precompiled", "jit:alone")
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
JIT_STEMS = ("libcudnn", "libcudnn_graph", "libcudnn_engines_runtime_compiled")
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
    damage, _, target = variant.partition(":")
    flavour = "cudnn_jit" if damage == "jit" else "cudnn"
    name = f"{flavour}-linux-x86_64-{version}.0_cuda{cuda}-archive"
    base = work / variant.replace(":", "-")  # ':' would split LD_LIBRARY_PATH and LD_PRELOAD
    shutil.rmtree(base, ignore_errors=True)
    lib = base / "files" / "lib"
    lib.mkdir(parents=True)
    if damage == "header-foreign":
        src_include = foreign_headers(src_include, foreign, major, base / "include")
    for path in sorted(src_lib.iterdir()):
        m = _LIB.match(path.name)
        if not m:
            continue
        stem = m.group(1)
        if damage == "jit" and stem not in JIT_STEMS:
            continue
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


def foreign_headers(include: Path, foreign: Path, major: str, out: Path) -> Path:
    """The headers with cudnn_version.h saying the release of --foreign-lib's libcudnn (its
    file name's version), as when a header of another release is copied over."""
    shutil.copytree(include, out)
    lib = Path(os.path.realpath(foreign / f"libcudnn.so.{major}"))
    m = re.search(r"\.so\.(\d+)\.(\d+)\.(\d+)$", lib.name)
    minor, patch = (m.group(2), m.group(3)) if m else ("0", "0")
    text = (out / "cudnn_version.h").read_text()
    text = re.sub(r"(#define CUDNN_MINOR\s+)\d+", rf"\g<1>{minor}", text)
    text = re.sub(r"(#define CUDNN_PATCHLEVEL\s+)\d+", rf"\g<1>{patch}", text)
    (out / "cudnn_version.h").write_text(text)
    return out


def flip_kernel_bytes(library: Path, count: int = 16) -> str:
    """Flip `count` bytes in the middle of the library's .nv_fatbin (its GPU kernels)."""
    from elftools.elf.elffile import ELFFile

    with open(library, "rb") as f:
        section = ELFFile(f).get_section_by_name(".nv_fatbin")
        if section is None:
            return "no .nv_fatbin section"
        offset, size = section["sh_offset"], section["sh_size"]
    at = offset + size // 2
    with open(library, "r+b") as f:
        f.seek(at)
        data = bytearray(f.read(count))
        f.seek(at)
        f.write(bytes(b ^ 0xFF for b in data))
    return f"{count} bytes at offset {at} of .nv_fatbin ({size} bytes)"


def damage_installed(variant: str, root: Path, ctx: dict) -> str | None:
    """What a situation does to the installed root after install; None for none."""
    damage, _, target = variant.partition(":")
    lib64 = root / "lib64"
    link = lib64 / f"{target}.so.{ctx['major']}"
    if damage == "link-deleted":
        link.unlink()
        return f"deleted {link.name}"
    if damage == "link-repointed":
        other = Path(os.path.realpath(Path(ctx["foreign"]) / link.name))
        link.unlink()
        link.symlink_to(other)
        return f"{link.name} -> {other}"
    if damage == "bitflip":
        full = next(lib64.glob(f"{target}.so.{ctx['major']}.*"))
        return flip_kernel_bytes(full)
    return None


class SystemCudnnAside:
    """The distribution's cuDNN moved out of the loader's way (and ldconfig run), put back
    after: a machine with no other cuDNN."""

    def __init__(self, foreign: Path, work: Path):
        self.files = sorted(foreign.glob("libcudnn*"))
        self.aside = work / "system-cudnn-aside"

    def __enter__(self):
        self.aside.mkdir(parents=True, exist_ok=True)
        for f in self.files:
            shutil.move(str(f), self.aside / f.name)
        subprocess.run(["ldconfig"], check=False)
        return self

    def __exit__(self, *exc):
        for f in self.files:
            shutil.move(str(self.aside / f.name), f)
        subprocess.run(["ldconfig"], check=False)


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


def tool(args: list[str], env: dict, user: list[str] = (),
         umask: int | None = None) -> tuple[int, dict | None, float]:
    """The tool as `user` (a setpriv prefix) runs it, under `umask` when given."""
    start = time.monotonic()
    done = subprocess.run([*user, sys.executable, "-m", "cudnn_setup", *args, "--json"], env=env,
                          capture_output=True, text=True, timeout=600, cwd="/",
                          preexec_fn=(lambda: os.umask(umask)) if umask is not None else None)
    took = time.monotonic() - start
    try:
        data = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        data = None
    return done.returncode, data, took


def torch_run(lib: Path, env: dict, shadow: Path, user: list[str] = ()) -> dict:
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
        done = subprocess.run([*user, sys.executable, str(TORCH), str(lib), *left], env=child,
                              capture_output=True, text=True, timeout=300, cwd="/")
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
    env = dict(ctx["env"])
    situation = variant.partition(":")[0]
    user = NOBODY if variant == "umask077:nobody" else []
    if user:  # a home of that user's own (its cache), and the tool as any user can read it
        home = base / "home"
        home.mkdir()
        os.chown(home, 65534, 65534)
        env.update(HOME=str(home), PYTHONPATH=ctx["public_pythonpath"])
    row: dict = {"variant": variant, "as": "uid 65534" if user else "root"}
    rc, data, took = tool(["install", str(archive), "--cuda-root", str(root), "--no-theanorc",
                           "--no-verify", "--no-frameworks"], ctx["env"],
                          umask=0o077 if user else None)
    row["install"] = {"exit": rc, "seconds": round(took, 2),
                      "error": (data or {}).get("error")}
    lib = files
    if rc == 0:
        lib = root / "lib64"
        how = ["--cuda-root", str(root)]
        row["damage"] = damage_installed(variant, root, ctx)
    else:  # the same files placed by hand: what verify says of them
        include = base / "include" if situation == "header-foreign" else ctx["src_include"]
        how = ["--cuda-root", str(root), "--lib-dir", str(files), "--include-dir", str(include)]
    frameworks = [] if situation == "jit" else ["--no-frameworks"]
    row["verify"] = verify_row(how, frameworks, env, user, lib != files)
    row["torch_dir"] = str(lib)
    row["torch"] = torch_run(lib, env, base / "shadow", user)
    if situation == "bitflip" and row["install"]["exit"] == 0:
        rc, data, took = tool(["repair", "--cuda-root", str(root)], env)
        row["repair"] = {"exit": rc, "seconds": round(took, 2), "changed": (data or {}).get("changed"),
                         "error": (data or {}).get("error")}
        row["verify_after_repair"] = verify_row(how, frameworks, env, user, True)
        row["torch_after_repair"] = torch_run(lib, env, base / "shadow-2", user)
    accepted = row["install"]["exit"] == 0 and row.get("verify", {}).get("exit") == 0
    broken = [w for w, e in row["torch"].items() if e["status"] != "pass"]
    row["torch_failed"] = broken
    row["verdict"] = ("missed" if accepted and broken else
                      "passes" if accepted else
                      "caught" if broken else "stricter than torch")
    shutil.rmtree(base, ignore_errors=True)
    return row


def verify_row(how: list[str], frameworks: list[str], env: dict, user: list[str],
               installed: bool) -> dict:
    rc, data, took = tool(["verify", *how, "--no-theano", *frameworks], env, user)
    checks = (data or {}).get("checks", [])
    return {"exit": rc, "seconds": round(took, 2), "failing": failing(data),
            "of": "the install" if installed else "the files (--lib-dir)",
            "checks": {c["name"]: c["status"] for c in checks},
            "gpu": next((c for c in checks if c["name"] == "gpu"), None),
            "clients": next((c for c in checks if c["name"] == "clients"), None),
            "error": (data or {}).get("error")}


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
        if r.get("repair"):
            verify += (f"; repair exit {r['repair']['exit']}, then verify exit "
                       f"{r['verify_after_repair']['exit']}")
        if r.get("as") != "root":
            verify += f" (as {r['as']})"
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
    variants += list(SITUATIONS)
    if args.only:
        variants = [v for v in variants if v in args.only.split(",")]
    os.umask(0o022)
    args.work.mkdir(parents=True, exist_ok=True)
    args.work.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LD_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    # the package where any user can read it, for the runs as an ordinary user
    public = args.work / "tool"
    shutil.rmtree(public, ignore_errors=True)
    shutil.copytree(REPO / "cudnn_setup", public / "cudnn_setup",
                    ignore=shutil.ignore_patterns("__pycache__"))
    global TORCH
    TORCH = Path(shutil.copy(TORCH, public / TORCH.name))
    ctx = {"work": str(args.work), "src_lib": src_lib, "src_include": src_include,
           "version": version, "major": major, "cuda_major": cuda_major(args.cuda),
           "foreign": args.foreign_lib, "cuda": args.cuda, "env": env,
           "public_pythonpath": os.pathsep.join(filter(None, [str(public),
                                                              os.environ.get("PYTHONPATH")]))}
    start = time.monotonic()
    together = [v for v in variants if v != "jit:alone"]
    with cf.ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(lambda v: run_variant(v, ctx), together))
    if "jit:alone" in variants:
        with SystemCudnnAside(args.foreign_lib, args.work):
            rows.append(run_variant("jit:alone", ctx))
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
