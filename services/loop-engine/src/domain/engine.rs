//! The lap loop (ENGINE-04..18) and its injected ports.
//!
//! The engine performs I/O only through the injected runner, gate, ledger, clock and kill switch
//! (ENGINE-19). The defaults provided here ([`SystemClock`], [`EnvKillSwitch`], [`NoApprover`])
//! read only the system clock and one environment variable.

#![allow(async_fn_in_trait)]

use std::future::Future;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use super::model::{
    Bounds, BudgetSnapshot, DETAIL_KILLED, Decision, GATE_ERROR_PREFIX, LapResult, LedgerRow,
    NO_PROGRESS_PREFIX, Outcome, REASON_AWAITING_APPROVAL, REASON_GATE_PASSED, REASON_KILLED,
    REASON_NO_PROGRESS, RUNNER_ERROR_PREFIX, RUNNER_LOG_MAX_CHARS, Rung, Status, StepError,
    Verdict, round3, truncate_chars,
};
use super::rules::{approval_required, budget_trip, no_progress};

/// Environment variable read by [`EnvKillSwitch`] (ENGINE-08).
pub const KILL_ENV_VAR: &str = "SLM_LOOP_KILL";

/// Does the work of one lap.
pub trait Runner {
    /// Runs lap `lap` (1-based). An `Err` ends the run in ERROR (ENGINE-11).
    async fn run(&mut self, lap: u32) -> Result<LapResult, StepError>;
}

/// External check asked after each lap.
pub trait Gate {
    /// Checks lap `lap`. An `Err` ends the run in ERROR (ENGINE-11).
    async fn check(&mut self, lap: u32) -> Result<Verdict, StepError>;
}

/// Grants or withholds approval for a passing verdict (ENGINE-12).
pub trait Approver {
    /// True grants approval.
    fn approve(&mut self, verdict: &Verdict) -> bool;
}

/// Destination of ledger rows. Errors are counted, never fatal (ENGINE-18).
pub trait Ledger {
    /// Appends one row; the error text ends up in `Outcome.write_errors`.
    async fn append(&mut self, row: &LedgerRow) -> Result<(), String>;
}

/// Emergency stop, checked at the start of every lap (ENGINE-08).
pub trait KillSwitch {
    /// True stops the run before the lap does anything.
    fn tripped(&self) -> bool;
}

/// Time source.
pub trait Clock {
    /// Timestamp written into ledger rows.
    fn now_iso(&self) -> String;
    /// Monotonic seconds; only differences are meaningful.
    fn monotonic_s(&self) -> f64;
}

impl<F, Fut> Runner for F
where
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Result<LapResult, StepError>>,
{
    async fn run(&mut self, lap: u32) -> Result<LapResult, StepError> {
        self(lap).await
    }
}

impl<F, Fut> Gate for F
where
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Result<Verdict, StepError>>,
{
    async fn check(&mut self, lap: u32) -> Result<Verdict, StepError> {
        self(lap).await
    }
}

impl<F: FnMut(&Verdict) -> bool> Approver for F {
    fn approve(&mut self, verdict: &Verdict) -> bool {
        self(verdict)
    }
}

impl<F: Fn() -> bool> KillSwitch for F {
    fn tripped(&self) -> bool {
        self()
    }
}

impl<L: Ledger + ?Sized> Ledger for &mut L {
    async fn append(&mut self, row: &LedgerRow) -> Result<(), String> {
        (**self).append(row).await
    }
}

/// Approver that never grants ("no approver").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NoApprover;

impl Approver for NoApprover {
    fn approve(&mut self, _verdict: &Verdict) -> bool {
        false
    }
}

/// Default kill switch: tripped when `SLM_LOOP_KILL` is set to any non-empty value, including
/// `"0"` and `"false"` (ENGINE-08). Read at every check.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EnvKillSwitch;

impl KillSwitch for EnvKillSwitch {
    fn tripped(&self) -> bool {
        std::env::var_os(KILL_ENV_VAR).is_some_and(|v| !v.is_empty())
    }
}

/// Default clock: UTC ISO-8601 wall time and an [`Instant`]-based monotonic clock whose origin
/// is the construction of the value.
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    /// A clock whose monotonic origin is now.
    pub fn new() -> Self {
        SystemClock {
            origin: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now_iso(&self) -> String {
        let micros: i128 = match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(d) => i128::try_from(d.as_micros()).unwrap_or(i128::MAX),
            Err(e) => -i128::try_from(e.duration().as_micros()).unwrap_or(i128::MAX),
        };
        let secs = i64::try_from(micros.div_euclid(1_000_000)).unwrap_or(i64::MAX);
        let frac = u32::try_from(micros.rem_euclid(1_000_000)).unwrap_or(0);
        format_iso_utc(secs, frac)
    }

    fn monotonic_s(&self) -> f64 {
        self.origin.elapsed().as_secs_f64()
    }
}

