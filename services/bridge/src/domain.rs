//! Contract identifiers, refusal texts, canonical JSON and the validation of
//! the producer's documents (spec BRIDGE-02, 08..11, 13, 19, 20). No I/O.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

pub const V1_CONTRACT: &str = "bounded-loops.dev/slm-bridge/v1";
pub const V1_TOOL: &str = "bl_graph_evidence";
pub const V1_OPERATION: &str = "observe_terminal_run";
pub const V2_CONTRACT: &str = "bounded-loops.dev/slm-bridge/v2";
pub const V2_TOOL: &str = "bl_graph_execution_evidence";
pub const V2_OPERATION: &str = "observe_verified_terminal_run";
pub const EXECUTABLE: &str = "bounded-loops-mcp";

/// Runs fetched per observation, whatever the producer lists.
pub const MAX_RUNS: usize = 100;
/// Largest text item of one tool reply (exactly this size is allowed).
pub const MAX_TEXT_BYTES: usize = 2 * 1024 * 1024;

pub const CONTROL_PLANE_V1: &str = "observation_only";
pub const CONTROL_PLANE_V2: &str = "execution_reliability_only";
pub const TRUST: &str = "local_hash_chain_only";

/// Bridge refusals (exact texts, spec Appendix A).
pub mod refusal {
    pub const NOT_INSTALLED: &str = "bounded-loops-mcp is not installed";
    pub const UNSAFE_PATH: &str = "bounded-loops-mcp discovery returned an unsafe path";
    pub const UNSAFE_EXECUTABLE: &str = "bounded-loops-mcp discovery returned an unsafe executable";
    pub const NOT_APPROVED: &str =
        "bounded-loops bridge requires an approved executable and workspace";
    pub const PATH_UNAVAILABLE: &str = "bounded-loops bridge path is unavailable";
    pub const UNTRUSTED_FILE: &str = "bounded-loops executable is not a trusted regular file";
    pub const UNTRUSTED_OWNER: &str = "bounded-loops executable owner is not trusted";
    pub const REJECTED: &str = "bounded-loops rejected the observation request";
    pub const INVALID_PAYLOAD: &str = "bounded-loops returned an invalid MCP payload";
    pub const INVALID_JSON: &str = "bounded-loops returned invalid JSON";
    pub const NO_V1: &str = "bounded-loops does not advertise slm-bridge/v1";
    pub const NO_V2: &str = "bounded-loops does not advertise slm-bridge/v2";
    pub const LISTING_UNAVAILABLE: &str = "bounded-loops terminal listing is unavailable";
    pub const LISTING_MALFORMED: &str = "bounded-loops terminal listing is malformed";
    pub const EVIDENCE_MALFORMED: &str = "bounded-loops evidence response is malformed";
    pub const UNSUPPORTED_CONTRACT: &str = "unsupported bounded-loops evidence contract";
    pub const NOT_OBSERVATION_ONLY: &str = "bounded-loops evidence is not observation-only";
    pub const MISSING_FIELDS: &str = "bounded-loops evidence is missing required v1 fields";
    pub const TIMED_OUT: &str = "bounded-loops observation timed out or could not start";

    pub const NO_READABLE_INTERPRETER: &str =
        "bounded-loops executable has no readable interpreter";
    pub const NO_ABSOLUTE_INTERPRETER: &str =
        "bounded-loops executable has no absolute interpreter";
    pub const INTERPRETER_UNAVAILABLE: &str = "bounded-loops executable interpreter is unavailable";
    pub const NOT_ISOLATED: &str =
        "bounded-loops executable is not an isolated environment launcher";
    pub const SOURCE_AMBIGUOUS: &str = "bounded-loops package source is unavailable or ambiguous";
    pub const SOURCE_EMPTY: &str = "bounded-loops package source is empty";
    pub const SOURCE_UNIDENTIFIED: &str = "bounded-loops producer source could not be identified";
    pub const NO_IDENTITY: &str = "bounded-loops execution producer identity is unavailable";
    pub const V2_EVIDENCE_MALFORMED: &str =
        "bounded-loops execution evidence response is malformed";
    pub const V2_UNSUPPORTED_CONTRACT: &str =
        "unsupported bounded-loops execution evidence contract";
    pub const V2_MISMATCH: &str =
        "bounded-loops execution evidence does not match terminal listing";
    pub const V2_INVALID: &str = "bounded-loops execution evidence is invalid";
    pub const V2_TIMED_OUT: &str =
        "bounded-loops execution observation timed out or could not start";

