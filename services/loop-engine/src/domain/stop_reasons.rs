//! Which text explains how a run ended (spec WATCH-16, MCP-06): for a HALT,
//! the receipt refusal a watcher lap recorded rather than the bound alone.

/// The receipt gate's reason when everything held.
pub const PASS_REASON: &str = "authenticated PASS for current copied revision";
/// `receipt_reason` when the gate never ran.
pub const NO_RECEIPT_EXAMINED: &str = "no receipt examined";
/// What a watcher lap's detail carries before its receipt reason (WATCH-12).
pub const RECEIPT_MARKERS: [&str; 2] = [
    " independent_receipt=False receipt_reason=",
    " independent_receipt=True receipt_reason=",
];

/// True when a lap's detail carries a receipt verdict (a "gate row").
pub fn is_gate_row(detail: &str) -> bool {
    RECEIPT_MARKERS.iter().any(|m| detail.contains(m))
}

/// The reason one gate row gives, if it is one: the text after the last
/// marker, or the whole detail when that text claims a PASS the row did not
/// pass (it then shows why recall failed).
pub fn gate_row_reason(detail: &str, passed: bool) -> Option<String> {
    let cut = RECEIPT_MARKERS
        .iter()
        .filter_map(|m| detail.rfind(m).map(|i| i + m.len()))
        .max()?;
    let text = &detail[cut..];
    if text != PASS_REASON || passed {
        Some(text.to_string())
    } else {
        Some(detail.to_string())
    }
}

/// `last_gate_reason(rows)`: from the newest gate row, else the newest row's
/// detail. `newest_gate` is `(detail, passed)` of the newest gate row.
pub fn last_gate_reason(newest_gate: Option<(&str, bool)>, newest_detail: &str) -> String {
    newest_gate
        .and_then(|(d, p)| gate_row_reason(d, p))
        .unwrap_or_else(|| newest_detail.to_string())
}

/// The reply's `reason` for a finished watcher run (WATCH-16): unchanged
/// except for HALT, which names the refusal.
pub fn watcher_reason(
    halted: bool,
    outcome_reason: &str,
    receipt_reason: &str,
    newest_gate: Option<(&str, bool)>,
    newest_detail: &str,
) -> String {
    if !halted {
        return outcome_reason.to_string();
    }
    let r = if receipt_reason == PASS_REASON || receipt_reason == NO_RECEIPT_EXAMINED {
        last_gate_reason(newest_gate, newest_detail)
    } else {
        receipt_reason.to_string()
    };
    if r.is_empty() {
        outcome_reason.to_string()
    } else {
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FALSE_ROW: &str = "recall 'build': hits=1 top=1.000 floor=False judged_insufficient=False answerability=unjudged:disabled independent_receipt=False receipt_reason=no execution receipt";

    #[test]
    fn gate_rows_give_the_text_after_the_last_marker() {
        assert!(is_gate_row(FALSE_ROW));
        assert!(!is_gate_row("demo gate: lap 1"));
        assert_eq!(
            gate_row_reason(FALSE_ROW, false).unwrap(),
            "no execution receipt"
        );
        assert_eq!(gate_row_reason("demo gate: lap 1", false), None);
        let pass =
            format!("recall 'x': hits=0 independent_receipt=True receipt_reason={PASS_REASON}");
        // A PASS receipt on a row that did not pass: the whole line explains it.
        assert_eq!(gate_row_reason(&pass, false).unwrap(), pass);
        assert_eq!(gate_row_reason(&pass, true).unwrap(), PASS_REASON);
    }

    #[test]
    fn last_gate_reason_falls_back_to_the_newest_detail() {
        assert_eq!(
            last_gate_reason(Some((FALSE_ROW, false)), "max-iterations"),
            "no execution receipt"
        );
        assert_eq!(
            last_gate_reason(None, "demo gate: lap 3"),
            "demo gate: lap 3"
        );
        assert_eq!(last_gate_reason(None, ""), "");
    }

    #[test]
    fn only_halt_replaces_the_reason() {
        let g = Some((FALSE_ROW, false));
        assert_eq!(
            watcher_reason(
                true,
                "max-iterations",
                "operator-registered job_id required",
                g,
                "x"
            ),
            "operator-registered job_id required"
        );
        assert_eq!(
            watcher_reason(true, "max-iterations", NO_RECEIPT_EXAMINED, g, "x"),
            "no execution receipt"
        );
        assert_eq!(
            watcher_reason(false, "gate-passed", "whatever", g, "x"),
            "gate-passed"
        );
        assert_eq!(
            watcher_reason(true, "wallclock", NO_RECEIPT_EXAMINED, None, ""),
            "wallclock"
        );
    }
}
