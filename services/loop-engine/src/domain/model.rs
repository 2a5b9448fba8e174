//! Value types of the bounded loop engine (SPEC ENGINE-01..03, ENGINE-16, LEDGER-01..03).
//!
//! Everything here is plain data: no I/O, no clocks, no environment.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Outcome reason: the gate passed and approval (if required) was granted.
pub const REASON_GATE_PASSED: &str = "gate-passed";
/// Outcome reason: the iteration cap tripped before a lap started.
pub const REASON_MAX_ITERATIONS: &str = "max-iterations";
/// Outcome reason: the cumulative token budget was reached (`>=`).
pub const REASON_TOKEN_BUDGET: &str = "token-budget";
/// Outcome reason: the wall-clock budget was exceeded (strictly `>`).
pub const REASON_WALLCLOCK: &str = "wallclock";
/// Outcome reason: the last `window` laps changed nothing and the gate failed.
pub const REASON_NO_PROGRESS: &str = "no-progress";
/// Outcome reason: the gate passed but approval was required and not granted.
pub const REASON_AWAITING_APPROVAL: &str = "awaiting-approval";
/// Outcome reason: the kill switch tripped.
pub const REASON_KILLED: &str = "killed";
/// Ledger row detail written when the kill switch trips (ENGINE-08).
pub const DETAIL_KILLED: &str = "kill switch tripped";
/// Prefix of the no-progress halt row detail (ENGINE-13).
pub const NO_PROGRESS_PREFIX: &str = "no-progress; ";
/// Prefix of a runner error reason/detail (ENGINE-11).
pub const RUNNER_ERROR_PREFIX: &str = "runner error: ";
/// Prefix of a gate error reason/detail (ENGINE-11).
pub const GATE_ERROR_PREFIX: &str = "gate error: ";
/// Maximum number of characters (Unicode scalar values) of `runner_log` kept in a row (ENGINE-16).
pub const RUNNER_LOG_MAX_CHARS: usize = 2000;
/// Default no-progress window (ENGINE-02).
pub const DEFAULT_NO_PROGRESS_WINDOW: u32 = 3;

/// Error returned when a string is not one of an enumeration's exact spellings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what}: {value:?}")]
pub struct ParseEnumError {
    /// Which enumeration was being parsed (`"rung"`, `"status"`, `"decision"`).
    pub what: &'static str,
    /// The rejected input.
    pub value: String,
}

macro_rules! string_enum {
    ($ty:ident, $what:literal, { $($variant:ident => $text:literal),+ $(,)? }) => {
        impl $ty {
            /// Every value, in declaration order.
            pub const ALL: &'static [$ty] = &[$($ty::$variant),+];

            /// The exact wire spelling.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($ty::$variant => $text),+
                }
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $ty {
            type Err = ParseEnumError;

            /// Parses exactly the wire spelling (case-sensitive, no trimming).
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($text => Ok($ty::$variant),)+
                    _ => Err(ParseEnumError { what: $what, value: s.to_owned() }),
                }
            }
        }
    };
}

/// Autonomy rung (ENGINE-01): `L1` report, `L2` assisted, `L3` unattended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum Rung {
    /// Report only; no approval required by default.
    #[default]
    L1,
    /// Assisted; approval required by default.
    L2,
    /// Unattended; approval required by default.
    L3,
}

string_enum!(Rung, "rung", { L1 => "L1", L2 => "L2", L3 => "L3" });

/// Terminal status of a run (ENGINE-01).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Status {
    /// The gate passed (and approval, when required, was granted).
    Done,
    /// A bound tripped (iterations, tokens, wall clock, no progress).
    Halt,
    /// The gate passed but approval is pending.
    Pause,
    /// The kill switch tripped.
    Killed,
    /// The runner or the gate failed.
    Error,
}

string_enum!(Status, "status", {
    Done => "DONE",
    Halt => "HALT",
    Pause => "PAUSE",
    Killed => "KILLED",
    Error => "ERROR",
});

/// Ledger row decision (LEDGER-02).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// The lap finished without a terminal condition; the next lap follows.
    Continue,
    /// Terminal: DONE.
    Done,
    /// Terminal: HALT.
    Halt,
    /// Terminal: PAUSE.
    Pause,
    /// Terminal: KILLED.
    Killed,
    /// Terminal: ERROR.
    Error,
}

string_enum!(Decision, "decision", {
    Continue => "continue",
    Done => "done",
    Halt => "halt",
    Pause => "pause",
    Killed => "killed",
    Error => "error",
});

