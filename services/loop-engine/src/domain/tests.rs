//! Engine tests: the ENGINE-20 worked cases and the edge rules of ENGINE-06..18.

use std::cell::Cell;
use std::future::{Future, Ready, ready};
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use super::*;

/// Minimal executor for tests (the fakes never return `Pending` for long).
pub(crate) fn block_on<F: Future>(fut: F) -> F::Output {
    let mut fut = pin!(fut);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::yield_now();
    }
}

/// Deterministic clock: `ts` is `t1`, `t2`, ... per call; monotonic time is set by hand.
#[derive(Default)]
struct FakeClock {
    mono: Cell<f64>,
    stamps: Cell<u32>,
}

impl FakeClock {
    fn at(mono: f64) -> Self {
        FakeClock {
            mono: Cell::new(mono),
            stamps: Cell::new(0),
        }
    }

    fn advance(&self, seconds: f64) {
        self.mono.set(self.mono.get() + seconds);
    }
}

impl Clock for FakeClock {
    fn now_iso(&self) -> String {
        self.stamps.set(self.stamps.get() + 1);
        format!("t{}", self.stamps.get())
    }

    fn monotonic_s(&self) -> f64 {
        self.mono.get()
    }
}

const NEVER: fn() -> bool = || false;
const ALWAYS: fn() -> bool = || true;

fn lap_result(changed: bool, claims: bool, tokens: i64, log: &str) -> LapResult {
    LapResult {
        changed,
        agent_claimed_done: claims,
        tokens,
        log: log.to_owned(),
    }
}

/// Runner closure returning the same shape every lap, with log `lap <n>`.
fn steady_runner(
    changed: bool,
    claims: bool,
    tokens: i64,
) -> impl FnMut(u32) -> Ready<Result<LapResult, StepError>> {
    move |lap| {
        ready(Ok(lap_result(
            changed,
            claims,
            tokens,
            &format!("lap {lap}"),
        )))
    }
}

/// Gate closure passing from lap `pass_from` on (never when `None`), counting calls.
fn gate_from<'a>(
    pass_from: Option<u32>,
    calls: &'a Cell<u32>,
) -> impl FnMut(u32) -> Ready<Result<Verdict, StepError>> + 'a {
    move |lap| {
        calls.set(calls.get() + 1);
        let passed = pass_from.is_some_and(|from| lap >= from);
        ready(Ok(Verdict::new(passed, format!("gate {lap}"))))
    }
}

fn spec<'a>(name: &'a str, bounds: &'a Bounds, rung: Rung) -> LoopSpec<'a> {
    LoopSpec {
        name,
        bounds,
        rung,
        run_id: Some(format!("{name}-00000000")),
    }
}

/// Runs a loop with an in-memory ledger and a fake clock at 0.
fn drive<R: Runner, G: Gate, A: Approver, K: KillSwitch>(
    bounds: &Bounds,
    rung: Rung,
    runner: &mut R,
    gate: &mut G,
    approver: Option<&mut A>,
    kill: &K,
) -> (Outcome, Vec<LedgerRow>) {
    let mut ledger = InMemoryLedger::new();
    let clock = FakeClock::default();
    let outcome = block_on(run_bounded_loop(
        spec("t", bounds, rung),
        runner,
        gate,
        &mut ledger,
        approver,
        kill,
        &clock,
    ));
    (outcome, ledger.rows().to_vec())
}

fn decisions(rows: &[LedgerRow]) -> Vec<&'static str> {
    rows.iter().map(|r| r.decision.as_str()).collect()
}

fn lap_numbers(rows: &[LedgerRow]) -> Vec<u32> {
    rows.iter().map(|r| r.lap).collect()
}

fn bounds(
    max: i64,
    window: i64,
    max_tokens: Option<i64>,
    max_wallclock_s: Option<f64>,
    require_approval: Option<bool>,
) -> Bounds {
    Bounds::new(max, window, max_tokens, max_wallclock_s, require_approval).unwrap()
}

struct WorkedCase {
    label: &'static str,
    bounds: Bounds,
    rung: Rung,
    runner: (bool, bool, i64),
    pass_from: Option<u32>,
    approver: Option<bool>,
    kill: bool,
    status: Status,
    reason: &'static str,
    laps: u32,
    decisions: &'static [&'static str],
    row_laps: &'static [u32],
}

