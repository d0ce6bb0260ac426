#!/usr/bin/env bash
# On the 16-core GPU machine, from a copy of the tree (dependency wheels, uv's among them, in
# .whl/): the wheel against uv, pip and the inflate floor, with phase timelines; the .tar.gz
# against decoding alone and decode-and-write, with timelines; the download overlapped with the
# install; verify with every GPU step; start-up, the same archive and the same version again.
#   bash docs/evidence/h200-2026-12-06/run.sh [PARTS]   (results under $OUT/r6, and r6.tgz)
# PARTS: any of wheel, gz, overlap, verify, wait (default: all). WHEEL_RUNS, OVERLAP_RUNS,
# ROUNDS (verify's alternated rounds) set the counts.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >/dev/null 2>&1 || echo "pip install of .whl failed"
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
P=python3; W=/tmp/r6; R=$OUT/r6; mkdir -p $W $R
parts=" ${1:-wheel gz overlap verify wait} "
want() { [[ $parts == *" $1 "* ]]; }
secs() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.3f", b - a}'; }
pack() { tar czf $OUT/r6.tgz -C $OUT r6; }  # after each part: a run cut short keeps what it did
troot() { rm -rf $W/troot; $P -c "import sys; sys.path.insert(0, '.'); from fixtures.generate import make_cuda_root; from pathlib import Path; make_cuda_root(Path('$W/troot'), '$1')"; }
{ nproc; uptime; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  $P --version; $P -c "import typer, torch; print('typer', typer.__version__, 'torch', torch.__version__)"
  uv --version; } > $R/machine.txt 2>&1
$P -m compileall -q cudnn_setup /tmp/site >/dev/null 2>&1

whl=$(timeout 20 find /root /home /tmp /var/cache /opt -name 'nvidia_cudnn_cu13-*.whl' 2>/dev/null | head -1)
[ -z "$whl" ] && whl=$($P docs/evidence/h200-round4-2026-12-03/rebuild_wheel.py nvidia-cudnn-cu13 $W/wheels)
ls -l "$whl" >> $R/machine.txt
# the wheel: this tree against uv, pip and the floor; where the tree has deflate_split.py (the
# run of 01:24 UTC), against `old` too: the same tree with the longest member inflated on one
# core (its MIN_CORES out of reach), and a timeline of each
if want wheel; then
  if [ -f cudnn_setup/archive/deflate_split.py ]; then
    rm -rf $W/one-core; mkdir -p $W/one-core; cp -r cudnn_setup bench fixtures $W/one-core/
    sed -i 's/^MIN_CORES = .*/MIN_CORES = 1 << 30/' $W/one-core/cudnn_setup/archive/deflate_split.py
    $P -m compileall -q $W/one-core/cudnn_setup >/dev/null 2>&1; trees="$PWD $W/one-core"; old="--old $W/one-core"
  else trees=$PWD; old=; fi
  timeout 200 $P bench/wheel_speed.py "$whl" --runs ${WHEEL_RUNS:-5} --work $W $old \
    --json $R/wheel-speed.json > $R/wheel-speed.txt 2>&1; echo "wheel_speed rc $?" >> $R/machine.txt
  for i in 1 2; do for tree in $trees; do troot 13.0; sync
    $P $tree/bench/install_trace.py install "$whl" --cuda-root $W/troot --no-verify --no-theanorc \
      --no-frameworks > /dev/null 2> $R/wheel-trace-$i-$([ $tree = $PWD ] && echo tool || echo one-core).txt; done; done
  pack
fi

# a real root: the machine's CUDA headers and runtime, cuDNN 9.19 of the wheel repacked as .tar.gz
src=$($P -c "import nvidia.cudnn as c; print(list(c.__path__)[0])")
gz=$($P -m fixtures.repack "$src" $W/archives --cuda 13 --format gz --level 6 2>/dev/null | tail -1)
ls -l "$gz" >> $R/machine.txt
root=$W/root; rm -rf $root; mkdir -p $root/lib64
cp -rL /usr/local/cuda/include $root/include; cp -P /usr/local/cuda/lib64/libcudart.so* $root/lib64/
$P -m cudnn_setup install "$gz" --cuda-root $root --no-theanorc --no-verify --json > $R/install.json 2>$R/install.err
echo "install rc $?" >> $R/machine.txt