impl From<Status> for Decision {
    fn from(status: Status) -> Self {
        match status {
            Status::Done => Decision::Done,
            Status::Halt => Decision::Halt,
            Status::Pause => Decision::Pause,
            Status::Killed => Decision::Killed,
            Status::Error => Decision::Error,
        }
    }
}

/// Invalid [`Bounds`]; the message is the spec's exact text (ENGINE-02).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BoundsError(pub String);

/// Hard limits of a run (ENGINE-02). Construct through [`Bounds::new`] to get validation.
#[derive(Debug, Clone, PartialEq)]
pub struct Bounds {
    /// Maximum number of laps; the cap trips when lap `max_iterations + 1` is about to start.
    pub max_iterations: u32,
    /// Number of trailing unchanged laps that halts a failing run; 0 disables the rule.
    pub no_progress_window: u32,
    /// Cumulative token budget (`>=` trips).
    pub max_tokens: Option<i64>,
    /// Wall-clock budget in seconds (strictly `>` trips).
    pub max_wallclock_s: Option<f64>,
    /// Approval posture: `Some` forces it, `None` derives it from the rung.
    pub require_approval: Option<bool>,
}

impl Bounds {
    /// Validates and builds bounds with the spec's exact error messages.
    ///
    /// Beyond the spec, `max_iterations` above `u32::MAX - 1` and `no_progress_window` above
    /// `u32::MAX` are rejected (the halt row of a capped run is numbered `max_iterations + 1`,
    /// which must fit a `u32`).
    pub fn new(
        max_iterations: i64,
        no_progress_window: i64,
        max_tokens: Option<i64>,
        max_wallclock_s: Option<f64>,
        require_approval: Option<bool>,
    ) -> Result<Bounds, BoundsError> {
        if max_iterations < 1 {
            return Err(BoundsError("max_iterations must be >= 1".into()));
        }
        if no_progress_window < 0 {
            return Err(BoundsError("no_progress_window must be >= 0".into()));
        }
        if matches!(max_tokens, Some(t) if t < 0) {
            return Err(BoundsError("max_tokens must be >= 0 when set".into()));
        }
        if matches!(max_wallclock_s, Some(w) if w < 0.0) {
            return Err(BoundsError("max_wallclock_s must be >= 0 when set".into()));
        }
        let max_iterations = u32::try_from(max_iterations)
            .ok()
            .filter(|m| *m < u32::MAX)
            .ok_or_else(|| BoundsError(format!("max_iterations must be <= {}", u32::MAX - 1)))?;
        let no_progress_window = u32::try_from(no_progress_window)
            .map_err(|_| BoundsError(format!("no_progress_window must be <= {}", u32::MAX)))?;
        Ok(Bounds {
            max_iterations,
            no_progress_window,
            max_tokens,
            max_wallclock_s,
            require_approval,
        })
    }

    /// Bounds with the given cap, the default no-progress window (3) and nothing else set.
    pub fn with_max_iterations(max_iterations: i64) -> Result<Bounds, BoundsError> {
        Bounds::new(
            max_iterations,
            i64::from(DEFAULT_NO_PROGRESS_WINDOW),
            None,
            None,
            None,
        )
    }
}

/// The gate's answer for one lap (ENGINE-03).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Verdict {
    /// Whether the external check passed. Only this (plus approval) can end a run in DONE.
    pub passed: bool,
    /// One-line explanation.
    pub detail: String,
    /// Free-form evidence; not written to the ledger row.
    pub evidence: Map<String, Value>,
}

impl Verdict {
    /// A verdict with empty evidence.
    pub fn new(passed: bool, detail: impl Into<String>) -> Self {
        Verdict {
            passed,
            detail: detail.into(),
            evidence: Map::new(),
        }
    }

    /// Replaces the evidence.
    pub fn with_evidence(mut self, evidence: Map<String, Value>) -> Self {
        self.evidence = evidence;
        self
    }
}

/// What the runner reports for one lap (ENGINE-03).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LapResult {
    /// Whether the lap changed anything (feeds the no-progress rule).
    pub changed: bool,
    /// The agent's own claim of being done: recorded, never used in a decision (ENGINE-06).
    pub agent_claimed_done: bool,
    /// Tokens spent in this lap; values `<= 0` are ignored.
    pub tokens: i64,
    /// Free-form log; the ledger keeps its first 2000 characters.
    pub log: String,
}

/// Budget state written with every row (ENGINE-16).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct BudgetSnapshot {
    /// Cumulative tokens spent so far.
    pub tokens: i64,
    /// Elapsed seconds since the run started, rounded to 3 decimals.
    pub wallclock_s: f64,
}

