#!/usr/bin/env bash
# Creates the venv holding the real Bounded Loops producer (bounded-loops 0.7.6,
# the version the fixtures were recorded with) for the slm-bridge real-producer
# test. Idempotent. Usage: tests/bridge/setup.sh   (from anywhere)
set -eu
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
VENV="$ROOT/.venv/bounded-loops"
if [ ! -x "$VENV/bin/bounded-loops-mcp" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q -r "$HERE/requirements.txt"
fi
# The bridge trusts only executables not writable by group/others.
chmod go-w "$VENV/bin/bounded-loops-mcp"
"$VENV/bin/bl" --version