#[test]
fn worked_cases_from_the_spec() {
    let cases = [
        WorkedCase {
            label: "max 10; gate passes when lap >= 3",
            bounds: bounds(10, 3, None, None, None),
            rung: Rung::L1,
            runner: (true, false, 0),
            pass_from: Some(3),
            approver: None,
            kill: false,
            status: Status::Done,
            reason: "gate-passed",
            laps: 3,
            decisions: &["continue", "continue", "done"],
            row_laps: &[1, 2, 3],
        },
        WorkedCase {
            label: "max 2; gate always fails; runner claims done",
            bounds: bounds(2, 3, None, None, None),
            rung: Rung::L1,
            runner: (true, true, 0),
            pass_from: None,
            approver: None,
            kill: false,
            status: Status::Halt,
            reason: "max-iterations",
            laps: 2,
            decisions: &["continue", "continue", "halt"],
            row_laps: &[1, 2, 3],
        },
        WorkedCase {
            label: "max 10, window 2; changed=false; gate fails",
            bounds: bounds(10, 2, None, None, None),
            rung: Rung::L1,
            runner: (false, false, 0),
            pass_from: None,
            approver: None,
            kill: false,
            status: Status::Halt,
            reason: "no-progress",
            laps: 2,
            decisions: &["continue", "halt"],
            row_laps: &[1, 2],
        },
        WorkedCase {
            label: "kill switch true",
            bounds: bounds(10, 3, None, None, None),
            rung: Rung::L1,
            runner: (true, false, 0),
            pass_from: Some(1),
            approver: None,
            kill: true,
            status: Status::Killed,
            reason: "killed",
            laps: 0,
            decisions: &["killed"],
            row_laps: &[1],
        },
        WorkedCase {
            label: "rung L2, gate passes, no approver",
            bounds: bounds(10, 3, None, None, None),
            rung: Rung::L2,
            runner: (true, false, 0),
            pass_from: Some(1),
            approver: None,
            kill: false,
            status: Status::Pause,
            reason: "awaiting-approval",
            laps: 1,
            decisions: &["pause"],
            row_laps: &[1],
        },
        WorkedCase {
            label: "rung L2, approver returns true",
            bounds: bounds(10, 3, None, None, None),
            rung: Rung::L2,
            runner: (true, false, 0),
            pass_from: Some(1),
            approver: Some(true),
            kill: false,
            status: Status::Done,
            reason: "gate-passed",
            laps: 1,
            decisions: &["done"],
            row_laps: &[1],
        },
        WorkedCase {
            label: "max_tokens 20, 10 tokens per lap, gate fails",
            bounds: bounds(10, 3, Some(20), None, None),
            rung: Rung::L1,
            runner: (true, false, 10),
            pass_from: None,
            approver: None,
            kill: false,
            status: Status::Halt,
            reason: "token-budget",
            laps: 2,
            decisions: &["continue", "halt"],
            row_laps: &[1, 2],
        },
        WorkedCase {
            label: "max_tokens 25, 10 tokens per lap",
            bounds: bounds(10, 3, Some(25), None, None),
            rung: Rung::L1,
            runner: (true, false, 10),
            pass_from: None,
            approver: None,
            kill: false,
            status: Status::Halt,
            reason: "token-budget",
            laps: 3,
            decisions: &["continue", "continue", "halt"],
            row_laps: &[1, 2, 3],
        },
    ];

    for case in cases {
        let (changed, claims, tokens) = case.runner;
        let mut runner = steady_runner(changed, claims, tokens);
        let calls = Cell::new(0);
        let mut gate = gate_from(case.pass_from, &calls);
        let mut approver = case.approver.map(|answer| move |_: &Verdict| answer);
        let kill = if case.kill { ALWAYS } else { NEVER };
        let (outcome, rows) = drive(
            &case.bounds,
            case.rung,
            &mut runner,
            &mut gate,
            approver.as_mut(),
            &kill,
        );
        let label = case.label;
        assert_eq!(outcome.status, case.status, "{label}");
        assert_eq!(outcome.reason, case.reason, "{label}");
        assert_eq!(outcome.laps, case.laps, "{label}");
        assert_eq!(outcome.ok(), case.status == Status::Done, "{label}");
        assert_eq!(outcome.run_id, "t-00000000", "{label}");
        assert!(outcome.write_errors.is_empty(), "{label}");
        assert_eq!(decisions(&rows), case.decisions, "{label}");
        assert_eq!(lap_numbers(&rows), case.row_laps, "{label}");
        for (i, row) in rows.iter().enumerate() {
            assert_eq!(row.run_id, "t-00000000", "{label}");
            assert_eq!(row.name, "t", "{label}");
            assert_eq!(row.ts, format!("t{}", i + 1), "{label}");
        }
    }
}

