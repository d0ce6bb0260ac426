#!/usr/bin/env bash
# On a many-core machine with NVIDIA's cuDNN wheel installed: the install-speed benchmark on the
# real cuDNN, repacked there as multi-block .tar.xz, single-block .tar.xz and .tar.gz.
#   (a) manual steps, (b) the fastest decoder (xz -T0; ISA-L or rapidgzip on every core),
#   (c) cudnn-setup install, medians of RUNS (3) rounds, peak memory, and ISA-L against
#   rapidgzip at 1, 2, 4... cores. One profiled install per archive shows where (c) spends its time.
# PYTHON: the interpreter with the wheel (default python3); FORMATS: which repacks (default
# "xz:2 xz1:2 gz:6", format:level; the single-block one takes minutes to make); results in $OUT
# (default /tmp/cudnn-speed/out): speed.json, speed.txt, profile-*.txt, importtime.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
work=${WORK:-/tmp/cudnn-speed}
out=${OUT:-$work/out}
runs=${RUNS:-3}
mkdir -p "$work" "$out"
src=${CUDNN_WHEEL_DIR:-$($py -c "import importlib.util as u; print(list(u.find_spec('nvidia.cudnn').submodule_search_locations)[0])")}
major=$(awk '/#define CUDA_VERSION/ {print int($3/1000); exit}' /usr/local/cuda/include/cuda.h)
echo "cuDNN from $src, CUDA $major; $(nproc) cores; $(xz --version | head -1); filesystem of $work: $(findmnt -n -o FSTYPE -T "$work" 2>/dev/null || echo unknown); content hash $($py -c 'from cudnn_setup.digest import content_hash; print(content_hash())')"
# As pip would have: the tool's modules byte-compiled, so (c) does not compile them each run.
$py -m compileall -q cudnn_setup ${PYTHONPATH:+$(tr ':' ' ' <<<"$PYTHONPATH")} >/dev/null 2>&1 || true
archives=()
for f in ${FORMATS:-xz:2 xz1:2 gz:6}; do
  fmt=${f%%:*}
  dir=$work/archives-$fmt
  a=$(ls "$dir"/*.tar.* 2>/dev/null | head -1 || true)
  if [ -z "$a" ]; then
    s=$EPOCHREALTIME
    a=$($py -m fixtures.repack "$src" "$dir" --cuda "$major" --format "$fmt" --level "${f##*:}")
    echo "repacked $fmt in $(awk -v a="$s" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.1f", b - a}') s: $(ls -l "$a")"
  fi
  archives+=(--archive "$a")
done
PYTHONUNBUFFERED=1 $py bench/install_speed.py --runs "$runs" "${archives[@]}" --no-verify-times \
  --gzip-sweep --work "$work/bench" --json "$out/speed.json" 2>&1 | tee "$out/speed.txt"
# The .tar.gz again, (b) and (c) only, alternated: min and median of 5 with the load average.
gz=$(ls "$work"/archives-gz/*.tar.gz | head -1)
PYTHONUNBUFFERED=1 $py bench/install_speed.py --tool-and-floor --runs 5 --archive "$gz" \
  --work "$work/bench" --json "$out/speed-gz-tool-and-floor.json" 2>&1 | tee -a "$out/speed.txt"
# Where the time goes in one install of each: the main thread's profile, and the imports.
i=0
for a in "${archives[@]}"; do
  [ "$a" = --archive ] && continue
  i=$((i + 1))
  root=$work/profile-root
  rm -rf "$root"
  $py -c "import sys; sys.path.insert(0, '.'); from fixtures.generate import make_cuda_root; from pathlib import Path; make_cuda_root(Path('$root'), '13.0')"
  sync
  $py -m cProfile -o "$work/p$i.prof" -m cudnn_setup install "$a" --cuda-root "$root" \
    --no-verify --no-theanorc --no-frameworks --json >/dev/null 2>&1 || true
  $py -c "import pstats, sys; p = pstats.Stats(sys.argv[1]); p.sort_stats('cumulative').print_stats(45); p.print_callers('sleep|acquire')" "$work/p$i.prof" >"$out/profile-$i.txt" 2>&1 || true
done
rm -rf "$work/profile-root"
$py -X importtime -m cudnn_setup --help 2>&1 >/dev/null | sort -t'|' -k2 -n | tail -25 >"$out/importtime.txt"
