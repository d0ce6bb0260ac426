#!/usr/bin/env bash
# Set up .venv with the test and Theano extras, then run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh test,theano
exec .venv/bin/python -m pytest -q "$@"