#[test]
fn one_row_per_lap_attempt_table() {
    // ENGINE-15: pre-lap terminal rows are numbered k with laps k-1; others laps k.
    let cases: &[(&str, Bounds, bool, u32, usize)] = &[
        (
            "killed before lap 1",
            bounds(3, 3, None, None, None),
            true,
            0,
            1,
        ),
        (
            "pre-lap halt at 4",
            bounds(3, 0, None, None, None),
            false,
            3,
            4,
        ),
        (
            "post-lap halt at 1",
            bounds(3, 0, Some(5), None, None),
            false,
            1,
            1,
        ),
    ];
    for (label, b, killed, laps, row_count) in cases {
        let mut runner = steady_runner(true, false, 5);
        let calls = Cell::new(0);
        let mut gate = gate_from(None, &calls);
        let kill = if *killed { ALWAYS } else { NEVER };
        let (outcome, rows) = drive(
            b,
            Rung::L1,
            &mut runner,
            &mut gate,
            None::<&mut NoApprover>,
            &kill,
        );
        assert_eq!(outcome.laps, *laps, "{label}");
        assert_eq!(rows.len(), *row_count, "{label}");
        assert_eq!(rows.last().unwrap().lap as usize, *row_count, "{label}");
    }
}

#[test]
fn max_iterations_halt_row_is_max_plus_one_without_runner_fields() {
    let b = bounds(4, 0, None, None, None);
    let mut runner = steady_runner(true, true, 3);
    let calls = Cell::new(0);
    let mut gate = gate_from(None, &calls);
    let (outcome, rows) = drive(
        &b,
        Rung::L1,
        &mut runner,
        &mut gate,
        None::<&mut NoApprover>,
        &NEVER,
    );
    assert_eq!(
        (outcome.status, outcome.reason.as_str(), outcome.laps),
        (Status::Halt, "max-iterations", 4)
    );
    assert_eq!(calls.get(), 4);
    assert_eq!(rows.len(), 5);
    let halt = rows.last().unwrap();
    assert_eq!(halt.lap, 5);
    assert_eq!(halt.decision, Decision::Halt);
    assert!(!halt.passed);
    assert_eq!(halt.detail, "max-iterations");
    assert!(!halt.agent_claimed_done);
    assert_eq!(halt.runner_log, "");
    assert_eq!(halt.budget.tokens, 12);
    for row in &rows[..4] {
        assert!(row.agent_claimed_done, "claims are recorded");
        assert_eq!(row.runner_log, format!("lap {}", row.lap));
        assert_eq!(row.detail, format!("gate {}", row.lap));
    }
}

#[test]
fn env_kill_switch_trips_on_any_non_empty_value() {
    // Self-contained: the only test touching SLM_LOOP_KILL.
    let cases: &[(Option<&str>, bool)] = &[
        (None, false),
        (Some(""), false),
        (Some("0"), true),
        (Some("false"), true),
        (Some("1"), true),
        (Some(" "), true),
    ];
    for &(value, expected) in cases {
        match value {
            // SAFETY: no other test reads or writes this variable.
            Some(v) => unsafe { std::env::set_var(KILL_ENV_VAR, v) },
            None => unsafe { std::env::remove_var(KILL_ENV_VAR) },
        }
        assert_eq!(EnvKillSwitch.tripped(), expected, "{value:?}");
    }

    unsafe { std::env::set_var(KILL_ENV_VAR, "0") };
    let b = bounds(3, 3, None, None, None);
    let mut runner = steady_runner(true, false, 0);
    let calls = Cell::new(0);
    let mut gate = gate_from(Some(1), &calls);
    let (outcome, rows) = drive(
        &b,
        Rung::L1,
        &mut runner,
        &mut gate,
        None::<&mut NoApprover>,
        &EnvKillSwitch,
    );
    unsafe { std::env::remove_var(KILL_ENV_VAR) };
    assert_eq!(
        (outcome.status, outcome.reason.as_str(), outcome.laps),
        (Status::Killed, "killed", 0)
    );
    assert_eq!(calls.get(), 0);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].detail, "kill switch tripped");
    assert!(!rows[0].passed && !rows[0].agent_claimed_done);
    assert_eq!(rows[0].runner_log, "");
}

