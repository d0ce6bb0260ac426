#!/usr/bin/env bash
# On the 16-core GPU machine, from a copy of the tree (dependency wheels, uv's and py-spy's among
# them, in .whl/): where a .tar.gz install's time goes (gz_where.py, the tool's phase timelines,
# a py-spy profile) and the install's fixed cost.
#   bash docs/evidence/h100-2026-12-06-gz/run.sh [PARTS]   (results under $OUT/r7, and r7.tgz)
# PARTS: any of gz, pyspy (with gz), fixed (default: gz fixed). ROUNDS sets gz_where's rounds.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >/dev/null 2>&1 || echo "pip install of .whl failed"
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
P=python3; W=/tmp/r7; R=$OUT/r7; E=docs/evidence/h100-2026-12-06-gz; mkdir -p $W $R
parts=" ${1:-gz fixed} "
want() { [[ $parts == *" $1 "* ]]; }
pack() { tar czf $OUT/r7.tgz -C $OUT r7; }
troot() { rm -rf $W/troot; $P -c "import sys; sys.path.insert(0, '.'); from fixtures.generate import make_cuda_root; from pathlib import Path; make_cuda_root(Path('$W/troot'), '$1')"; }
{ nproc; uptime; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; $P --version
  df -T /tmp | tail -1; } > $R/machine.txt 2>&1
$P -m compileall -q cudnn_setup /tmp/site >/dev/null 2>&1
if want gz; then
  src=$($P -c "import nvidia.cudnn as c; print(list(c.__path__)[0])")
  gz=$($P -m fixtures.repack "$src" $W/archives --cuda 13 --format gz --level 6 2>/dev/null | tail -1)
  ls -l "$gz" >> $R/machine.txt
  timeout 240 $P $E/gz_where.py "$gz" $W/where --rounds ${ROUNDS:-5} --json $R/gz-where.json \
    > $R/gz-where.txt 2>&1; echo "gz_where rc $?" >> $R/machine.txt
  pack
  timeout 150 $P bench/install_speed.py --tool-and-floor --runs 5 --archive "$gz" --work $W/bench \
    --json $R/gz-tool-and-floor.json > $R/gz-tool-and-floor.txt 2>&1; echo "install_speed rc $?" >> $R/machine.txt
  pack
  for i in 1 2; do troot 13.0; sync; $P bench/install_trace.py install "$gz" --cuda-root $W/troot \
    --no-verify --no-theanorc --no-frameworks > /dev/null 2> $R/gz-trace-$i.txt; done
  want pyspy && troot 13.0 && sync && timeout 60 py-spy record --native --threads --subprocesses -r 250 -f raw -o $R/gz-pyspy.txt -- \
    $P -m cudnn_setup install "$gz" --cuda-root $W/troot --no-verify --no-theanorc --no-frameworks \
    > /dev/null 2> $R/gz-pyspy.err; echo "py-spy rc $?" >> $R/machine.txt
  pack
fi
if want fixed; then
  timeout 150 $P bench/wait_speed.py --runs 15 --skip verify --skip again --skip by-version \
    --json $R/wait-speed.json > $R/wait-speed.txt 2>&1; echo "wait_speed rc $?" >> $R/machine.txt
  troot 10.0
  $P -X importtime -m cudnn_setup install fixtures/samples/cudnn-10.0-linux-x64-v7.4.2.24.tgz \
    --cuda-root $W/troot --no-verify --no-theanorc --no-frameworks --json > /dev/null 2> $R/fixed-importtime.txt
fi
pack
