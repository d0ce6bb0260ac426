#!/usr/bin/env bash
# The timeline of an overlapped .tar.gz install at 1000 MB/s (trace.py), 3 runs.
#   bash docs/evidence/2026-12-06-gz-arriving/trace.sh   (results in $OUT/trace.tgz)
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >/dev/null 2>&1 || echo "pip install of .whl failed"
export PATH=/tmp/site/bin:$PATH PYTHONPATH=/tmp/site
P=python3; W=/tmp/gt; R=$OUT/trace; mkdir -p $R $W/in
{ nproc; uptime; } > $R/machine.txt
src=$(PYTHONPATH=/tmp/site:$PWD $P -c "import nvidia.cudnn as c; print(list(c.__path__)[0])")
ver=$($P -c "import importlib.metadata as m; print(m.version('nvidia-cudnn-cu13'))")
xz=$W/in/cudnn-linux-x86_64-${ver}_cuda13-archive.tar.xz
cp "$(PYTHONPATH=/tmp/site:$PWD $P -m fixtures.repack "$src" $W/xz --cuda 13 --format xz \
  2>/dev/null | tail -1)" $xz
timeout 300 $P docs/evidence/2026-12-06-gz-arriving/trace.py $xz $W $R 3 2>> $R/machine.txt
uptime >> $R/machine.txt
tar czf $OUT/trace.tgz -C $OUT trace
