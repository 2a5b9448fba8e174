//! How a run stands when it is read back (history, show): ended, running
//! here, or, without a terminal row, unfinished or interrupted after
//! [`RUN_SILENT_AFTER_S`] of silence. Judged at read time from the newest
//! row; nothing is written.

use super::model::Decision;

/// A run whose newest row is terminal.
pub const RUN_STATE_ENDED: &str = "ended";
/// A run this engine is running now.
pub const RUN_STATE_RUNNING: &str = "running";
/// No terminal row, not running in this engine, and silent for longer than
/// any live run can be: its engine stopped mid-run (killed, crashed).
pub const RUN_STATE_INTERRUPTED: &str = "interrupted";
/// No terminal row and not running in this engine, but written recently:
/// either its engine stopped mid-run or another engine sharing the ledger
/// is still running it. This engine cannot tell which.
pub const RUN_STATE_UNFINISHED: &str = "unfinished";
/// A live run writes a row at least every poll interval (at most
/// `watch::WALLCLOCK_CAP_S`) plus one gate call; a run silent for longer has
/// no live engine.
pub const RUN_SILENT_AFTER_S: f64 = 180.0;

/// Whether a lap decision ends its run (done, halt, pause, killed, error).
pub fn is_terminal(decision: &str) -> bool {
    decision
        .parse::<Decision>()
        .is_ok_and(|d| d != Decision::Continue)
}

/// How a run stands, judged at read time from its newest row (nothing is
/// written on startup: several engines may share one ledger).
pub fn run_state(
    last_decision: &str,
    running_here: bool,
    last_ts: &str,
    now: time::OffsetDateTime,
) -> (bool, &'static str) {
    if is_terminal(last_decision) {
        return (true, RUN_STATE_ENDED);
    }
    if running_here {
        return (false, RUN_STATE_RUNNING);
    }
    let silent = slm_runtime::time::parse_iso(last_ts)
        .is_none_or(|t| (now - t).as_seconds_f64() > RUN_SILENT_AFTER_S);
    if silent {
        (false, RUN_STATE_INTERRUPTED)
    } else {
        (false, RUN_STATE_UNFINISHED)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> time::OffsetDateTime {
        slm_runtime::time::parse_iso(s).unwrap()
    }

    #[test]
    fn a_run_without_a_terminal_row_is_never_reported_ended() {
        let now = at("2026-01-01T00:10:00+00:00");
        let recent = "2026-01-01T00:09:00+00:00";
        let old = "2026-01-01T00:00:00+00:00";
        for d in ["done", "halt", "pause", "killed", "error"] {
            assert_eq!(run_state(d, false, old, now), (true, RUN_STATE_ENDED));
            assert_eq!(run_state(d, true, recent, now), (true, RUN_STATE_ENDED));
        }
        assert_eq!(
            run_state("continue", true, old, now),
            (false, RUN_STATE_RUNNING)
        );
        assert_eq!(
            run_state("continue", false, recent, now),
            (false, RUN_STATE_UNFINISHED)
        );
        assert_eq!(
            run_state("continue", false, old, now),
            (false, RUN_STATE_INTERRUPTED)
        );
        // An unknown or missing decision is not an end either.
        assert_eq!(
            run_state("", false, "", now),
            (false, RUN_STATE_INTERRUPTED)
        );
        assert_eq!(
            run_state("DONE", false, recent, now),
            (false, RUN_STATE_UNFINISHED)
        );
    }
}
