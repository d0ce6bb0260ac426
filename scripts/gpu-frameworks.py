"""On a machine with a GPU and real frameworks: which cuDNN each framework of --python loads,
and what an older cuDNN on the loader path would do to them.

    python scripts/gpu-frameworks.py --python /opt/torch/.venv/bin/python \
        --old-from /lib/x86_64-linux-gnu --scratch /tmp/cudnn-fw/old-root --out "$OUT"

Copies the libcudnn*.so.9* of --old-from (links kept as links) into SCRATCH/lib64, then writes
to --out: frameworks.json (the frameworks check and list as they are), what-if-ld-library-path.json
(the probe run again with SCRATCH/lib64 first on LD_LIBRARY_PATH) and what-if-ldconfig.json
(SCRATCH/lib64 registered with ldconfig, deduced), and prints a summary.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cudnn_setup.checks import framework_whatif as wi  # noqa: E402
from cudnn_setup.checks import frameworks_check as fw  # noqa: E402
from cudnn_setup.facts.ldresolve.environment import Environment  # noqa: E402
from cudnn_setup.facts.ldresolve.ldconfig import read_cache  # noqa: E402
from cudnn_setup.facts.ldresolve.loader_facts import probe_loader  # noqa: E402


def copy_old(source: Path, lib_dir: Path) -> list[str]:
    lib_dir.mkdir(parents=True, exist_ok=True)
    copied = []
    for path in sorted(source.glob("libcudnn*.so.9*")):
        target = lib_dir / path.name
        if target.is_symlink() or target.exists():
            target.unlink()
        shutil.copy2(path, target, follow_symlinks=False)
        copied.append(path.name)
    return copied


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", required=True)
    ap.add_argument("--old-from", type=Path, required=True)
    ap.add_argument("--scratch", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--timeout", type=float, default=fw.DEFAULT_TIMEOUT)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    search = Environment(cache=read_cache(), facts=probe_loader())
    lib_dir = args.scratch / "lib64"
    copied = copy_old(args.old_from, lib_dir)
    print(f"copied into {lib_dir}: {', '.join(copied) or 'nothing'}")

    start = time.monotonic()
    entries = fw.framework_report(args.python, env, args.timeout, search=search)
    took = time.monotonic() - start
    check = fw.frameworks_check(entries, args.python)
    (args.out / "frameworks.json").write_text(json.dumps({
        "python": args.python, "seconds": round(took, 2), "check": check.to_dict(),
        "frameworks": fw.frameworks_json(entries)}, indent=1))
    print(f"== frameworks check: {check.status} ({took:.1f} s)\n{check.detail}")

    for change, name in ((wi.prepend_to_ld_library_path(lib_dir), "what-if-ld-library-path"),
                         (wi.register_with_ldconfig(lib_dir), "what-if-ldconfig")):
        start = time.monotonic()
        result = wi.what_if(args.python, env, change, args.timeout, search=search,
                            current=entries)
        took = time.monotonic() - start
        (args.out / f"{name}.json").write_text(json.dumps(
            {"change": change.describe(), "seconds": round(took, 2), "frameworks": result},
            indent=1))
        print(f"== what if: {change.describe()} ({took:.1f} s)")
        for item in result:
            print(f"  {item['framework']}: affected={item['affected']} breaks={item['breaks']}: "
                  f"{item['reason']}")
        for line in wi.what_if_warnings(result):
            print(f"  WARNING {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
