#!/usr/bin/env bash
# Create .venv (if missing) and install cudnn-setup with the given extras, e.g. "test,theano".
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
log=.venv/pip-install.log
spec="."
[ -n "$extras" ] && spec=".[$extras]"
if ! { .venv/bin/python -m pip install -q --upgrade pip && .venv/bin/python -m pip install -q -e "$spec"; } >"$log" 2>&1; then
  cat "$log" >&2
  echo "setup-venv: pip install failed (log above, also in $log)" >&2
  exit 1
fi
