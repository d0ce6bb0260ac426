#!/usr/bin/env bash
# On the 16-core GPU machine, from a copy of the tree (dependency wheels in .whl/; the tree
# before rapidgzip read arriving archives, 0876fcb, exported into .old/):
#   bash docs/evidence/2026-12-06-gz-arriving/run.sh     (results in $OUT/arriving.tgz)
# `install VERSION` with a cold cache against the download alone, from a local server at 100 and
# 1000 MB/s (bench/overlap_speed.py), for a .tar.gz of cuDNN 9.19 (gzip -1 of NVIDIA's tar, as
# the bench makes it), this tree and the one before taking turns, then the wheel with this tree.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >/dev/null 2>&1 || echo "pip install of .whl failed"
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
P=python3; W=/tmp/ga; R=$OUT/arriving; mkdir -p $W $R
{ nproc; uptime; $P --version; } > $R/machine.txt 2>&1
src=$(PYTHONPATH=/tmp/site:$PWD $P -c "import nvidia.cudnn as c; print(list(c.__path__)[0])")
xzf=$(PYTHONPATH=/tmp/site:$PWD $P -m fixtures.repack "$src" $W/xz --cuda 13 --format xz 2>/dev/null | tail -1)
ver=$(PYTHONPATH=/tmp/site $P -c "import importlib.metadata as m; print(m.version('nvidia-cudnn-cu13'))")
mkdir -p $W/in; cp "$xzf" $W/in/cudnn-linux-x86_64-${ver}_cuda13-archive.tar.xz; ls -l $W/in >> $R/machine.txt
for round in 1 2; do for tree in new old; do
  dir=$PWD; [ $tree = old ] && dir=$PWD/.old
  (cd $dir && PYTHONPATH=/tmp/site:$dir timeout 200 $P bench/overlap_speed.py \
    --archive $W/in/cudnn-linux-x86_64-${ver}_cuda13-archive.tar.xz --gzip --gzip-only \
    --rates 100,1000 --runs 2 --work $W/ov-$tree --json $R/gz-$tree-$round.json) \
    > $R/gz-$tree-$round.txt 2>&1; echo "$tree $round rc $?" >> $R/machine.txt
done; done
whl=$(timeout 20 find /root /home /tmp /var/cache /opt -name 'nvidia_cudnn_cu13-*.whl' 2>/dev/null | head -1)
[ -n "$whl" ] && PYTHONPATH=/tmp/site:$PWD timeout 150 $P bench/overlap_speed.py --wheel "$whl" \
  --rates 1000 --runs 3 --work $W/ovw --json $R/wheel.json > $R/wheel.txt 2>&1
echo "wheel rc $?" >> $R/machine.txt
uptime >> $R/machine.txt
tar czf $OUT/arriving.tgz -C $OUT arriving
