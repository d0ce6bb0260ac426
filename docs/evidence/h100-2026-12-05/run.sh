#!/usr/bin/env bash
# On the 16-core GPU machine, from a copy of the tree (dependency wheels in .whl/): the wheel
# against uv, pip and the inflate floor; the .tar.gz against its floors with a phase timeline;
# the download overlapped with the install; start-up, verify and the same archive again.
#   bash docs/evidence/h100-2026-12-05/run.sh [PARTS]   (results under $OUT/r5, and r5.tgz)
# PARTS: any of wheel, gz, overlap, wait (default: all).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >/dev/null 2>&1 || echo "pip install of .whl failed"
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
P=python3; W=/tmp/r5; R=$OUT/r5; mkdir -p $W $R
parts=" ${1:-wheel gz overlap wait} "
want() { [[ $parts == *" $1 "* ]]; }
pack() { tar czf $OUT/r5.tgz -C $OUT r5; }  # after each part: a run cut short keeps what it did
{ nproc; uptime; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  $P --version; uv --version; git log --oneline -1 2>/dev/null; } > $R/machine.txt 2>&1
$P -m compileall -q cudnn_setup /tmp/site >/dev/null 2>&1

whl=$(timeout 20 find /root /home /tmp /var/cache /opt -name 'nvidia_cudnn_cu13-*.whl' 2>/dev/null | head -1)
[ -z "$whl" ] && whl=$($P docs/evidence/h200-round4-2026-12-03/rebuild_wheel.py nvidia-cudnn-cu13 $W/wheels)
ls -l "$whl" >> $R/machine.txt
want wheel && { timeout 150 $P bench/wheel_speed.py "$whl" --runs ${WHEEL_RUNS:-5} --work $W --json $R/wheel-speed.json \
  > $R/wheel-speed.txt 2>&1; echo "wheel_speed rc $?" >> $R/machine.txt; pack; }

# a real root: the machine's CUDA headers and runtime, cuDNN 9.19 of the wheel repacked as .tar.gz
src=$($P -c "import nvidia.cudnn as c; print(list(c.__path__)[0])")
gz=$($P -m fixtures.repack "$src" $W/archives --cuda 13 --format gz --level 6 2>/dev/null | tail -1)
ls -l "$gz" >> $R/machine.txt
root=$W/root; rm -rf $root; mkdir -p $root/lib64
cp -rL /usr/local/cuda/include $root/include; cp -P /usr/local/cuda/lib64/libcudart.so* $root/lib64/
$P -m cudnn_setup install "$gz" --cuda-root $root --no-theanorc --no-verify --json > $R/install.json 2>$R/install.err
echo "install rc $?" >> $R/machine.txt

if want gz; then
  timeout 120 $P bench/install_speed.py --tool-and-floor --runs 5 --archive "$gz" --work $W/bench \
    --json $R/gz-tool-and-floor.json > $R/gz-tool-and-floor.txt 2>&1; echo "install_speed rc $?" >> $R/machine.txt
  for i in 1 2 3; do rm -rf $W/troot; $P -c "import sys; sys.path.insert(0, '.'); from fixtures.generate import make_cuda_root; from pathlib import Path; make_cuda_root(Path('$W/troot'), '13.0')"
    sync; $P bench/install_trace.py install "$gz" --cuda-root $W/troot --no-verify --no-theanorc --no-frameworks \
      > /dev/null 2> $R/gz-trace-$i.txt; done
  pack
fi
# the overlap: a multi-block .tar.xz under NVIDIA's name (the bench's mirror needs the 4-part
# version), and --gzip's .tar.gz of the same tar
if want overlap; then
  xzf=$($P -m fixtures.repack "$src" $W/xz --cuda 13 --format xz 2>/dev/null | tail -1)
  mkdir -p $W/ov-in; ver=$($P -c "import nvidia.cudnn, importlib.metadata as m; print(m.version('nvidia-cudnn-cu13'))")
  cp "$xzf" $W/ov-in/cudnn-linux-x86_64-${ver}_cuda13-archive.tar.xz; ls -l $W/ov-in >> $R/machine.txt
  timeout 240 $P bench/overlap_speed.py --archive $W/ov-in/cudnn-linux-x86_64-${ver}_cuda13-archive.tar.xz \
    --gzip --rates 100,1000 --runs ${OVERLAP_RUNS:-2} --work $W/ov --json $R/overlap-speed.json > $R/overlap-speed.txt 2>&1
  echo "overlap_speed rc $?" >> $R/machine.txt; pack
fi
want wait && { timeout 200 $P bench/wait_speed.py --runs 5 --verify-runs 3 --archive "$gz" --root $root --wheel "$whl" \
  --json $R/wait-speed.json > $R/wait-speed.txt 2>&1; echo "wait_speed rc $?" >> $R/machine.txt; }
pack
