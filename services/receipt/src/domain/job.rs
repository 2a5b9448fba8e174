//! A registered job (spec RECEIPT-03, 05, 14, 15, 17, 19): identity, lifetime,
//! digests of the command, the inputs and the pinned definition, and when it
//! is current.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::canon::{canonical, sha256_hex};
use super::msg;

pub const DEFAULT_TTL_S: i64 = 3600;
pub const MAX_TTL_S: i64 = 86_400;

/// One hashed input file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRecord {
    pub path: String,
    pub sha256: String,
}

/// A job as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// Insertion order; the newest registration for a watcher supersedes.
    pub seq: i64,
    pub job_id: String,
    pub profile_id: String,
    pub task_id: String,
    pub watcher_name: String,
    pub producer: String,
    pub command_digest: String,
    /// Normalised argv (absolute paths).
    pub argv: Vec<String>,
    pub cwd: String,
    pub artifacts: Vec<FileRecord>,
    pub revision_digest: String,
    pub registered_at: String,
    pub expires_at: String,
    /// Microseconds since the epoch, for comparisons.
    pub registered_us: i64,
    pub expires_us: i64,
    pub allow_prestart_evidence: bool,
    pub artifact_paths: Vec<String>,
    pub check_paths: Vec<String>,
    pub definition: Vec<FileRecord>,
    pub definition_digest: String,
}

/// RECEIPT-03: every identity field non-empty after trimming.
pub fn validate_identity(fields: &[&str]) -> Result<(), String> {
    if fields
        .iter()
        .any(|f| f.trim().is_empty() || f.contains('\0'))
    {
        return Err(msg::IDENTITY.into());
    }
    Ok(())
}

/// RECEIPT-05: 0 < ttl <= one day; unset means the default.
pub fn ttl(requested: Option<i64>) -> Result<i64, String> {
    let t = requested.unwrap_or(DEFAULT_TTL_S);
    if t <= 0 || t > MAX_TTL_S {
        return Err(msg::LIFETIME.into());
    }
    Ok(t)
}

/// Canonical manifest text of hashed files (sorted by path).
pub fn manifest(records: &[FileRecord]) -> String {
    let mut sorted: Vec<&FileRecord> = records.iter().collect();
    sorted.sort_by(|a, b| a.path.cmp(&b.path));
    canonical(&json!(sorted))
}

/// The revision digest of a set of inputs.
pub fn revision_digest(records: &[FileRecord]) -> String {
    sha256_hex(manifest(records).as_bytes())
}

pub fn command_digest(argv: &[String], cwd: &str) -> String {
    sha256_hex(canonical(&json!({"argv": argv, "cwd": cwd})).as_bytes())
}

/// Digest of what is pinned: the location-independent command, the check
/// files and the artifact selectors (RECEIPT-15).
pub fn definition_digest(
    relative_argv: &[String],
    files: &[FileRecord],
    artifact_paths: &[String],
) -> String {
    let files: Value = serde_json::from_str(&manifest(files)).expect("manifest is JSON");
    sha256_hex(
        canonical(&json!({
            "command": relative_argv,
            "files": files,
            "artifact_paths": artifact_paths,
        }))
        .as_bytes(),
    )
}

/// RECEIPT-19: `job` is current for its watcher when it is the newest
/// registration for (profile, watcher), has a pinned definition and has not
/// expired (at exactly `expires_at` it has).
pub fn is_current(newest_for_watcher: Option<&Job>, job_id: &str, now_us: i64) -> bool {
    newest_for_watcher.is_some_and(|j| {
        j.job_id == job_id && !j.definition_digest.is_empty() && now_us < j.expires_us
    })
}

/// A fresh job id: a random UUIDv4 as 32 lowercase hex.
pub fn new_job_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: &str, expires_us: i64) -> Job {
        Job {
            seq: 1,
            job_id: id.into(),
            profile_id: "default".into(),
            task_id: "t".into(),
            watcher_name: "w".into(),
            producer: "p".into(),
            command_digest: String::new(),
            argv: vec![],
            cwd: "/p".into(),
            artifacts: vec![],
            revision_digest: String::new(),
            registered_at: String::new(),
            expires_at: String::new(),
            registered_us: 0,
            expires_us,
            allow_prestart_evidence: false,
            artifact_paths: vec![],
            check_paths: vec![],
            definition: vec![],
            definition_digest: "d".into(),
        }
    }

    #[test]
    fn identity_and_ttl() {
        assert!(validate_identity(&["a", "b"]).is_ok());
        assert_eq!(validate_identity(&["a", "  "]).unwrap_err(), msg::IDENTITY);
        assert_eq!(ttl(None).unwrap(), 3600);
        assert_eq!(ttl(Some(86_400)).unwrap(), 86_400);
        assert_eq!(ttl(Some(0)).unwrap_err(), msg::LIFETIME);
        assert_eq!(ttl(Some(86_401)).unwrap_err(), msg::LIFETIME);
        assert_eq!(ttl(Some(-5)).unwrap_err(), msg::LIFETIME);
    }

    #[test]
    fn current_means_newest_pinned_and_unexpired() {
        let j = job("a", 100);
        assert!(is_current(Some(&j), "a", 99));
        assert!(
            !is_current(Some(&j), "a", 100),
            "expired at exactly expires_at"
        );
        assert!(!is_current(Some(&j), "b", 0), "superseded");
        assert!(!is_current(None, "a", 0));
        let mut legacy = job("a", 100);
        legacy.definition_digest.clear();
        assert!(!is_current(Some(&legacy), "a", 0));
    }

    #[test]
    fn digests_are_order_independent_for_files() {
        let a = FileRecord {
            path: "b".into(),
            sha256: "1".into(),
        };
        let b = FileRecord {
            path: "a".into(),
            sha256: "2".into(),
        };
        assert_eq!(
            revision_digest(&[a.clone(), b.clone()]),
            revision_digest(&[b, a])
        );
        assert_eq!(manifest(&[]), "[]");
        assert_eq!(new_job_id().len(), 32);
    }
}