/// Formats a Unix time as `YYYY-MM-DDTHH:MM:SS[.ffffff]+00:00`; the fraction (always six
/// digits) is dropped when `micros` is 0, like Python's `datetime.isoformat()`.
pub fn format_iso_utc(unix_secs: i64, micros: u32) -> String {
    let days = unix_secs.div_euclid(86_400);
    let secs_of_day = unix_secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let (h, m, s) = (
        secs_of_day / 3600,
        (secs_of_day % 3600) / 60,
        secs_of_day % 60,
    );
    if micros == 0 {
        format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}+00:00")
    } else {
        format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{micros:06}+00:00")
    }
}

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day) (H. Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11]
    let day = doy - (153 * mp + 2) / 5 + 1; // [1, 31]
    let month = if mp < 10 { mp + 3 } else { mp - 9 }; // [1, 12]
    let year = yoe + era * 400 + i64::from(month <= 2);
    // Both values are in small ranges by construction.
    (year, month as u32, day as u32)
}

/// `<name>-<first 8 lowercase hex characters of a random UUIDv4>` (ENGINE-05).
pub fn new_run_id(name: &str) -> String {
    let hex = uuid::Uuid::new_v4().simple().to_string();
    format!("{name}-{}", &hex[..8])
}

/// What to run: the loop's name, bounds, rung and optional run id (ENGINE-04).
#[derive(Debug, Clone)]
pub struct LoopSpec<'a> {
    /// Loop name, written into every row.
    pub name: &'a str,
    /// Hard limits.
    pub bounds: &'a Bounds,
    /// Autonomy rung (drives the default approval posture).
    pub rung: Rung,
    /// Run id; generated with [`new_run_id`] when `None`.
    pub run_id: Option<String>,
}

/// Writes rows, counting failures instead of propagating them (ENGINE-16, ENGINE-18).
struct RowWriter<'a, L, C> {
    run_id: &'a str,
    name: &'a str,
    ledger: &'a mut L,
    clock: &'a C,
    start_s: f64,
    write_errors: Vec<String>,
}

impl<L: Ledger, C: Clock> RowWriter<'_, L, C> {
    #[allow(clippy::too_many_arguments)]
    async fn write(
        &mut self,
        lap: u32,
        decision: Decision,
        passed: bool,
        detail: &str,
        runner: Option<&LapResult>,
        tokens: i64,
    ) {
        let row = LedgerRow {
            run_id: self.run_id.to_owned(),
            name: self.name.to_owned(),
            lap,
            ts: self.clock.now_iso(),
            decision,
            passed,
            detail: detail.to_owned(),
            agent_claimed_done: runner.is_some_and(|r| r.agent_claimed_done),
            runner_log: runner
                .map(|r| truncate_chars(&r.log, RUNNER_LOG_MAX_CHARS))
                .unwrap_or_default(),
            budget: BudgetSnapshot {
                tokens,
                wallclock_s: round3(self.clock.monotonic_s() - self.start_s),
            },
        };
        if let Err(e) = self.ledger.append(&row).await {
            self.write_errors.push(format!("lap {lap}: {e}"));
        }
    }

    fn finish(self, status: Status, reason: impl Into<String>, laps: u32) -> Outcome {
        Outcome {
            status,
            reason: reason.into(),
            laps,
            run_id: self.run_id.to_owned(),
            write_errors: self.write_errors,
        }
    }
}

