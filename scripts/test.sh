#!/usr/bin/env bash
# Set up .venv with the test and Theano extras, then run the test suite on every core
# (pytest-xdist); arguments go to pytest: `bash scripts/test.sh -k theanorc`, `-m slow`, `-n 0`.
# worksteal: each worker starts on its own contiguous half of the tests (so a module's fixtures
# are mostly made once, not on every worker) and takes over the other's when it runs dry.
# The exhaustive sweeps (`slow`) are left out unless CI=true (CI sets it; .ci/run comes here):
# then everything runs. A `-m` given here still wins, as pytest takes the last one.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh test,theano
if [ "${CI:-}" = true ]; then set -- -m "" "$@"; fi
exec .venv/bin/python -m pytest -q -n auto --dist worksteal "$@"
