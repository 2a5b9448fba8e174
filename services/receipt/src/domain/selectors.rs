//! Declared inputs (spec RECEIPT-12): artifact and check-file selectors are
//! paths or globs relative to the approved working folder, stored as sorted,
//! de-duplicated POSIX strings.

use std::path::{Component, Path};

use super::msg;

/// True when a selector uses glob syntax.
pub fn is_glob(selector: &str) -> bool {
    selector.contains(['*', '?', '['])
}

/// Normalises one selector against the canonical `cwd`.
fn normalise_one(entry: &str, cwd: &Path) -> Result<String, String> {
    let path = Path::new(entry);
    let rel = if path.is_absolute() {
        path.strip_prefix(cwd)
            .map_err(|_| msg::INPUT_OUTSIDE.to_string())?
    } else {
        path
    };
    let mut parts: Vec<&str> = Vec::new();
    for c in rel.components() {
        match c {
            Component::CurDir => {}
            Component::Normal(s) => {
                parts.push(s.to_str().ok_or_else(|| msg::INPUT_CONFINED.to_string())?)
            }
            // `..`, a root or a prefix inside a relative selector.
            _ => return Err(msg::INPUT_CONFINED.into()),
        }
    }
    if entry.is_empty() || parts.is_empty() || parts[0] == ".slm-runtime" {
        return Err(msg::INPUT_CONFINED.into());
    }
    Ok(parts.join("/"))
}

/// Normalises selectors: inside `cwd`, no traversal, not the runtime folder;
/// sorted and de-duplicated.
pub fn normalise(entries: &[String], cwd: &Path) -> Result<Vec<String>, String> {
    let mut out: Vec<String> = entries
        .iter()
        .map(|e| normalise_one(e, cwd))
        .collect::<Result<_, _>>()?;
    out.sort();
    out.dedup();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(entries: &[&str]) -> Result<Vec<String>, String> {
        let v: Vec<String> = entries.iter().map(|s| s.to_string()).collect();
        normalise(&v, Path::new("/proj"))
    }

    #[test]
    fn absolute_inside_becomes_relative_sorted_unique() {
        assert_eq!(
            n(&["/proj/src/**/*.py", "tests", "./tests", "a.txt"]).unwrap(),
            vec!["a.txt", "src/**/*.py", "tests"]
        );
    }

    #[test]
    fn refusals() {
        assert_eq!(n(&["/elsewhere/x"]).unwrap_err(), msg::INPUT_OUTSIDE);
        for bad in ["", "../x", "a/../b", ".slm-runtime/x", ".slm-runtime", "."] {
            assert_eq!(n(&[bad]).unwrap_err(), msg::INPUT_CONFINED, "{bad:?}");
        }
        assert_eq!(n(&["/proj"]).unwrap_err(), msg::INPUT_CONFINED);
    }

    #[test]
    fn glob_detection() {
        assert!(is_glob("src/*.py") && is_glob("a?") && is_glob("[ab]"));
        assert!(!is_glob("src/main.rs"));
    }
}
