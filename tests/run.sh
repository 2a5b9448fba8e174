#!/usr/bin/env bash
# Runs the whole test suite: unit tests, the store suites on SQLite and on a
# real PostgreSQL, the end-to-end CLI tests, and the MCP conformance run with
# the official Python SDK (installed into .venv/mcp from PyPI on first use),
# the bridge against the real bounded-loops-mcp (.venv/bounded-loops), and the
# dashboard in headless Chromium.
# Extra arguments go to `cargo test` (e.g. a test name filter) and skip the
# Python run.
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/ensure-postgres.sh
# The real Bounded Loops producer (PyPI bounded-loops[mcp]) for the bridge tests.
tests/bridge/setup.sh
export SLM_TEST_POSTGRES_URL="${SLM_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
cargo test --workspace --locked "$@"
# MCP conformance with the official Python SDK, over stdio and HTTP, against
# the real `slm` binary the tests just built.
if [[ $# -eq 0 ]]; then
    tests/mcp/run.sh target/debug/slm
    # The dashboard in headless Chromium (installed from Debian when missing).
    tests/dashboard/run.sh
fi