#[test]
fn kill_switch_mid_run_wins_over_budget() {
    // Trips at the start of lap 2, where the iteration cap (max 1) would also trip.
    let checks = Cell::new(0);
    let kill = || {
        checks.set(checks.get() + 1);
        checks.get() >= 2
    };
    let b = bounds(1, 3, None, None, None);
    let mut runner = steady_runner(true, false, 4);
    let calls = Cell::new(0);
    let mut gate = gate_from(None, &calls);
    let (outcome, rows) = drive(
        &b,
        Rung::L1,
        &mut runner,
        &mut gate,
        None::<&mut NoApprover>,
        &kill,
    );
    assert_eq!(
        (outcome.status, outcome.reason.as_str(), outcome.laps),
        (Status::Killed, "killed", 1)
    );
    assert_eq!(decisions(&rows), ["continue", "killed"]);
    assert_eq!(lap_numbers(&rows), [1, 2]);
    assert_eq!(rows[1].budget.tokens, 4);
}

#[test]
fn agent_claiming_done_never_ends_in_done() {
    let cases = [
        bounds(1, 0, None, None, None),
        bounds(5, 0, None, None, None),
        bounds(5, 2, None, None, None),
        bounds(5, 0, Some(30), None, None),
    ];
    for b in &cases {
        for changed in [true, false] {
            for rung in Rung::ALL.iter().copied() {
                let mut runner = steady_runner(changed, true, 10);
                let calls = Cell::new(0);
                let mut gate = gate_from(None, &calls);
                let mut approver = |_: &Verdict| true;
                let (outcome, rows) =
                    drive(b, rung, &mut runner, &mut gate, Some(&mut approver), &NEVER);
                assert_eq!(outcome.status, Status::Halt, "{b:?} {changed} {rung}");
                assert!(!outcome.ok());
                assert!(rows.iter().all(|r| r.decision != Decision::Done));
                assert!(rows.iter().all(|r| !r.passed));
            }
        }
    }
}

/// Runner that spends wall-clock time on the shared fake clock.
struct SlowRunner<'a> {
    clock: &'a FakeClock,
    seconds_per_lap: f64,
}

impl Runner for SlowRunner<'_> {
    async fn run(&mut self, lap: u32) -> Result<LapResult, StepError> {
        self.clock.advance(self.seconds_per_lap);
        Ok(lap_result(true, true, 1, &format!("slow {lap}")))
    }
}

/// Gate that counts calls and optionally spends wall-clock time.
struct CountingGate<'a> {
    clock: &'a FakeClock,
    seconds_per_check: f64,
    passes: bool,
    calls: u32,
}

impl Gate for CountingGate<'_> {
    async fn check(&mut self, lap: u32) -> Result<Verdict, StepError> {
        self.calls += 1;
        self.clock.advance(self.seconds_per_check);
        Ok(Verdict::new(self.passes, format!("checked {lap}")))
    }
}

#[test]
fn post_lap_wallclock_overshoot_halts_before_gate() {
    let clock = FakeClock::at(100.0);
    let b = bounds(10, 3, None, Some(1.5), None);
    let mut runner = SlowRunner {
        clock: &clock,
        seconds_per_lap: 2.0,
    };
    let mut gate = CountingGate {
        clock: &clock,
        seconds_per_check: 0.0,
        passes: true,
        calls: 0,
    };
    let mut ledger = InMemoryLedger::new();
    let outcome = block_on(run_bounded_loop(
        spec("w", &b, Rung::L1),
        &mut runner,
        &mut gate,
        &mut ledger,
        None::<&mut NoApprover>,
        &NEVER,
        &clock,
    ));
    assert_eq!(
        (outcome.status, outcome.reason.as_str(), outcome.laps),
        (Status::Halt, "wallclock", 1)
    );
    assert_eq!(gate.calls, 0, "the gate must not be asked");
    let rows = ledger.rows();
    assert_eq!(decisions(rows), ["halt"]);
    assert_eq!(rows[0].lap, 1);
    assert_eq!(rows[0].detail, "wallclock");
    assert!(!rows[0].passed);
    assert!(rows[0].agent_claimed_done);
    assert_eq!(rows[0].runner_log, "slow 1");
    assert_eq!(rows[0].budget.wallclock_s, 2.0);
    assert_eq!(rows[0].budget.tokens, 1);
}

