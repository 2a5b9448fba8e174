//! The MCP watcher `slm_loop_run` (spec WATCH-01..16): its limits, the lap's
//! pass rule and the exact detail line. Recall only locates context; a lap
//! passes only with an independent, valid execution receipt as well.

/// Each lap recalls at most this many memories.
pub const GATE_LIMIT: u32 = 3;
pub const MAX_NAME_CHARS: usize = 128;
pub const MAX_QUERY_CHARS: usize = 2000;
pub const MAX_ITERATIONS: i64 = 200;
pub const WALLCLOCK_CAP_S: f64 = 120.0;
/// A call can never block longer than this, even with the wall-clock bound
/// removed (`max_wallclock_s = 0`), whatever the iterations and poll (GAP-17).
pub const ABSOLUTE_CEILING_S: f64 = 600.0;
pub const MIN_POLL_S: f64 = 0.25;
/// The fixed note of every watcher result.
pub const NOTE: &str =
    "Independent execution receipts decide completion; memory claims cannot pass.";

/// Trimmed; 1–128 characters.
pub fn validate_name(raw: &str) -> Result<String, String> {
    let s = raw.trim();
    let n = s.chars().count();
    if n == 0 || n > MAX_NAME_CHARS {
        return Err("name must be 1–128 chars".into());
    }
    Ok(s.to_string())
}

/// Trimmed; 1–2000 characters.
pub fn validate_query(raw: &str) -> Result<String, String> {
    let s = raw.trim();
    let n = s.chars().count();
    if n == 0 || n > MAX_QUERY_CHARS {
        return Err("gate_query must be 1–2000 chars".into());
    }
    Ok(s.to_string())
}

/// The bounds of one watcher run, clamped as WATCH-01 says.
#[derive(Debug, Clone, PartialEq)]
pub struct WatchLimits {
    pub max_iterations: i64,
    /// Always set: the requested bound capped at 120 s, or the absolute
    /// ceiling when the request removed the bound.
    pub max_wallclock_s: f64,
    pub poll_interval_s: f64,
    pub max_tokens: Option<i64>,
    pub no_progress_window: i64,
}

pub fn limits(
    max_iterations: i64,
    max_wallclock_s: f64,
    poll_interval_s: f64,
    max_tokens: i64,
    no_progress_window: i64,
) -> WatchLimits {
    let wall = if max_wallclock_s.is_finite() && max_wallclock_s > 0.0 {
        max_wallclock_s.min(WALLCLOCK_CAP_S)
    } else {
        0.0
    };
    let poll_cap = if wall > 0.0 { wall } else { WALLCLOCK_CAP_S };
    let poll = if poll_interval_s.is_finite() {
        poll_interval_s
    } else {
        MIN_POLL_S
    };
    WatchLimits {
        max_iterations: max_iterations.clamp(1, MAX_ITERATIONS),
        max_wallclock_s: if wall > 0.0 { wall } else { ABSOLUTE_CEILING_S },
        poll_interval_s: poll.min(poll_cap).max(MIN_POLL_S),
        max_tokens: (max_tokens > 0).then_some(max_tokens),
        no_progress_window: no_progress_window.max(0),
    }
}

/// What one lap's recall found, reduced to what the gate needs.
#[derive(Debug, Clone, PartialEq)]
pub struct RecallView {
    /// Locator results left after dropping ledger rows.
    pub hits: usize,
    pub top: f64,
    /// The evidence floor blocked (no confident match).
    pub floor: bool,
    pub judged_insufficient: bool,
    pub answerability: &'static str,
    pub answerability_reason: &'static str,
}

/// The offline answer check: deterministic, no provider. A locator that
/// carries every significant term of the query supports it; fewer does not.
/// It never abstains as "judged insufficient" (only an online judge could).
pub fn answer_check(hits: usize, top: f64) -> (&'static str, &'static str) {
    if hits == 0 {
        ("unjudged", "no_results")
    } else if top >= 1.0 {
        ("supported", "judged_fresh")
    } else {
        ("unsupported", "no_support")
    }
}

impl RecallView {
    pub fn new(hits: usize, top: f64, no_confident_match: bool) -> Self {
        let (answerability, answerability_reason) = answer_check(hits, top);
        Self {
            hits,
            top,
            floor: no_confident_match,
            judged_insufficient: false,
            answerability,
            answerability_reason,
        }
    }
}

/// WATCH-10: a lap passes only when every condition holds.
pub fn lap_passes(
    v: &RecallView,
    min_score: f64,
    require_support: bool,
    independent: bool,
) -> bool {
    v.hits > 0
        && !v.floor
        && !v.judged_insufficient
        && v.top >= min_score
        && (!require_support || v.answerability == "supported")
        && independent
}

