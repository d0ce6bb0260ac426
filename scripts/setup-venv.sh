#!/usr/bin/env bash
# Create .venv (if missing) and install cudnn-setup with the given extras, e.g. "test,theano".
# Says what it is doing while pip works (about a minute the first time), and installs nothing
# when .venv already holds these extras for this pyproject.toml (a stamp in .venv records them).
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
log=.venv/pip-install.log
stamp=.venv/cudnn-setup.stamp
say() { echo "setup-venv: $*" >&2; }

# The stamp: a hash of pyproject.toml and of the interpreter, then one installed extra a line.
key="$(cat pyproject.toml <(python3 --version 2>&1) | sha256sum | cut -d' ' -f1)"
wanted="$(tr ',' '\n' <<<"$extras" | sed '/^$/d' | sort -u)"
if [ -x .venv/bin/python ] && [ -f "$stamp" ] && [ "$(head -n1 "$stamp")" = "$key" ] \
   && [ -z "$(comm -23 <(echo "$wanted") <(tail -n +2 "$stamp" | sort -u) | sed '/^$/d')" ] \
   && .venv/bin/python -c 'import cudnn_setup' 2>/dev/null; then
  say ".venv is up to date (extras: ${extras:-none}); nothing to install"
  exit 0
fi

if [ ! -x .venv/bin/python ]; then
  say "creating .venv with $(python3 --version 2>&1)"
  python3 -m venv .venv
fi
# Keep extras installed earlier: a later run asking for fewer must not lose them.
if [ -f "$stamp" ] && [ "$(head -n1 "$stamp")" = "$key" ]; then
  wanted="$(printf '%s\n%s\n' "$wanted" "$(tail -n +2 "$stamp")" | sed '/^$/d' | sort -u)"
fi
all="$(paste -sd, <<<"$wanted")"
spec="."
[ -n "$all" ] && spec=".[$all]"

# pip, in the background, with a line every $SETUP_VENV_TICK (5) s saying how far it got, so
# that a log of the quickstart is never silent for longer than the tool itself allows.
tick="${SETUP_VENV_TICK:-5}"
run_logged() {
  "$@" >>"$log" 2>&1 &
  local pid=$! waited=0 last
  while kill -0 "$pid" 2>/dev/null; do
    # a second at most, in tenths, so that a pip that is done is not waited for
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      kill -0 "$pid" 2>/dev/null || break 2
      sleep 0.1
    done
    waited=$((waited + 1))
    if [ $((waited % tick)) -eq 0 ]; then
      last="$(grep -E '^(Collecting|Downloading|Building|Installing|Successfully)' "$log" \
              | tail -n1 | cut -c1-60 || true)"
      say "  ... ${waited} s${last:+: $last}"
    fi
  done
  wait "$pid"
}

say "installing cudnn-setup${all:+[$all]} and its dependencies with pip (about a minute the" \
    "first time; the log is $log)"
: >"$log"
if ! { run_logged .venv/bin/python -m pip install --upgrade pip \
       && run_logged .venv/bin/python -m pip install -e "$spec"; }; then
  cat "$log" >&2
  say "pip install failed (log above, also in $log)"
  exit 1
fi
{ echo "$key"; echo "$wanted"; } >"$stamp"
say "done: .venv/bin/cudnn-setup is ready"
