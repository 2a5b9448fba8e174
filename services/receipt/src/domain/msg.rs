//! The exact refusal and reason strings of spec section RECEIPT (callers and
//! tests match on them).

// Registration.
pub const IDENTITY: &str = "Gate identity fields must be nonempty strings";
pub const ARGV: &str = "Gate check must be a nonempty argv sequence";
pub const LIFETIME: &str = "Gate lifetime must be positive and at most one day";
pub const EXECUTABLE: &str = "Check executable must be operator-owned outside the project";
pub const TRAVERSAL: &str = "Check command paths must be confined without traversal";
pub const PLATFORM: &str = "Hermetic registered checks are unsupported on this platform: secure no-follow directory handles are required (including on Windows)";
pub const DATA_ROOT_INSIDE: &str =
    "Hermetic check data root must be outside the approved project directory";
pub const PRIVATE_TRAVERSAL: &str = "Private storage needs a no-follow path without traversal";
pub const PRIVATE_SYMLINK: &str =
    "Private check storage requires no-follow directories; symlinks refused";
pub const PRIVATE_NOT_DIR: &str = "Private check storage must be a directory";
pub const KEY_MODE: &str = "Admission key must be an owner-only 0600 regular file";
pub const KEY_INVALID: &str = "Invalid admission key";
pub const INPUT_OUTSIDE: &str = "Gate inputs must be inside the approved working directory";
pub const INPUT_CONFINED: &str = "Gate inputs require confined, non-runtime relative paths";
pub const INPUT_SYMLINK: &str = "Gate inputs must be regular files; symlinks are refused";
pub const INPUT_TREE_SYMLINK: &str = "Gate input trees cannot contain symlinks";
pub const INPUT_SPECIAL: &str = "Gate inputs must be regular files; devices and FIFOs are refused";
pub const INPUT_IO: &str = "Gate inputs require regular files and no-follow directories";
pub const DEFINITION_MODIFIED: &str = "Pinned check definition has been modified";
pub const DEFINITION_UNAVAILABLE: &str = "Pinned check definition is unavailable or modified";
pub const DISTINCT: &str = "Check definition and mutable artifact inputs must have distinct paths";
pub const IMMUTABLE: &str = "gate registrations are operator-owned and immutable";
pub const APPEND_ONLY: &str = "execution receipts are append-only";

/// `No declared input matches <selector>`.
pub fn no_match(selector: &str) -> String {
    format!("No declared input matches {selector}")
}

// Running.
pub const NO_SUCH_JOB: &str = "No such operator gate job";
pub const NOT_CURRENT: &str = "Gate job expired, superseded or requires hermetic re-registration";
pub const LOCK_NOT_FILE: &str = "Check lock must be a regular file";
pub const LOCK_BUSY: &str = "Another registered check is running on this data root; try again";
pub const TEMP_INSIDE: &str = "Check temporary directory must be outside the project and data root";
pub const ARTIFACTS_CHANGED: &str = "Checked artifacts changed during verification";
pub const EXPIRED_DURING: &str = "Gate job expired or superseded during verification";
pub const INPUTS_MODIFIED: &str = "Check modified its copied inputs during verification";
pub const DEFINITION_MODIFIED_DURING: &str =
    "Check modified its copied definition during verification";
pub const KEY_CHANGED: &str = "Admission key changed during verification";
pub const KEY_EXPOSED: &str = "Independent check exposed admission key material";

// Gate.
pub const CONTRACT_REQUIRED: &str = "operator-registered job_id required";
pub const JOB_NOT_CURRENT: &str =
    "job missing, expired, superseded or requires hermetic re-registration";
pub const PRODUCER_IS_AGENT: &str = "receipt producer is the running agent";
pub const NO_RECEIPT: &str = "no execution receipt";
pub const STALE: &str = "latest receipt stale or unauthenticated";
pub const REVISION_CHANGED: &str = "declared artifact revision changed; rerun the registered check";
pub const JOB_GONE: &str = "job expired or superseded";
pub const PASS: &str = "authenticated PASS for current copied revision";
pub const DB_UNAVAILABLE: &str = "no registered job or execution receipt";
pub const INPUTS_INVALID: &str = "check definition or declared inputs unavailable or invalid";

/// `check FAILED (exit <n>)`.
pub fn check_failed(exit_code: i64) -> String {
    format!("check FAILED (exit {exit_code})")
}

/// The validation scheme named in every signed receipt.
pub const VALIDATION: &str = "hermetic-copy-v1";
