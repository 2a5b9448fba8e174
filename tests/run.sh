#!/usr/bin/env bash
# Runs the whole test suite: unit tests, the store suite on SQLite and on a
# real PostgreSQL, and the end-to-end CLI tests. Extra arguments go to
# `cargo test` (e.g. a test name filter).
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/ensure-postgres.sh
export SLM_TEST_POSTGRES_URL="${SLM_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
cargo test --workspace --locked "$@"
