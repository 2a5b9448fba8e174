//! Validation of the Bounded Loops producer's documents by the bridge
//! (services/bridge/src/domain.rs; spec BRIDGE-08..11, 13, 14, 19, 20).
//!
//! Two input modes, chosen by the first byte:
//!
//! * raw: the rest is one tool reply's text, decoded by the bridge's own
//!   `reply::decode_text` (at most 2 MiB, must be a JSON object) and then
//!   run through every check a reply can meet: capabilities, terminal
//!   listing, v1 evidence, v2 execution evidence;
//! * mutate: a recorded, valid v1 or v2 document (the crate's own test
//!   fixtures) is edited by a sequence of structured operations (replace,
//!   remove, insert, grow a list to a limit, boundary numbers and strings)
//!   so the fuzzer reaches the deep checks and their limits.
//!
//! Every accepted document must satisfy the documented limits, and a v1
//! record must rebuild exactly the payload it came from.

#![no_main]

use std::collections::BTreeSet;
use std::sync::OnceLock;

use arbitrary::{Arbitrary, Result as AResult, Unstructured};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value, json};
use slm_bridge::bridge::advertises;
use slm_bridge::domain::{
    MAX_RUNS, MAX_TEXT_BYTES, Sealed, TRUST, V1_CONTRACT, V1_FIELDS, V1_OPERATION, V1_TOOL,
    V1Record, V2_CONTRACT, V2_OPERATION, V2_TOOL, canon, canon_digest, is_digest, is_rfc3339,
    is_safe_id, refusal, sha256_hex, v1_bridge_payload, v1_payload_from_row, validate_v1,
    validate_v2,
};
use slm_bridge::reply::{LISTED_RUN_FIELDS, decode_text, listed_run};

const V1_FIXTURE: &str =
    include_str!("../../services/bridge/tests/fixtures/bl_graph_evidence.by-run_ref.json");
const V2_FIXTURE: &str = include_str!(
    "../../services/bridge/tests/fixtures/bl_graph_execution_evidence.by-run_ref.json"
);
const CAPS_FIXTURE: &str =
    include_str!("../../services/bridge/tests/fixtures/bl_capabilities.json");
const LISTING_FIXTURE: &str =
    include_str!("../../services/bridge/tests/fixtures/bl_graph_terminal_runs.json");

/// Recorded documents: v1 evidence, v2 evidence, capabilities, listing.
fn templates() -> &'static Vec<Value> {
    static T: OnceLock<Vec<Value>> = OnceLock::new();
    T.get_or_init(|| {
        let mut out = Vec::new();
        for fixture in [V1_FIXTURE, V2_FIXTURE] {
            let all: Value = serde_json::from_str(fixture).expect("fixture");
            for reply in all.as_object().expect("fixture object").values() {
                if let Some(ev) = reply.get("evidence") {
                    out.push(ev.clone());
                }
            }
        }
        out.push(serde_json::from_str(CAPS_FIXTURE).expect("fixture"));
        out.push(serde_json::from_str(LISTING_FIXTURE).expect("fixture"));
        out
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode % 4 == 0 {
        raw_reply(rest);
    } else {
        let mut u = Unstructured::new(rest);
        if let Ok(doc) = mutated(&mut u) {
            if let Value::Object(m) = &doc {
                check_reply(m);
                check_document(m);
            }
        }
    }
});

/// BRIDGE-08: one text item, at most 2 MiB, a JSON object.
fn raw_reply(bytes: &[u8]) {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return;
    };
    let Ok(m) = decode_text(text) else {
        return;
    };
    assert!(bytes.len() <= MAX_TEXT_BYTES);
    check_reply(&m);
    check_document(&m);
}

