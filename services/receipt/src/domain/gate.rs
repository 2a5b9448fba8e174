//! The receipt gate (spec RECEIPT-39..44): an ordered evaluation whose first
//! failing step gives the reason. The I/O it needs (jobs, receipts, the key,
//! hashing the live artifacts) comes through [`GateWorld`], so the order and
//! the exact reasons are tested without a database.

#![allow(async_fn_in_trait)]

use serde_json::Value;

use super::evidence::{Receipt, authentic, evidence_object};
use super::job::Job;
use super::msg;

/// Why the world could not answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// The job or receipt tables could not be read (E1).
    Database,
    /// A value, key or file problem (E2).
    Invalid,
}

pub trait GateWorld {
    fn platform_supported(&self) -> bool;
    fn now_us(&self) -> i64;
    /// The newest registration for (profile, watcher).
    async fn newest_job(&self, profile: &str, watcher: &str) -> Result<Option<Job>, Fault>;
    /// The newest receipt for the job (profile, task, run, producer, command).
    async fn newest_receipt(&self, job: &Job) -> Result<Option<Receipt>, Fault>;
    fn key(&self) -> Result<Vec<u8>, Fault>;
    /// The revision digest of the job's declared artifacts as they are now.
    async fn live_revision(&self, job: &Job) -> Result<String, Fault>;
}

/// What the watcher asks.
#[derive(Debug, Clone)]
pub struct GateRequest<'a> {
    pub profile_id: &'a str,
    /// `gate_contract` as JSON text; empty when absent.
    pub contract_json: &'a str,
    pub watcher_name: &'a str,
    pub running_agent: &'a str,
    /// Microseconds since the epoch; None means "now".
    pub watcher_started_us: Option<i64>,
}

/// RECEIPT-39: exactly `{"job_id": "<32 lowercase hex>"}`.
pub fn admit_contract(contract_json: &str) -> Option<String> {
    let v: Value = serde_json::from_str(contract_json).ok()?;
    let obj = v.as_object()?;
    if obj.len() != 1 {
        return None;
    }
    let id = obj.get("job_id")?.as_str()?;
    let ok = id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    ok.then(|| id.to_string())
}

fn fault_reason(f: Fault) -> (bool, String) {
    match f {
        Fault::Database => (false, msg::DB_UNAVAILABLE.into()),
        Fault::Invalid => (false, msg::INPUTS_INVALID.into()),
    }
}

/// Evaluates the gate: `(independent, reason)`.
pub async fn evaluate<W: GateWorld>(world: &W, req: &GateRequest<'_>) -> (bool, String) {
    match steps(world, req).await {
        Ok(v) => v,
        Err(f) => fault_reason(f),
    }
}

fn refuse(reason: impl Into<String>) -> Result<(bool, String), Fault> {
    Ok((false, reason.into()))
}

