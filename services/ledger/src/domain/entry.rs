//! A loop lap stored as memory (spec LEDGER-01..04): the content is one JSON
//! object with a fixed key order; the memory carries the loop's tags, session
//! and metadata so ordinary recall and tag search find it.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub const DECISIONS: [&str; 6] = ["continue", "done", "halt", "pause", "killed", "error"];
/// Lap memories rank below ordinary memories (default 5).
pub const LAP_IMPORTANCE: i32 = 2;
pub const RUNNER_LOG_MAX_CHARS: usize = 2000;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Budget {
    pub tokens: i64,
    pub wallclock_s: f64,
}

/// One ledger row. Field order is the serialisation order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LapRecord {
    pub run_id: String,
    pub name: String,
    pub lap: u32,
    pub ts: String,
    pub decision: String,
    pub passed: bool,
    pub detail: String,
    pub agent_claimed_done: bool,
    pub runner_log: String,
    pub budget: Budget,
}

impl LapRecord {
    /// Rejects rows the ledger must not store.
    pub fn validate(&self) -> Result<(), String> {
        if self.run_id.trim().is_empty() || self.run_id.chars().count() > 200 {
            return Err("lap run_id must be 1–200 characters".into());
        }
        if self.name.trim().is_empty() || self.name.chars().count() > 128 {
            return Err("lap name must be 1–128 characters".into());
        }
        if !DECISIONS.contains(&self.decision.as_str()) {
            return Err(format!("unknown lap decision {:?}", self.decision));
        }
        if !self.budget.wallclock_s.is_finite() {
            return Err("lap budget wallclock_s must be finite".into());
        }
        let text = [
            &self.run_id,
            &self.name,
            &self.ts,
            &self.detail,
            &self.runner_log,
        ];
        if text.iter().any(|s| s.contains('\0')) {
            return Err("lap fields must not contain NUL characters".into());
        }
        Ok(())
    }

    /// The runner log as stored: its first 2000 characters.
    pub fn capped(mut self) -> Self {
        if let Some((cut, _)) = self.runner_log.char_indices().nth(RUNNER_LOG_MAX_CHARS) {
            self.runner_log.truncate(cut);
        }
        self
    }

