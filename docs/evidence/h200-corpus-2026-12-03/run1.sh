#!/usr/bin/env bash
# One call: framework import times, verify timings on a real root, the damage corpus.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
chmod -R a+rX /tmp/site
cd .devrun/src
export PYTHONPATH=/tmp/site:$PWD
P=python3; W=/tmp/fin; mkdir -p $W $OUT/e
src=$($P -c "import nvidia.cudnn as c; print(list(c.__path__)[0])")
{
echo "== framework imports (python3 -c 'import X', 3 runs each)"
for fw in "torch; torch.backends.cudnn.version()" "jax; jax.devices()" "onnxruntime" "cupy"; do
  for i in 1 2 3; do t=$EPOCHREALTIME; $P -c "import $fw" >/dev/null 2>&1; echo "import $fw: $(awk -v a=$t -v b=$EPOCHREALTIME 'BEGIN{printf "%.2f", b-a}') s"; done
done
} 2>&1 | tee $OUT/e/imports.txt
archive=$($P -m fixtures.repack "$src" $W/archives --cuda 13 --format gz --level 1 2>&1 | tail -1)
root=$W/root; rm -rf $root; mkdir -p $root/lib64
cp -rL /usr/local/cuda/include $root/include
cp -P /usr/local/cuda/lib64/libcudart.so* $root/lib64/ 2>/dev/null || cp -P /usr/local/cuda/lib/libcudart.so* $root/lib64/
$P -m cudnn_setup install "$archive" --cuda-root $root --no-theanorc --no-verify --no-frameworks --json > $OUT/e/install.json; echo "install rc $?"
{
for opts in "--no-theano --no-frameworks" "--no-theano"; do for i in 0 1 2 3 4 5; do
  t=$EPOCHREALTIME; $P -m cudnn_setup verify --cuda-root $root $opts --json > $W/v.json 2>/dev/null; rc=$?
  echo "verify $opts run $i: rc $rc $(awk -v a=$t -v b=$EPOCHREALTIME 'BEGIN{printf "%.2f", b-a}') s $($P -c "import json;d=json.load(open('$W/v.json'));print([(c['name'],c['status']) for c in d['checks'] if c['status']!='pass'])")"
done; cp $W/v.json "$OUT/e/verify$(echo $opts|tr -d ' -').json"; done
for opts in "--no-theano --no-frameworks" "--no-theano"; do
  $P bench/verify_trace.py verify --cuda-root $root $opts --json >/dev/null 2>$W/t.txt; echo "== trace verify $opts"; grep -v '^  [a-z]' $W/t.txt | grep -v '^cudnn-setup' | grep -v '^cuDNN in'
done
} 2>&1 | tee $OUT/e/verify-times.txt
$P scripts/damage-corpus.py --out $OUT/e/corpus --jobs 8 > $OUT/e/corpus.log 2>&1; echo "corpus rc $?"
tail -5 $OUT/e/corpus.log
tar czf $OUT/final.tgz -C $OUT e
