#!/usr/bin/env bash
# Set up .venv with the test and Theano extras, then run the test suite on every core
# (pytest-xdist); arguments go to pytest: `bash scripts/test.sh -k theanorc`, `-m slow`, `-n 0`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh test,theano
exec .venv/bin/python -m pytest -q -n auto "$@"
