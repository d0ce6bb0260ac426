#!/usr/bin/env bash
# On a machine with an NVIDIA GPU, one command for the GPU evidence of verify, doctor and install:
#  1. facts of the machine (the wheel's and the system's cuDNN, the loader cache, the GPU);
#  2. scripts/gpu-verify.sh: the nvidia-cudnn-cuNN wheel's cuDNN repacked as NVIDIA's archive,
#     installed into a scratch CUDA root, verified (a real convolution) and benchmarked;
#  3. scripts/gpu-checks.py: deps, coherence and driver checks on every cuDNN there and on
#     hand-made broken copies (a sub-library from another release, one missing, one shadowed);
#  4. verify --lib-dir on the system's and the wheel's cuDNN, doctor --python (frameworks);
#  5. scripts/gpu-frameworks.py: what each framework loads, and the what-ifs;
#  6. the system's older cuDNN repacked and installed into a scratch root: install's what-if
#     warning instead of a bare LD_LIBRARY_PATH line, then torch run with that advice followed.
# PYTHON is the interpreter with the frameworks (default /opt/torch/.venv/bin/python); results go
# to $OUT/evidence (and $OUT/evidence.tgz).
set -uo pipefail
cd "$(dirname "$0")/.."
P=${PYTHON:-/opt/torch/.venv/bin/python}
out=${OUT:-/tmp/cudnn-gpu/out}/evidence
work=${WORK:-/tmp/cudnn-gpu}
mkdir -p "$out" "$work"
step() { echo; echo "=== $*"; }
W=$($P -c "import nvidia.cudnn as c; print(list(c.__path__)[0])")/lib

step "1 facts"
{ for f in "$W"/libcudnn*.so.9 /usr/lib/x86_64-linux-gnu/libcudnn*.so.9.*.*; do
    echo "== $f"; readelf -d "$f" | grep -E 'NEEDED|RUNPATH|RPATH'; done
  ldconfig -p | grep -E 'libcublas|libnvrtc|libcuda\.|libz\.so|libcudnn\.so'
  nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv; nproc; } \
  >"$out/facts.txt" 2>&1
tail -5 "$out/facts.txt"

step "2 gpu-verify.sh"
PYTHON=$P OUT="$out/gpu-verify" WORK="$work" bash scripts/gpu-verify.sh 2>&1 | tail -30

step "3 gpu-checks.py"
$P scripts/gpu-checks.py --out "$out/checks" --work "$work/checks-work" \
  --cuda-root "$work/cuda-scratch" 2>&1 | tail -40

step "4 verify --lib-dir, doctor --python"
i=0
for a in "verify --lib-dir /usr/lib/x86_64-linux-gnu --no-theano --python $P" \
         "verify --lib-dir $W --no-theano --python $P" \
         "verify --cuda-root $work/cuda-scratch --no-theano --python $P" \
         "doctor --python $P"; do
  i=$((i + 1))
  $P -m cudnn_setup $a --json >"$out/cli-$i.json" 2>"$out/cli-$i.err"
  echo "$i: cudnn-setup $a -> exit $?"
  $P - "$out/cli-$i.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("   ok", d["ok"], "cudnn", d["cudnn_version"], "error", (d["error"] or {}).get("code"))
for c in d["checks"]:
    print(f"   {c['name']:<12} {c['status']:<4} {c['detail'][:300]}")
for f in d.get("frameworks") or []:
    print("   framework", json.dumps(f)[:400])
PY
done

step "5 gpu-frameworks.py"
$P scripts/gpu-frameworks.py --python "$P" --old-from /lib/x86_64-linux-gnu \
  --scratch "$work/fw-old-root" --out "$out/fw" 2>&1 | tail -30

step "6 the older system cuDNN installed into a scratch root: install's what-if"
old=$work/old-cudnn
rm -rf "$old" "$work/old-archive" "$work/old-root"
mkdir -p "$old/include" "$old/lib" "$work/old-root/lib64"
cp -L /usr/include/x86_64-linux-gnu/cudnn*.h "$old/include/" 2>/dev/null
for l in /usr/lib/x86_64-linux-gnu/libcudnn*.so.9; do cp -L "$l" "$old/lib/"; done
major=$(awk '/#define CUDA_VERSION/ {print int($3/1000); exit}' /usr/local/cuda/include/cuda.h)
archive=$($P -m fixtures.repack "$old" "$work/old-archive" --cuda "$major" --format gz --level 1)
cp -rL /usr/local/cuda/include "$work/old-root/include"
cp -P /usr/local/cuda/lib64/libcudart.so* "$work/old-root/lib64/"
$P -m cudnn_setup install "$archive" --cuda-root "$work/old-root" --no-theanorc --python "$P" \
  --json >"$out/install-old.json" 2>"$out/install-old.txt"
echo "install of the older cuDNN: exit $?"
cat "$out/install-old.txt" | tail -20
step "6b torch with the advice the tool did not give (the old copy first on LD_LIBRARY_PATH)"
LD_LIBRARY_PATH=$work/old-root/lib64 $P -c "
import torch
x = torch.ones(1, 1, 5, 5, device='cuda'); w = torch.ones(1, 1, 3, 3, device='cuda')
print(torch.nn.functional.conv2d(x, w).sum())" >"$out/torch-with-old-first.txt" 2>&1
echo "torch with the old cuDNN first on LD_LIBRARY_PATH: exit $?"
tail -3 "$out/torch-with-old-first.txt"

tar czf "$out.tgz" -C "$out" .
ls -l "$out.tgz"