/// Runs a bounded loop to a terminal outcome (ENGINE-04..18).
///
/// Per lap, in order: kill switch, pre-lap budget, runner, spend, post-lap budget, gate,
/// decide. Exactly one ledger row is written per lap attempt; ledger failures are collected in
/// [`Outcome::write_errors`] and never change the run. `agent_claimed_done` is recorded but
/// never consulted.
pub async fn run_bounded_loop<R, G, L, A, K, C>(
    spec: LoopSpec<'_>,
    runner: &mut R,
    gate: &mut G,
    ledger: &mut L,
    mut approver: Option<&mut A>,
    kill: &K,
    clock: &C,
) -> Outcome
where
    R: Runner,
    G: Gate,
    L: Ledger,
    A: Approver,
    K: KillSwitch,
    C: Clock,
{
    let LoopSpec {
        name,
        bounds,
        rung,
        run_id,
    } = spec;
    let run_id = run_id.unwrap_or_else(|| new_run_id(name));
    let start_s = clock.monotonic_s();
    let mut rows = RowWriter {
        run_id: &run_id,
        name,
        ledger,
        clock,
        start_s,
        write_errors: Vec::new(),
    };
    let mut tokens: i64 = 0;
    let mut changed_history: Vec<bool> = Vec::new();
    let mut lap: u32 = 0;

    loop {
        // Bounds::new keeps max_iterations < u32::MAX, so the cap trips before this saturates.
        lap = lap.saturating_add(1);

        // 1. Kill switch (ENGINE-08).
        if kill.tripped() {
            rows.write(lap, Decision::Killed, false, DETAIL_KILLED, None, tokens)
                .await;
            return rows.finish(Status::Killed, REASON_KILLED, lap - 1);
        }

        // 2. Pre-lap budget (ENGINE-09).
        if let Some(reason) = budget_trip(bounds, lap, tokens, clock.monotonic_s() - start_s) {
            rows.write(lap, Decision::Halt, false, reason, None, tokens)
                .await;
            return rows.finish(Status::Halt, reason, lap - 1);
        }

        // 3. Runner (ENGINE-11).
        let result = match runner.run(lap).await {
            Ok(result) => result,
            Err(e) => {
                let detail = format!("{RUNNER_ERROR_PREFIX}{}: {}", e.kind, e.message);
                rows.write(lap, Decision::Error, false, &detail, None, tokens)
                    .await;
                return rows.finish(Status::Error, detail, lap);
            }
        };

        // 4. Spend.
        if result.tokens > 0 {
            tokens = tokens.saturating_add(result.tokens);
        }
        changed_history.push(result.changed);

        // 5. Post-lap budget, same lap number (ENGINE-10).
        if let Some(reason) = budget_trip(bounds, lap, tokens, clock.monotonic_s() - start_s) {
            rows.write(lap, Decision::Halt, false, reason, Some(&result), tokens)
                .await;
            return rows.finish(Status::Halt, reason, lap);
        }

        // 6. Gate (ENGINE-11).
        let verdict = match gate.check(lap).await {
            Ok(verdict) => verdict,
            Err(e) => {
                let detail = format!("{GATE_ERROR_PREFIX}{}: {}", e.kind, e.message);
                rows.write(lap, Decision::Error, false, &detail, Some(&result), tokens)
                    .await;
                return rows.finish(Status::Error, detail, lap);
            }
        };

        // 7. Decide (ENGINE-12..14).
        if verdict.passed {
            if approval_required(bounds.require_approval, rung) {
                let granted = approver.as_mut().is_some_and(|a| a.approve(&verdict));
                if !granted {
                    rows.write(
                        lap,
                        Decision::Pause,
                        true,
                        &verdict.detail,
                        Some(&result),
                        tokens,
                    )
                    .await;
                    return rows.finish(Status::Pause, REASON_AWAITING_APPROVAL, lap);
                }
            }
            rows.write(
                lap,
                Decision::Done,
                true,
                &verdict.detail,
                Some(&result),
                tokens,
            )
            .await;
            return rows.finish(Status::Done, REASON_GATE_PASSED, lap);
        }

        if no_progress(&changed_history, bounds.no_progress_window) {
            let detail = format!("{NO_PROGRESS_PREFIX}{}", verdict.detail);
            rows.write(lap, Decision::Halt, false, &detail, Some(&result), tokens)
                .await;
            return rows.finish(Status::Halt, REASON_NO_PROGRESS, lap);
        }

        rows.write(
            lap,
            Decision::Continue,
            false,
            &verdict.detail,
            Some(&result),
            tokens,
        )
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_formatting_table() {
        let cases: &[(i64, u32, &str)] = &[
            (0, 0, "1970-01-01T00:00:00+00:00"),
            (0, 1, "1970-01-01T00:00:00.000001+00:00"),
            (1_784_800_800, 0, "2026-07-23T10:00:00+00:00"),
            (1_784_800_800, 123_456, "2026-07-23T10:00:00.123456+00:00"),
            (1_784_800_800, 500_000, "2026-07-23T10:00:00.500000+00:00"),
            (951_782_400, 0, "2000-02-29T00:00:00+00:00"),
            (951_868_799, 999_999, "2000-02-29T23:59:59.999999+00:00"),
            (4_107_542_400, 0, "2100-03-01T00:00:00+00:00"),
            (-1, 0, "1969-12-31T23:59:59+00:00"),
            (253_402_300_799, 0, "9999-12-31T23:59:59+00:00"),
        ];
        for &(secs, micros, expected) in cases {
            assert_eq!(format_iso_utc(secs, micros), expected, "{secs}.{micros}");
        }
    }

    #[test]
    fn system_clock_shape_and_monotonic() {
        let clock = SystemClock::new();
        let ts = clock.now_iso();
        assert!(ts.ends_with("+00:00"), "{ts}");
        assert!(ts.len() == 25 || ts.len() == 32, "{ts}");
        assert_eq!(&ts[4..5], "-");
        assert_eq!(&ts[10..11], "T");
        let a = clock.monotonic_s();
        let b = clock.monotonic_s();
        assert!(a >= 0.0 && b >= a);
    }

    #[test]
    fn run_id_format() {
        for name in ["build", "my loop", "ünï"] {
            let id = new_run_id(name);
            let suffix = id
                .strip_prefix(name)
                .and_then(|rest| rest.strip_prefix('-'))
                .unwrap_or_else(|| panic!("{id}"));
            assert_eq!(suffix.len(), 8, "{id}");
            assert!(
                suffix
                    .chars()
                    .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)),
                "{id}"
            );
        }
        assert_ne!(new_run_id("x"), new_run_id("x"));
    }

    #[test]
    fn no_approver_never_grants() {
        assert!(!NoApprover.approve(&Verdict::new(true, "ok")));
    }
}
