//! Recall scoring. Full-text search (FTS5 or tsvector) finds candidates; the
//! score is computed here, the same way on every backend: the fraction of the
//! query's significant terms that the memory contains. It is 0..1, stable and
//! explainable ("2 of 3 terms"), so an evidence floor means the same thing on
//! SQLite and on PostgreSQL.

/// Default evidence floor: at least half of the query's significant terms.
pub const DEFAULT_EVIDENCE_FLOOR: f64 = 0.5;
pub const DEFAULT_LIMIT: u32 = 10;
pub const MAX_LIMIT: u32 = 100;
/// How many full-text candidates are scored for one recall.
pub fn candidate_pool(limit: u32) -> u32 {
    (limit * 5).clamp(50, 500)
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
        let t: String = raw
            .chars()
            .take(MAX_TERM_CHARS)
            .flat_map(char::to_lowercase)
            .collect();
        if !out.contains(&t) {
            out.push(t);
        }
    }
    out
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

/// Sorts candidates (given in full-text rank order) by score, keeping the
/// full-text order among equal scores, and cuts to `limit`. Returns the kept
/// items with their scores and whether none reaches the floor.
pub fn rank<T>(candidates: Vec<(T, f64)>, limit: u32, floor: f64) -> (Vec<(T, f64)>, bool) {
    let mut scored = candidates;
    // Stable sort: ties keep the index's relevance order.
    scored.sort_by(|a, b| b.1.total_cmp(&a.1));
    scored.truncate(limit as usize);
    let confident = scored.first().is_some_and(|(_, s)| *s >= floor);
    (scored, !confident)
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
