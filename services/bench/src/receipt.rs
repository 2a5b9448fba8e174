//! The receipt service: registering a job, running a trivial registered
//! check (`/bin/true`) and evaluating the gate with a valid PASS receipt,
//! for three artifact sets: `small` = 10 files of 256 B, `1k` = 1,000 ×
//! 4 KiB and `200mb` = 20 × 10 MB. Figures in milliseconds, measured on
//! `Checks` directly (no gRPC hop), one SQLite receipt database per set.
//!
//! - `receipt.register_ms.{small,1k}`: one `Checks::register` (pins the
//!   check files, records the job);
//! - `receipt.check_ms.{small,1k,200mb}`: one `Checks::run` of the same job
//!   (copy the inputs, run contained, hash, sign, store the receipt);
//! - `receipt.gate_eval_ms.{small,1k,200mb}`: one `Checks::gate` that passes
//!   on the latest valid receipt (3 × as many samples as runs).
//!
//! One warm-up register + run per set is not timed (key creation, page
//! cache). Project creation is not timed.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::{Map, Value, json};
use slm_receipt::checks::{Checks, Registration};
use slm_receipt::domain::gate::GateRequest;
use slm_receipt::store::Store;

use crate::{millis, summary};

fn make_project(root: &Path, files: usize, size: usize) {
    std::fs::create_dir_all(root.join("src")).unwrap();
    for i in 0..files {
        let mut content = vec![0u8; size];
        for (j, b) in content.iter_mut().enumerate() {
            *b = (i * 31 + j * 7) as u8;
        }
        std::fs::write(root.join(format!("src/f{i:05}.bin")), content).unwrap();
    }
    std::fs::write(root.join("check.sh"), "exit 0\n").unwrap();
}

fn registration(project: &Path, watcher: &str) -> Registration {
    Registration {
        profile_id: "default".into(),
        task_id: "bench".into(),
        watcher_name: watcher.into(),
        producer: "operator".into(),
        argv: vec!["/bin/true".into()],
        cwd: project.display().to_string(),
        artifact_paths: vec!["src".into()],
        check_paths: vec!["check.sh".into()],
        allow_prestart_evidence: true,
        ..Default::default()
    }
}

/// Where a check run's time goes, between the progress messages `Checks::run`
/// sends (the last stage ends when `run` returns).
const STAGES: [&str; 6] = [
    "lookup_lock_run_folder",
    "pin_check_files_expand",
    "copy_artifacts",
    "run_contained",
    "validate_sign_store",
    "remove_run_folder",
];

/// The artifact sets: label, files, bytes per file, samples (full, quick).
pub const SETS: [(&str, usize, usize, usize, usize); 3] = [
    ("small", 10, 256, 40, 10),
    ("1k", 1000, 4096, 20, 5),
    ("200mb", 20, 10 << 20, 8, 3),
];

/// `(figures, details)`.
pub async fn run(quick: bool) -> (Value, Value) {
    let mut register = Map::new();
    let mut check = Map::new();
    let mut gate = Map::new();
    let mut stages = Map::new();
    for (label, files, size, full_n, quick_n) in SETS {
        let n = if quick { quick_n } else { full_n };
        let project = tempfile::tempdir().unwrap();
        let data = tempfile::tempdir().unwrap();
        make_project(project.path(), files, size);
        let url = slm_runtime::config::sqlite_url(&data.path().join("receipt.db"));
        let checks = Checks::new(Store::open(&url).await.unwrap(), data.path());
        // Warm up (key creation, page cache).
        let job = checks
            .register(registration(project.path(), "w"))
            .await
            .unwrap();
        checks.run(&job.job_id, 30.0, |_| {}).await.unwrap();

        if label != "200mb" {
            let mut ms = Vec::new();
            for i in 0..n {
                let t = Instant::now();
                checks
                    .register(registration(project.path(), &format!("r{i}")))
                    .await
                    .unwrap();
                ms.push(millis(t));
            }
            register.insert(label.into(), summary(ms));
        }

        let job = checks
            .register(registration(project.path(), "w"))
            .await
            .unwrap();
        let mut ms = Vec::new();
        let mut split: Vec<Vec<f64>> = vec![Vec::new(); STAGES.len()];
        for _ in 0..n {
            let marks = Arc::new(Mutex::new(Vec::new()));
            let m2 = marks.clone();
            let t = Instant::now();
            let r = checks
                .run(&job.job_id, 30.0, move |_| {
                    m2.lock().unwrap().push(Instant::now())
                })
                .await
                .unwrap();
            ms.push(millis(t));
            assert_eq!(r.receipt.verdict, "PASS");
            let mut marks = marks.lock().unwrap().clone();
            marks.insert(0, t);
            marks.push(Instant::now());
            if marks.len() == STAGES.len() + 1 {
                for (i, w) in marks.windows(2).enumerate() {
                    split[i].push((w[1] - w[0]).as_secs_f64() * 1e3);
                }
            }
        }
        check.insert(label.into(), summary(ms));
        stages.insert(
            label.into(),
            STAGES
                .iter()
                .zip(split)
                .map(|(name, v)| (name.to_string(), summary(v)))
                .collect::<Map<_, _>>()
                .into(),
        );

        let contract = json!({"job_id": job.job_id}).to_string();
        let req = GateRequest {
            profile_id: "default",
            contract_json: &contract,
            watcher_name: "w",
            running_agent: "agent",
            watcher_started_us: None,
        };
        let mut ms = Vec::new();
        for _ in 0..n * 3 {
            let t = Instant::now();
            let (passed, reason) = checks.gate(&req).await;
            ms.push(millis(t));
            assert!(passed, "{reason}");
        }
        gate.insert(label.into(), summary(ms));
    }
    let figures = json!({
        "receipt.register_ms": register,
        "receipt.check_ms": check,
        "receipt.gate_eval_ms": gate,
    });
    let details = json!({
        "containment": slm_receipt::exec::available_containment().as_str(),
        "sandbox": slm_receipt::exec::sandbox::planned(&slm_receipt::exec::FsPolicy {
            choice: slm_receipt::exec::SandboxChoice::from_env(),
            network: slm_receipt::exec::NetworkChoice::from_env(),
            hidden: Vec::new(),
        })
        .to_string(),
        "check_stages_ms": stages,
        "sets": SETS.iter().map(|(l, f, s, full, q)| json!({
            "set": l, "files": f, "bytes_per_file": s, "runs": if quick { q } else { full },
        })).collect::<Vec<_>>(),
    });
    (figures, details)
}
