#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: repack the cuDNN of the installed nvidia-cudnn-cuNN wheel as
# NVIDIA's archive, install it into a scratch CUDA root made from the system toolkit, then run
# `verify` (its gpu check runs a real convolution) and the cuDNN algorithm benchmark.
# Results land in $OUT (default /tmp/cudnn-gpu/out): install.json, verify.json, bench.json, and
# verify-trace.txt (bench/verify_trace.py: each child verify starts, when and for how long).
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
work=${WORK:-/tmp/cudnn-gpu}
out=${OUT:-$work/out}
cuda=${CUDA_SOURCE:-/usr/local/cuda}
mkdir -p "$work" "$out"
src=${CUDNN_WHEEL_DIR:-$($py -c "import importlib.util as u; print(list(u.find_spec('nvidia.cudnn').submodule_search_locations)[0])")}
major=$(awk '/#define CUDA_VERSION/ {print int($3/1000); exit}' "$cuda/include/cuda.h")
echo "cuDNN from $src; CUDA $major from $cuda"
archive=$(ls "$work"/archives/*.tar.xz 2>/dev/null | head -1 || true)
[ -n "$archive" ] || archive=$($py -m fixtures.repack "$src" "$work/archives" --cuda "$major")
ls -l "$archive"
root=$work/cuda-scratch
rm -rf "$root"
mkdir -p "$root/lib64"
cp -rL "$cuda/include" "$root/include"
cp -P "$cuda"/lib64/libcudart.so* "$root/lib64/"
echo "filesystem of $work: $(findmnt -n -o FSTYPE -T "$work" 2>/dev/null || echo unknown); $(nproc) cores"
set +e
start=$EPOCHREALTIME
xz -dc -T0 "$archive" >/dev/null
floor=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.2f", b - a}')
start=$EPOCHREALTIME
$py -m cudnn_setup install "$archive" --cuda-root "$root" --no-theanorc --no-verify --no-frameworks --json >"$out/install.json"
echo "install exit $?"
took=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.2f", b - a}')
echo "xz -dc -T0 to /dev/null: $floor s; cudnn-setup install --no-verify --no-frameworks: $took s" | tee "$out/install-time.txt"
start=$EPOCHREALTIME
$py -m cudnn_setup verify --cuda-root "$root" --no-theano --json >"$out/verify.json"
echo "verify exit $?"
took=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.2f", b - a}')
echo "cudnn-setup verify --no-theano (gpu check included): $took s" | tee -a "$out/install-time.txt"
# where verify's time goes: each child's start and end, and the CPU time (the first run warms)
for opts in "--no-theano --no-frameworks" "--no-theano"; do
  for run in 1 2 3; do
    $py bench/verify_trace.py verify --cuda-root "$root" $opts --json >/dev/null 2>"$out/trace.tmp" || true
    { echo "== verify $opts, run $run"; grep -v '^cudnn-setup:' "$out/trace.tmp" | grep -v '^  [a-z]'; } >>"$out/verify-trace.txt"
  done
done
rm -f "$out/trace.tmp"
tail -n 30 "$out/verify-trace.txt"
$py -m cudnn_setup bench --cuda-root "$root" --json >"$out/bench.json"
echo "bench exit $?"
$py - "$out" <<'PY'
import json, sys
out = sys.argv[1]
for name in ("install", "verify", "bench"):
    try:
        data = json.load(open(f"{out}/{name}.json"))
    except Exception as exc:
        print(name, "no JSON:", exc)
        continue
    print(f"== {name}: ok={data['ok']} cudnn={data['cudnn_version']} error={data['error']}")
    for c in data["checks"]:
        print(f"  {c['name']:<9} {c['status']:<4} {c['detail']}")
PY
