//! Pure decision rules: approval (ENGINE-12), no-progress (ENGINE-13) and the budget check
//! (ENGINE-09, ENGINE-10).
//!
//! None of these reads `agent_claimed_done` (ENGINE-06).

use super::model::{Bounds, REASON_MAX_ITERATIONS, REASON_TOKEN_BUDGET, REASON_WALLCLOCK, Rung};

/// Whether a passing verdict needs approval (ENGINE-12): `Some(b)` forces `b`; `None` requires
/// it for `L2` and `L3` only.
pub fn approval_required(require_approval: Option<bool>, rung: Rung) -> bool {
    match require_approval {
        Some(forced) => forced,
        None => matches!(rung, Rung::L2 | Rung::L3),
    }
}

/// No-progress rule (ENGINE-13): a window of 0 disables it; otherwise it trips when at least
/// `window` change flags have been recorded and the last `window` are all false.
pub fn no_progress(changed_history: &[bool], window: u32) -> bool {
    let Ok(window) = usize::try_from(window) else {
        return false;
    };
    if window == 0 || changed_history.len() < window {
        return false;
    }
    changed_history[changed_history.len() - window..]
        .iter()
        .all(|changed| !changed)
}

/// Budget check (ENGINE-09 order): iterations (`lap > max_iterations`), then tokens
/// (`cumulative >= max_tokens`), then wall clock (`elapsed > max_wallclock_s`, strictly).
/// Returns the reason of the first condition that holds.
///
/// The post-lap check (ENGINE-10) calls this with the same lap number, so the iteration cap
/// cannot trip there.
pub fn budget_trip(
    bounds: &Bounds,
    lap: u32,
    cumulative_tokens: i64,
    elapsed_s: f64,
) -> Option<&'static str> {
    if lap > bounds.max_iterations {
        return Some(REASON_MAX_ITERATIONS);
    }
    if let Some(max_tokens) = bounds.max_tokens
        && cumulative_tokens >= max_tokens
    {
        return Some(REASON_TOKEN_BUDGET);
    }
    if let Some(max_wallclock_s) = bounds.max_wallclock_s
        && elapsed_s > max_wallclock_s
    {
        return Some(REASON_WALLCLOCK);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn approval_table() {
        let cases = [
            (None, Rung::L1, false),
            (None, Rung::L2, true),
            (None, Rung::L3, true),
            (Some(true), Rung::L1, true),
            (Some(true), Rung::L2, true),
            (Some(true), Rung::L3, true),
            (Some(false), Rung::L1, false),
            (Some(false), Rung::L2, false),
            (Some(false), Rung::L3, false),
        ];
        for (forced, rung, expected) in cases {
            assert_eq!(
                approval_required(forced, rung),
                expected,
                "{forced:?} {rung}"
            );
        }
    }

    #[test]
    fn no_progress_table() {
        let cases: &[(&[bool], u32, bool)] = &[
            (&[], 0, false),
            (&[false, false, false], 0, false),
            (&[], 1, false),
            (&[false], 1, true),
            (&[true], 1, false),
            (&[false], 2, false),
            (&[false, false], 2, true),
            (&[true, false], 2, false),
            (&[true, false, false], 2, true),
            (&[false, false, true], 2, false),
            (&[false, false], 3, false),
            (&[false, false, false], 3, true),
            (&[false, true, false, false], 3, false),
        ];
        for &(history, window, expected) in cases {
            assert_eq!(
                no_progress(history, window),
                expected,
                "{history:?} w={window}"
            );
        }
    }

    #[test]
    fn budget_table() {
        let b = |max: i64, tokens: Option<i64>, wall: Option<f64>| {
            Bounds::new(max, 3, tokens, wall, None).unwrap()
        };
        type Case = (Bounds, u32, i64, f64, Option<&'static str>);
        let cases: Vec<Case> = vec![
            (b(2, None, None), 1, 0, 0.0, None),
            (b(2, None, None), 2, 0, 1e9, None),
            (b(2, None, None), 3, 0, 0.0, Some("max-iterations")),
            (
                b(2, Some(10), Some(1.0)),
                3,
                99,
                99.0,
                Some("max-iterations"),
            ),
            (b(5, Some(20), None), 2, 19, 0.0, None),
            (b(5, Some(20), None), 2, 20, 0.0, Some("token-budget")),
            (b(5, Some(20), None), 2, 21, 0.0, Some("token-budget")),
            (b(5, Some(0), None), 1, 0, 0.0, Some("token-budget")),
            (b(5, Some(20), Some(1.0)), 2, 20, 5.0, Some("token-budget")),
            (b(5, None, Some(1.0)), 2, 0, 1.0, None),
            (b(5, None, Some(1.0)), 2, 0, 1.0001, Some("wallclock")),
            (b(5, None, Some(0.0)), 1, 0, 0.0, None),
            (b(5, None, Some(0.0)), 1, 0, 0.001, Some("wallclock")),
        ];
        for (bounds, lap, tokens, elapsed, expected) in cases {
            assert_eq!(
                budget_trip(&bounds, lap, tokens, elapsed),
                expected,
                "{bounds:?} lap={lap} tokens={tokens} elapsed={elapsed}"
            );
        }
    }
}
