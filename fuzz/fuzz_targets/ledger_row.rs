//! The ledger's lap-row codec (services/ledger/src/domain/entry.rs, spec
//! LEDGER-01..04) and the memory row validation (domain/memory.rs).
//!
//! Input (first byte chooses):
//!
//! * a stored memory text: `LapRecord::from_json` on arbitrary bytes; for
//!   anything it accepts, encode and decode again and compare
//!   (decode(encode(x)) == x, and the encoding is stable);
//! * a structured `LapRecord` (via `arbitrary`): encode then decode gives
//!   the same record back (finite budgets: LEDGER-JSON has no NaN);
//! * a structured `NewMemory`: `validated` is idempotent and its result
//!   respects the documented limits.

#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use slm_ledger::domain::entry::{Budget, DECISIONS, LapRecord, RUNNER_LOG_MAX_CHARS};
use slm_ledger::domain::memory::{
    MAX_AGENT_CHARS, MAX_SESSION_CHARS, MAX_TAG_CHARS, MAX_TAGS, NewMemory, profile_id,
};

#[derive(Arbitrary, Debug)]
struct ArbLap {
    run_id: String,
    name: String,
    lap: u32,
    ts: String,
    decision: u8,
    raw_decision: Option<String>,
    passed: bool,
    detail: String,
    agent_claimed_done: bool,
    runner_log: String,
    tokens: i64,
    wallclock_s: f64,
}

#[derive(Arbitrary, Debug)]
struct ArbMemory {
    profile_id: String,
    content: String,
    tags: Vec<String>,
    session_id: String,
    metadata: String,
    importance: i32,
    agent_id: String,
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 3 {
        0 => {
            if let Ok(text) = std::str::from_utf8(rest) {
                decode_text(text);
            }
        }
        1 => {
            if let Ok(lap) = ArbLap::arbitrary_take_rest(Unstructured::new(rest)) {
                encode_record(lap);
            }
        }
        _ => {
            if let Ok(m) = ArbMemory::arbitrary_take_rest(Unstructured::new(rest)) {
                validate_memory(m);
            }
        }
    }
});

/// Decode what the ledger reads back; what it accepts must round-trip.
fn decode_text(text: &str) {
    let Some(r) = LapRecord::from_json(text) else {
        // Only JSON objects with both keys are laps (LEDGER-03).
        if let Ok(Value::Object(m)) = serde_json::from_str::<Value>(text) {
            assert!(!(m.contains_key("run_id") && m.contains_key("lap")));
        }
        return;
    };
    let obj: serde_json::Map<String, Value> =
        serde_json::from_str(text).expect("a decoded lap is a JSON object");
    assert!(obj.contains_key("run_id") && obj.contains_key("lap"));
    assert!(r.budget.wallclock_s.is_finite());
    check_round_trip(&r);
    let capped = r.clone().capped();
    assert!(capped.runner_log.chars().count() <= RUNNER_LOG_MAX_CHARS);
    assert!(r.runner_log.starts_with(&capped.runner_log));
    check_round_trip(&capped);
    check_derived(&r);
}

fn check_round_trip(r: &LapRecord) {
    let encoded = r.to_json();
    let back = LapRecord::from_json(&encoded).expect("an encoded lap decodes");
    assert_eq!(&back, r, "decode(encode(x)) != x for {encoded}");
    // Same bits (PartialEq treats -0.0 == 0.0).
    assert_eq!(
        back.budget.wallclock_s.to_bits(),
        r.budget.wallclock_s.to_bits(),
        "wallclock_s changed: {encoded}"
    );
    assert_eq!(back.to_json(), encoded, "encoding is not stable");
    // LEDGER-JSON: the fixed key order.
    let keys: Vec<String> = serde_json::from_str::<serde_json::Map<String, Value>>(&encoded)
        .unwrap()
        .keys()
        .cloned()
        .collect();
    let mut sorted_expected = [
        "run_id",
        "name",
        "lap",
        "ts",
        "decision",
        "passed",
        "detail",
        "agent_claimed_done",
        "runner_log",
        "budget",
    ];
    assert!(encoded.starts_with("{\"run_id\":"));
    assert!(encoded.contains(",\"budget\":{\"tokens\":"));
    let mut got = keys.clone();
    got.sort();
    sorted_expected.sort();
    assert_eq!(got, sorted_expected);
}

fn check_derived(r: &LapRecord) {
    let meta: Value = serde_json::from_str(&r.metadata()).expect("metadata is JSON");
    assert_eq!(meta["loop_run_id"], Value::String(r.run_id.clone()));
    assert_eq!(meta["loop_lap"], Value::from(r.lap));
    assert_eq!(r.session_id(), format!("loop:{}", r.run_id));
    if r.validate().is_ok() {
        assert!(DECISIONS.contains(&r.decision.as_str()));
        assert!(!r.run_id.trim().is_empty() && r.run_id.chars().count() <= 200);
        assert!(!r.name.trim().is_empty() && r.name.chars().count() <= 128);
        assert!(!r.detail.contains('\0') && !r.runner_log.contains('\0'));
    }
}

fn encode_record(a: ArbLap) {
    let decision = a
        .raw_decision
        .unwrap_or_else(|| DECISIONS[a.decision as usize % DECISIONS.len()].to_string());
    let r = LapRecord {
        run_id: a.run_id,
        name: a.name,
        lap: a.lap,
        ts: a.ts,
        decision,
        passed: a.passed,
        detail: a.detail,
        agent_claimed_done: a.agent_claimed_done,
        runner_log: a.runner_log,
        budget: Budget {
            tokens: a.tokens,
            wallclock_s: a.wallclock_s,
        },
    };
    if !r.budget.wallclock_s.is_finite() {
        // Never stored: validate refuses it.
        assert!(r.validate().is_err());
        return;
    }
    check_round_trip(&r);
    check_round_trip(&r.clone().capped());
    check_derived(&r);
}

fn validate_memory(a: ArbMemory) {
    let m = NewMemory {
        profile_id: a.profile_id,
        content: a.content,
        tags: a.tags,
        session_id: a.session_id,
        metadata: a.metadata,
        importance: a.importance,
        agent_id: a.agent_id,
    };
    let Ok(v) = m.validated() else {
        return;
    };
    assert_eq!(
        profile_id(&v.profile_id).ok().as_deref(),
        Some(&*v.profile_id)
    );
    assert!(!v.content.trim().is_empty() && !v.content.contains('\0'));
    assert!(v.tags.len() <= MAX_TAGS);
    for (i, t) in v.tags.iter().enumerate() {
        assert_eq!(t.trim(), t);
        assert!(!t.is_empty() && t.chars().count() <= MAX_TAG_CHARS);
        assert!(!v.tags[..i].contains(t), "duplicate tag");
    }
    assert!(v.session_id.chars().count() <= MAX_SESSION_CHARS);
    assert!(v.agent_id.chars().count() <= MAX_AGENT_CHARS);
    assert!((1..=10).contains(&v.importance));
    assert!(matches!(
        serde_json::from_str::<Value>(&v.metadata),
        Ok(Value::Object(_))
    ));
    // Idempotent: what is stored validates to itself.
    let again = v
        .clone()
        .validated()
        .expect("a validated memory re-validates");
    assert_eq!(again.profile_id, v.profile_id);
    assert_eq!(again.content, v.content);
    assert_eq!(again.tags, v.tags);
    assert_eq!(again.session_id, v.session_id);
    assert_eq!(again.metadata, v.metadata);
    assert_eq!(again.importance, v.importance);
    assert_eq!(again.agent_id, v.agent_id);
}
