//! What a receipt proves and how it is signed (spec RECEIPT-33..36, 43): the
//! exit status and hashes of the output, never the output; HMAC-SHA256 over a
//! canonical payload with a key only the receipt service can read.

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::canon::{canonical, hex, sha256_hex};
use super::msg;

pub const KEY_LEN: usize = 32;

/// A stored receipt.
#[derive(Debug, Clone, PartialEq)]
pub struct Receipt {
    pub seq: i64,
    pub receipt_id: String,
    pub profile_id: String,
    pub task_id: String,
    /// The job id.
    pub run_id: String,
    pub producer: String,
    pub command_digest: String,
    pub verdict: String,
    pub exit_code: i64,
    pub produced_at: String,
    pub produced_us: i64,
    pub evidence: String,
    pub evidence_digest: String,
}

/// The measured run, before signing.
#[derive(Debug, Clone, PartialEq)]
pub struct Measurement {
    pub exit_code: i64,
    pub stdout_sha256: String,
    pub stderr_sha256: String,
    pub output_sha256: String,
    pub key_exposed: bool,
    pub stop_reason: Option<String>,
    pub containment: String,
    /// The filesystem sandbox (`landlock-v<abi>` or `none`; empty: not
    /// recorded, see [`Measurement::with_sandbox`]).
    pub sandbox: String,
}

/// `len(stdout)` (u64 BE) ‖ stdout ‖ `len(stderr)` (u64 BE) ‖ stderr.
pub fn output_sha256(stdout: &[u8], stderr: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update((stdout.len() as u64).to_be_bytes());
    h.update(stdout);
    h.update((stderr.len() as u64).to_be_bytes());
    h.update(stderr);
    hex(&h.finalize())
}

/// Python's `repr(bytes)` of the key, one of the forms a check might print.
fn python_bytes_repr(b: &[u8]) -> String {
    let quote = if b.contains(&b'\'') && !b.contains(&b'"') {
        '"'
    } else {
        '\''
    };
    let mut s = format!("b{quote}");
    for &c in b {
        match c {
            b'\\' => s.push_str("\\\\"),
            b'\t' => s.push_str("\\t"),
            b'\n' => s.push_str("\\n"),
            b'\r' => s.push_str("\\r"),
            c if c as char == quote => {
                s.push('\\');
                s.push(quote)
            }
            0x20..=0x7e => s.push(c as char),
            _ => s.push_str(&format!("\\x{c:02x}")),
        }
    }
    s.push(quote);
    s
}

/// True when any printable form of the key appears in the output.
pub fn key_exposed(key: &[u8], stdout: &[u8], stderr: &[u8]) -> bool {
    let forms: Vec<Vec<u8>> = vec![
        key.to_vec(),
        hex(key).into_bytes(),
        python_bytes_repr(key).into_bytes(),
        STANDARD.encode(key).into_bytes(),
        STANDARD_NO_PAD.encode(key).into_bytes(),
        URL_SAFE.encode(key).into_bytes(),
        URL_SAFE_NO_PAD.encode(key).into_bytes(),
    ];
    forms.iter().any(|f| {
        memchr::memmem::find(stdout, f).is_some() || memchr::memmem::find(stderr, f).is_some()
    })
}

/// Applies RECEIPT-33's exposure rule and measures the output.
pub fn measure(
    exit_code: i64,
    stop_reason: Option<String>,
    stdout: &[u8],
    stderr: &[u8],
    key: &[u8],
    containment: &str,
) -> Measurement {
    let exposed = key_exposed(key, stdout, stderr);
    let mut exit_code = exit_code;
    let mut stop_reason = stop_reason;
    if exposed {
        if exit_code == 0 {
            exit_code = -1;
        }
        stop_reason.get_or_insert_with(|| msg::KEY_EXPOSED.to_string());
    }
    if stop_reason.is_some() && exit_code == 0 {
        exit_code = -1;
    }
    Measurement {
        exit_code,
        stdout_sha256: sha256_hex(stdout),
        stderr_sha256: sha256_hex(stderr),
        output_sha256: output_sha256(stdout, stderr),
        key_exposed: exposed,
        stop_reason: stop_reason.map(|r| r.chars().take(512).collect()),
        containment: containment.to_string(),
        sandbox: String::new(),
    }
}