#[test]
fn wallclock_is_strict_and_pre_lap_halt_has_no_runner_fields() {
    // Runner takes exactly the budget (not a trip); the gate then overshoots, so lap 2's
    // pre-lap check halts.
    let clock = FakeClock::at(0.0);
    let b = bounds(10, 3, None, Some(1.0), None);
    let mut runner = SlowRunner {
        clock: &clock,
        seconds_per_lap: 1.0,
    };
    let mut gate = CountingGate {
        clock: &clock,
        seconds_per_check: 0.5,
        passes: false,
        calls: 0,
    };
    let mut ledger = InMemoryLedger::new();
    let outcome = block_on(run_bounded_loop(
        spec("w", &b, Rung::L1),
        &mut runner,
        &mut gate,
        &mut ledger,
        None::<&mut NoApprover>,
        &NEVER,
        &clock,
    ));
    assert_eq!(
        (outcome.status, outcome.reason.as_str(), outcome.laps),
        (Status::Halt, "wallclock", 1)
    );
    assert_eq!(gate.calls, 1);
    let rows = ledger.rows();
    assert_eq!(decisions(rows), ["continue", "halt"]);
    assert_eq!(lap_numbers(rows), [1, 2]);
    assert_eq!(rows[0].budget.wallclock_s, 1.5);
    assert!(!rows[1].agent_claimed_done);
    assert_eq!(rows[1].runner_log, "");
    assert_eq!(rows[1].budget.wallclock_s, 1.5);
}

#[test]
fn token_budget_exact_boundary_halts_even_when_gate_would_pass() {
    let cases: &[(i64, i64, u32, &[&str])] = &[
        // (max_tokens, tokens per lap, laps, decisions)
        (10, 10, 1, &["halt"]),
        (20, 10, 2, &["continue", "halt"]),
        (21, 10, 3, &["continue", "continue", "halt"]),
    ];
    for &(max_tokens, per_lap, laps, expected) in cases {
        let b = bounds(10, 3, Some(max_tokens), None, None);
        let mut runner = steady_runner(true, true, per_lap);
        let calls = Cell::new(0);
        // The gate would pass only at the halting lap.
        let mut gate = gate_from(Some(laps), &calls);
        let (outcome, rows) = drive(
            &b,
            Rung::L1,
            &mut runner,
            &mut gate,
            None::<&mut NoApprover>,
            &NEVER,
        );
        assert_eq!(
            (outcome.status, outcome.reason.as_str(), outcome.laps),
            (Status::Halt, "token-budget", laps),
            "{max_tokens}"
        );
        assert_eq!(calls.get(), laps - 1, "gate skipped at the halting lap");
        assert_eq!(decisions(&rows), expected);
        let halt = rows.last().unwrap();
        assert_eq!(halt.lap, laps);
        assert_eq!(halt.detail, "token-budget");
        assert!(!halt.passed);
        assert_eq!(halt.runner_log, format!("lap {laps}"));
        assert!(halt.agent_claimed_done);
        assert_eq!(halt.budget.tokens, per_lap * i64::from(laps));
    }
}

#[test]
fn negative_and_zero_tokens_are_ignored() {
    let b = bounds(3, 0, Some(1), None, None);
    let mut runner = steady_runner(true, false, -5);
    let calls = Cell::new(0);
    let mut gate = gate_from(None, &calls);
    let (outcome, rows) = drive(
        &b,
        Rung::L1,
        &mut runner,
        &mut gate,
        None::<&mut NoApprover>,
        &NEVER,
    );
    assert_eq!(outcome.reason, "max-iterations");
    assert!(rows.iter().all(|r| r.budget.tokens == 0));
}

