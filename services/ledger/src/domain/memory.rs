//! What a memory is and what the service accepts.

pub const DEFAULT_PROFILE: &str = "default";
pub const DEFAULT_IMPORTANCE: i32 = 5;
pub const MAX_CONTENT_BYTES: usize = 1 << 20;
pub const MAX_METADATA_BYTES: usize = 64 << 10;
pub const MAX_TAGS: usize = 32;
pub const MAX_TAG_CHARS: usize = 128;
pub const MAX_SESSION_CHARS: usize = 256;
pub const MAX_AGENT_CHARS: usize = 128;
pub const MAX_QUERY_CHARS: usize = 4000;

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("{0}")]
    Invalid(String),
    #[error("There is no profile '{0}' on this computer. A tool call never creates a profile.")]
    UnknownProfile(String),
    #[error("profile '{0}' already exists")]
    ProfileExists(String),
    #[error("{0}")]
    Unsupported(String),
    #[error("database error: {0}")]
    Db(String),
}

impl From<sqlx::Error> for LedgerError {
    fn from(e: sqlx::Error) -> Self {
        LedgerError::Db(e.to_string())
    }
}

fn invalid(msg: impl Into<String>) -> LedgerError {
    LedgerError::Invalid(msg.into())
}

/// A memory as requested, before validation.
#[derive(Debug, Clone, Default)]
pub struct NewMemory {
    pub profile_id: String,
    pub content: String,
    pub tags: Vec<String>,
    pub session_id: String,
    pub metadata: String,
    pub importance: i32,
    pub agent_id: String,
}

/// A memory as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredMemory {
    pub id: i64,
    pub profile_id: String,
    pub content: String,
    pub tags: Vec<String>,
    pub session_id: String,
    pub metadata: String,
    pub importance: i32,
    pub agent_id: String,
    pub created_at: String,
}

/// An empty profile id means the default profile; otherwise 1–64 of
/// `[A-Za-z0-9._-]`.
pub fn profile_id(raw: &str) -> Result<String, LedgerError> {
    let p = raw.trim();
    if p.is_empty() {
        return Ok(DEFAULT_PROFILE.to_string());
    }
    let ok = p.len() <= 64
        && p.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(p.to_string())
    } else {
        Err(invalid(
            "profile_id must be 1–64 characters of letters, digits, '.', '_' or '-'",
        ))
    }
}

fn no_nul(field: &str, s: &str) -> Result<(), LedgerError> {
    if s.contains('\0') {
        Err(invalid(format!("{field} must not contain NUL characters")))
    } else {
        Ok(())
    }
}

impl NewMemory {
    /// Normalises and validates; the result is what gets stored.
    pub fn validated(mut self) -> Result<Self, LedgerError> {
        self.profile_id = profile_id(&self.profile_id)?;
        if self.content.trim().is_empty() {
            return Err(invalid("content must not be empty"));
        }
        if self.content.len() > MAX_CONTENT_BYTES {
            return Err(invalid(format!(
                "content must be at most {MAX_CONTENT_BYTES} bytes"
            )));
        }
        no_nul("content", &self.content)?;
        let mut tags: Vec<String> = Vec::new();
        for t in &self.tags {
            let t = t.trim();
            if t.is_empty() || t.chars().count() > MAX_TAG_CHARS || t.chars().any(char::is_control)
            {
                return Err(invalid(format!(
                    "each tag must be 1–{MAX_TAG_CHARS} characters without control characters"
                )));
            }
            if !tags.iter().any(|x| x == t) {
                tags.push(t.to_string());
            }
        }
        if tags.len() > MAX_TAGS {
            return Err(invalid(format!("at most {MAX_TAGS} tags")));
        }
        self.tags = tags;
        if self.session_id.chars().count() > MAX_SESSION_CHARS {
            return Err(invalid(format!(
                "session_id must be at most {MAX_SESSION_CHARS} characters"
            )));
        }
        no_nul("session_id", &self.session_id)?;
        if self.agent_id.chars().count() > MAX_AGENT_CHARS {
            return Err(invalid(format!(
                "agent_id must be at most {MAX_AGENT_CHARS} characters"
            )));
        }
        no_nul("agent_id", &self.agent_id)?;
        if self.importance == 0 {
            self.importance = DEFAULT_IMPORTANCE;
        }
        if !(1..=10).contains(&self.importance) {
            return Err(invalid("importance must be 1–10"));
        }
        if self.metadata.trim().is_empty() {
            self.metadata = "{}".into();
        }
        if self.metadata.len() > MAX_METADATA_BYTES {
            return Err(invalid(format!(
                "metadata must be at most {MAX_METADATA_BYTES} bytes"
            )));
        }
        // Valid JSON that starts with `{` is an object; checked without
        // building it.
        if !self.metadata.trim_start().starts_with('{')
            || serde_json::from_str::<serde::de::IgnoredAny>(&self.metadata).is_err()
        {
            return Err(invalid("metadata must be a JSON object"));
        }
        no_nul("metadata", &self.metadata)?;
        Ok(self)
    }
}

/// A recall query must be non-empty text of bounded size.
pub fn recall_query(q: &str) -> Result<&str, LedgerError> {
    let q = q.trim();
    if q.is_empty() {
        return Err(invalid("query must not be empty"));
    }
    if q.chars().count() > MAX_QUERY_CHARS {
        return Err(invalid(format!(
            "query must be at most {MAX_QUERY_CHARS} characters"
        )));
    }
    no_nul("query", q)?;
    Ok(q)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mem(content: &str) -> NewMemory {
        NewMemory {
            content: content.into(),
            ..Default::default()
        }
    }

    #[test]
    fn defaults_are_filled_in() {
        let m = mem("hello").validated().unwrap();
        assert_eq!(m.profile_id, "default");
        assert_eq!(m.importance, 5);
        assert_eq!(m.metadata, "{}");
    }

    #[test]
    fn bad_input_is_refused_with_a_reason() {
        assert!(mem("  ").validated().is_err());
        assert!(mem("a\0b").validated().is_err());
        for bad in ["[1]", "{", "{} {}", "{\"a\": }", "\"{}\"", "1"] {
            let mut m = mem("x");
            m.metadata = bad.into();
            assert!(
                m.validated()
                    .unwrap_err()
                    .to_string()
                    .contains("JSON object"),
                "{bad}"
            );
        }
        let mut m = mem("x");
        m.metadata = " {\"a\": [1, {\"b\": null}]}".into();
        assert!(m.validated().is_ok());
        let mut m = mem("x");
        m.importance = 11;
        assert!(m.validated().is_err());
        let mut m = mem("x");
        m.tags = vec!["".into()];
        assert!(m.validated().is_err());
        let mut m = mem("x");
        m.profile_id = "../etc".into();
        assert!(m.validated().is_err());
    }

    #[test]
    fn tags_are_trimmed_and_deduplicated() {
        let mut m = mem("x");
        m.tags = vec![" a ".into(), "a".into(), "b".into()];
        assert_eq!(m.validated().unwrap().tags, vec!["a", "b"]);
    }
}