impl Measurement {
    /// Records the filesystem sandbox the run had.
    pub fn with_sandbox(mut self, sandbox: impl Into<String>) -> Self {
        self.sandbox = sandbox.into();
        self
    }
}

/// The admission block a signed receipt carries (without its signature).
pub fn admission(job_id: &str, revision_digest: &str, definition_digest: &str) -> Value {
    json!({
        "job_id": job_id,
        "revision_digest": revision_digest,
        "definition_digest": definition_digest,
        "validation": msg::VALIDATION,
    })
}

/// The bytes signed: the record's fields and the unsigned evidence.
fn payload(r: &Receipt, unsigned_evidence: &str) -> Vec<u8> {
    canonical(&json!({
        "receipt_id": r.receipt_id,
        "profile_id": r.profile_id,
        "task_id": r.task_id,
        "run_id": r.run_id,
        "producer": r.producer,
        "command_digest": r.command_digest,
        "verdict": r.verdict,
        "exit_code": r.exit_code,
        "produced_at": r.produced_at,
        "evidence": unsigned_evidence,
    }))
    .into_bytes()
}

fn hmac_hex(key: &[u8], data: &[u8]) -> String {
    let mut mac =
        <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(data);
    hex(&mac.finalize().into_bytes())
}

pub fn verdict_of(exit_code: i64) -> &'static str {
    if exit_code == 0 { "PASS" } else { "FAIL" }
}

/// Builds and signs a receipt (RECEIPT-35, 36). `r` carries the identity
/// fields and `produced_at`; evidence, digest and verdict are filled in.
pub fn sign(mut r: Receipt, m: &Measurement, admission: Value, key: &[u8]) -> Receipt {
    let mut evidence = json!({
        "exit_code": m.exit_code,
        "stdout_sha256": m.stdout_sha256,
        "stderr_sha256": m.stderr_sha256,
        "output_sha256": m.output_sha256,
        "key_exposed": m.key_exposed,
        "containment": m.containment,
        "admission": admission,
    });
    if let Some(reason) = &m.stop_reason {
        evidence["stop_reason"] = json!(reason);
    }
    if !m.sandbox.is_empty() {
        evidence["sandbox"] = json!(m.sandbox);
    }
    r.exit_code = m.exit_code;
    r.verdict = verdict_of(m.exit_code).to_string();
    let unsigned = canonical(&evidence);
    let signature = hmac_hex(key, &payload(&r, &unsigned));
    evidence["admission"]["signature"] = json!(signature);
    r.evidence = canonical(&evidence);
    r.evidence_digest = sha256_hex(r.evidence.as_bytes());
    r
}

/// The parsed evidence of a receipt, when it is an object.
pub fn evidence_object(r: &Receipt) -> Option<Map<String, Value>> {
    match serde_json::from_str::<Value>(&r.evidence).ok()? {
        Value::Object(m) => Some(m),
        _ => None,
    }
}