if want gz; then
  timeout 150 $P bench/install_speed.py --tool-and-floor --runs 5 --archive "$gz" --work $W/bench \
    --json $R/gz-tool-and-floor.json > $R/gz-tool-and-floor.txt 2>&1; echo "install_speed rc $?" >> $R/machine.txt
  for i in 1 2 3; do troot 13.0; sync; $P bench/install_trace.py install "$gz" --cuda-root $W/troot \
    --no-verify --no-theanorc --no-frameworks > /dev/null 2> $R/gz-trace-$i.txt; done
  pack
fi
# the overlap: a multi-block .tar.xz under NVIDIA's name (the bench's mirror needs the 4-part
# version), --gzip's .tar.gz of the same tar, and the wheel where the bench serves wheels
if want overlap; then
  xzf=$($P -m fixtures.repack "$src" $W/xz --cuda 13 --format xz 2>/dev/null | tail -1)
  mkdir -p $W/ov-in; ver=$($P -c "import importlib.metadata as m; print(m.version('nvidia-cudnn-cu13'))")
  cp "$xzf" $W/ov-in/cudnn-linux-x86_64-${ver}_cuda13-archive.tar.xz; ls -l $W/ov-in >> $R/machine.txt
  timeout 240 $P bench/overlap_speed.py --archive $W/ov-in/cudnn-linux-x86_64-${ver}_cuda13-archive.tar.xz \
    --gzip --rates 100,1000 --runs ${OVERLAP_RUNS:-2} --work $W/ov --json $R/overlap-speed.json > $R/overlap-speed.txt 2>&1
  echo "overlap_speed rc $?" >> $R/machine.txt
  if $P bench/overlap_speed.py --help 2>/dev/null | grep -q -- --wheel; then
    timeout 150 $P bench/overlap_speed.py --wheel "$whl" --rates 100,1000 --runs ${OVERLAP_RUNS:-2} --work $W/ovw \
      --json $R/overlap-wheel.json > $R/overlap-wheel.txt 2>&1; echo "overlap_speed wheel rc $?" >> $R/machine.txt
  fi
  pack
fi
# verify with every GPU step, with and without the frameworks, alternated with torch's own
# import and version check; only exit 0 counts (the JSON answers say which checks ran)
if want verify; then
  for i in $(seq ${ROUNDS:-5}); do
    t=$EPOCHREALTIME; $P -c "import torch; torch.backends.cudnn.version()"; echo "torch-import $i rc $? $(secs $t)"
    t=$EPOCHREALTIME; $P -m cudnn_setup verify --cuda-root $root --no-theano --json > $W/vf$i.json 2>/dev/null
    echo "verify-frameworks $i rc $? $(secs $t)"
    t=$EPOCHREALTIME; $P -m cudnn_setup verify --cuda-root $root --no-theano --no-frameworks --json > $W/v$i.json 2>/dev/null
    echo "verify-gpu $i rc $? $(secs $t)"
  done > $R/verify-runs.txt 2>&1
  cp $W/vf1.json $R/verify-frameworks.json; cp $W/v1.json $R/verify-gpu.json
  timeout 60 $P bench/verify_trace.py verify --cuda-root $root --no-theano --json >/dev/null 2>$R/verify-trace.txt
  pack
fi
want wait && { timeout 200 $P bench/wait_speed.py --runs 5 --verify-runs 3 --archive "$gz" --root $root --wheel "$whl" \
  --json $R/wait-speed.json > $R/wait-speed.txt 2>&1; echo "wait_speed rc $?" >> $R/machine.txt; }
pack
