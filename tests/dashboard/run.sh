#!/usr/bin/env bash
# Browser test of the SLM dashboard: installs what is missing (Debian's
# chromium via apt, playwright-core via npm), builds the demo example, runs
# the test. The last line printed is "N passed, M failed".
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
export CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"
export SCREENSHOT_DIR="${SCREENSHOT_DIR:-$root/target/dashboard-screenshots}"

fail() { echo "$1" >&2; echo "0 passed, 1 failed"; exit 1; }

if [ ! -x "$CHROMIUM" ]; then
  echo "installing chromium..." >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >&2 \
    || fail "could not install chromium"
fi
command -v node >/dev/null || fail "node is required"
if [ ! -d "$here/node_modules/playwright-core" ]; then
  (cd "$here" && npm install --no-audit --no-fund >&2) || fail "npm install failed"
fi
if [ -z "${DASHBOARD_DEMO_BIN:-}" ]; then
  (cd "$root" && cargo build -q -p slm-dashboard --example dashboard_demo >&2) \
    || fail "building the dashboard_demo example failed"
  target="${CARGO_TARGET_DIR:-$root/target}"
  export DASHBOARD_DEMO_BIN="$target/debug/examples/dashboard_demo"
fi
cd "$root" && exec node "$here/dashboard.test.mjs"
