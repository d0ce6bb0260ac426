#!/usr/bin/env bash
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
cd .devrun/src
export PYTHONPATH=/tmp/site:$PWD
P=python3; W=/tmp/prof; mkdir -p $W $OUT/p
src=$($P -c "import nvidia.cudnn as c; print(list(c.__path__)[0])")
grep -n "CUDNN_TYPE_CHAR\b\|CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION" $src/include/cudnn_graph*.h
archive=$($P -m fixtures.repack "$src" $W/archives --cuda 13 --format gz --level 1 2>&1 | tail -1)
root=$W/root; rm -rf $root; mkdir -p $root/lib64
cp -rL /usr/local/cuda/include $root/include
cp -P /usr/local/cuda/lib64/libcudart.so* $root/lib64/ 2>/dev/null || cp -P /usr/local/cuda/lib/libcudart.so* $root/lib64/
$P -m cudnn_setup install "$archive" --cuda-root $root --no-theanorc --no-verify --no-frameworks --json > $OUT/p/install.json; echo "install rc $?"
rm -rf ~/.cache/cudnn-setup/gpu-plans
show() { $P - "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
g = next(c for c in d["checks"] if c["name"] == "gpu")
print("  gpu", g["status"], "probe timings", g["data"].get("timings"))
for s in g["data"].get("steps", []):
    print("   ", s["name"], s["status"], s.get("seconds"), s.get("plan") or "", s.get("timings") or "", (s.get("reason") or "")[:150])
print("  ", [(c["name"], c["status"]) for c in d["checks"] if c["status"] != "pass"])
PY
}
for opts in "--no-theano --no-frameworks" "--no-theano"; do for i in 1 2 3 4 5; do
  t=$EPOCHREALTIME; $P -m cudnn_setup verify --cuda-root $root $opts --json > $W/v.json 2>/dev/null; rc=$?
  echo "verify $opts run $i: rc $rc $(awk -v a=$t -v b=$EPOCHREALTIME 'BEGIN{print b-a}') s"; show $W/v.json
done; cp $W/v.json "$OUT/p/verify$(echo $opts|tr -d ' -').json"; done
ls -la ~/.cache/cudnn-setup/gpu-plans; du -b ~/.cache/cudnn-setup/gpu-plans/*
for i in 1 2; do $P bench/verify_trace.py verify --cuda-root $root --no-theano --no-frameworks --json >/dev/null 2>$W/t.txt; grep -v '^  [a-z]' $W/t.txt | grep -v '^cudnn-setup' ; done
# as it runs in a fresh user's cache: no plan kept
t=$EPOCHREALTIME; XDG_CACHE_HOME=$W/fresh $P -m cudnn_setup verify --cuda-root $root --no-theano --no-frameworks --json > $W/v.json; echo "fresh cache: rc $? $(awk -v a=$t -v b=$EPOCHREALTIME 'BEGIN{print b-a}') s"; show $W/v.json
$P -X importtime -m cudnn_setup verify --cuda-root $root --no-theano --no-frameworks --json 2>$W/imp.txt >/dev/null; sort -t'|' -k2 -n $W/imp.txt | tail -15
tar czf $OUT/v2.tgz -C $OUT p
