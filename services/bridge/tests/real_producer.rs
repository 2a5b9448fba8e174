//! The bridge against the real `bounded-loops-mcp` 0.7.6 in
//! `.venv/bounded-loops` (created by `tests/bridge/setup.sh`). Skips, with a
//! printed reason, only when that venv is absent.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use slm_bridge::{Bridge, Store};

fn venv_bin() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../.venv/bounded-loops/bin"
    ))
}

fn script(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/bridge")).join(name)
}

#[tokio::test]
async fn observes_real_terminal_runs() {
    let bin = venv_bin();
    if !bin.join("bounded-loops-mcp").is_file() {
        println!(
            "SKIP observes_real_terminal_runs: {} is absent; run tests/bridge/setup.sh",
            bin.display()
        );
        eprintln!(
            "SKIP observes_real_terminal_runs: {} is absent; run tests/bridge/setup.sh",
            bin.display()
        );
        return;
    }
    let bin = std::fs::canonicalize(bin).unwrap();
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display());
    let root = tempfile::tempdir().unwrap();
    let ws = root.path().join("ws");
    for s in ["recreate-workspace.sh", "make-nondemo-copies.sh"] {
        let out = Command::new("bash")
            .arg(script(s))
            .arg(&ws)
            .env("PATH", &path)
            .output()
            .unwrap();
        assert!(
            out.status.success() || s == "recreate-workspace.sh",
            "{s}: {out:?}"
        );
    }
    let store = Store::open(&slm_runtime::config::sqlite_url(
        &root.path().join("learning.db"),
    ))
    .await
    .unwrap();
    let bridge = Bridge::new(store.clone()).with_search_path(path);
    let ws = ws.to_str().unwrap();

    let t = Instant::now();
    let r = bridge.observe_evidence("default", ws).await.to_json();
    let v1_cold = t.elapsed();
    println!("v1 observation against the real producer: {v1_cold:?}: {r}");
    assert_eq!(r["success"], true, "{r}");
    assert_eq!(r["observed"], 15, "{r}");
    assert_eq!(r["created"], 15, "{r}");
    let t = Instant::now();
    let r = bridge.observe_evidence("default", ws).await.to_json();
    println!("v1 re-observation: {:?}: {r}", t.elapsed());
    assert_eq!(r["created"], 0);
    let counts = store.evidence_counts("default").await.unwrap();
    assert_eq!(counts.receipts_total, 15);
    assert_eq!(counts.eligible_for_learning_total, 0);
    // run_id is not unique; run_ref is the address.
    let rows = store.list_v1("default", 100).await.unwrap();
    assert!(rows.iter().filter(|r| r.run_id == "graph-run").count() > 1);

    let t = Instant::now();
    let r = bridge
        .observe_execution_learning("default", ws)
        .await
        .to_json();
    println!(
        "v2 observation against the real producer: {:?}: {r}",
        t.elapsed()
    );
    assert_eq!(r["success"], true, "{r}");
    assert_eq!(r["observed"], 4, "{r}");
    assert_eq!(r["created"], 4, "{r}");
    let l = store.learning_counts("default").await.unwrap();
    println!("execution learning: {l:?}");
    assert_eq!(l.receipts_total, 4);
    assert_eq!(l.positive_events + l.negative_events, 4);

    let t = Instant::now();
    let p = bridge.probe().await;
    println!("status probe: {:?}: {p:?}", t.elapsed());
    assert_eq!(p.installed, Some(true));
    assert_eq!(p.version, "0.7.6");

    // A subdirectory as workspace: the producer lists only the demo run.
    let sub = format!("{ws}/.bounded-loops");
    let r = bridge.observe_evidence("sub", &sub).await.to_json();
    println!("from .bounded-loops: {r}");
}
