//! The bridge's cost of one observation (`bridge.overhead_ms`): one
//! `Bridge::observe_evidence` (discover and trust-check
//! `bounded-loops-mcp`, spawn it, the MCP handshake, `bl_capabilities`, the
//! terminal-run listing, validation, storing into `learning.db`, child
//! teardown) on a small workspace (`bl init` only: no runs), through the
//! bridge library directly (no gRPC hop). One untimed warm-up observation
//! first (cold page cache, Python imports).
//!
//! The producer is looked for on `PATH`, else in `.venv/bounded-loops/bin`
//! (of the current directory, then of this source tree), which is
//! prepended. Without it: `{"skipped": "bounded-loops-mcp not installed"}`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Instant;

use serde_json::{Value, json};
use slm_bridge::{Bridge, Store};

use crate::{millis, summary};

const EXE: &str = "bounded-loops-mcp";

/// The `PATH` to search, with the venv's bin prepended when the producer is
/// not already on `PATH`; None when it is nowhere.
pub fn producer_path() -> Option<(OsString, PathBuf)> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    if let Some(found) = slm_bridge::discovery::which(Some(path.clone())) {
        return Some((path, found));
    }
    let candidates = [
        std::env::current_dir()
            .ok()
            .map(|d| d.join(".venv/bounded-loops/bin")),
        Some(PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../.venv/bounded-loops/bin"
        ))),
    ];
    for bin in candidates.into_iter().flatten() {
        if bin.join(EXE).is_file() {
            let bin = std::fs::canonicalize(&bin).unwrap_or(bin);
            let mut dirs = vec![bin.clone()];
            dirs.extend(std::env::split_paths(&path));
            let joined = std::env::join_paths(dirs).ok()?;
            return Some((joined, bin.join(EXE)));
        }
    }
    None
}

/// `(figures, details)`.
pub async fn run(quick: bool) -> (Value, Value) {
    let Some((path, exe)) = producer_path() else {
        return (
            json!({"bridge.overhead_ms": {"skipped": "bounded-loops-mcp not installed"}}),
            json!({}),
        );
    };
    let n = if quick { 5 } else { 15 };
    let root = tempfile::tempdir().expect("tempdir");
    let ws = root.path().join("ws");
    std::fs::create_dir(&ws).expect("workspace");
    // A small workspace: `bl init` when `bl` sits beside the producer.
    let bl = exe.with_file_name("bl");
    let initialised = bl.is_file()
        && tokio::process::Command::new(&bl)
            .args(["init", "--json"])
            .current_dir(&ws)
            .env("PATH", &path)
            .output()
            .await
            .is_ok_and(|o| o.status.success());
    let store = Store::open(&slm_runtime::config::sqlite_url(
        &root.path().join("learning.db"),
    ))
    .await
    .expect("open the learning store");
    let bridge = Bridge::new(store.clone()).with_search_path(path);
    let ws = ws.to_str().expect("UTF-8 temp path").to_string();
    let mut last = bridge.observe_evidence("default", &ws).await.to_json();
    let mut ms = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        last = bridge.observe_evidence("default", &ws).await.to_json();
        ms.push(millis(t));
    }
    store.close().await;
    let figures = json!({"bridge.overhead_ms": summary(ms)});
    let details = json!({
        "producer": exe.display().to_string(),
        "workspace": if initialised { "bl init (no runs)" } else { "empty directory" },
        "outcome": last,
    });
    (figures, details)
}