    /// LEDGER-JSON: fixed key order, compact, non-ASCII raw.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a lap record always serialises")
    }

    /// A stored text is a lap iff it is a JSON object with both `run_id` and
    /// `lap`; missing fields take defaults (spec LEDGER-03).
    pub fn from_json(text: &str) -> Option<Self> {
        let obj: Map<String, Value> = serde_json::from_str(text).ok()?;
        if !obj.contains_key("run_id") || !obj.contains_key("lap") {
            return None;
        }
        let s = |k: &str| obj.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let b = |k: &str| obj.get(k).and_then(Value::as_bool).unwrap_or(false);
        let budget = obj.get("budget").and_then(Value::as_object);
        Some(Self {
            run_id: s("run_id"),
            name: s("name"),
            lap: obj
                .get("lap")
                .and_then(Value::as_u64)
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(0),
            ts: s("ts"),
            decision: s("decision"),
            passed: b("passed"),
            detail: s("detail"),
            agent_claimed_done: b("agent_claimed_done"),
            runner_log: s("runner_log"),
            budget: Budget {
                tokens: budget
                    .and_then(|b| b.get("tokens"))
                    .and_then(Value::as_i64)
                    .unwrap_or(0),
                wallclock_s: budget
                    .and_then(|b| b.get("wallclock_s"))
                    .and_then(Value::as_f64)
                    .unwrap_or(0.0),
            },
        })
    }

    pub fn session_id(&self) -> String {
        format!("loop:{}", self.run_id)
    }

    pub fn tags(&self) -> Vec<String> {
        vec!["slm-loop".to_string(), format!("loop:{}", self.name)]
    }

    /// Memory metadata of a lap (spec LEDGER-04).
    pub fn metadata(&self) -> String {
        // Fields in key order: the same text the `json!` object (a sorted
        // map) gave, without building the map for every lap.
        #[derive(Serialize)]
        struct LapMetadata<'a> {
            importance: i32,
            index_external: bool,
            integration: &'static str,
            loop_decision: &'a str,
            loop_lap: u32,
            loop_name: &'a str,
            loop_run_id: &'a str,
            project_name: &'static str,
            tags: Vec<String>,
        }
        serde_json::to_string(&LapMetadata {
            importance: LAP_IMPORTANCE,
            index_external: false,
            integration: "slm-loop",
            loop_decision: &self.decision,
            loop_lap: self.lap,
            loop_name: &self.name,
            loop_run_id: &self.run_id,
            project_name: "slm-loop",
            tags: self.tags(),
        })
        .expect("lap metadata always serialises")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The metadata text is the sorted-key object LEDGER-04 lists.
    #[test]
    fn metadata_is_the_sorted_object() {
        let r = row();
        let expected = serde_json::json!({
            "integration": "slm-loop",
            "loop_name": r.name,
            "loop_run_id": r.run_id,
            "loop_lap": r.lap,
            "loop_decision": r.decision,
            "tags": r.tags(),
            "importance": LAP_IMPORTANCE,
            "project_name": "slm-loop",
            "index_external": false,
        })
        .to_string();
        assert_eq!(r.metadata(), expected);
    }

    fn row() -> LapRecord {
        LapRecord {
            run_id: "build-3f9a0c1d".into(),
            name: "build".into(),
            lap: 1,
            ts: "2026-07-23T10:00:00.5+00:00".into(),
            decision: "continue".into(),
            passed: false,
            detail: "démo".into(),
            agent_claimed_done: false,
            runner_log: String::new(),
            budget: Budget {
                tokens: 0,
                wallclock_s: 0.0,
            },
        }
    }

    #[test]
    fn serialises_in_the_fixed_order() {
        assert_eq!(
            row().to_json(),
            r#"{"run_id":"build-3f9a0c1d","name":"build","lap":1,"ts":"2026-07-23T10:00:00.5+00:00","decision":"continue","passed":false,"detail":"démo","agent_claimed_done":false,"runner_log":"","budget":{"tokens":0,"wallclock_s":0.0}}"#
        );
    }

    #[test]
    fn parses_only_objects_with_run_id_and_lap() {
        assert_eq!(LapRecord::from_json(&row().to_json()), Some(row()));
        for garbage in [
            "",
            "[]",
            "42",
            "{\"run_id\":\"x\"}",
            "{\"lap\":1}",
            "not json",
        ] {
            assert_eq!(LapRecord::from_json(garbage), None, "{garbage}");
        }
        let sparse = LapRecord::from_json(r#"{"run_id":"r","lap":2,"budget":[1]}"#).unwrap();
        assert_eq!(sparse.lap, 2);
        assert_eq!(sparse.decision, "");
        assert_eq!(sparse.budget, Budget::default());
    }

    #[test]
    fn caps_the_runner_log_in_characters() {
        let mut r = row();
        r.runner_log = "é".repeat(2500);
        assert_eq!(r.capped().runner_log.chars().count(), 2000);
    }

    #[test]
    fn validation_refuses_unknown_decisions_and_nul() {
        let mut r = row();
        assert!(r.validate().is_ok());
        r.decision = "maybe".into();
        assert!(r.validate().is_err());
        let mut r = row();
        r.detail = "a\0b".into();
        assert!(r.validate().is_err());
    }

    /// Regression (fuzz/ledger_row): without serde_json's exact float
    /// parsing this value read back one ULP off.
    #[test]
    fn budget_floats_round_trip_exactly() {
        for w in [
            -7.274238755027592e59,
            0.30000000000000004,
            1.7976931348623157e308,
            5e-324,
        ] {
            let mut r = row();
            r.budget.wallclock_s = w;
            let back = LapRecord::from_json(&r.to_json()).unwrap();
            assert_eq!(back.budget.wallclock_s.to_bits(), w.to_bits(), "{w:e}");
        }
    }

    #[test]
    fn serialises_escapes_unicode_and_whole_floats() {
        let r = LapRecord {
            run_id: "r-1".into(),
            name: "n\"q".into(),
            lap: 4,
            ts: "t4".into(),
            decision: "halt".into(),
            passed: true,
            detail: "no-progress; ünïcode\n".into(),
            agent_claimed_done: true,
            runner_log: "log😀".into(),
            budget: Budget {
                tokens: 40,
                wallclock_s: 3.0,
            },
        };
        let expected = "{\"run_id\":\"r-1\",\"name\":\"n\\\"q\",\"lap\":4,\"ts\":\"t4\",\"decision\":\"halt\",\"passed\":true,\"detail\":\"no-progress; ünïcode\\n\",\"agent_claimed_done\":true,\"runner_log\":\"log😀\",\"budget\":{\"tokens\":40,\"wallclock_s\":3.0}}";
        assert_eq!(r.to_json(), expected);
        assert_eq!(LapRecord::from_json(expected), Some(r));
    }
}