#[test]
fn runner_error_is_terminal_without_runner_fields() {
    let mut runner = |lap: u32| {
        ready(if lap == 2 {
            Err(StepError::new("RuntimeError", "boom"))
        } else {
            Ok(lap_result(true, true, 3, "first"))
        })
    };
    let calls = Cell::new(0);
    let mut gate = gate_from(None, &calls);
    let b = bounds(10, 3, None, None, None);
    let (outcome, rows) = drive(
        &b,
        Rung::L1,
        &mut runner,
        &mut gate,
        None::<&mut NoApprover>,
        &NEVER,
    );
    assert_eq!(outcome.status, Status::Error);
    assert_eq!(outcome.reason, "runner error: RuntimeError: boom");
    assert!(outcome.reason.starts_with(RUNNER_ERROR_PREFIX));
    assert_eq!(outcome.laps, 2);
    assert_eq!(calls.get(), 1);
    assert_eq!(decisions(&rows), ["continue", "error"]);
    let err = &rows[1];
    assert_eq!(err.lap, 2);
    assert_eq!(err.detail, "runner error: RuntimeError: boom");
    assert!(!err.passed && !err.agent_claimed_done);
    assert_eq!(err.runner_log, "");
    assert_eq!(err.budget.tokens, 3);
}

#[test]
fn gate_error_is_terminal_with_runner_fields() {
    let mut runner = steady_runner(true, true, 2);
    let mut gate = |_lap: u32| ready(Err::<Verdict, _>(StepError::new("Timeout", "slow gate")));
    let b = bounds(10, 3, None, None, None);
    let (outcome, rows) = drive(
        &b,
        Rung::L1,
        &mut runner,
        &mut gate,
        None::<&mut NoApprover>,
        &NEVER,
    );
    assert_eq!(outcome.status, Status::Error);
    assert_eq!(outcome.reason, "gate error: Timeout: slow gate");
    assert!(outcome.reason.starts_with(GATE_ERROR_PREFIX));
    assert_eq!(outcome.laps, 1);
    assert_eq!(rows.len(), 1);
    let err = &rows[0];
    assert_eq!(err.decision, Decision::Error);
    assert_eq!(err.detail, "gate error: Timeout: slow gate");
    assert!(!err.passed);
    assert!(err.agent_claimed_done);
    assert_eq!(err.runner_log, "lap 1");
    assert_eq!(err.budget.tokens, 2);
}

#[test]
fn approval_postures() {
    // (require_approval, rung, approver answer, status, reason, decision)
    type Case = (
        Option<bool>,
        Rung,
        Option<bool>,
        Status,
        &'static str,
        &'static str,
    );
    let cases: &[Case] = &[
        (
            Some(true),
            Rung::L1,
            None,
            Status::Pause,
            "awaiting-approval",
            "pause",
        ),
        (
            Some(true),
            Rung::L1,
            Some(false),
            Status::Pause,
            "awaiting-approval",
            "pause",
        ),
        (
            Some(true),
            Rung::L1,
            Some(true),
            Status::Done,
            "gate-passed",
            "done",
        ),
        (
            Some(false),
            Rung::L3,
            None,
            Status::Done,
            "gate-passed",
            "done",
        ),
        (
            Some(false),
            Rung::L2,
            Some(false),
            Status::Done,
            "gate-passed",
            "done",
        ),
        (None, Rung::L1, None, Status::Done, "gate-passed", "done"),
        (
            None,
            Rung::L1,
            Some(false),
            Status::Done,
            "gate-passed",
            "done",
        ),
        (
            None,
            Rung::L2,
            None,
            Status::Pause,
            "awaiting-approval",
            "pause",
        ),
        (
            None,
            Rung::L3,
            None,
            Status::Pause,
            "awaiting-approval",
            "pause",
        ),
        (
            None,
            Rung::L3,
            Some(false),
            Status::Pause,
            "awaiting-approval",
            "pause",
        ),
        (
            None,
            Rung::L3,
            Some(true),
            Status::Done,
            "gate-passed",
            "done",
        ),
    ];
    for &(require, rung, answer, status, reason, decision) in cases {
        let b = bounds(5, 3, None, None, require);
        let mut runner = steady_runner(true, false, 1);
        let calls = Cell::new(0);
        let mut gate = gate_from(Some(1), &calls);
        let seen = Cell::new(0);
        let mut approver = answer.map(|a| {
            let seen = &seen;
            move |v: &Verdict| {
                assert!(v.passed);
                assert_eq!(v.detail, "gate 1");
                seen.set(seen.get() + 1);
                a
            }
        });
        let (outcome, rows) = drive(&b, rung, &mut runner, &mut gate, approver.as_mut(), &NEVER);
        let label = format!("{require:?} {rung} {answer:?}");
        assert_eq!(outcome.status, status, "{label}");
        assert_eq!(outcome.reason, reason, "{label}");
        assert_eq!(outcome.laps, 1, "{label}");
        assert_eq!(decisions(&rows), [decision], "{label}");
        let row = &rows[0];
        assert!(row.passed, "{label}: pause and done rows carry the verdict");
        assert_eq!(row.detail, "gate 1", "{label}");
        assert_eq!(row.runner_log, "lap 1", "{label}");
        let required = approval_required(require, rung);
        let expected_calls = u32::from(required && answer.is_some());
        assert_eq!(seen.get(), expected_calls, "{label}");
    }
}