/// One ledger row: exactly one per lap attempt (ENGINE-15, ENGINE-16).
#[derive(Debug, Clone, PartialEq)]
pub struct LedgerRow {
    /// Run identifier.
    pub run_id: String,
    /// Loop name.
    pub name: String,
    /// 1-based lap number of the attempt.
    pub lap: u32,
    /// Timestamp from the injected clock.
    pub ts: String,
    /// Decision taken at this lap.
    pub decision: Decision,
    /// Gate verdict (false for rows without a verdict).
    pub passed: bool,
    /// Gate detail, reason or error text.
    pub detail: String,
    /// The runner's claim, or false when the row has no runner result.
    pub agent_claimed_done: bool,
    /// The runner's log truncated to 2000 characters, or `""`.
    pub runner_log: String,
    /// Budget at the time of writing.
    pub budget: BudgetSnapshot,
}

/// Result of a run (ENGINE-03, ENGINE-18).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Terminal status.
    pub status: Status,
    /// One of the ENGINE-17 reasons.
    pub reason: String,
    /// Completed laps, per the ENGINE-15 table.
    pub laps: u32,
    /// Run identifier.
    pub run_id: String,
    /// Ledger write failures, each `"lap <n>: <error text>"` (fail open, ENGINE-18).
    pub write_errors: Vec<String>,
}

impl Outcome {
    /// True only for [`Status::Done`].
    pub fn ok(&self) -> bool {
        self.status == Status::Done
    }
}

/// Error raised by a runner or a gate (ENGINE-11).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct StepError {
    /// Short stable name, e.g. `RuntimeError`, `Timeout`, `Unavailable`.
    pub kind: String,
    /// Free text.
    pub message: String,
}

impl StepError {
    /// Builds an error from a kind and a message.
    pub fn new(kind: impl Into<String>, message: impl Into<String>) -> Self {
        StepError {
            kind: kind.into(),
            message: message.into(),
        }
    }
}

/// Keeps the first `max` characters (Unicode scalar values) of `s`.
pub fn truncate_chars(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((byte_idx, _)) => s[..byte_idx].to_owned(),
        None => s.to_owned(),
    }
}