async fn steps<W: GateWorld>(w: &W, req: &GateRequest<'_>) -> Result<(bool, String), Fault> {
    if !w.platform_supported() {
        return refuse(msg::PLATFORM);
    }
    let Some(job_id) = admit_contract(req.contract_json) else {
        return refuse(msg::CONTRACT_REQUIRED);
    };
    let now = w.now_us();
    let job = match w.newest_job(req.profile_id, req.watcher_name).await? {
        Some(j) if super::job::is_current(Some(&j), &job_id, now) => j,
        _ => return refuse(msg::JOB_NOT_CURRENT),
    };
    if job.producer == req.running_agent {
        return refuse(msg::PRODUCER_IS_AGENT);
    }
    let Some(receipt) = w.newest_receipt(&job).await? else {
        return refuse(msg::NO_RECEIPT);
    };
    // RECEIPT-41: fresh between the later of registration and watcher start
    // (unless prestart evidence is allowed) and now, both inclusive.
    let minimum = if job.allow_prestart_evidence {
        job.registered_us
    } else {
        job.registered_us.max(req.watcher_started_us.unwrap_or(now))
    };
    let fresh = minimum <= receipt.produced_us && receipt.produced_us <= now;
    let key = w.key()?;
    let certified = if fresh {
        authentic(&receipt, &job.job_id, &job.definition_digest, &key)
    } else {
        None
    };
    let Some(certified_revision) = certified else {
        return refuse(msg::STALE);
    };
    if receipt.verdict != "PASS" {
        let stop = evidence_object(&receipt)
            .and_then(|e| {
                e.get("stop_reason")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
            .filter(|s| !s.is_empty());
        return refuse(stop.unwrap_or_else(|| msg::check_failed(receipt.exit_code)));
    }
    if w.live_revision(&job).await? != certified_revision {
        return refuse(msg::REVISION_CHANGED);
    }
    let still = w.newest_job(req.profile_id, req.watcher_name).await?;
    if !super::job::is_current(still.as_ref(), &job_id, w.now_us()) {
        return refuse(msg::JOB_GONE);
    }
    Ok((true, msg::PASS.into()))
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;
    use crate::domain::evidence::{admission, measure, sign};

    const KEY: [u8; 32] = [9u8; 32];
    const JOB: &str = "0123456789abcdef0123456789abcdef";

    struct World {
        platform: bool,
        now: i64,
        job: Option<Job>,
        receipt: Option<Receipt>,
        key: Result<Vec<u8>, Fault>,
        live: Result<String, Fault>,
        db: bool,
        // The job disappears after the first look (superseded mid-check).
        vanish: bool,
        looks: RefCell<u32>,
    }

    impl GateWorld for World {
        fn platform_supported(&self) -> bool {
            self.platform
        }
        fn now_us(&self) -> i64 {
            self.now
        }
        async fn newest_job(&self, _p: &str, watcher: &str) -> Result<Option<Job>, Fault> {
            if !self.db {
                return Err(Fault::Database);
            }
            *self.looks.borrow_mut() += 1;
            if self.vanish && *self.looks.borrow() > 1 {
                return Ok(None);
            }
            Ok(self.job.clone().filter(|j| j.watcher_name == watcher))
        }
        async fn newest_receipt(&self, _j: &Job) -> Result<Option<Receipt>, Fault> {
            Ok(self.receipt.clone())
        }
        fn key(&self) -> Result<Vec<u8>, Fault> {
            self.key.clone()
        }
        async fn live_revision(&self, _j: &Job) -> Result<String, Fault> {
            self.live.clone()
        }
    }

    fn job() -> Job {
        Job {
            seq: 1,
            job_id: JOB.into(),
            profile_id: "default".into(),
            task_id: "build".into(),
            watcher_name: "build".into(),
            producer: "operator".into(),
            command_digest: "c".into(),
            argv: vec![],
            cwd: "/p".into(),
            artifacts: vec![],
            revision_digest: "rev0".into(),
            registered_at: String::new(),
            expires_at: String::new(),
            registered_us: 1_000,
            expires_us: 10_000,
            allow_prestart_evidence: false,
            artifact_paths: vec![],
            check_paths: vec![],
            definition: vec![],
            definition_digest: "def".into(),
        }
    }

    fn receipt(exit: i64, reason: Option<&str>, produced_us: i64) -> Receipt {
        let m = measure(
            exit,
            reason.map(str::to_string),
            b"",
            b"",
            &KEY,
            "cgroup-v2",
        );
        let base = Receipt {
            seq: 1,
            receipt_id: "r".into(),
            profile_id: "default".into(),
            task_id: "build".into(),
            run_id: JOB.into(),
            producer: "operator".into(),
            command_digest: "c".into(),
            verdict: String::new(),
            exit_code: 0,
            produced_at: "t".into(),
            produced_us,
            evidence: String::new(),
            evidence_digest: String::new(),
        };
        sign(base, &m, admission(JOB, "rev1", "def"), &KEY)
    }

    fn world() -> World {
        World {
            platform: true,
            now: 5_000,
            job: Some(job()),
            receipt: Some(receipt(0, None, 3_000)),
            key: Ok(KEY.to_vec()),
            live: Ok("rev1".into()),
            db: true,
            vanish: false,
            looks: RefCell::new(0),
        }
    }

    fn req(contract: &str) -> GateRequest<'_> {
        GateRequest {
            profile_id: "default",
            contract_json: contract,
            watcher_name: "build",
            running_agent: "agent-7",
            watcher_started_us: Some(2_000),
        }
    }

    fn run(w: &World, r: &GateRequest<'_>) -> (bool, String) {
        let fut = evaluate(w, r);
        let mut fut = std::pin::pin!(fut);
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        match fut.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(v) => v,
            std::task::Poll::Pending => unreachable!("the fake world never waits"),
        }
    }

    fn contract() -> String {
        format!(r#"{{"job_id": "{JOB}"}}"#)
    }

    #[test]
    fn contract_admission_is_exact() {
        assert_eq!(admit_contract(&contract()).as_deref(), Some(JOB));
        for bad in [
            String::new(),
            "null".into(),
            "[]".into(),
            format!(r#"{{"job_id": "{}"}}"#, JOB.to_uppercase()),
            format!(r#"{{"job_id": "{JOB}", "x": 1}}"#),
            r#"{"job_id": 5}"#.into(),
            r#"{"job_id": "abc"}"#.into(),
            format!(r#"{{"job": "{JOB}"}}"#),
        ] {
            assert_eq!(admit_contract(&bad), None, "{bad}");
        }
    }

    #[test]
    fn every_reason_in_order() {
        let c = contract();
        let mut cases: Vec<(World, GateRequest, bool, String)> = Vec::new();
        cases.push((world(), req(&c), true, msg::PASS.into()));
        let mut w = world();
        w.platform = false;
        cases.push((w, req(&c), false, msg::PLATFORM.into()));
        cases.push((world(), req(""), false, msg::CONTRACT_REQUIRED.into()));
        let mut r = req(&c);
        r.watcher_name = "other";
        cases.push((world(), r, false, msg::JOB_NOT_CURRENT.into()));
        let mut w = world();
        w.now = 10_000;
        cases.push((w, req(&c), false, msg::JOB_NOT_CURRENT.into()));
        let mut r = req(&c);
        r.running_agent = "operator";
        cases.push((world(), r, false, msg::PRODUCER_IS_AGENT.into()));
        let mut w = world();
        w.receipt = None;
        cases.push((w, req(&c), false, msg::NO_RECEIPT.into()));
        // Produced before the watcher started.
        let mut w = world();
        w.receipt = Some(receipt(0, None, 1_500));
        cases.push((w, req(&c), false, msg::STALE.into()));
        // ... which prestart permission accepts.
        let mut w = world();
        w.receipt = Some(receipt(0, None, 1_500));
        w.job.as_mut().unwrap().allow_prestart_evidence = true;
        cases.push((w, req(&c), true, msg::PASS.into()));
        // Future-dated.
        let mut w = world();
        w.receipt = Some(receipt(0, None, 6_000));
        cases.push((w, req(&c), false, msg::STALE.into()));
        // Wrong key.
        let mut w = world();
        w.key = Ok(vec![1u8; 32]);
        cases.push((w, req(&c), false, msg::STALE.into()));
        let mut w = world();
        w.receipt = Some(receipt(1, None, 3_000));
        cases.push((w, req(&c), false, msg::check_failed(1)));
        let mut w = world();
        w.receipt = Some(receipt(0, Some("Independent check timed out"), 3_000));
        cases.push((w, req(&c), false, "Independent check timed out".into()));
        let mut w = world();
        w.live = Ok("rev2".into());
        cases.push((w, req(&c), false, msg::REVISION_CHANGED.into()));
        let mut w = world();
        w.vanish = true;
        cases.push((w, req(&c), false, msg::JOB_GONE.into()));
        let mut w = world();
        w.db = false;
        cases.push((w, req(&c), false, msg::DB_UNAVAILABLE.into()));
        let mut w = world();
        w.live = Err(Fault::Invalid);
        cases.push((w, req(&c), false, msg::INPUTS_INVALID.into()));
        let mut w = world();
        w.key = Err(Fault::Invalid);
        cases.push((w, req(&c), false, msg::INPUTS_INVALID.into()));
        for (i, (w, r, ok, reason)) in cases.iter().enumerate() {
            assert_eq!(run(w, r), (*ok, reason.clone()), "case {i}");
        }
    }
}
