//! Receipt service benchmark: registering a job, running a trivial
//! registered check (`/bin/true`) and evaluating the gate with a valid PASS
//! receipt, for three artifact sets: 10 small files, 1,000 × 4 KiB and
//! 20 × 10 MB. Prints one JSON object; every figure is
//! `{"median", "p99", "n"}` in milliseconds.
//!
//! `cargo bench -p slm-receipt --bench receipt [-- --quick]`

use std::path::Path;
use std::time::Instant;

use serde_json::{Value, json};
use slm_receipt::checks::{Checks, Registration};
use slm_receipt::domain::gate::GateRequest;
use slm_receipt::store::Store;

fn stats(mut ms: Vec<f64>) -> Value {
    ms.sort_by(f64::total_cmp);
    let n = ms.len();
    let at = |q: f64| ms[((n as f64 - 1.0) * q).round() as usize];
    json!({"median": (at(0.5) * 1000.0).round() / 1000.0, "p99": (at(0.99) * 1000.0).round() / 1000.0, "n": n})
}

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

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_default()
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let sets: [(&str, usize, usize, usize); 3] = [
        ("small", 10, 256, if quick { 10 } else { 40 }),
        ("1k", 1000, 4096, if quick { 5 } else { 20 }),
        ("200mb", 20, 10 << 20, if quick { 3 } else { 8 }),
    ];
    let mut register = serde_json::Map::new();
    let mut check = serde_json::Map::new();
    let mut gate = serde_json::Map::new();
    for (label, files, size, n) in sets {
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
                ms.push(t.elapsed().as_secs_f64() * 1000.0);
            }
            register.insert(label.into(), stats(ms));
        }

        let job = checks
            .register(registration(project.path(), "w"))
            .await
            .unwrap();
        let mut ms = Vec::new();
        for _ in 0..n {
            let t = Instant::now();
            let r = checks.run(&job.job_id, 30.0, |_| {}).await.unwrap();
            ms.push(t.elapsed().as_secs_f64() * 1000.0);
            assert_eq!(r.receipt.verdict, "PASS");
        }
        check.insert(label.into(), stats(ms));

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
            ms.push(t.elapsed().as_secs_f64() * 1000.0);
            assert!(passed, "{reason}");
        }
        gate.insert(label.into(), stats(ms));
    }
    let out = json!({
        "receipt.register_ms": register,
        "receipt.check_ms": check,
        "receipt.gate_eval_ms": gate,
        "containment": slm_receipt::exec::available_containment().as_str(),
        "machine": {"nproc": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1), "cpu": cpu_model()},
    });
    println!("{}", serde_json::to_string_pretty(&out).unwrap());
}