/// A reply as the bridge reads it: capabilities, listing, evidence.
fn check_reply(reply: &Map<String, Value>) {
    let v1 = advertises(reply, V1_CONTRACT, V1_TOOL, V1_OPERATION);
    let v2 = advertises(reply, V2_CONTRACT, V2_TOOL, V2_OPERATION);
    if v1 || v2 {
        assert_eq!(reply.get("status"), Some(&json!("ok")));
    }
    let _ = canon_digest(reply.get("capabilities").unwrap_or(&Value::Null));
    check_listing(reply);
    // An evidence reply: {"status": "ok", "evidence": {...}}.
    if let Ok(Some(evidence)) = slm_bridge::reply::evidence(reply) {
        assert_eq!(reply.get("status"), Some(&json!("ok")));
        check_document(evidence);
    }
}

/// The terminal listing (bridge.rs `collect_v1` / `collect_v2`): the runs
/// used are at most MAX_RUNS, each with the fields the bridge reads.
fn check_listing(listing: &Map<String, Value>) {
    let Some(Value::Array(runs)) = listing.get("runs") else {
        return;
    };
    let digest = canon_digest(&Value::Array(runs.clone()));
    assert!(is_digest(&digest), "{digest}");
    let used: Vec<&Value> = runs.iter().take(MAX_RUNS).collect();
    assert!(used.len() <= MAX_RUNS);
    for run in used {
        if let Some(fields) = listed_run(run) {
            for (k, v) in LISTED_RUN_FIELDS.iter().zip(fields) {
                assert_eq!(run.get(*k).and_then(Value::as_str), Some(v));
            }
        }
    }
}

/// Any object, as v1 evidence, as a v1 payload and as a v2 payload.
fn check_document(doc: &Map<String, Value>) {
    check_canon(&Value::Object(doc.clone()));
    for profile in ["default", "p-1", ""] {
        match v1_bridge_payload(doc, profile) {
            Ok(p) => {
                assert_eq!(p.len(), V1_FIELDS.len() + 1);
                assert_eq!(p["contract"], json!(V1_CONTRACT));
                assert_eq!(p["eligible_for_learning"], json!(false));
                assert_eq!(p["profile_id"], json!(profile));
                for f in V1_FIELDS {
                    assert_eq!(p.get(f), doc.get(f));
                }
                check_v1(&p);
            }
            Err(e) => assert!(
                [
                    refusal::UNSUPPORTED_CONTRACT,
                    refusal::NOT_OBSERVATION_ONLY,
                    refusal::MISSING_FIELDS
                ]
                .contains(&e)
            ),
        }
    }
    check_v1(doc);
    check_v2(doc);
    let mut with_profile = doc.clone();
    with_profile.insert("profile_id".into(), json!("default"));
    check_v2(&with_profile);
}

/// CANON-COMPACT is sorted, compact and stable under a re-parse.
fn check_canon(v: &Value) {
    let c = canon(v);
    let back: Value = serde_json::from_str(&c).expect("canon is JSON");
    assert_eq!(canon(&back), c, "canon is not stable under re-parsing");
}

fn is_hex64(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
}

/// BRIDGE-11/13/14.
fn check_v1(p: &Map<String, Value>) {
    let rec = match validate_v1(p) {
        Ok(rec) => rec,
        Err(e) => {
            assert!(!e.is_empty());
            return;
        }
    };
    check_v1_record(&rec);
    assert_eq!(
        rec.payload_sha256,
        sha256_hex(canon(&Value::Object(p.clone())).as_bytes())
    );
    // BRIDGE-14: the row stands for exactly this payload.
    let rebuilt = v1_payload_from_row(&rec);
    assert_eq!(&rebuilt, p, "the row does not rebuild its payload");
    assert_eq!(
        canon(&Value::Object(rebuilt.clone())),
        canon(&Value::Object(p.clone()))
    );
    assert_eq!(validate_v1(&rebuilt).as_ref(), Ok(&rec));
}

