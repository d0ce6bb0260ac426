#!/usr/bin/env bash
# On the 16-core GPU machine, from a copy of the tree (dependency wheels in .whl/, and the tree
# before the records became msgspec Structs as .whl/before.tgz, made with
# `git archive 7847292 cudnn_setup | gzip > .whl/before.tgz`):
#   1. start-up and the install's fixed cost, this tree and the one before, run for run, and
#      verify of the real root with every GPU step (bench/wait_speed.py --old);
#   2. the .tar.gz and the multi-block .tar.xz against decode-and-write (install_speed.py);
#   3. the download overlapped with the install at 100 and 1000 MB/s, and the wheel against uv.
#   bash docs/evidence/2026-12-06-records/run.sh [PARTS]   (results under $OUT/r8, r8.tgz)
# PARTS: any of wait, gz, xz, overlap, wheel (default: wait gz xz); WAIT_RUNS (9) the start-up rounds.
set -uo pipefail
parts=" ${1:-wait gz xz} "
want() { [[ $parts == *" $1 "* ]]; }
R=$OUT/r8; mkdir -p $R
pack() { tar czf $OUT/r8.tgz -C $OUT r8; }
here=$(dirname "$0")
# run.sh installs .whl into /tmp/site, builds the real root /tmp/r6/root (the machine's CUDA
# 13.0, cuDNN 9.19.0 of its wheel repacked as .tar.gz) and runs the parts it is given
rparts=""; want gz && rparts+=" gz"; want overlap && rparts+=" overlap"; want wheel && rparts+=" wheel"
bash docs/evidence/h200-2026-12-06/run.sh "${rparts:-none}"
cp -r $OUT/r6/. $R/; rm -rf $OUT/r6 $OUT/r6.tgz; pack
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
if want wait; then
  old=/tmp/before; rm -rf $old; mkdir -p $old; tar xzf .whl/before.tgz -C $old
  timeout 400 python3 bench/wait_speed.py --runs ${WAIT_RUNS:-9} --verify-runs 3 --root /tmp/r6/root --old $old \
    --skip again --skip by-version --json $R/wait-speed.json > $R/wait-speed.txt 2>&1
  echo "wait_speed rc $?" >> $R/machine.txt; pack
fi
if want xz; then
  bash docs/evidence/h100-2026-12-06-head/run2.sh xz; cp -r $OUT/r7/. $R/; rm -rf $OUT/r7 $OUT/r7.tgz
fi
uptime >> $R/machine.txt; pack
