#!/usr/bin/env bash
# On the GPU machine, from a copy of the tree (dependency wheels in .whl/), after run.sh has built
# its real root in /tmp/r6/root (the machine's CUDA 13.0 with cuDNN 9.19.0 of its wheel):
#   1. users: a fresh root installed by root under umask 077, then `verify` with every GPU step,
#      as root and as a second user (uid 65534, a HOME of its own, the tree and the interpreter's
#      dependencies readable to it); each answer's checks and exit code;
#   2. xz: the multi-block .tar.xz of the same release against `xz -dc -T0` decode-and-write;
#   3. disk: how fast the disk under /tmp takes 512 MiB, direct and fsync'd.
#   bash docs/evidence/h100-2026-12-06-head/run2.sh [PARTS]   (results under $OUT/r7, r7.tgz)
set -uo pipefail
parts=" ${1:-disk users xz} "
want() { [[ $parts == *" $1 "* ]]; }
export PYTHONPATH=/tmp/site:$PWD
P=python3; W=/tmp/r6; R=$OUT/r7; mkdir -p $R
pack() { tar czf $OUT/r7.tgz -C $OUT r7; }
src=$($P -c "import nvidia.cudnn as c; print(list(c.__path__)[0])")
gz=$(ls $W/archives/*.tar.gz | head -1)
summary() { $P -c "
import json, sys
d = json.load(open(sys.argv[1]))
print('exit', sys.argv[2], 'ok', d.get('ok'), 'error', (d.get('error') or {}).get('code'))
for c in d.get('checks', []):
    print(f\"  {c['name']:<11} {c['status']:<5} {c['detail'][:240]}\")" "$@"; }
if want users; then
  tree=/tmp/tree; rm -rf $tree; mkdir -p $tree; cp -r cudnn_setup $tree/; chmod -R a+rX $tree /tmp/site
  root=$W/uroot; rm -rf $root; mkdir -p $root/lib64
  cp -rL /usr/local/cuda/include $root/include; cp -P /usr/local/cuda/lib64/libcudart.so* $root/lib64/
  chmod -R a+rX $root
  ( umask 077; PYTHONPATH=/tmp/site:$tree $P -m cudnn_setup install "$gz" --cuda-root $root \
      --no-theanorc --no-verify --json > $R/users-install.json 2> $R/users-install.err; echo $? > $R/users-install.rc )
  summary $R/users-install.json "$(cat $R/users-install.rc)" > $R/users.txt 2>&1
  ls -la $root/lib64 | head -20 >> $R/users.txt
  for who in root nobody; do
    home=/tmp/home-$who; rm -rf $home; mkdir -p $home
    if [ $who = nobody ]; then chown 65534:65534 $home; run="setpriv --reuid=65534 --regid=65534 --clear-groups"; else run=; fi
    for i in 1 2; do
      t=$EPOCHREALTIME
      $run env HOME=$home PYTHONPATH=/tmp/site:$tree PATH=$PATH $P -m cudnn_setup verify --cuda-root $root \
        --no-theano --json > $R/verify-$who-$i.json 2> $R/verify-$who-$i.err; rc=$?
      echo "== verify as $who, run $i: rc $rc, $(awk -v a=$t -v b=$EPOCHREALTIME 'BEGIN{printf "%.2f s", b-a}')" >> $R/users.txt
      summary $R/verify-$who-$i.json $rc >> $R/users.txt 2>&1
    done
  done
  pack
fi
if want xz; then
  xzf=$(ls $W/xz/*.tar.xz 2>/dev/null | head -1)
  [ -z "$xzf" ] && xzf=$($P -m fixtures.repack "$src" $W/xz --cuda 13 --format xz 2>/dev/null | tail -1)
  ls -l "$xzf" > $R/xz-archive.txt
  timeout 200 $P bench/install_speed.py --tool-and-floor --runs 5 --archive "$xzf" --work $W/benchxz \
    --json $R/xz-tool-and-floor.json > $R/xz-tool-and-floor.txt 2>&1; echo "install_speed xz rc $?" >> $R/xz-archive.txt
  pack
fi
# the disk under /tmp: 512 MiB written with O_DIRECT, then through the page cache and fsync'd,
# as the tool writes a staged library and a part file
if want disk; then
  { dd if=/dev/zero of=/tmp/r7-dd bs=4M count=128 oflag=direct 2>&1 | tail -1
    dd if=/dev/zero of=/tmp/r7-dd bs=4M count=128 conv=fsync 2>&1 | tail -1
    df -hT /tmp | tail -1; } > $R/disk.txt; rm -f /tmp/r7-dd
  pack
fi
