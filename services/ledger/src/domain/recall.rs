//! Recall scoring. Full-text search (FTS5 or tsvector) finds candidates; the
//! score is computed here, the same way on every backend: the fraction of the
//! query's significant terms that the memory contains. It is 0..1, stable and
//! explainable ("2 of 3 terms"), so an evidence floor means the same thing on
//! SQLite and on PostgreSQL.
//!
//! Candidates are gathered with bounded work, whatever the number of
//! memories ([`plan`]): every memory holding one of the query's rare terms,
//! then the newest memories holding all of its common terms (then all but
//! the most common one, and so on). Ranking every full-text match instead
//! costs time in proportion to the matches (tens of thousands for a query
//! of common words). Equal scores are ordered by [`relevance`] (a BM25
//! weighting of the same terms, rarer terms weighing more), then newest
//! first.

use std::collections::HashSet;

use super::{LapRecord, StoredMemory};

/// Default evidence floor: at least half of the query's significant terms.
pub const DEFAULT_EVIDENCE_FLOOR: f64 = 0.5;
pub const DEFAULT_LIMIT: u32 = 10;
pub const MAX_LIMIT: u32 = 100;
/// How many full-text candidates are scored for one recall, at least.
pub fn candidate_pool(limit: u32) -> u32 {
    (limit * 5).clamp(50, 500)
}

/// Document frequencies are counted up to this many memories: enough to
/// tell a rare term from a common one without walking a common term's
/// whole posting list.
pub const DF_CAP: u32 = 200;
/// Every memory holding a rare term is a candidate while the rare terms'
/// frequencies add up to at most this.
pub const RARE_BUDGET: u32 = 500;

const BM25_K1: f64 = 1.2;
const BM25_B: f64 = 0.75;

/// Which memories become candidates, given the query's terms and their
/// document frequencies (counted up to [`DF_CAP`]). Terms no memory holds
/// are left out (they still count in the score's denominator).
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Rarest terms first, while their frequencies add up to at most
    /// [`RARE_BUDGET`]: every memory holding one of them is a candidate.
    pub rare: Vec<String>,
    /// The other terms, rarest first, probed newest first (see
    /// [`Plan::probes`]).
    pub common: Vec<String>,
}

/// One newest-first probe for common terms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Probe<'a> {
    pub terms: &'a [String],
    /// Every term must be present (else any one).
    pub all: bool,
    /// Run only if the probe before it filled its limit: otherwise that
    /// probe (all but the most common term) already returned every memory
    /// this one would find.
    pub only_if_previous_full: bool,
    /// How many common terms a memory found from here on is sure to hold
    /// (non-increasing along the probes): once the `limit` best candidates
    /// hold at least this many terms, the rest can at best tie. The first
    /// probe also stands for the one after it, so it reaches all terms.
    pub reach: usize,
}

impl Plan {
    /// The common-term probes in order: all but the most common term, then
    /// all of them (skipped when the first one was not cut by its limit);
    /// then, for each smaller count down to two, the rarest ones and the
    /// most common ones; last, the rarest term alone. Leaving the most
    /// common term out first matters: the index walks its whole posting
    /// list to intersect it.
    pub fn probes(&self) -> Vec<Probe<'_>> {
        let n = self.common.len();
        let probe = |terms, all, only_if_previous_full, reach| Probe {
            terms,
            all,
            only_if_previous_full,
            reach,
        };
        let mut out = Vec::new();
        if n >= 3 {
            out.push(probe(&self.common[..n - 1], true, false, n));
            out.push(probe(&self.common[..], true, true, n));
            out.push(probe(&self.common[1..], true, false, n - 1));
        } else if n == 2 {
            out.push(probe(&self.common[..], true, false, 2));
        }
        for k in (2..n.saturating_sub(1)).rev() {
            out.push(probe(&self.common[..k], true, false, k));
            out.push(probe(&self.common[n - k..], true, false, k));
        }
        if n > 0 {
            out.push(probe(&self.common[..1], false, false, 1));
        }
        out
    }
}

