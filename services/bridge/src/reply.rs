//! How the bridge reads the producer's tool replies (spec BRIDGE-08..10,
//! 19): the reply text, an evidence reply and one run of a terminal listing.
//! Pure, so the observations in [`crate::bridge`], the client in
//! [`crate::client`] and the fuzz target share one reading.

use serde_json::{Map, Value};

use crate::domain::{MAX_TEXT_BYTES, refusal};

/// The fields of one listed run that the v2 observation reads, in this
/// order, and requires its evidence to repeat.
pub const LISTED_RUN_FIELDS: [&str; 4] = ["run_ref", "run_id", "run_state", "terminal_at"];

/// BRIDGE-08: a reply's one text item, at most 2 MiB, must be a JSON
/// object. The refusal text otherwise.
pub fn decode_text(text: &str) -> Result<Map<String, Value>, &'static str> {
    if text.len() > MAX_TEXT_BYTES {
        return Err(refusal::INVALID_PAYLOAD);
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(refusal::INVALID_PAYLOAD),
        Err(_) => Err(refusal::INVALID_JSON),
    }
}

/// An evidence reply: `Ok(None)` for `{"status": "unavailable"}` (the run
/// is skipped), `Ok(Some(evidence))` for `{"status": "ok", "evidence":
/// {...}}`, `Err(())` for anything else (the caller names its refusal).
#[allow(clippy::result_unit_err)]
pub fn evidence(reply: &Map<String, Value>) -> Result<Option<&Map<String, Value>>, ()> {
    let status = reply.get("status").and_then(Value::as_str);
    if status == Some("unavailable") {
        return Ok(None);
    }
    match (status, reply.get("evidence")) {
        (Some("ok"), Some(Value::Object(evidence))) => Ok(Some(evidence)),
        _ => Err(()),
    }
}

/// One run of a terminal listing as the v2 observation reads it: the
/// [`LISTED_RUN_FIELDS`] as text, or None when one is missing or not text.
pub fn listed_run(run: &Value) -> Option<[&str; 4]> {
    let mut out = [""; 4];
    for (slot, key) in out.iter_mut().zip(LISTED_RUN_FIELDS) {
        *slot = run.get(key).and_then(Value::as_str)?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reply_text_must_be_a_bounded_json_object() {
        assert_eq!(decode_text(r#"{"a": 1}"#).unwrap()["a"], json!(1));
        assert_eq!(decode_text("[1]"), Err(refusal::INVALID_PAYLOAD));
        assert_eq!(decode_text("\"x\""), Err(refusal::INVALID_PAYLOAD));
        assert_eq!(decode_text("{"), Err(refusal::INVALID_JSON));
        assert_eq!(decode_text(""), Err(refusal::INVALID_JSON));
        let pad = " ".repeat(MAX_TEXT_BYTES - 2);
        assert!(decode_text(&format!("{{{pad}}}")).is_ok());
        assert_eq!(
            decode_text(&format!("{{ {pad}}}")),
            Err(refusal::INVALID_PAYLOAD)
        );
    }

    #[test]
    fn evidence_replies() {
        let m = |v: Value| v.as_object().unwrap().clone();
        assert_eq!(evidence(&m(json!({"status": "unavailable"}))), Ok(None));
        let ok = m(json!({"status": "ok", "evidence": {"x": 1}}));
        assert_eq!(evidence(&ok), Ok(Some(&m(json!({"x": 1})))));
        for bad in [
            json!({"status": "ok"}),
            json!({"status": "ok", "evidence": [1]}),
            json!({"status": "error", "evidence": {}}),
            json!({"evidence": {}}),
        ] {
            assert_eq!(evidence(&m(bad)), Err(()));
        }
    }

    #[test]
    fn listed_runs_need_every_field_as_text() {
        let run = json!({"run_ref": "r", "run_id": "i", "run_state": "SUCCEEDED",
            "terminal_at": "t", "extra": 1});
        assert_eq!(listed_run(&run), Some(["r", "i", "SUCCEEDED", "t"]));
        assert_eq!(listed_run(&json!({"run_ref": "r"})), None);
        let mut bad = run.clone();
        bad["run_id"] = json!(1);
        assert_eq!(listed_run(&bad), None);
        assert_eq!(listed_run(&json!("r")), None);
    }
}