    pub const DIFFERENT_HEAD: &str = "external run address has a different receipt head";
    pub const WRITE_DEADLINE: &str = "external evidence write deadline exceeded";
    pub const PROFILE_CLOSED: &str = "profile is inactive or closing for erasure";
    pub const DRAIN_DEADLINE: &str = "profile receipt drain deadline exceeded";
    pub const RESIDUE: &str = "learning receipt erasure left profile residue";
}

/// The 14 v1 fields kept from a producer document (BRIDGE-10).
pub const V1_FIELDS: [&str; 14] = [
    "contract",
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
];

const NODE_KEYS: [&str; 5] = [
    "node_id",
    "state",
    "gate_passed",
    "attempts",
    "artifact_digests",
];
const RECEIPT_KEYS: [&str; 3] = ["sequence", "head_digest", "trust"];

// ---------------------------------------------------------------- JSON ----

/// CANON-COMPACT: keys sorted by code point, `,`/`:` without spaces,
/// non-ASCII raw. Sorts explicitly, whatever `serde_json`'s map order is.
pub fn canon(v: &Value) -> String {
    let mut out = String::new();
    write_canon(v, &mut out);
    out
}

fn write_canon(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::to_string(k).expect("a string serialises"));
                out.push(':');
                write_canon(&m[k.as_str()], out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canon(x, out);
            }
            out.push(']');
        }
        other => out.push_str(&serde_json::to_string(other).expect("a scalar serialises")),
    }
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    let d = Sha256::digest(bytes);
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// `"sha256:" + hex(SHA-256(CANON-COMPACT(v)))`.
pub fn canon_digest(v: &Value) -> String {
    format!("sha256:{}", sha256_hex(canon(v).as_bytes()))
}

// ------------------------------------------------------------- formats ----

/// `^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`, plus `:` when `colon`.
pub fn is_safe_id(s: &str, colon: bool) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && b[0].is_ascii_alphanumeric()
        && b[1..].iter().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-') || (colon && *c == b':')
        })
}

/// `^sha256:[a-f0-9]{64}$`.
pub fn is_digest(s: &str) -> bool {
    s.len() == 71
        && s.starts_with("sha256:")
        && s[7..]
            .bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
}

fn is_safe_value(v: Option<&Value>, colon: bool) -> bool {
    v.and_then(Value::as_str)
        .is_some_and(|s| is_safe_id(s, colon))
}

fn is_digest_value(v: Option<&Value>) -> bool {
    v.and_then(Value::as_str).is_some_and(is_digest)
}

/// A full RFC 3339 date-time (trailing `Z` accepted), at most 128 bytes.
pub fn is_rfc3339(s: &str) -> bool {
    use time::format_description::well_known::Rfc3339;
    s.len() <= 128 && time::OffsetDateTime::parse(s, &Rfc3339).is_ok()
}

/// A non-negative JSON integer (bools are not integers here).
fn as_int(v: Option<&Value>) -> Option<i128> {
    match v? {
        Value::Number(n) => n
            .as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from)),
        _ => None,
    }
}

fn keys_are(m: &Map<String, Value>, keys: &[&str]) -> bool {
    m.len() == keys.len() && keys.iter().all(|k| m.contains_key(*k))
}

// ------------------------------------------------------------------ v1 ----

/// BRIDGE-10: the kept payload (the 14 fields + `profile_id`), or a bridge
/// refusal. Every other producer field is dropped.
pub fn v1_bridge_payload(
    evidence: &Map<String, Value>,
    profile_id: &str,
) -> Result<Map<String, Value>, &'static str> {
    if evidence.get("contract").and_then(Value::as_str) != Some(V1_CONTRACT) {
        return Err(refusal::UNSUPPORTED_CONTRACT);
    }
    if evidence.get("eligible_for_learning") != Some(&Value::Bool(false)) {
        return Err(refusal::NOT_OBSERVATION_ONLY);
    }
    let mut out = Map::new();
    for f in V1_FIELDS {
        let v = evidence.get(f).ok_or(refusal::MISSING_FIELDS)?;
        out.insert(f.to_string(), v.clone());
    }
    out.insert("profile_id".into(), Value::String(profile_id.to_string()));
    Ok(out)
}

/// A validated v1 record, ready for its row (BRIDGE-13).
#[derive(Debug, Clone, PartialEq)]
pub struct V1Record {
    pub profile_id: String,
    pub contract_id: String,
    pub workspace_id: String,
    pub run_ref: String,
    pub run_id: String,
    pub outcome: String,
    pub run_state: String,
    pub demonstration: bool,
    pub terminal_at: String,
    pub graph_digest: String,
    pub plan_digest: String,
    pub policy_digest: String,
    pub receipt_sequence: i64,
    pub receipt_head_digest: String,
    pub receipt_trust: String,
    pub nodes_json: String,
    pub artifact_digests_json: String,
    pub payload_sha256: String,
}