/// Rounds to 3 decimals like Python's `round(x, 3)` (correctly rounded from the exact binary
/// value, ties to even), by going through Rust's exact decimal formatting.
pub fn round3(x: f64) -> f64 {
    if !x.is_finite() {
        return x;
    }
    format!("{x:.3}").parse().unwrap_or(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enums_display_and_parse_exactly() {
        let rungs = [(Rung::L1, "L1"), (Rung::L2, "L2"), (Rung::L3, "L3")];
        for (rung, text) in rungs {
            assert_eq!(rung.to_string(), text);
            assert_eq!(rung.as_str(), text);
            assert_eq!(text.parse::<Rung>(), Ok(rung));
        }
        let statuses = [
            (Status::Done, "DONE"),
            (Status::Halt, "HALT"),
            (Status::Pause, "PAUSE"),
            (Status::Killed, "KILLED"),
            (Status::Error, "ERROR"),
        ];
        for (status, text) in statuses {
            assert_eq!(status.to_string(), text);
            assert_eq!(status.as_str(), text);
            assert_eq!(text.parse::<Status>(), Ok(status));
        }
        let decisions = [
            (Decision::Continue, "continue"),
            (Decision::Done, "done"),
            (Decision::Halt, "halt"),
            (Decision::Pause, "pause"),
            (Decision::Killed, "killed"),
            (Decision::Error, "error"),
        ];
        for (decision, text) in decisions {
            assert_eq!(decision.to_string(), text);
            assert_eq!(text.parse::<Decision>(), Ok(decision));
        }
        assert_eq!(Rung::ALL.len(), 3);
        assert_eq!(Status::ALL.len(), 5);
        assert_eq!(Decision::ALL.len(), 6);
    }

    #[test]
    fn enums_reject_other_spellings() {
        for bad in ["l1", "L4", "", " L1", "L1 "] {
            assert!(bad.parse::<Rung>().is_err(), "{bad:?}");
        }
        for bad in ["done", "Done", "HALTED", "", "ERROR "] {
            assert!(bad.parse::<Status>().is_err(), "{bad:?}");
        }
        for bad in ["CONTINUE", "Continue", "stop", ""] {
            assert!(bad.parse::<Decision>().is_err(), "{bad:?}");
        }
        let err = "x".parse::<Status>().unwrap_err();
        assert_eq!(err.to_string(), "invalid status: \"x\"");
    }

    #[test]
    fn enums_serde_use_wire_spellings() {
        assert_eq!(serde_json::to_string(&Rung::L2).unwrap(), "\"L2\"");
        assert_eq!(
            serde_json::to_string(&Status::Killed).unwrap(),
            "\"KILLED\""
        );
        assert_eq!(
            serde_json::to_string(&Decision::Continue).unwrap(),
            "\"continue\""
        );
        assert_eq!(
            serde_json::from_str::<Status>("\"PAUSE\"").unwrap(),
            Status::Pause
        );
    }

    #[test]
    fn bounds_validation_messages() {
        type Case = (i64, i64, Option<i64>, Option<f64>, Option<&'static str>);
        let cases: &[Case] = &[
            (1, 0, None, None, None),
            (10, 3, Some(0), Some(0.0), None),
            (0, 3, None, None, Some("max_iterations must be >= 1")),
            (-5, 3, None, None, Some("max_iterations must be >= 1")),
            (1, -1, None, None, Some("no_progress_window must be >= 0")),
            (
                1,
                3,
                Some(-1),
                None,
                Some("max_tokens must be >= 0 when set"),
            ),
            (
                1,
                3,
                None,
                Some(-0.001),
                Some("max_wallclock_s must be >= 0 when set"),
            ),
            // The first failing rule wins.
            (
                0,
                -1,
                Some(-1),
                Some(-1.0),
                Some("max_iterations must be >= 1"),
            ),
        ];
        for &(max, window, tokens, wall, expected) in cases {
            let got = Bounds::new(max, window, tokens, wall, None);
            match expected {
                None => {
                    let b = got.unwrap_or_else(|e| panic!("{max},{window}: {e}"));
                    assert_eq!(i64::from(b.max_iterations), max);
                    assert_eq!(i64::from(b.no_progress_window), window);
                    assert_eq!(b.max_tokens, tokens);
                    assert_eq!(b.max_wallclock_s, wall);
                }
                Some(msg) => {
                    let err = got.expect_err("must fail");
                    assert_eq!(err.to_string(), msg);
                    assert_eq!(err.0, msg);
                }
            }
        }
        assert!(Bounds::new(i64::from(u32::MAX), 3, None, None, None).is_err());
        assert!(Bounds::new(i64::from(u32::MAX) - 1, 3, None, None, None).is_ok());
    }

    #[test]
    fn bounds_with_max_iterations_defaults() {
        let b = Bounds::with_max_iterations(7).unwrap();
        assert_eq!(
            b,
            Bounds {
                max_iterations: 7,
                no_progress_window: 3,
                max_tokens: None,
                max_wallclock_s: None,
                require_approval: None,
            }
        );
        assert_eq!(
            Bounds::with_max_iterations(0).unwrap_err().0,
            "max_iterations must be >= 1"
        );
    }

    #[test]
    fn outcome_ok_only_for_done() {
        for status in Status::ALL.iter().copied() {
            let o = Outcome {
                status,
                reason: String::new(),
                laps: 0,
                run_id: String::new(),
                write_errors: Vec::new(),
            };
            assert_eq!(o.ok(), status == Status::Done, "{status}");
        }
    }

    #[test]
    fn verdict_and_lap_result_defaults() {
        let v = Verdict::new(true, "ok");
        assert!(v.passed);
        assert_eq!(v.detail, "ok");
        assert!(v.evidence.is_empty());
        let r = LapResult::default();
        assert!(!r.changed && !r.agent_claimed_done);
        assert_eq!(r.tokens, 0);
        assert_eq!(r.log, "");
        assert_eq!(
            StepError::new("Timeout", "too slow").to_string(),
            "Timeout: too slow"
        );
    }

    #[test]
    fn truncate_chars_counts_scalar_values() {
        let cases: &[(&str, usize, &str)] = &[
            ("", 3, ""),
            ("abc", 3, "abc"),
            ("abcd", 3, "abc"),
            ("é€😀x", 3, "é€😀"),
            ("é€😀", 0, ""),
        ];
        for &(input, max, expected) in cases {
            assert_eq!(truncate_chars(input, max), expected, "{input:?}");
        }
    }

    #[test]
    fn round3_matches_python_round() {
        let cases: &[(f64, f64)] = &[
            (0.0, 0.0),
            (1.23449, 1.234),
            (1.2345678, 1.235),
            (1.0005, 1.0),   // 1.0005 is 1.000499999... in binary
            (2.0005, 2.001), // 2.0005 is 2.000500000...2 in binary
            (0.1235, 0.123), // 0.1235 is 0.123499999... in binary
            (0.0015, 0.002), // 0.0015 is 0.00150000000000000003 in binary
            (12.5, 12.5),
            (-0.0004, -0.0),
        ];
        for &(input, expected) in cases {
            assert_eq!(round3(input), expected, "{input}");
        }
    }
}
