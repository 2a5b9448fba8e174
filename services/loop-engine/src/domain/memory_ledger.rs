//! In-memory ledgers (LEDGER-09) and a failing ledger for fault injection (ENGINE-18).

use super::engine::Ledger;
use super::model::LedgerRow;

/// Ledger that keeps rows in memory, in append order. It never fails (LEDGER-09).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InMemoryLedger {
    rows: Vec<LedgerRow>,
}

impl InMemoryLedger {
    /// An empty ledger.
    pub fn new() -> Self {
        Self::default()
    }

    /// All rows in append order.
    pub fn rows(&self) -> &[LedgerRow] {
        &self.rows
    }

    /// The rows of one run, in append order.
    pub fn laps(&self, run_id: &str) -> Vec<LedgerRow> {
        self.rows
            .iter()
            .filter(|row| row.run_id == run_id)
            .cloned()
            .collect()
    }

    /// Distinct run ids of the loop `name` (exact, case-sensitive match), **newest first**: rows
    /// are scanned from the most recently appended backwards and each run id is listed at its
    /// first appearance (\[DECISION\] in LEDGER-09, consistent with LEDGER-07).
    pub fn runs(&self, name: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for row in self.rows.iter().rev().filter(|row| row.name == name) {
            if !out.contains(&row.run_id) {
                out.push(row.run_id.clone());
            }
        }
        out
    }
}

impl Ledger for InMemoryLedger {
    async fn append(&mut self, row: &LedgerRow) -> Result<(), String> {
        self.rows.push(row.clone());
        Ok(())
    }
}

/// Ledger whose every append fails, for tests and demo fault injection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailingLedger {
    /// Error text returned by every append.
    pub message: String,
    /// Number of append attempts seen.
    pub attempts: u32,
}

impl FailingLedger {
    /// Error text of [`FailingLedger::default`].
    pub const DEFAULT_MESSAGE: &'static str = "ledger unavailable";

    /// A failing ledger with a custom error text.
    pub fn with_message(message: impl Into<String>) -> Self {
        FailingLedger {
            message: message.into(),
            attempts: 0,
        }
    }
}

impl Default for FailingLedger {
    fn default() -> Self {
        Self::with_message(Self::DEFAULT_MESSAGE)
    }
}

impl Ledger for FailingLedger {
    async fn append(&mut self, _row: &LedgerRow) -> Result<(), String> {
        self.attempts = self.attempts.saturating_add(1);
        Err(self.message.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::model::{BudgetSnapshot, Decision};
    use crate::domain::tests::block_on;

    fn row(run_id: &str, name: &str, lap: u32) -> LedgerRow {
        LedgerRow {
            run_id: run_id.into(),
            name: name.into(),
            lap,
            ts: format!("t{lap}"),
            decision: Decision::Continue,
            passed: false,
            detail: String::new(),
            agent_claimed_done: false,
            runner_log: String::new(),
            budget: BudgetSnapshot::default(),
        }
    }

    #[test]
    fn runs_newest_first_and_laps_in_order() {
        let mut ledger = InMemoryLedger::new();
        let appends = [
            ("a-1", "a", 1),
            ("a-1", "a", 2),
            ("b-1", "b", 1),
            ("a-2", "a", 1),
            ("A-3", "A", 1),
            ("a-3", "a", 1),
            ("a-2", "a", 2),
        ];
        for (run_id, name, lap) in appends {
            block_on(ledger.append(&row(run_id, name, lap))).unwrap();
        }
        assert_eq!(ledger.rows().len(), appends.len());
        let cases: &[(&str, &[&str])] = &[
            ("a", &["a-2", "a-3", "a-1"]),
            ("b", &["b-1"]),
            ("A", &["A-3"]),
            ("missing", &[]),
        ];
        for &(name, expected) in cases {
            assert_eq!(ledger.runs(name), expected, "{name}");
        }
        let laps: Vec<u32> = ledger.laps("a-1").iter().map(|r| r.lap).collect();
        assert_eq!(laps, [1, 2]);
        assert!(ledger.laps("zzz").is_empty());
    }

    #[test]
    fn failing_ledger_always_errs() {
        let mut ledger = FailingLedger::default();
        for _ in 0..3 {
            assert_eq!(
                block_on(ledger.append(&row("r", "n", 1))),
                Err("ledger unavailable".to_owned())
            );
        }
        assert_eq!(ledger.attempts, 3);
        let mut custom = FailingLedger::with_message("disk full");
        assert_eq!(
            block_on(custom.append(&row("r", "n", 1))),
            Err("disk full".to_owned())
        );
    }
}