/// Splits the present terms into rare and common ones, rarest first (ties
/// keep the query's order).
pub fn plan(terms: &[String], dfs: &[u32]) -> Plan {
    let mut present: Vec<(u32, usize)> = dfs
        .iter()
        .enumerate()
        .filter(|(_, d)| **d > 0)
        .map(|(i, d)| (*d, i))
        .collect();
    present.sort_unstable();
    let mut plan = Plan {
        rare: Vec::new(),
        common: Vec::new(),
    };
    let mut budget = RARE_BUDGET;
    for (d, i) in present {
        if plan.common.is_empty() && d < DF_CAP && d <= budget {
            budget -= d;
            plan.rare.push(terms[i].clone());
        } else {
            plan.common.push(terms[i].clone());
        }
    }
    plan
}

/// A term's weight: rarer terms weigh more; every term held by at least
/// [`DF_CAP`] memories weighs the same.
pub fn weights(dfs: &[u32]) -> Vec<f64> {
    dfs.iter()
        .map(|&d| {
            if d == 0 {
                0.0
            } else {
                (1.0 + f64::from(DF_CAP) / f64::from(d)).ln()
            }
        })
        .collect()
}

/// How often each of `terms` occurs in `content`, and how many tokens the
/// content has (tokens as [`tokens`] splits them, repeats included).
pub fn term_counts(terms: &[String], content: &str) -> (Vec<u32>, u32) {
    let mut counts = vec![0u32; terms.len()];
    let mut len = 0u32;
    for raw in content.split(|c: char| !c.is_alphanumeric()) {
        if raw.is_empty() {
            continue;
        }
        len += 1;
        let t = normalise(raw);
        if let Some(i) = terms.iter().position(|q| *q == t) {
            counts[i] += 1;
        }
    }
    (counts, len)
}

/// Fraction of the terms present, from [`term_counts`]; equals [`coverage`].
pub fn coverage_of(counts: &[u32]) -> f64 {
    if counts.is_empty() {
        return 0.0;
    }
    counts.iter().filter(|&&c| c > 0).count() as f64 / counts.len() as f64
}

/// BM25 relevance of one memory from its [`term_counts`], the term
/// [`weights`] and the mean token count of the memories compared.
pub fn relevance(counts: &[u32], len: u32, weights: &[f64], mean_len: f64) -> f64 {
    let norm = BM25_K1 * (1.0 - BM25_B + BM25_B * f64::from(len) / mean_len.max(1.0));
    counts
        .iter()
        .zip(weights)
        .filter(|(c, _)| **c > 0)
        .map(|(&c, w)| {
            let tf = f64::from(c);
            w * tf * (BM25_K1 + 1.0) / (tf + norm)
        })
        .sum()
}

const MAX_TERMS: usize = 32;
const MAX_TERM_CHARS: usize = 64;

const STOPWORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "do", "does", "for", "from", "has", "have",
    "how", "i", "in", "is", "it", "its", "me", "my", "of", "on", "or", "our", "that", "the",
    "this", "to", "was", "we", "what", "when", "where", "which", "who", "why", "will", "with",
    "you", "your",
];

/// Lower-case alphanumeric tokens, in order, without duplicates. Tokens are
/// split the way the full-text indexes split them (on anything that is not a
/// letter or digit), so a term the index matched is a term counted here.
pub fn tokens(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for raw in text.split(|c: char| !c.is_alphanumeric()) {
        if raw.is_empty() {
            continue;
        }
        let t = normalise(raw);
        if !out.contains(&t) {
            out.push(t);
        }
    }
    out
}

fn normalise(raw: &str) -> String {
    raw.chars()
        .take(MAX_TERM_CHARS)
        .flat_map(char::to_lowercase)
        .collect()
}

/// The significant terms of a query: its tokens without stop words (all of
/// them when the query has nothing else), at most 32.
pub fn query_terms(query: &str) -> Vec<String> {
    let all = tokens(query);
    let significant: Vec<String> = all
        .iter()
        .filter(|t| !STOPWORDS.contains(&t.as_str()))
        .cloned()
        .collect();
    let mut terms = if significant.is_empty() {
        all
    } else {
        significant
    };
    terms.truncate(MAX_TERMS);
    terms
}

