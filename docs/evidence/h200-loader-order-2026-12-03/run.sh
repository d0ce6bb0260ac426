set -u
D=$(python3 -c "import nvidia.cudnn, os; print(os.path.join(os.path.dirname(nvidia.cudnn.__file__), 'lib'))" 2>/dev/null || python3 -c "import os, nvidia; print(os.path.join(list(nvidia.__path__)[0], 'cudnn', 'lib'))")
echo "wheel dir: $D"; ls $D
V=9.19.0
C=/tmp/c; rm -rf $C; mkdir -p $C
for f in $D/libcudnn*.so.9; do b=$(basename $f .9); ln -s $f $C/$b.9.$(echo $V | cut -d. -f2-) ; ln -s $b.$V $C/$b.9; done
ls -la $C | head -30
cat > /tmp/w.py <<'PY'
import torch, sys
x = torch.randn(8, 3, 32, 32, device="cuda")
c = torch.nn.Conv2d(3, 8, 3).cuda()
out = {}
try:
    c(x); torch.cuda.synchronize(); out["conv32"] = "ok"
except Exception as e: out["conv32"] = str(e)[:200]
try:
    torch.nn.BatchNorm2d(3).cuda()(x); torch.cuda.synchronize(); out["bn"] = "ok"
except Exception as e: out["bn"] = str(e)[:200]
try:
    l = torch.nn.LSTM(32, 16).cuda(); l(torch.randn(5, 2, 32, device="cuda")); torch.cuda.synchronize(); out["lstm"] = "ok"
except Exception as e: out["lstm"] = str(e)[:200]
print(out, torch.backends.cudnn.version())
maps = sorted({l.split()[-1] for l in open("/proc/self/maps") if "libcudnn" in l})
print("\n".join(maps))
PY
run() { label=$1; rm -f /tmp/dbg.*; LD_PRELOAD=$C/libcudnn.so.9 LD_DEBUG=libs LD_DEBUG_OUTPUT=/tmp/dbg python3 /tmp/w.py > $OUT/$label.out 2>&1; cat /tmp/dbg.* | grep -E "find library=libcudnn|trying file=.*libcudnn" | awk '{$1=""; print}' > $OUT/$label.order; echo "== $label"; cat $OUT/$label.out; grep "find library" $OUT/$label.order | awk '!seen[$0]++' | head -30; }
run whole
rm $C/libcudnn_graph.so.9
run graph-link-deleted
ln -s libcudnn_graph.so.$V $C/libcudnn_graph.so.9
rm $C/libcudnn_heuristic.so.9; ln -s /usr/lib/x86_64-linux-gnu/libcudnn_heuristic.so.9.14.0 $C/libcudnn_heuristic.so.9
run heuristic-repointed
