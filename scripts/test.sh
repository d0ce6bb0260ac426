#!/usr/bin/env bash
# Set up .venv with the test and Theano extras, then run the test suite with two pytest-xdist
# workers per core: about a third of the tests' time is spent waiting (on child processes,
# servers, time limits and the progress beat), and a second worker per core fills it (on 2
# cores, 3 min 26-31 s against 4 min 27 s with one worker per core, when the suite was longer;
# 3 workers against 4 on today's: 216 s against 194 s). Arguments go to pytest:
# `bash scripts/test.sh -k theanorc`, `-m slow`, `-n 0`.
# worksteal: each worker starts on its own contiguous half of the tests (so a module's fixtures
# are mostly made once, not on every worker) and takes over the other's when it runs dry.
# The exhaustive sweeps (`slow`) are left out unless CI=true (CI sets it; .ci/run comes here):
# then everything runs. A `-m` given here still wins, as pytest takes the last one.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh test,theano
# The tests start the tool hundreds of times, as users do: where the environment forbids writing
# bytecode (PYTHONDONTWRITEBYTECODE, set on some machines and CI images) each start compiled the
# package from source again, 62 of the suite's 432 CPU-seconds on 2 cores. Compiled once here.
# So is pytest's rewrite of the test modules' asserts, which it caches only where bytecode may be
# written: else each worker rewrote every module again (5 CPU-seconds each, 1.4 once cached).
.venv/bin/python -m compileall -q -j 0 cudnn_setup fixtures tests bench >/dev/null &
if [ -n "${PYTHONDONTWRITEBYTECODE:-}" ]; then  # else the workers keep that cache themselves
  PYTHONDONTWRITEBYTECODE= .venv/bin/python -m pytest --collect-only -q -p no:cacheprovider \
      >/dev/null 2>&1 || true  # a module that fails to import is reported by the run below
fi
wait
if [ "${CI:-}" = true ]; then set -- -m "" "$@"; fi
exec .venv/bin/python -m pytest -q -n "$(( $(nproc) * 2 ))" --dist worksteal "$@"
