#!/usr/bin/env bash
# The situations of the damage corpus again, with the final code; verify with the frameworks
# beside PyTorch's own import, alternated.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
chmod -R a+rX /tmp/site
cd .devrun/src
export PYTHONPATH=/tmp/site:$PWD
P=python3; W=/tmp/fin; mkdir -p $W $OUT/f
$P scripts/damage-corpus.py --out $OUT/f/corpus --jobs 8 --only intact,umask077:nobody,link-deleted:libcudnn_graph,link-repointed:libcudnn_heuristic,jit:beside-system,header-foreign,bitflip:libcudnn_engines_precompiled,jit:alone,stub:libcudnn_cnn > $OUT/f/corpus.log 2>&1; echo "corpus rc $?"
tail -3 $OUT/f/corpus.log
src=$($P -c "import nvidia.cudnn as c; print(list(c.__path__)[0])")
archive=$($P -m fixtures.repack "$src" $W/archives --cuda 13 --format gz --level 1 2>&1 | tail -1)
root=$W/root; rm -rf $root; mkdir -p $root/lib64
cp -rL /usr/local/cuda/include $root/include
cp -P /usr/local/cuda/lib64/libcudart.so* $root/lib64/ 2>/dev/null || cp -P /usr/local/cuda/lib/libcudart.so* $root/lib64/
$P -m cudnn_setup install "$archive" --cuda-root $root --no-theanorc --no-verify --no-frameworks --json > /dev/null; echo "install rc $?"
$P -m cudnn_setup verify --cuda-root $root --no-theano --json > /dev/null  # the plan kept, the caches warm
{
for i in 1 2 3 4 5; do
  t=$EPOCHREALTIME; $P -c "import torch; torch.backends.cudnn.version()" >/dev/null 2>&1; echo "import torch run $i: $(awk -v a=$t -v b=$EPOCHREALTIME 'BEGIN{printf "%.2f", b-a}') s"
  t=$EPOCHREALTIME; $P -m cudnn_setup verify --cuda-root $root --no-theano --json > $W/v.json 2>/dev/null; rc=$?
  echo "verify --no-theano run $i: rc $rc $(awk -v a=$t -v b=$EPOCHREALTIME 'BEGIN{printf "%.2f", b-a}') s $($P -c "import json;d=json.load(open('$W/v.json'));print([(c['name'],c['status']) for c in d['checks'] if c['status']!='pass'])")"
  t=$EPOCHREALTIME; $P -m cudnn_setup verify --cuda-root $root --no-theano --no-frameworks --json > $W/v2.json 2>/dev/null; rc=$?
  echo "verify --no-theano --no-frameworks run $i: rc $rc $(awk -v a=$t -v b=$EPOCHREALTIME 'BEGIN{printf "%.2f", b-a}') s"
done
} 2>&1 | tee $OUT/f/verify-times.txt
cp $W/v.json $OUT/f/verify-frameworks.json
tar czf $OUT/final2.tgz -C $OUT f