#[test]
fn no_approver_type_pauses_at_l2() {
    let b = bounds(5, 3, None, None, None);
    let mut runner = steady_runner(true, false, 0);
    let calls = Cell::new(0);
    let mut gate = gate_from(Some(1), &calls);
    let mut approver = NoApprover;
    let (outcome, _) = drive(
        &b,
        Rung::L2,
        &mut runner,
        &mut gate,
        Some(&mut approver),
        &NEVER,
    );
    assert_eq!(outcome.status, Status::Pause);
}

#[test]
fn no_progress_row_detail_and_window_zero() {
    let cases: &[(i64, Status, &str, u32)] = &[
        (0, Status::Halt, "max-iterations", 4),
        (1, Status::Halt, "no-progress", 1),
        (3, Status::Halt, "no-progress", 3),
        (5, Status::Halt, "max-iterations", 4),
    ];
    for &(window, status, reason, laps) in cases {
        let b = bounds(4, window, None, None, None);
        let mut runner = steady_runner(false, false, 0);
        let calls = Cell::new(0);
        let mut gate = gate_from(None, &calls);
        let (outcome, rows) = drive(
            &b,
            Rung::L1,
            &mut runner,
            &mut gate,
            None::<&mut NoApprover>,
            &NEVER,
        );
        assert_eq!(
            (outcome.status, outcome.reason.as_str(), outcome.laps),
            (status, reason, laps),
            "window {window}"
        );
        if reason == "no-progress" {
            let last = rows.last().unwrap();
            assert_eq!(last.detail, format!("no-progress; gate {laps}"));
            assert!(!last.passed);
            assert_eq!(last.runner_log, format!("lap {laps}"));
        }
    }
}

#[test]
fn failing_ledger_fails_open() {
    let b = bounds(10, 3, None, None, None);
    let mut runner = steady_runner(true, false, 8);
    let calls = Cell::new(0);
    let mut gate = gate_from(Some(3), &calls);
    let mut ledger = FailingLedger::default();
    let clock = FakeClock::default();
    let outcome = block_on(run_bounded_loop(
        LoopSpec {
            name: "demo",
            bounds: &b,
            rung: Rung::L1,
            run_id: None,
        },
        &mut runner,
        &mut gate,
        &mut ledger,
        None::<&mut NoApprover>,
        &NEVER,
        &clock,
    ));
    assert_eq!(outcome.status, Status::Done);
    assert!(outcome.ok());
    assert_eq!(outcome.reason, "gate-passed");
    assert_eq!(outcome.laps, 3);
    assert_eq!(
        outcome.write_errors,
        [
            "lap 1: ledger unavailable",
            "lap 2: ledger unavailable",
            "lap 3: ledger unavailable",
        ]
    );
    assert_eq!(ledger.attempts, 3);
    assert!(outcome.run_id.starts_with("demo-"));
}