/// RECEIPT-43 without the freshness window: digest, exit code, admission
/// block and signature. Returns the certified revision digest when authentic.
pub fn authentic(r: &Receipt, job_id: &str, definition_digest: &str, key: &[u8]) -> Option<String> {
    if r.verdict != verdict_of(r.exit_code) {
        return None;
    }
    if sha256_hex(r.evidence.as_bytes()) != r.evidence_digest {
        return None;
    }
    let mut ev = evidence_object(r)?;
    if ev.get("exit_code").and_then(Value::as_i64) != Some(r.exit_code) {
        return None;
    }
    let mut adm = ev.get("admission")?.as_object()?.clone();
    let signature = adm.remove("signature")?.as_str()?.to_string();
    let revision = adm.get("revision_digest")?.as_str()?.to_string();
    if Value::Object(adm.clone()) != admission(job_id, &revision, definition_digest) {
        return None;
    }
    ev.insert("admission".into(), Value::Object(adm));
    let unsigned = canonical(&Value::Object(ev));
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).ok()?;
    mac.update(&payload(r, &unsigned));
    let sig = decode_hex(&signature)?;
    // Constant-time comparison.
    mac.verify_slice(&sig).ok()?;
    Some(revision)
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: [u8; 32] = [7u8; 32];

    fn record() -> Receipt {
        Receipt {
            seq: 0,
            receipt_id: "r".repeat(32),
            profile_id: "default".into(),
            task_id: "build".into(),
            run_id: "a".repeat(32),
            producer: "operator".into(),
            command_digest: "c".repeat(64),
            verdict: String::new(),
            exit_code: 0,
            produced_at: "2026-07-23T10:00:00+00:00".into(),
            produced_us: 0,
            evidence: String::new(),
            evidence_digest: String::new(),
        }
    }

    fn signed(exit: i64) -> Receipt {
        let m = measure(exit, None, b"ok\n", b"", &KEY, "cgroup-v2");
        sign(record(), &m, admission(&"a".repeat(32), "rev", "def"), &KEY)
    }

    #[test]
    fn output_hash_framing_matches_a_hand_computed_vector() {
        // 00..03 "ok\n" 00..00: sha256 of 8+3+8 bytes.
        let mut framed = Vec::new();
        framed.extend_from_slice(&3u64.to_be_bytes());
        framed.extend_from_slice(b"ok\n");
        framed.extend_from_slice(&0u64.to_be_bytes());
        assert_eq!(output_sha256(b"ok\n", b""), sha256_hex(&framed));
        assert_eq!(framed.len(), 19);
    }

    #[test]
    fn signed_receipts_verify_and_tampering_fails() {
        let r = signed(0);
        assert_eq!(r.verdict, "PASS");
        assert_eq!(
            authentic(&r, &"a".repeat(32), "def", &KEY).as_deref(),
            Some("rev")
        );
        // Wrong key, wrong job, wrong definition.
        assert!(authentic(&r, &"a".repeat(32), "def", &[8u8; 32]).is_none());
        assert!(authentic(&r, &"b".repeat(32), "def", &KEY).is_none());
        assert!(authentic(&r, &"a".repeat(32), "other", &KEY).is_none());
        // Edited evidence with a recomputed digest still fails the signature.
        let mut t = r.clone();
        t.evidence = t.evidence.replace("cgroup-v2", "none");
        t.evidence_digest = sha256_hex(t.evidence.as_bytes());
        assert!(authentic(&t, &"a".repeat(32), "def", &KEY).is_none());
        // Edited evidence without the digest fails the digest.
        let mut t = r.clone();
        t.evidence.push(' ');
        assert!(authentic(&t, &"a".repeat(32), "def", &KEY).is_none());
        // A verdict that disagrees with the exit code.
        let mut t = r.clone();
        t.verdict = "FAIL".into();
        assert!(authentic(&t, &"a".repeat(32), "def", &KEY).is_none());
        // Changed identity fields break the signature.
        let mut t = r;
        t.producer = "agent".into();
        assert!(authentic(&t, &"a".repeat(32), "def", &KEY).is_none());
        let f = signed(1);
        assert_eq!(f.verdict, "FAIL");
        assert!(authentic(&f, &"a".repeat(32), "def", &KEY).is_some());
    }

    #[test]
    fn the_key_in_any_printed_form_is_exposure() {
        let key: Vec<u8> = (0u8..32)
            .map(|i| i.wrapping_mul(37).wrapping_add(3))
            .collect();
        for form in [
            key.clone(),
            hex(&key).into_bytes(),
            python_bytes_repr(&key).into_bytes(),
            STANDARD.encode(&key).into_bytes(),
            URL_SAFE_NO_PAD.encode(&key).into_bytes(),
        ] {
            let mut out = b"prefix ".to_vec();
            out.extend_from_slice(&form);
            assert!(key_exposed(&key, &out, b""));
            assert!(key_exposed(&key, b"", &out));
            let m = measure(0, None, &out, b"", &key, "x");
            assert_eq!(m.exit_code, -1);
            assert_eq!(m.stop_reason.as_deref(), Some(msg::KEY_EXPOSED));
        }
        assert!(!key_exposed(&key, b"nothing", b"here"));
        assert_eq!(python_bytes_repr(b"a'\n\x00\\"), "b\"a'\\n\\x00\\\\\"");
        assert_eq!(python_bytes_repr(b"a"), "b'a'");
    }

    #[test]
    fn a_reason_forces_a_failure_and_is_capped() {
        let m = measure(0, Some("x".repeat(600)), b"", b"", &KEY, "c");
        assert_eq!(m.exit_code, -1);
        assert_eq!(m.stop_reason.unwrap().len(), 512);
        assert_eq!(measure(2, None, b"", b"", &KEY, "c").exit_code, 2);
    }
}
