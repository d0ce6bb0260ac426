#!/usr/bin/env bash
# On the H200, from a copy of the tree (dependency wheels in .whl/): every figure of this round.
#   bash docs/evidence/h200-round4-2026-12-03/run.sh [PARTS]   (results under $OUT/r4, and r4.tgz)
# PARTS: which of wheel, verify, probe, wait, gz to run (default: all of them); ROUNDS: verify's
# alternated rounds (default 6).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >/dev/null 2>&1 || echo "pip install of .whl failed"
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
P=python3; W=/tmp/r4; R=$OUT/r4; mkdir -p $W $R
here=docs/evidence/h200-round4-2026-12-03
parts=" ${1:-wheel verify probe wait gz} "
want() { [[ $parts == *" $1 "* ]]; }
secs() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.3f", b - a}'; }
{ nproc; uptime; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  $P --version; $P -c "import typer, torch; print('typer', typer.__version__, 'torch', torch.__version__)"
  uv --version; } > $R/machine.txt 2>&1
$P -m compileall -q cudnn_setup >/dev/null 2>&1

# 1. The wheel against uv, pip and the parallel inflate floor (the wheel file: the machine's own
# copy if it has one, else rebuilt from the installed files at the wheel tools' level).
whl=
want wheel || want wait && whl=$(timeout 20 find /root /home /tmp /var/cache /opt -name 'nvidia_cudnn_cu13-*.whl' 2>/dev/null | head -1)
if [ -z "$whl" ] && { want wheel || want wait; }; then t=$EPOCHREALTIME; whl=$($P $here/rebuild_wheel.py nvidia-cudnn-cu13 $W/wheels)
  echo "rebuilt $whl in $(secs $t) s" >> $R/machine.txt; fi
[ -n "$whl" ] && ls -l "$whl" >> $R/machine.txt
want wheel && timeout 200 $P bench/wheel_speed.py "$whl" --runs 5 --uv "$(command -v uv)" --work $W \
  --json $R/wheel-speed.json > $R/wheel-speed.txt 2>&1; echo "wheel_speed rc $?" >> $R/machine.txt

# 2. A real root: the machine's CUDA headers and runtime, cuDNN 9.19 from the wheel repacked as
# NVIDIA's .tar.gz, installed by the tool.
src=$($P -c "import nvidia.cudnn as c; print(list(c.__path__)[0])")
gz=$($P -m fixtures.repack "$src" $W/archives --cuda 13 --format gz --level 6 2>/dev/null | tail -1)
root=$W/root; rm -rf $root; mkdir -p $root/lib64
cp -rL /usr/local/cuda/include $root/include
cp -P /usr/local/cuda/lib64/libcudart.so* $root/lib64/
$P -m cudnn_setup install "$gz" --cuda-root $root --no-theanorc --no-verify --json > $R/install.json 2>$R/install.err
echo "install rc $?" >> $R/machine.txt

# 3. verify with every GPU step, with and without the frameworks, alternated with torch's own
# import and version check; only exit 0 counts (the script that reads this says which ran).
want verify && for i in $(seq ${ROUNDS:-6}); do
  t=$EPOCHREALTIME; $P -c "import torch; torch.backends.cudnn.version()"; echo "torch-import $i rc $? $(secs $t)"
  t=$EPOCHREALTIME; $P -m cudnn_setup verify --cuda-root $root --no-theano --json > $W/vf$i.json 2>/dev/null
  echo "verify-frameworks $i rc $? $(secs $t)"
  t=$EPOCHREALTIME; $P -m cudnn_setup verify --cuda-root $root --no-theano --no-frameworks --json > $W/v$i.json 2>/dev/null
  echo "verify-gpu $i rc $? $(secs $t)"
done > $R/verify-runs.txt 2>&1
want verify && cp $W/vf6.json $R/verify-frameworks.json && cp $W/v6.json $R/verify-gpu.json
# the torch child alone, the driver started during the import or after it
want probe && for i in $(seq ${ROUNDS:-4}); do for mode in warm --cold-driver; do
  t=$EPOCHREALTIME; echo k | $P cudnn_setup/probes/framework_loads.py torch $([ $mode = warm ] || echo $mode) > $W/probe.json 2>/dev/null
  echo "torch-probe $mode $i $(secs $t) $(grep -o '"seconds":[0-9.]*' $W/probe.json | head -1) $(grep -o '"ran":{[^}]*}' $W/probe.json)"
done; done > $R/torch-probe.txt 2>&1
want verify && timeout 60 $P bench/verify_trace.py verify --cuda-root $root --no-theano --json >/dev/null 2>$R/verify-trace.txt

# 4. Start-up, the install's fixed cost, verify and the same archive again, from the bench.
want wait && timeout 170 $P bench/wait_speed.py --runs 5 --verify-runs 3 --archive "$gz" --root $root --wheel "$whl" \
  --json $R/wait-speed.json > $R/wait-speed.txt 2>&1 && echo "wait_speed done" >> $R/machine.txt

# 5. .tar.gz on every core against decode-and-write, and one profiled install.
want gz && timeout 120 $P bench/install_speed.py --tool-and-floor --runs 5 --archive "$gz" --work $W/bench \
  --json $R/gz-tool-and-floor.json > $R/gz-tool-and-floor.txt 2>&1; echo "install_speed rc $?" >> $R/machine.txt
want gz && rm -rf $W/proot && $P -c "import sys; sys.path.insert(0, '.'); from fixtures.generate import make_cuda_root; from pathlib import Path; make_cuda_root(Path('$W/proot'), '13.0')"
want gz && sync && $P -m cProfile -o $W/gz.prof -m cudnn_setup install "$gz" --cuda-root $W/proot --no-verify \
  --no-theanorc --no-frameworks --json > /dev/null 2>&1
want gz && $P -c "import pstats, sys; p = pstats.Stats(sys.argv[1]); p.sort_stats('cumulative').print_stats(40)" $W/gz.prof > $R/gz-profile.txt 2>&1
tar czf $OUT/r4.tgz -C $OUT r4