fn check_v1_record(rec: &V1Record) {
    for id in [&rec.profile_id, &rec.run_ref, &rec.run_id] {
        assert!(is_safe_id(id, false), "{id:?}");
    }
    for d in [
        &rec.workspace_id,
        &rec.graph_digest,
        &rec.plan_digest,
        &rec.policy_digest,
        &rec.receipt_head_digest,
    ] {
        assert!(is_digest(d), "{d:?}");
    }
    assert_eq!(rec.contract_id, V1_CONTRACT);
    assert_eq!(rec.receipt_trust, TRUST);
    assert!(rec.receipt_sequence >= 1);
    assert!(["SUCCEEDED", "FAILED", "CANCELLED"].contains(&rec.outcome.as_str()));
    assert!(
        ["SUCCEEDED", "FAILED", "HALTED", "CANCELLED", "EXPIRED"].contains(&rec.run_state.as_str())
    );
    if rec.run_state == "SUCCEEDED" {
        assert_eq!(rec.outcome, "SUCCEEDED");
    }
    assert!(is_rfc3339(&rec.terminal_at));
    assert!(is_hex64(&rec.payload_sha256));
    assert!(rec.nodes_json.len() <= 65_536);
    let nodes: Value = serde_json::from_str(&rec.nodes_json).expect("nodes_json is JSON");
    assert_eq!(canon(&nodes), rec.nodes_json, "nodes_json is not canonical");
    let nodes = nodes.as_array().expect("nodes_json is a list");
    assert!(nodes.len() <= 256, "{} nodes accepted", nodes.len());
    let mut union = BTreeSet::new();
    let mut total = 0;
    for node in nodes {
        let n = node.as_object().expect("a node is an object");
        assert_eq!(n.len(), 5);
        assert!(is_safe_id(n["node_id"].as_str().unwrap(), false));
        assert!(is_safe_id(n["state"].as_str().unwrap(), false));
        let attempts = n["attempts"]
            .as_u64()
            .expect("attempts is a natural number");
        let gate = &n["gate_passed"];
        assert!(gate.is_boolean() || gate.is_null());
        if attempts == 0 {
            assert!(gate.is_null(), "a gate result without an attempt");
        }
        let digests = n["artifact_digests"].as_array().unwrap();
        assert!(digests.len() <= 64);
        total += digests.len();
        for d in digests {
            let d = d.as_str().unwrap();
            assert!(is_digest(d));
            union.insert(d.to_string());
        }
    }
    assert!(total <= 2048);
    let all: Value = serde_json::from_str(&rec.artifact_digests_json).unwrap();
    let all: Vec<String> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap().to_string())
        .collect();
    assert_eq!(all, union.into_iter().collect::<Vec<_>>(), "sorted union");
}

/// BRIDGE-19/20.
fn check_v2(p: &Map<String, Value>) {
    let checked = validate_v2(p);
    let sealed = Sealed::seal(p.clone(), "sha256:id", "sha256:caps", "sha256:list");
    assert_eq!(checked.is_ok(), sealed.is_ok());
    if let Err(e) = &checked {
        assert!(!e.is_empty());
        return;
    }
    assert!(canon(&Value::Object(p.clone())).len() <= 32_768);
    for f in ["profile_id", "workspace_id", "run_ref", "run_id"] {
        assert!(is_safe_id(p[f].as_str().unwrap(), true));
    }
    assert_eq!(p["demonstration"], json!(false));
    assert_eq!(p["eligible_for_learning"], json!(true));
    let state = p["run_state"].as_str().unwrap();
    assert!(state == "SUCCEEDED" || state == "FAILED");
    assert_eq!(p["outcome"].as_str(), Some(state));
    assert!(p["terminal_at"].as_str().unwrap().chars().count() <= 64);
    let seq = &p["receipt"]["sequence"];
    assert!(seq.as_u64().is_some_and(|s| s >= 1 && s <= i64::MAX as u64));
    let nodes = p["nodes"].as_array().unwrap();
    assert!(
        !nodes.is_empty() && nodes.len() <= 256,
        "{} nodes",
        nodes.len()
    );
    for n in nodes {
        let attempts = n["attempts"].as_u64().unwrap();
        assert!(attempts <= 10_000);
        assert!(n["artifact_digests"].as_array().unwrap().len() <= 64);
    }
    let usage = p["usage"]["attempts"].as_u64().unwrap();
    assert!(usage <= 1_000_000);

    let s = sealed.unwrap();
    s.verify().expect("a fresh seal verifies");
    let back: Value = serde_json::from_str(&s.payload_json()).unwrap();
    assert_eq!(back.as_object(), Some(p), "payload_json does not re-parse");
    assert_eq!(s.payload_sha256(), sha256_hex(s.payload_json().as_bytes()));
    assert!(is_hex64(s.payload_sha256()));
    assert_eq!(s.signal(), if state == "SUCCEEDED" { 1 } else { -1 });
    assert_eq!(s.route_key().split('|').count(), 4);
    assert_eq!(
        s.head_digest(),
        p["receipt"]["head_digest"].as_str().unwrap()
    );
    let unverified = Sealed::seal(p.clone(), "", "sha256:caps", "sha256:list").unwrap();
    assert!(unverified.verify().is_err());
}

