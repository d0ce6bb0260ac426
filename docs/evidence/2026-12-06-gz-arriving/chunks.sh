#!/usr/bin/env bash
# How large a piece each of rapidgzip's threads should take of a .tar.gz still arriving: the
# overlapped install at 100 and 1000 MB/s (bench/overlap_speed.py, --gzip-only) with
# decoders.ARRIVING_CHUNK at 1, 2 and 4 MiB (copies of the tree), taking turns, 2 rounds.
#   bash docs/evidence/2026-12-06-gz-arriving/chunks.sh   (results in $OUT/chunks.tgz)
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >/dev/null 2>&1 || echo "pip install of .whl failed"
export PATH=/tmp/site/bin:$PATH
P=python3; W=/tmp/gc; R=$OUT/chunks; mkdir -p $R $W/in
{ nproc; uptime; } > $R/machine.txt
src=$(PYTHONPATH=/tmp/site:$PWD $P -c "import nvidia.cudnn as c; print(list(c.__path__)[0])")
ver=$(PYTHONPATH=/tmp/site $P -c "import importlib.metadata as m; print(m.version('nvidia-cudnn-cu13'))")
xz=$W/in/cudnn-linux-x86_64-${ver}_cuda13-archive.tar.xz
[ -f $xz ] || cp "$(PYTHONPATH=/tmp/site:$PWD $P -m fixtures.repack "$src" $W/xz --cuda 13 \
  --format xz 2>/dev/null | tail -1)" $xz
for mib in 1 2 4; do
  rm -rf $W/tree-$mib; mkdir -p $W/tree-$mib; cp -r cudnn_setup bench fixtures $W/tree-$mib/
  sed -i "s/^ARRIVING_CHUNK = .*/ARRIVING_CHUNK = $mib << 20/" $W/tree-$mib/cudnn_setup/archive/decoders.py
  grep "^ARRIVING_CHUNK" $W/tree-$mib/cudnn_setup/archive/decoders.py >> $R/machine.txt
done
for round in 1 2; do for mib in 1 2 4; do
  (cd $W/tree-$mib && PYTHONPATH=/tmp/site timeout 150 $P bench/overlap_speed.py --archive $xz \
    --gzip --gzip-only --rates 100,1000 --runs 2 --work $W/ov --json $R/gz-$mib-$round.json) \
    > $R/gz-$mib-$round.txt 2>&1; echo "$mib MiB round $round rc $?" >> $R/machine.txt
done; done
uptime >> $R/machine.txt
tar czf $OUT/chunks.tgz -C $OUT chunks
