//! Recall: carrying out `domain::recall`'s plan (which full-text queries
//! gather the candidates, when to stop), then its scoring and ranking. The
//! decisions stay in the domain; this only runs the queries it asks for.

use super::Store;
use crate::domain::recall;
use crate::domain::{LedgerError, StoredMemory};

impl Store {
    /// The ranked hits for `query` (at most `limit`, scored in 0..1) and
    /// whether none reaches `floor`.
    pub async fn recall(
        &self,
        profile: &str,
        query: &str,
        tag: Option<&str>,
        limit: u32,
        floor: f64,
        exclude_laps: bool,
    ) -> Result<(Vec<(StoredMemory, f64)>, bool), LedgerError> {
        let terms = recall::query_terms(query);
        let pool = recall::candidate_pool(limit) as usize;
        let dfs = self.term_frequencies(&terms, recall::DF_CAP).await?;
        let plan = recall::plan(&terms, &dfs);
        let mut found = recall::Candidates::new(&terms, exclude_laps);
        if !plan.rare.is_empty() {
            let rows = self
                .recall_candidates(
                    profile,
                    &plan.rare,
                    false,
                    tag,
                    recall::RARE_BUDGET,
                    exclude_laps,
                )
                .await?;
            found.add(rows);
        }
        let mut previous_full = false;
        for probe in plan.probes() {
            // The `limit` best already hold as many terms as what is left
            // to find is sure to: it can at best tie with them. Stop.
            if found.kth_best_hits(limit) >= probe.reach {
                break;
            }
            if probe.only_if_previous_full && !previous_full {
                continue;
            }
            let rows = self
                .recall_candidates(
                    profile,
                    probe.terms,
                    probe.all,
                    tag,
                    pool as u32,
                    exclude_laps,
                )
                .await?;
            previous_full = rows.len() >= pool;
            found.add(rows);
        }
        let candidates = found.list;
        let weights = recall::weights(&dfs);
        let mean_len =
            candidates.iter().map(|c| f64::from(c.2)).sum::<f64>() / candidates.len().max(1) as f64;
        let mut scored: Vec<(StoredMemory, f64, f64)> = candidates
            .into_iter()
            .map(|(m, counts, len)| {
                let rel = recall::relevance(&counts, len, &weights, mean_len);
                (m, recall::coverage_of(&counts), rel)
            })
            .collect();
        // Tie-break order for equal scores: relevance, then newest first.
        scored.sort_by(|a, b| b.2.total_cmp(&a.2).then(b.0.id.cmp(&a.0.id)));
        let scored = scored.into_iter().map(|(m, s, _)| (m, s)).collect();
        Ok(recall::rank(scored, limit, floor))
    }
}