// ----------------------------------------------------- structured edits ----

const KEYS: &[&str] = &[
    "contract",
    "profile_id",
    "workspace_id",
    "run_ref",
    "run_id",
    "outcome",
    "run_state",
    "demonstration",
    "eligible_for_learning",
    "terminal_at",
    "graph_digest",
    "plan_digest",
    "policy_digest",
    "receipt",
    "nodes",
    "learning_authority",
    "route",
    "usage",
    "sequence",
    "head_digest",
    "trust",
    "node_id",
    "state",
    "gate_passed",
    "attempts",
    "artifact_digests",
    "runner",
    "provider",
    "model",
    "effort",
    "status",
    "evidence",
    "runs",
    "capabilities",
    "evidence_contracts",
    "id",
    "tool",
    "operation",
];

fn digest(u: &mut Unstructured) -> AResult<String> {
    let mut s = String::from("sha256:");
    for _ in 0..64 {
        s.push(*u.choose(&[
            '0', '1', '2', '3', '4', '5', '6', '7', '8', '9', 'a', 'b', 'c', 'd', 'e', 'f',
        ])?);
    }
    Ok(s)
}

fn boundary_string(u: &mut Unstructured) -> AResult<String> {
    Ok(match u.int_in_range(0..=20u8)? {
        0 => String::new(),
        1 => "a".repeat(128),
        2 => "a".repeat(129),
        3 => "a".repeat(64),
        4 => "a".repeat(65),
        5 => digest(u)?,
        6 => digest(u)?.to_uppercase(),
        7 => format!("{}0", digest(u)?),
        8 => "a:b".into(),
        9 => "../x".into(),
        10 => "é".repeat(u.int_in_range(1..=70)?),
        11 => "2026-11-30T13:36:38Z".into(),
        12 => "2026-11-30T13:36:38.123456+05:30".into(),
        13 => "2026-02-30T25:61:61Z".into(),
        14 => u
            .choose(&[
                "SUCCEEDED",
                "FAILED",
                "HALTED",
                "CANCELLED",
                "EXPIRED",
                "ok",
                "unavailable",
            ])?
            .to_string(),
        15 => u.choose(&[V1_CONTRACT, V2_CONTRACT, TRUST])?.to_string(),
        16 => "-lead".into(),
        17 => "x\0y".into(),
        _ => String::arbitrary(u)?,
    })
}

fn boundary_number(u: &mut Unstructured) -> AResult<Value> {
    Ok(match u.int_in_range(0..=16u8)? {
        0 => json!(0),
        1 => json!(-1),
        2 => json!(1),
        3 => json!(64),
        4 => json!(256),
        5 => json!(2048),
        6 => json!(10_000),
        7 => json!(10_001),
        8 => json!(1_000_000),
        9 => json!(1_000_001),
        10 => json!(i64::MAX),
        11 => json!(u64::MAX),
        12 => json!(i64::MIN),
        13 => json!(1.0),
        14 => json!(1.5),
        15 => json!(1e300),
        _ => json!(i64::arbitrary(u)?),
    })
}