/// Fraction of `terms` present among the tokens of `content`.
pub fn coverage(terms: &[String], content: &str) -> f64 {
    if terms.is_empty() {
        return 0.0;
    }
    let have = tokens(content);
    let hits = terms.iter().filter(|t| have.contains(t)).count();
    hits as f64 / terms.len() as f64
}

/// Clamps a requested result count: 0 means the default.
pub fn clamp_limit(limit: u32) -> u32 {
    if limit == 0 {
        DEFAULT_LIMIT
    } else {
        limit.min(MAX_LIMIT)
    }
}

/// The floor to apply: a valid requested one, else the default.
pub fn floor(requested: Option<f64>) -> f64 {
    match requested {
        Some(f) if f.is_finite() && (0.0..=1.0).contains(&f) => f,
        _ => DEFAULT_EVIDENCE_FLOOR,
    }
}

/// Sorts candidates (given in tie-break order: [`relevance`], then newest
/// first) by score, keeping that order among equal scores, and cuts to
/// `limit`. Returns the kept
/// items with their scores and whether none reaches the floor.
pub fn rank<T>(candidates: Vec<(T, f64)>, limit: u32, floor: f64) -> (Vec<(T, f64)>, bool) {
    let mut scored = candidates;
    // Stable sort: ties keep the given order.
    scored.sort_by(|a, b| b.1.total_cmp(&a.1));
    scored.truncate(limit as usize);
    let confident = scored.first().is_some_and(|(_, s)| *s >= floor);
    (scored, !confident)
}

/// Recall candidates gathered so far: each memory once, with how often
/// it holds each query term and its token count.
pub struct Candidates<'a> {
    terms: &'a [String],
    exclude_loop_rows: bool,
    seen: HashSet<i64>,
    pub list: Vec<(StoredMemory, Vec<u32>, u32)>,
}

impl<'a> Candidates<'a> {
    pub fn new(terms: &'a [String], exclude_loop_rows: bool) -> Self {
        Self {
            terms,
            exclude_loop_rows,
            seen: HashSet::new(),
            list: Vec::new(),
        }
    }

    pub fn add(&mut self, rows: Vec<StoredMemory>) {
        for m in rows {
            if !self.seen.insert(m.id)
                || (self.exclude_loop_rows && LapRecord::from_json(&m.content).is_some())
            {
                continue;
            }
            let (counts, len) = term_counts(self.terms, &m.content);
            self.list.push((m, counts, len));
        }
    }

