#!/usr/bin/env bash
# Builds and installs `slm` from this checkout, then runs the keyless loop
# demo on the data root ($SLM_DATA_DIR, default ~/.local/share/slm).
# Needs a Rust toolchain (cargo); nothing else.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo >/dev/null; then
  echo "install.sh: cargo not found; install Rust (https://rustup.rs) first" >&2
  exit 1
fi
bin_dir="${SLM_BIN_DIR:-$HOME/.local/bin}"
cargo build --release --locked -p slm
mkdir -p "$bin_dir"
install -m 0755 target/release/slm "$bin_dir/slm"
echo "installed $bin_dir/slm"
"$bin_dir/slm" loop demo
