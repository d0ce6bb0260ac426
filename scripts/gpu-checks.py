#!/usr/bin/env python3
"""On a machine with an NVIDIA GPU: verify's dependency, coherence and driver checks on every
real cuDNN there, and on hand-made broken copies.

    python scripts/gpu-checks.py [--out DIR] [--work DIR] [--wheel-lib DIR] [--prefix /]
                                 [--cuda-root DIR] [--no-gpu-run]

Subjects, each a cuDNN the checks locate as `verify --lib-dir` would:
  wheel      the nvidia-cudnn-cuNN wheel of this interpreter (or --wheel-lib)
  system     the distribution packages' cuDNN under --prefix (/usr/lib/<triple>)
  installed  the cuDNN cudnn-setup installed into --cuda-root (scripts/gpu-verify.sh makes one)
  replaced   a copy of the wheel's directory whose libcudnn_ops.so.9 is the system's file
  missing    a copy of the wheel's directory without libcudnn_ops.so.9 (the loader then takes
             the system's, through the ldconfig cache)
  llp        the wheel, run with LD_LIBRARY_PATH naming a directory that holds only the
             system's libcudnn_ops.so.9
For each: load, deps, coherence, driver (and gpu unless --no-gpu-run). The copies are made of
hard links where the filesystem allows (else copies) under --work; nothing else is written.
Writes OUT/driver.json, OUT/<subject>.json and OUT/summary.txt; prints the summary.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cudnn_setup.installation import locate  # noqa: E402
from cudnn_setup.checks.coherence import check_coherence_with  # noqa: E402
from cudnn_setup.checks.deps import check_deps_with, loader_environment  # noqa: E402
from cudnn_setup.checks.driver_check import check_driver_with  # noqa: E402
from cudnn_setup.probing.driver import driver_facts, has_driver  # noqa: E402
from cudnn_setup.installation.model import find_installation  # noqa: E402
from cudnn_setup.checks.gpu import check_gpu_with  # noqa: E402
from cudnn_setup.checks.load_check import load_libcudnn  # noqa: E402
from cudnn_setup.facts.ldresolve.ldconfig import read_cache  # noqa: E402
from cudnn_setup.facts.ldresolve.loader_facts import probe_loader  # noqa: E402
from cudnn_setup.facts.cuda import find_cuda_root  # noqa: E402
from cudnn_setup.report import Check  # noqa: E402

SUB = "libcudnn_ops.so.9"


def wheel_lib_dir() -> Path | None:
    try:
        import nvidia.cudnn  # noqa: F401  (the wheel's namespace package)
    except ImportError:
        return None
    for base in nvidia.cudnn.__path__:
        if (Path(base) / "lib").is_dir():
            return Path(base) / "lib"
    return None


def link_or_copy_tree(src: Path, dest: Path) -> str:
    """dest/ with every file of src/ hard-linked (copied across filesystems); links kept."""
    how = "hard links"
    dest.mkdir(parents=True)
    for p in sorted(src.iterdir()):
        target = dest / p.name
        if p.is_symlink():
            target.symlink_to(os.readlink(p))
        elif p.is_file():
            try:
                os.link(p, target)
            except OSError:
                shutil.copy2(p, target)
                how = "copies"
    return how


def system_file(prefix: Path, name: str) -> Path | None:
    for d in ("usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu"):
        p = prefix / d / name
        if p.exists():
            return Path(os.path.realpath(p))
    return None


def run_subject(name, inst, env, facts, loader, gpu_run) -> dict:
    started = time.monotonic()
    load, data = load_libcudnn(inst, env)
    checks: list[Check] = [load]
    checks.append(check_deps_with(inst, env, load_data=data, loader=loader,
                                  driver_present=has_driver(facts)))
    checks.append(check_coherence_with(inst, env, load_data=data, loader=loader))
    checks.append(check_driver_with(inst, facts, load_data=data))
    if gpu_run and data is not None:
        checks.append(check_gpu_with(inst, env))
    return {"subject": name, "installation": locate.describe(inst),
            "env_ld_library_path": env.get("LD_LIBRARY_PATH"),
            "seconds": round(time.monotonic() - started, 2),
            "checks": [c.to_dict() for c in checks]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/cudnn-gpu/out")) / "checks")
    ap.add_argument("--work", type=Path, default=Path("/tmp/cudnn-gpu/checks-work"))
    ap.add_argument("--wheel-lib", type=Path, default=None)
    ap.add_argument("--prefix", type=Path, default=Path("/"))
    ap.add_argument("--cuda-root", type=Path, default=Path("/tmp/cudnn-gpu/cuda-scratch"))
    ap.add_argument("--no-gpu-run", action="store_true")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.work.exists():
        shutil.rmtree(args.work)
    args.work.mkdir(parents=True)
    base_env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    cache, lfacts = read_cache(), probe_loader()
    loader = loader_environment(base_env, cache, lfacts)
    facts = driver_facts(base_env)
    (args.out / "driver.json").write_text(json.dumps(facts, indent=1) + "\n")
    lines = [f"driver: {json.dumps(facts)}"]
    subjects = []
    wheel = args.wheel_lib or wheel_lib_dir()
    if wheel:
        subjects.append(("wheel", locate.locate(wheel), base_env, loader))
    system = locate.find_multiarch(args.prefix)
    if system:
        subjects.append(("system", system, base_env, loader))
    if (args.cuda_root / ".cudnn-setup").is_dir():
        subjects.append(("installed", find_installation(find_cuda_root({}, args.cuda_root)),
                         base_env, loader))
    ops_system = system_file(args.prefix, SUB)
    if wheel and ops_system:
        for variant in ("replaced", "missing"):
            lib = args.work / variant / "lib"
            how = link_or_copy_tree(wheel, lib)
            shutil.copytree(wheel.parent / "include", lib.parent / "include", symlinks=True)
            (lib / SUB).unlink()
            if variant == "replaced":
                shutil.copy2(ops_system, lib / SUB)
            lines.append(f"{variant}: {lib} ({how}); {SUB} "
                         + (f"= copy of {ops_system}" if variant == "replaced" else "removed"))
            subjects.append((variant, locate.locate(lib), base_env, loader))
        llp = args.work / "llp"
        llp.mkdir()
        (llp / SUB).symlink_to(ops_system)
        env = dict(base_env, LD_LIBRARY_PATH=str(llp))
        lines.append(f"llp: LD_LIBRARY_PATH={llp} holding {SUB} -> {ops_system}")
        subjects.append(("llp", locate.locate(wheel), env,
                         loader_environment(env, cache, lfacts)))
    for name, inst, env, ldr in subjects:
        report = run_subject(name, inst, env, facts, ldr, not args.no_gpu_run)
        (args.out / f"{name}.json").write_text(json.dumps(report, indent=1) + "\n")
        lines.append(f"== {name}: {inst.lib_dir} (cuDNN {inst.version}, {inst.origin or 'cuda-root'}) "
                     f"{report['seconds']} s")
        for c in report["checks"]:
            lines.append(f"  {c['name']:<9} {c['status']:<4} {c['detail']}")
    text = "\n".join(lines) + "\n"
    (args.out / "summary.txt").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