fn value(u: &mut Unstructured, depth: u8) -> AResult<Value> {
    Ok(match u.int_in_range(0..=9u8)? {
        0 => Value::Null,
        1 => Value::Bool(bool::arbitrary(u)?),
        2 | 3 => boundary_number(u)?,
        4..=6 => Value::String(boundary_string(u)?),
        7 if depth < 3 => {
            let n = u.int_in_range(0..=3)?;
            let mut a = Vec::new();
            for _ in 0..n {
                a.push(value(u, depth + 1)?);
            }
            Value::Array(a)
        }
        8 if depth < 3 => {
            let n = u.int_in_range(0..=3)?;
            let mut m = Map::new();
            for _ in 0..n {
                m.insert(u.choose(KEYS)?.to_string(), value(u, depth + 1)?);
            }
            Value::Object(m)
        }
        // A piece of a recorded document.
        _ => {
            let t = u.choose(templates())?;
            pick(u, t)?.clone()
        }
    })
}

/// A random sub-value of `v`.
fn pick<'a>(u: &mut Unstructured, v: &'a Value) -> AResult<&'a Value> {
    let mut cur = v;
    while bool::arbitrary(u)? {
        cur = match cur {
            Value::Object(m) if !m.is_empty() => {
                let i = u.choose_index(m.len())?;
                m.values().nth(i).expect("index in range")
            }
            Value::Array(a) if !a.is_empty() => &a[u.choose_index(a.len())?],
            _ => break,
        };
    }
    Ok(cur)
}

/// One edit at a random place of `v`.
fn edit(u: &mut Unstructured, v: &mut Value) -> AResult<()> {
    // Descend.
    if bool::arbitrary(u)? {
        match v {
            Value::Object(m) if !m.is_empty() => {
                let i = u.choose_index(m.len())?;
                return edit(u, m.values_mut().nth(i).expect("index in range"));
            }
            Value::Array(a) if !a.is_empty() => {
                let i = u.choose_index(a.len())?;
                return edit(u, &mut a[i]);
            }
            _ => {}
        }
    }
    let cur = v;
    match (u.int_in_range(0..=5u8)?, cur) {
        // Remove a key / an element.
        (0, Value::Object(m)) if !m.is_empty() => {
            let i = u.choose_index(m.len())?;
            let k = m.keys().nth(i).expect("index in range").clone();
            m.remove(&k);
        }
        (0, Value::Array(a)) if !a.is_empty() => {
            let i = u.choose_index(a.len())?;
            a.remove(i);
        }
        // Insert / overwrite a key, or push an element.
        (1, Value::Object(m)) => {
            let k = if bool::arbitrary(u)? {
                u.choose(KEYS)?.to_string()
            } else {
                String::arbitrary(u)?
            };
            m.insert(k, value(u, 0)?);
        }
        (1, Value::Array(a)) => a.push(value(u, 0)?),
        // Grow a list to (about) a limit by repeating its elements.
        (2, Value::Array(a)) if !a.is_empty() => {
            let target = *u.choose(&[63usize, 64, 65, 255, 256, 257, 2049])?;
            let mut i = 0;
            while a.len() < target {
                let x = a[i % a.len()].clone();
                a.push(x);
                i += 1;
            }
        }
        // Replace in place.
        (_, cur) => *cur = value(u, 0)?,
    }
    Ok(())
}

fn mutated(u: &mut Unstructured) -> AResult<Value> {
    let mut doc = u.choose(templates())?.clone();
    // Optionally wrap as a tool reply.
    if u.ratio(1u8, 8u8)? {
        doc = json!({"status": "ok", "evidence": doc});
    }
    let edits = u.int_in_range(0..=4u8)?;
    for _ in 0..edits {
        edit(u, &mut doc)?;
    }
    Ok(doc)
}
