#!/usr/bin/env bash
# Install the bundled sample cuDNN into a sandbox CUDA root, write a sandbox .theanorc, verify.
# No sudo: everything lands under ./sandbox (delete it to start over).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh theano
root=sandbox/cuda-10.0
if [ ! -d "$root" ]; then
  echo "demo: building a minimal CUDA 10.0 root in $root" >&2
  .venv/bin/python -m fixtures.generate cuda-root "$root" --version 10.0 >/dev/null
fi
mkdir -p sandbox/home
export HOME="$PWD/sandbox/home"
echo "demo: cudnn-setup install fixtures/samples/cudnn-10.0-linux-x64-v7.4.2.24.tgz" \
     "--cuda-root $root" >&2
.venv/bin/cudnn-setup install fixtures/samples/cudnn-10.0-linux-x64-v7.4.2.24.tgz \
  --cuda-root "$root" --theanorc sandbox/home/.theanorc "$@"
