//! Pure domain of the bounded loop engine (SPEC sections 1 ENGINE and 2 LEDGER-01..03, 09).
//!
//! No I/O happens here except through the injected ports ([`Runner`], [`Gate`], [`Ledger`],
//! [`Clock`], [`KillSwitch`], [`Approver`]); the defaults [`SystemClock`] and [`EnvKillSwitch`]
//! read the system clock and the `SLM_LOOP_KILL` environment variable only.

pub mod engine;
pub mod memory_ledger;
pub mod model;
pub mod rules;
pub mod run_state;
pub mod stop_reasons;
pub mod watch;

#[cfg(test)]
mod tests;

pub use engine::{
    Approver, Clock, EnvKillSwitch, Gate, KILL_ENV_VAR, KillSwitch, Ledger, LoopSpec, NoApprover,
    Runner, SystemClock, format_iso_utc, new_run_id, run_bounded_loop,
};
pub use memory_ledger::{FailingLedger, InMemoryLedger};
pub use model::{
    Bounds, BoundsError, BudgetSnapshot, DEFAULT_NO_PROGRESS_WINDOW, DETAIL_KILLED, Decision,
    GATE_ERROR_PREFIX, LapResult, LedgerRow, NO_PROGRESS_PREFIX, Outcome, ParseEnumError,
    REASON_AWAITING_APPROVAL, REASON_GATE_PASSED, REASON_KILLED, REASON_MAX_ITERATIONS,
    REASON_NO_PROGRESS, REASON_TOKEN_BUDGET, REASON_WALLCLOCK, RUNNER_ERROR_PREFIX,
    RUNNER_LOG_MAX_CHARS, Rung, Status, StepError, Verdict,
};
pub use rules::{approval_required, budget_trip, no_progress};