fn s(m: &Map<String, Value>, k: &str) -> String {
    m.get(k)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// BRIDGE-11 (error type "external evidence validation").
pub fn validate_v1(p: &Map<String, Value>) -> Result<V1Record, String> {
    let mut keys: Vec<&str> = V1_FIELDS.to_vec();
    keys.push("profile_id");
    if !keys_are(p, &keys) {
        return Err("external evidence fields do not match v1".into());
    }
    if p.get("contract").and_then(Value::as_str) != Some(V1_CONTRACT) {
        return Err("unsupported external evidence contract".into());
    }
    for f in ["profile_id", "run_ref", "run_id"] {
        if !is_safe_value(p.get(f), false) {
            return Err(format!("{f} must be a safe identifier"));
        }
    }
    for f in [
        "workspace_id",
        "graph_digest",
        "plan_digest",
        "policy_digest",
    ] {
        if !is_digest_value(p.get(f)) {
            return Err(format!("{f} must be a sha256 digest"));
        }
    }
    let outcome = s(p, "outcome");
    let run_state = s(p, "run_state");
    if !p["outcome"].is_string()
        || !p["run_state"].is_string()
        || !["SUCCEEDED", "FAILED", "CANCELLED"].contains(&outcome.as_str())
        || !["SUCCEEDED", "FAILED", "HALTED", "CANCELLED", "EXPIRED"].contains(&run_state.as_str())
    {
        return Err("outcome or run_state is unsupported".into());
    }
    if run_state == "SUCCEEDED" && outcome != "SUCCEEDED" {
        return Err("SUCCEEDED run_state must keep its outcome".into());
    }
    if !p["terminal_at"].as_str().is_some_and(is_rfc3339) {
        return Err("terminal_at must be an RFC3339 timestamp".into());
    }
    let Some(demonstration) = p["demonstration"].as_bool() else {
        return Err("v1 evidence is observation-only".into());
    };
    if p["eligible_for_learning"] != Value::Bool(false) {
        return Err("v1 evidence is observation-only".into());
    }
    let receipt = match &p["receipt"] {
        Value::Object(r) if keys_are(r, &RECEIPT_KEYS) => r,
        _ => return Err("receipt shape is invalid".into()),
    };
    let sequence = as_int(receipt.get("sequence")).filter(|n| *n >= 1 && *n <= i64::MAX as i128);
    if sequence.is_none() || receipt["trust"].as_str() != Some(TRUST) {
        return Err("receipt metadata is invalid".into());
    }
    if !is_digest_value(receipt.get("head_digest")) {
        return Err("receipt head digest is invalid".into());
    }
    let Value::Array(nodes) = &p["nodes"] else {
        return Err("nodes must be a list".into());
    };
    if nodes.len() > 256 {
        return Err("node count exceeds v1 safety limit".into());
    }
    let mut all = std::collections::BTreeSet::new();
    let mut total = 0usize;
    for node in nodes {
        let n = match node {
            Value::Object(n) if keys_are(n, &NODE_KEYS) => n,
            _ => return Err("node shape is invalid".into()),
        };
        if !is_safe_value(n.get("node_id"), false) || !is_safe_value(n.get("state"), false) {
            return Err("node identifiers are invalid".into());
        }
        let gate = &n["gate_passed"];
        let attempts = as_int(n.get("attempts"));
        if !(gate.is_boolean() || gate.is_null())
            || attempts.is_none_or(|a| a < 0)
            || (attempts == Some(0) && !gate.is_null())
        {
            return Err("node gate metadata is invalid".into());
        }
        let Value::Array(digests) = &n["artifact_digests"] else {
            return Err("node artifact digests are invalid".into());
        };
        if !digests.iter().all(|d| d.as_str().is_some_and(is_digest)) {
            return Err("node artifact digests are invalid".into());
        }
        if digests.len() > 64 {
            return Err("node artifact count exceeds v1 safety limit".into());
        }
        total += digests.len();
        if total > 2048 {
            return Err("artifact count exceeds v1 safety limit".into());
        }
        all.extend(digests.iter().filter_map(Value::as_str).map(str::to_string));
    }
    let nodes_json = canon(&p["nodes"]);
    if nodes_json.len() > 65_536 {
        return Err("node evidence exceeds v1 size limit".into());
    }
    let union: Vec<Value> = all.into_iter().map(Value::String).collect();
    Ok(V1Record {
        profile_id: s(p, "profile_id"),
        contract_id: s(p, "contract"),
        workspace_id: s(p, "workspace_id"),
        run_ref: s(p, "run_ref"),
        run_id: s(p, "run_id"),
        outcome,
        run_state,
        demonstration,
        terminal_at: s(p, "terminal_at"),
        graph_digest: s(p, "graph_digest"),
        plan_digest: s(p, "plan_digest"),
        policy_digest: s(p, "policy_digest"),
        receipt_sequence: sequence.expect("checked") as i64,
        receipt_head_digest: receipt["head_digest"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        receipt_trust: TRUST.to_string(),
        nodes_json,
        artifact_digests_json: canon(&Value::Array(union)),
        payload_sha256: sha256_hex(canon(&Value::Object(p.clone())).as_bytes()),
    })
}

/// The payload a stored row stands for (BRIDGE-14), for the duplicate test.
#[allow(clippy::too_many_arguments)]
pub fn v1_payload_from_row(r: &V1Record) -> Map<String, Value> {
    let mut m = Map::new();
    let st = |v: &str| Value::String(v.to_string());
    m.insert("profile_id".into(), st(&r.profile_id));
    m.insert("contract".into(), st(&r.contract_id));
    m.insert("workspace_id".into(), st(&r.workspace_id));
    m.insert("run_ref".into(), st(&r.run_ref));
    m.insert("run_id".into(), st(&r.run_id));
    m.insert("outcome".into(), st(&r.outcome));
    m.insert("run_state".into(), st(&r.run_state));
    m.insert("demonstration".into(), Value::Bool(r.demonstration));
    m.insert("eligible_for_learning".into(), Value::Bool(false));
    m.insert("terminal_at".into(), st(&r.terminal_at));
    m.insert("graph_digest".into(), st(&r.graph_digest));
    m.insert("plan_digest".into(), st(&r.plan_digest));
    m.insert("policy_digest".into(), st(&r.policy_digest));
    let mut receipt = Map::new();
    receipt.insert("sequence".into(), Value::from(r.receipt_sequence));
    receipt.insert("head_digest".into(), st(&r.receipt_head_digest));
    receipt.insert("trust".into(), st(&r.receipt_trust));
    m.insert("receipt".into(), Value::Object(receipt));
    m.insert(
        "nodes".into(),
        serde_json::from_str(&r.nodes_json).unwrap_or(Value::Null),
    );
    m
}

// ------------------------------------------------------------------ v2 ----

const V2_KEYS: [&str; 18] = [
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
];

/// BRIDGE-20 (error type "execution learning validation"), without the
/// provenance checks, which [`Sealed`] carries.
pub fn validate_v2(p: &Map<String, Value>) -> Result<(), String> {
    if !keys_are(p, &V2_KEYS) || p["contract"].as_str() != Some(V2_CONTRACT) {
        return Err("v2 receipt does not match the bounded contract".into());
    }
    if canon(&Value::Object(p.clone())).len() > 32_768 {
        return Err("v2 receipt exceeds the bounded payload size".into());
    }
    for f in ["profile_id", "workspace_id", "run_ref", "run_id"] {
        if !is_safe_value(p.get(f), true) {
            return Err(format!("v2 receipt has an invalid {f}"));
        }
    }
    for f in [
        "workspace_id",
        "graph_digest",
        "plan_digest",
        "policy_digest",
    ] {
        if !is_digest_value(p.get(f)) {
            return Err(format!("v2 receipt has an invalid {f}"));
        }
    }
    if p["terminal_at"]
        .as_str()
        .is_none_or(|t| t.chars().count() > 64)
    {
        return Err("v2 receipt has an invalid terminal timestamp".into());
    }
    if p["demonstration"] != Value::Bool(false) || p["eligible_for_learning"] != Value::Bool(true) {
        return Err("receipt is not eligible for execution learning".into());
    }
    let state = p["run_state"].as_str().unwrap_or("");
    if !["SUCCEEDED", "FAILED"].contains(&state) || p["outcome"].as_str() != Some(state) {
        return Err("only terminal succeeded or executed-gate failure is learnable".into());
    }
    let (Value::Object(receipt), Value::Object(authority)) =
        (&p["receipt"], &p["learning_authority"])
    else {
        return Err("receipt authority is malformed".into());
    };
    if !keys_are(receipt, &RECEIPT_KEYS) {
        return Err("receipt chain metadata is malformed".into());
    }
    if as_int(receipt.get("sequence")).is_none_or(|n| n < 1 || n > i64::MAX as i128)
        || receipt["trust"].as_str() != Some(TRUST)
        || !is_digest_value(receipt.get("head_digest"))
    {
        return Err("receipt chain head is invalid".into());
    }
    let want = serde_json::json!({
        "scope": "execution_reliability_only",
        "reason_code": "verified_terminal_receipt",
        "verification_state": "reconciled",
        "gate_authority": "deterministic_gate",
        "trust_class": TRUST,
    });
    if Value::Object(authority.clone()) != want {
        return Err("receipt lacks bounded deterministic learning authority".into());
    }
    let nodes = match &p["nodes"] {
        Value::Array(n) if !n.is_empty() && n.len() <= 256 => n,
        _ => return Err("receipt nodes are malformed".into()),
    };
    for node in nodes {
        let n = match node {
            Value::Object(n) if keys_are(n, &NODE_KEYS) => n,
            _ => return Err("receipt node schema is malformed".into()),
        };
        let gate = &n["gate_passed"];
        let ok = is_safe_value(n.get("node_id"), true)
            && is_safe_value(n.get("state"), true)
            && (gate.is_boolean() || gate.is_null())
            && as_int(n.get("attempts")).is_some_and(|a| (0..=10_000).contains(&a))
            && matches!(&n["artifact_digests"], Value::Array(d)
                if d.len() <= 64 && d.iter().all(|x| x.as_str().is_some_and(is_digest)));
        if !ok {
            return Err("receipt node values are malformed".into());
        }
    }
    let route_ok = matches!(&p["route"], Value::Object(r)
        if r.iter().all(|(k, v)| ["runner", "provider", "model", "effort"].contains(&k.as_str())
            && is_safe_value(Some(v), true)));
    let usage_ok = matches!(&p["usage"], Value::Object(u)
        if u.len() == 1 && as_int(u.get("attempts")).is_some_and(|a| (0..=1_000_000).contains(&a)));
    if !route_ok || !usage_ok {
        return Err("route or usage is malformed".into());
    }
    Ok(())
}

/// A v2 payload validated at the bridge and bound to where it came from.
/// Only [`Sealed::seal`] builds one; the store re-checks the digest.
#[derive(Debug, Clone)]
pub struct Sealed {
    payload: Map<String, Value>,
    pub producer_identity: String,
    pub capability_digest: String,
    pub terminal_listing_digest: String,
    digest: String,
}

impl Sealed {
    pub fn seal(
        payload: Map<String, Value>,
        producer_identity: &str,
        capability_digest: &str,
        terminal_listing_digest: &str,
    ) -> Result<Self, String> {
        validate_v2(&payload)?;
        let digest = sha256_hex(canon(&Value::Object(payload.clone())).as_bytes());
        Ok(Self {
            payload,
            producer_identity: producer_identity.to_string(),
            capability_digest: capability_digest.to_string(),
            terminal_listing_digest: terminal_listing_digest.to_string(),
            digest,
        })
    }

    pub fn payload(&self) -> &Map<String, Value> {
        &self.payload
    }

    /// The full BRIDGE-20 check the store runs before writing.
    pub fn verify(&self) -> Result<(), String> {
        for (what, v) in [
            ("producer identity", &self.producer_identity),
            ("capability digest", &self.capability_digest),
            ("terminal listing digest", &self.terminal_listing_digest),
        ] {
            if v.is_empty() {
                return Err(format!("v2 receipt has no verified {what}"));
            }
        }
        if sha256_hex(canon(&Value::Object(self.payload.clone())).as_bytes()) != self.digest {
            return Err("v2 execution-learning provenance was modified after verification".into());
        }
        validate_v2(&self.payload)
    }

    pub fn payload_json(&self) -> String {
        canon(&Value::Object(self.payload.clone()))
    }

    pub fn payload_sha256(&self) -> &str {
        &self.digest
    }

    /// `runner|provider|model|effort`, a missing part empty.
    pub fn route_key(&self) -> String {
        let r = &self.payload["route"];
        ["runner", "provider", "model", "effort"]
            .iter()
            .map(|k| r.get(*k).and_then(Value::as_str).unwrap_or(""))
            .collect::<Vec<_>>()
            .join("|")
    }

    pub fn signal(&self) -> i64 {
        if self.payload["run_state"] == "SUCCEEDED" {
            1
        } else {
            -1
        }
    }

    pub fn field(&self, k: &str) -> &str {
        self.payload.get(k).and_then(Value::as_str).unwrap_or("")
    }

    pub fn head_digest(&self) -> &str {
        self.payload["receipt"]["head_digest"]
            .as_str()
            .unwrap_or("")
    }
}

#[cfg(test)]
mod tests;