    /// How many query terms the `limit`-th best candidate holds (0 when
    /// there are fewer candidates).
    pub fn kth_best_hits(&self, limit: u32) -> usize {
        let k = limit as usize;
        if k == 0 || self.list.len() < k {
            return 0;
        }
        let mut hits: Vec<usize> = self
            .list
            .iter()
            .map(|c| c.1.iter().filter(|&&n| n > 0).count())
            .collect();
        hits.select_nth_unstable_by(k - 1, |a, b| b.cmp(a));
        hits[k - 1]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_split_like_an_index() {
        assert_eq!(
            tokens("Build-3f9a status: OK, build"),
            vec!["build", "3f9a", "status", "ok"]
        );
        assert_eq!(tokens("Grüße, WELT"), vec!["grüße", "welt"]);
    }

    #[test]
    fn stop_words_are_dropped_unless_alone() {
        assert_eq!(
            query_terms("where is the build status"),
            vec!["build", "status"]
        );
        assert_eq!(query_terms("where is it"), vec!["where", "is", "it"]);
        assert!(query_terms("  ,, ").is_empty());
    }

    #[test]
    fn coverage_is_a_fraction_of_terms() {
        let q = query_terms("build status report");
        assert_eq!(coverage(&q, "the build status lives in /proj"), 2.0 / 3.0);
        assert_eq!(coverage(&q, "nothing related"), 0.0);
        assert_eq!(coverage(&[], "x"), 0.0);
    }

    #[test]
    fn rank_orders_by_score_and_reports_the_floor() {
        let (kept, no_match) = rank(vec![("a", 0.25), ("b", 1.0), ("c", 0.25)], 2, 0.5);
        assert_eq!(kept, vec![("b", 1.0), ("a", 0.25)]);
        assert!(!no_match);
        let (_, no_match) = rank(vec![("a", 0.4)], 5, 0.5);
        assert!(no_match);
        let (kept, no_match) = rank(Vec::<(&str, f64)>::new(), 5, 0.5);
        assert!(kept.is_empty() && no_match);
    }

    #[test]
    fn counts_agree_with_coverage() {
        let q = query_terms("build status report");
        let text = "The BUILD status: build ok";
        let (counts, len) = term_counts(&q, text);
        assert_eq!(counts, vec![2, 1, 0]);
        assert_eq!(len, 5);
        assert_eq!(coverage_of(&counts), coverage(&q, text));
        assert_eq!(coverage_of(&[]), 0.0);
    }

    #[test]
    fn rare_terms_are_read_whole_and_common_ones_probed() {
        let q: Vec<String> = ["a", "b", "c", "d", "e"].map(String::from).to_vec();
        let p = plan(&q, &[DF_CAP, 0, 7, DF_CAP, DF_CAP - 1]);
        assert_eq!(p.rare, vec!["c", "e"]);
        assert_eq!(p.common, vec!["a", "d"]);
        let shape = |p: &Plan| -> Vec<(Vec<String>, bool, bool, usize)> {
            p.probes()
                .into_iter()
                .map(|p| (p.terms.to_vec(), p.all, p.only_if_previous_full, p.reach))
                .collect()
        };
        let v = |t: &[&str]| -> Vec<String> { t.iter().map(|s| s.to_string()).collect() };
        assert_eq!(
            shape(&p),
            vec![
                (v(&["a", "d"]), true, false, 2),
                (v(&["a"]), false, false, 1)
            ]
        );
        let p = plan(&q[..4], &[DF_CAP; 4]);
        assert_eq!(
            shape(&p),
            vec![
                (v(&["a", "b", "c"]), true, false, 4),
                (v(&["a", "b", "c", "d"]), true, true, 4),
                (v(&["b", "c", "d"]), true, false, 3),
                (v(&["a", "b"]), true, false, 2),
                (v(&["c", "d"]), true, false, 2),
                (v(&["a"]), false, false, 1),
            ]
        );
        // Over budget: the rest is common, even if under the cap.
        let n = DF_CAP - 10;
        assert!(3 * n > RARE_BUDGET && 2 * n + 10 <= RARE_BUDGET);
        let p = plan(&q[..4], &[n, n, n, 10]);
        assert_eq!(p.rare, vec!["d", "a", "b"]);
        assert_eq!(p.common, vec!["c"]);
        assert!(plan(&q[..2], &[0, 0]).probes().is_empty());
    }

    #[test]
    fn relevance_prefers_rare_terms_and_short_texts() {
        let w = weights(&[1, DF_CAP, 0]);
        assert!(w[0] > w[1] && w[1] > 0.0 && w[2] == 0.0);
        let rare = relevance(&[1, 0, 0], 10, &w, 10.0);
        let common = relevance(&[0, 1, 0], 10, &w, 10.0);
        assert!(rare > common);
        assert!(relevance(&[1, 0, 0], 5, &w, 10.0) > rare);
        assert_eq!(relevance(&[0, 0, 3], 10, &w, 10.0), 0.0);
    }

    #[test]
    fn limits_and_floors_are_clamped() {
        assert_eq!(clamp_limit(0), 10);
        assert_eq!(clamp_limit(7), 7);
        assert_eq!(clamp_limit(1000), 100);
        assert_eq!(floor(None), 0.5);
        assert_eq!(floor(Some(0.2)), 0.2);
        assert_eq!(floor(Some(-1.0)), 0.5);
        assert_eq!(floor(Some(f64::NAN)), 0.5);
    }
}
