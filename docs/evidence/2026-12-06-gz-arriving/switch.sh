#!/usr/bin/env bash
# Whether the overlapped install at 1 GB/s waits for the
# interpreter's lock. The download's thread gives the lock up at every read from the socket and
# waits for it again behind threads that decode and stage; sys.setswitchinterval bounds that
# wait. The .tar.gz and the wheel at 1000 MB/s, with the switch interval at 5 (Python's
# default), 1 and 0.2 ms, set in every Python started (switch/sitecustomize.py).
#   bash docs/evidence/2026-12-06-gz-arriving/switch.sh   (results in $OUT/switch.tgz)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >/dev/null 2>&1 || echo "pip install of .whl failed"
export PATH=/tmp/site/bin:$PATH
P=python3; W=/tmp/ga; R=$OUT/switch; mkdir -p $R $W/in
{ nproc; uptime; $P --version; } > $R/machine.txt 2>&1
src=$(PYTHONPATH=/tmp/site:$PWD $P -c "import nvidia.cudnn as c; print(list(c.__path__)[0])")
ver=$(PYTHONPATH=/tmp/site $P -c "import importlib.metadata as m; print(m.version('nvidia-cudnn-cu13'))")
xz=$W/in/cudnn-linux-x86_64-${ver}_cuda13-archive.tar.xz
[ -f $xz ] || cp "$(PYTHONPATH=/tmp/site:$PWD $P -m fixtures.repack "$src" $W/xz --cuda 13 --format xz \
  2>/dev/null | tail -1)" $xz
whl=$(PYTHONPATH=/tmp/site:$PWD $P docs/evidence/h200-round4-2026-12-03/rebuild_wheel.py \
  nvidia-cudnn-cu13 $W/wheels 2>>$R/machine.txt | tail -1)
ls -l $xz $whl >> $R/machine.txt
for round in 1 2; do for ms in 5 1 0.2; do
  export SWITCH_MS=$ms PYTHONPATH=/tmp/site:$here/switch
  timeout 120 $P bench/overlap_speed.py --archive $xz --gzip --gzip-only --rates 1000 --runs 2 \
    --work $W/ov-new --json $R/gz-$ms-$round.json > $R/gz-$ms-$round.txt 2>&1
  echo "gz $ms $round rc $?" >> $R/rc.txt
  [ -n "$whl" ] && timeout 120 $P bench/overlap_speed.py --wheel "$whl" --rates 1000 --runs 2 \
    --work $W/ovw-$ms --json $R/wheel-$ms-$round.json > $R/wheel-$ms-$round.txt 2>&1
  echo "wheel $ms $round rc $?" >> $R/rc.txt
done; done
uptime >> $R/machine.txt
tar czf $OUT/switch.tgz -C $OUT switch
