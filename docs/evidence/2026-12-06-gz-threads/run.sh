#!/usr/bin/env bash
# On the 16-core GPU machine, from a copy of the tree with the tool's dependency wheels in .whl/:
#   bash docs/evidence/2026-12-06-gz-threads/run.sh      (results under $OUT/gzt, and gzt.tgz)
# gz_threads.py's variants and floor in ROUNDS rounds; then TRACES phase timelines of the
# tool's own install, to see which phase moves from run to run.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >/dev/null 2>&1 || echo "pip install of .whl failed"
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
P=python3; W=/tmp/gzt; R=$OUT/gzt; E=docs/evidence/2026-12-06-gz-threads; mkdir -p $W $R
pack() { tar czf $OUT/gzt.tgz -C $OUT gzt; }
{ nproc; uptime; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; $P --version
  df -T /tmp | tail -1; } > $R/machine.txt 2>&1
$P -m compileall -q cudnn_setup /tmp/site >/dev/null 2>&1
src=$($P -c "import nvidia.cudnn as c; print(list(c.__path__)[0])")
gz=$($P -m fixtures.repack "$src" $W/archives --cuda 13 --format gz --level 6 2>/dev/null | tail -1)
ls -l "$gz" >> $R/machine.txt
sync; sleep 5  # the repack's writes flushed before the first timing
timeout 300 $P $E/gz_threads.py "$gz" $W/runs --rounds ${ROUNDS:-8} --json $R/gz-threads.json \
  > $R/gz-threads.txt 2>&1; echo "gz_threads rc $?" >> $R/machine.txt
pack
for i in $(seq ${TRACES:-6}); do
  rm -rf $W/troot; $P -c "import sys; sys.path.insert(0, '.'); from fixtures.generate import make_cuda_root; from pathlib import Path; make_cuda_root(Path('$W/troot'), '13.0')"
  sync; $P bench/install_trace.py install "$gz" --cuda-root $W/troot --no-verify --no-theanorc \
    --no-frameworks > /dev/null 2> $R/gz-trace-$i.txt
done
uptime >> $R/machine.txt
pack