#[test]
fn run_id_supplied_or_generated() {
    let b = bounds(1, 3, None, None, None);
    for supplied in [Some("custom-run".to_owned()), None] {
        let mut runner = steady_runner(true, false, 0);
        let calls = Cell::new(0);
        let mut gate = gate_from(Some(1), &calls);
        let mut ledger = InMemoryLedger::new();
        let outcome = block_on(run_bounded_loop(
            LoopSpec {
                name: "build",
                bounds: &b,
                rung: Rung::L1,
                run_id: supplied.clone(),
            },
            &mut runner,
            &mut gate,
            &mut ledger,
            None::<&mut NoApprover>,
            &NEVER,
            &FakeClock::default(),
        ));
        match supplied {
            Some(id) => assert_eq!(outcome.run_id, id),
            None => {
                let suffix = outcome.run_id.strip_prefix("build-").expect("prefix");
                assert_eq!(suffix.len(), 8);
                assert!(
                    suffix
                        .bytes()
                        .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
                );
            }
        }
        assert_eq!(ledger.laps(&outcome.run_id).len(), 1);
        assert_eq!(ledger.runs("build"), vec![outcome.run_id.as_str()]);
    }
}

#[test]
fn runner_log_is_truncated_to_2000_characters() {
    let cases: &[(String, usize)] = &[
        ("é".repeat(2500), 2000),
        ("😀".repeat(2000), 2000),
        ("a€".repeat(999), 1998),
        (format!("{}ab", "ü".repeat(1999)), 2000),
    ];
    for (log, expected_chars) in cases {
        let b = bounds(1, 3, None, None, None);
        let log_for_runner = log.clone();
        let mut runner = move |_lap: u32| {
            ready(Ok::<_, StepError>(lap_result(
                true,
                false,
                0,
                &log_for_runner,
            )))
        };
        let calls = Cell::new(0);
        let mut gate = gate_from(Some(1), &calls);
        let (_, rows) = drive(
            &b,
            Rung::L1,
            &mut runner,
            &mut gate,
            None::<&mut NoApprover>,
            &NEVER,
        );
        let kept = &rows[0].runner_log;
        assert_eq!(kept.chars().count(), *expected_chars);
        assert!(log.starts_with(kept.as_str()));
    }
    let row_log = {
        let b = bounds(1, 3, None, None, None);
        let mut runner = |_lap: u32| {
            ready(Ok::<_, StepError>(lap_result(
                true,
                false,
                0,
                &"é".repeat(2001),
            )))
        };
        let calls = Cell::new(0);
        let mut gate = gate_from(Some(1), &calls);
        drive(
            &b,
            Rung::L1,
            &mut runner,
            &mut gate,
            None::<&mut NoApprover>,
            &NEVER,
        )
        .1[0]
            .runner_log
            .clone()
    };
    assert_eq!(row_log.len(), 4000, "2000 two-byte characters");
}

#[test]
fn budget_snapshot_rounds_wallclock_to_three_decimals() {
    let cases: &[(f64, f64, f64)] = &[
        // (start, seconds per lap, expected wallclock_s at lap 1)
        (100.0, 1.23456, 1.235),
        (0.0, 0.0004, 0.0),
        (5.5, 0.1, 0.1),
        (0.0, 2.0, 2.0),
    ];
    for &(start, per_lap, expected) in cases {
        let clock = FakeClock::at(start);
        let b = bounds(1, 3, None, None, None);
        let mut runner = SlowRunner {
            clock: &clock,
            seconds_per_lap: per_lap,
        };
        let mut gate = CountingGate {
            clock: &clock,
            seconds_per_check: 0.0,
            passes: true,
            calls: 0,
        };
        let mut ledger = InMemoryLedger::new();
        block_on(run_bounded_loop(
            spec("r", &b, Rung::L1),
            &mut runner,
            &mut gate,
            &mut ledger,
            None::<&mut NoApprover>,
            &NEVER,
            &clock,
        ));
        assert_eq!(
            ledger.rows()[0].budget.wallclock_s,
            expected,
            "{start}+{per_lap}"
        );
    }
}

#[test]
fn ledger_by_mutable_reference_is_a_ledger() {
    let b = bounds(1, 3, None, None, None);
    let mut runner = steady_runner(true, false, 0);
    let calls = Cell::new(0);
    let mut gate = gate_from(Some(1), &calls);
    let mut inner = InMemoryLedger::new();
    let mut by_ref = &mut inner;
    let outcome = block_on(run_bounded_loop(
        spec("ref", &b, Rung::L1),
        &mut runner,
        &mut gate,
        &mut by_ref,
        None::<&mut NoApprover>,
        &NEVER,
        &SystemClock::new(),
    ));
    assert!(outcome.ok());
    assert_eq!(inner.rows().len(), 1);
    assert!(inner.rows()[0].ts.ends_with("+00:00"));
}
