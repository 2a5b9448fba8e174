#!/usr/bin/env bash
# CI smoke of the cargo-fuzz targets in fuzz/ (see fuzz/README.md).
#
# Builds every target and runs each one for FUZZ_SECONDS (default 20) from
# its committed seed corpus (fuzz/seeds/<target>/), without writing to the
# seeds. Fails on a crash, a failed build, or when no usable toolchain is
# found: it never skips silently.
#
# Environment:
#   FUZZ_SECONDS     seconds per target (default 20)
#   FUZZ_TARGETS     space-separated subset (default: every target)
#   FUZZ_TARGET_DIR  cargo target dir (default fuzz/target)
#   FUZZ_SANITIZER   address | none (default address)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
fuzz_dir="$repo/fuzz"
seconds="${FUZZ_SECONDS:-20}"
sanitizer="${FUZZ_SANITIZER:-address}"
targets="${FUZZ_TARGETS:-mcp_args bridge_evidence artifact_select ledger_row}"
start=$(date +%s)

log() { printf '[fuzz-smoke] %s\n' "$*" >&2; }
die() { printf '[fuzz-smoke] ERROR: %s\n' "$*" >&2; exit 1; }

command -v cargo >/dev/null || die "cargo is not installed"

# (a) cargo-fuzz
if ! cargo fuzz --version >/dev/null 2>&1; then
    log "installing cargo-fuzz (cargo install cargo-fuzz --locked)"
    cargo install cargo-fuzz --locked || die "could not install cargo-fuzz"
fi

# (b) a toolchain that accepts -Z flags: nightly, else stable + RUSTC_BOOTSTRAP.
toolchain=()
if command -v rustup >/dev/null && rustup toolchain list | grep -q '^nightly'; then
    toolchain=(+nightly)
    log "using the nightly toolchain ($(rustc +nightly --version))"
else
    # cargo-fuzz needs -Zsanitizer / -Cpasses=sancov-module; on stable these
    # are only available with RUSTC_BOOTSTRAP=1.
    if RUSTC_BOOTSTRAP=1 rustc -Z help >/dev/null 2>&1; then
        export RUSTC_BOOTSTRAP=1
        log "no nightly toolchain: using $(rustc --version) with RUSTC_BOOTSTRAP=1"
    else
        die "no nightly toolchain and RUSTC_BOOTSTRAP=1 does not enable -Z flags on $(rustc --version 2>/dev/null || echo rustc); install one with 'rustup toolchain install nightly'"
    fi
fi

fuzz_args=(--sanitizer "$sanitizer")
if [[ -n "${FUZZ_TARGET_DIR:-}" ]]; then
    fuzz_args+=(--target-dir "$FUZZ_TARGET_DIR")
fi

cd "$fuzz_dir"
# (c) build once, then run each target.
log "building targets: $targets"
build_log="$(mktemp)"
for t in $targets; do
    if ! cargo "${toolchain[@]}" fuzz build "${fuzz_args[@]}" "$t" >"$build_log" 2>&1; then
        tail -n 60 "$build_log" >&2
        die "cargo fuzz build $t failed"
    fi
done
rm -f "$build_log"
built=$(date +%s)
log "build took $((built - start)) s"

failed=()
for t in $targets; do
    seeds="$fuzz_dir/seeds/$t"
    [[ -d "$seeds" ]] || die "no seed folder $seeds"
    work="$(mktemp -d)"
    artifacts="$fuzz_dir/artifacts/$t/"
    mkdir -p "$artifacts"
    log "running $t for ${seconds}s"
    # The first corpus dir receives new inputs: a scratch dir, so the
    # committed seeds are read only.
    if cargo "${toolchain[@]}" fuzz run "${fuzz_args[@]}" "$t" "$work" "$seeds" -- \
        -max_total_time="$seconds" -print_final_stats=1 \
        -artifact_prefix="$artifacts" >"$work.log" 2>&1; then
        execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work.log" | grep -o '[0-9]*$' || true)
        log "$t: ok (${execs:-?} executions)"
    else
        log "$t: FAILED; last lines of its log:"
        tail -n 40 "$work.log" >&2
        failed+=("$t")
    fi
    rm -rf "$work" "$work.log"
done

end=$(date +%s)
log "total $((end - start)) s (build $((built - start)) s)"
if ((${#failed[@]})); then
    die "crashing targets: ${failed[*]} (reproducers under fuzz/artifacts/)"
fi
log "all targets ran without a crash"