fn py_bool(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

/// WATCH-12, exactly.
pub fn detail(query: &str, v: &RecallView, independent: bool, receipt_reason: &str) -> String {
    let q: String = query.chars().take(48).collect();
    format!(
        "recall '{q}': hits={} top={:.3} floor={} judged_insufficient={} answerability={}:{} independent_receipt={} receipt_reason={receipt_reason}",
        v.hits,
        v.top,
        py_bool(v.floor),
        py_bool(v.judged_insufficient),
        v.answerability,
        v.answerability_reason,
        py_bool(independent),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::stop_reasons::{gate_row_reason, is_gate_row};

    #[test]
    fn names_and_queries_are_trimmed_and_bounded() {
        assert_eq!(validate_name("  build ").unwrap(), "build");
        assert_eq!(
            validate_name("   ").unwrap_err(),
            "name must be 1–128 chars"
        );
        assert!(validate_name(&"é".repeat(128)).is_ok());
        assert!(validate_name(&"é".repeat(129)).is_err());
        assert_eq!(
            validate_query("").unwrap_err(),
            "gate_query must be 1–2000 chars"
        );
        assert!(validate_query(&"x".repeat(2000)).is_ok());
        assert!(validate_query(&"x".repeat(2001)).is_err());
    }

    #[test]
    fn limits_clamp_and_keep_a_ceiling() {
        let l = limits(20, 15.0, 1.0, 0, 0);
        assert_eq!(
            l,
            WatchLimits {
                max_iterations: 20,
                max_wallclock_s: 15.0,
                poll_interval_s: 1.0,
                max_tokens: None,
                no_progress_window: 0
            }
        );
        let l = limits(0, 500.0, 0.01, 5, -2);
        assert_eq!(
            (
                l.max_iterations,
                l.max_wallclock_s,
                l.poll_interval_s,
                l.max_tokens,
                l.no_progress_window
            ),
            (1, 120.0, 0.25, Some(5), 0)
        );
        let l = limits(1000, 0.0, 1000.0, -1, 3);
        assert_eq!(
            (l.max_iterations, l.max_wallclock_s, l.poll_interval_s),
            (200, ABSOLUTE_CEILING_S, 120.0)
        );
        // Negative wall clock means "no bound", like 0, and the ceiling holds.
        assert_eq!(
            limits(5, -3.0, 1.0, 0, 0).max_wallclock_s,
            ABSOLUTE_CEILING_S
        );
        assert_eq!(
            limits(5, f64::NAN, f64::NAN, 0, 0).poll_interval_s,
            MIN_POLL_S
        );
        // Poll never exceeds the wall clock.
        assert_eq!(limits(5, 2.0, 10.0, 0, 0).poll_interval_s, 2.0);
    }

    #[test]
    fn every_condition_is_needed() {
        let good = RecallView::new(1, 1.0, false);
        assert!(lap_passes(&good, 0.0, true, true));
        assert!(
            !lap_passes(&good, 0.0, false, false),
            "recall alone never passes"
        );
        assert!(!lap_passes(
            &RecallView::new(0, 0.0, true),
            0.0,
            false,
            true
        ));
        assert!(!lap_passes(
            &RecallView::new(2, 0.4, true),
            0.0,
            false,
            true
        ));
        assert!(!lap_passes(&good, 1.5, false, true));
        let partial = RecallView::new(1, 0.5, false);
        assert!(lap_passes(&partial, 0.5, false, true));
        assert!(
            !lap_passes(&partial, 0.0, true, true),
            "require_support needs a supported answer"
        );
    }

    #[test]
    fn the_detail_line_is_exact_and_carries_the_marker() {
        let v = RecallView::new(1, 2.0 / 3.0, false);
        let d = detail(
            &format!("{}tail", "q".repeat(48)),
            &v,
            false,
            "no execution receipt",
        );
        assert_eq!(
            d,
            format!(
                "recall '{}': hits=1 top=0.667 floor=False judged_insufficient=False answerability=unsupported:no_support independent_receipt=False receipt_reason=no execution receipt",
                "q".repeat(48)
            )
        );
        assert!(is_gate_row(&d));
        assert_eq!(gate_row_reason(&d, false).unwrap(), "no execution receipt");
        let v = RecallView::new(0, 0.0, true);
        assert!(detail("x", &v, true, "r").contains("hits=0 top=0.000 floor=True judged_insufficient=False answerability=unjudged:no_results independent_receipt=True"));
    }
}
