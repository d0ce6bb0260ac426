#!/usr/bin/env bash
# On the 16-core GPU machine, from a copy of the tree with the tool's dependency wheels in .whl/
# and the tree before rapidgzip read the archive itself (c04bb73) in .old/:
#   bash docs/evidence/2026-12-06-gz-beside/run.sh      (results under $OUT/gzb, and gzb.tgz)
# The .tar.gz install against decode-and-write, this tree and the old one in turn, ROUNDS
# rounds of RUNS alternated runs each; two phase timelines of this tree's install; the
# install's fixed cost, both trees run for run.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >/dev/null 2>&1 || echo "pip install of .whl failed"
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
P=python3; W=/tmp/gzb; R=$OUT/gzb; mkdir -p $W $R
pack() { tar czf $OUT/gzb.tgz -C $OUT gzb; }
troot() { rm -rf $W/troot; $P -c "import sys; sys.path.insert(0, '.'); from fixtures.generate import make_cuda_root; from pathlib import Path; make_cuda_root(Path('$W/troot'), '$1')"; }
{ nproc; uptime; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; $P --version
  df -T /tmp | tail -1; git log -1 --format=%H 2>/dev/null; } > $R/machine.txt 2>&1
$P -m compileall -q cudnn_setup .old/cudnn_setup /tmp/site >/dev/null 2>&1
src=$($P -c "import nvidia.cudnn as c; print(list(c.__path__)[0])")
gz=$($P -m fixtures.repack "$src" $W/archives --cuda 13 --format gz --level 6 2>/dev/null | tail -1)
ls -l "$gz" >> $R/machine.txt
for round in $(seq ${ROUNDS:-3}); do
  for tree in new old; do
    b=bench/install_speed.py; [ $tree = old ] && b=.old/bench/install_speed.py
    timeout 150 $P $b --tool-and-floor --runs ${RUNS:-4} --archive "$gz" --work $W/bench-$tree \
      --json $R/gz-$tree-$round.json > $R/gz-$tree-$round.txt 2>&1
    echo "$tree round $round rc $?" >> $R/machine.txt
  done
  pack
done
for i in 1 2; do troot 13.0; sync; $P bench/install_trace.py install "$gz" --cuda-root $W/troot \
  --no-verify --no-theanorc --no-frameworks > /dev/null 2> $R/gz-trace-$i.txt; done
pack
timeout 150 $P bench/wait_speed.py --runs 15 --skip verify --skip again --skip by-version \
  --old .old --json $R/wait-speed.json > $R/wait-speed.txt 2>&1; echo "wait_speed rc $?" >> $R/machine.txt
pack
