#!/usr/bin/env bash
# On the GPU machine: what users wait for around an install (bench/wait_speed.py), on the
# cuDNN of the machine's nvidia-cudnn wheel repacked as a .tar.gz, with the GPU, its driver and
# the frameworks there; plus the code of OLD (a directory holding an older checkout, if given)
# for start-up, the fixed cost and verify (run for run beside this checkout's), and the driver
# probe alone (part of every install's fixed cost) both ways: through NVML, and through the CUDA
# driver API (cuInit; CUDA_VISIBLE_DEVICES set makes the probe ask CUDA), with both answers kept
# in driver-answers.txt to be compared.
# PYTHON (default python3), RUNS (5), VERIFY_RUNS (3); results in $OUT (default /tmp/cudnn-waits/out).
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
work=${WORK:-/tmp/cudnn-waits}
out=${OUT:-$work/out}
mkdir -p "$work" "$out"
src=${CUDNN_WHEEL_DIR:-$($py -c "import importlib.util as u; print(list(u.find_spec('nvidia.cudnn').submodule_search_locations)[0])")}
major=$(awk '/#define CUDA_VERSION/ {print int($3/1000); exit}' /usr/local/cuda/include/cuda.h)
echo "cuDNN from $src, CUDA $major; $(nproc) cores; $($py --version);" \
     "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-(unset: the driver probe asks NVML)}"
a=$(ls "$work"/gz/*.tar.gz 2>/dev/null | head -1 || true)
[ -n "$a" ] || a=$($py -m fixtures.repack "$src" "$work/gz" --cuda "$major" --format gz --level 1)
ls -l "$a"
unset PYTHONDONTWRITEBYTECODE
$py -m compileall -q cudnn_setup ${OLD:+$OLD/cudnn_setup} >/dev/null 2>&1 || true
best() {  # label, runs, command...: min and median wall time in ms
  local label=$1 n=$2; shift 2
  $py - "$label" "$n" "$@" <<'P'
import subprocess, sys, time
label, n, cmd = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
ts = []
for _ in range(n):
    t = time.perf_counter(); subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL); ts.append(time.perf_counter() - t)
ts.sort(); print(f"{label}: min {ts[0]*1000:.0f} ms, median {ts[len(ts)//2]*1000:.0f} ms")
P
}
sample=$PWD/fixtures/samples/cudnn-10.0-linux-x64-v7.4.2.24.tgz
{
  probe="$py -I -S cudnn_setup/probes/driver.py"
  best "driver probe alone, NVML (probes/driver.py)" 7 $probe
  best "driver probe alone, CUDA driver API (CUDA_VISIBLE_DEVICES set)" 7 env CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}" $probe
  { echo "NVML:"; echo key | $probe; echo "CUDA driver API:"; echo key | CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}" $probe; } >"$out/driver-answers.txt" 2>&1
  if [ -n "${OLD:-}" ]; then
    (cd "$OLD" && best "old: cudnn-setup --version" 7 $py -m cudnn_setup --version &&
     best "old: cudnn-setup --help" 7 $py -m cudnn_setup --help) || true
    for i in 1 2 3 4 5; do
      r=$work/oldroot$i; rm -rf "$r"
      $py -c "import sys; sys.path.insert(0, '.'); from fixtures.generate import make_cuda_root; from pathlib import Path; make_cuda_root(Path('$r'), '10.0')"
      (cd "$OLD" && s=$EPOCHREALTIME && $py -m cudnn_setup install "$sample" --cuda-root "$r" --no-verify --no-theanorc --no-frameworks --json >/dev/null 2>&1; e=$EPOCHREALTIME; echo "old: install of the sample, run $i: $(awk -v a="$s" -v b="$e" 'BEGIN {printf "%.3f", b - a}') s")
      rm -rf "$r"
    done
  fi
} 2>&1 | tee "$out/extra.txt"
PYTHONUNBUFFERED=1 $py bench/wait_speed.py --runs "${RUNS:-5}" --verify-runs "${VERIFY_RUNS:-3}" \
  --archive "$a" ${OLD:+--old "$OLD"} --json "$out/waits.json" 2>&1 | tee "$out/waits.txt" | tail -40
$py -X importtime -m cudnn_setup --help 2>&1 >/dev/null | sort -t'|' -k2 -n | tail -25 >"$out/importtime-help.txt"
# where the fixed cost goes: imports, and a timeline of the process and its children
r=$work/traceroot; rm -rf "$r"
$py -c "import sys; sys.path.insert(0, '.'); from fixtures.generate import make_cuda_root; from pathlib import Path; make_cuda_root(Path('$r'), '10.0')"
$py -X importtime -m cudnn_setup install "$sample" --cuda-root "$r" --no-verify --no-theanorc --no-frameworks --json 2>&1 >/dev/null | grep '^import time' | sort -t'|' -k2 -n | tail -40 >"$out/importtime-install.txt" || true
if command -v strace >/dev/null; then
  rm -rf "$r"; $py -c "import sys; sys.path.insert(0, '.'); from fixtures.generate import make_cuda_root; from pathlib import Path; make_cuda_root(Path('$r'), '10.0')"
  strace -f -tt -e trace=execve,fsync,fdatasync,flock,exit_group -o "$out/strace-install.txt" $py -m cudnn_setup install "$sample" --cuda-root "$r" --no-verify --no-theanorc --no-frameworks --json >/dev/null 2>&1 || true
fi
rm -rf "$r"
