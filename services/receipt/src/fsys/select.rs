//! Expanding declared selectors into files (spec RECEIPT-13): paths or globs
//! (`*`, `?`, `[…]` within a component, `**` for any depth), hidden files
//! included, symlinks refused. Discovery never follows a link; the files
//! found are later opened through no-follow handles, so a link swapped in
//! after discovery is refused there.

use std::fs::Metadata;
use std::path::Path;

use globset::GlobBuilder;

use crate::domain::msg;
use crate::domain::selectors::is_glob;

fn lstat(p: &Path) -> Option<Metadata> {
    std::fs::symlink_metadata(p).ok()
}

/// Every non-directory below `rel` (a directory); links are refused.
fn collect_tree(root: &Path, rel: &str, out: &mut Vec<String>) -> Result<(), String> {
    let entries = std::fs::read_dir(root.join(rel)).map_err(|_| msg::INPUT_IO.to_string())?;
    for e in entries {
        let e = e.map_err(|_| msg::INPUT_IO.to_string())?;
        let name = e
            .file_name()
            .into_string()
            .map_err(|_| msg::INPUT_IO.to_string())?;
        let child = format!("{rel}/{name}");
        let ft = e.file_type().map_err(|_| msg::INPUT_IO.to_string())?;
        if ft.is_symlink() {
            return Err(msg::INPUT_TREE_SYMLINK.into());
        } else if ft.is_dir() {
            collect_tree(root, &child, out)?;
        } else {
            out.push(child);
        }
    }
    Ok(())
}

/// Adds what one match contributes.
fn contribute(
    root: &Path,
    rel: &str,
    meta: &Metadata,
    out: &mut Vec<String>,
) -> Result<(), String> {
    if meta.file_type().is_symlink() {
        Err(msg::INPUT_SYMLINK.into())
    } else if meta.is_dir() {
        collect_tree(root, rel, out)
    } else {
        out.push(rel.to_string());
        Ok(())
    }
}

/// Walks below `base` (relative, "" for the root) collecting entries whose
/// relative path matches, down to `max_depth` components.
fn walk_matches(
    root: &Path,
    base: &str,
    depth: usize,
    max_depth: usize,
    matcher: &globset::GlobMatcher,
    hits: &mut Vec<(String, Metadata)>,
) -> Result<(), String> {
    if depth >= max_depth {
        return Ok(());
    }
    let dir = if base.is_empty() {
        root.to_path_buf()
    } else {
        root.join(base)
    };
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(());
    };
    for e in entries {
        let e = e.map_err(|_| msg::INPUT_IO.to_string())?;
        let Ok(name) = e.file_name().into_string() else {
            continue;
        };
        let rel = if base.is_empty() {
            name
        } else {
            format!("{base}/{name}")
        };
        let meta = e.metadata().map_err(|_| msg::INPUT_IO.to_string())?;
        if matcher.is_match(&rel) {
            hits.push((rel.clone(), meta.clone()));
        }
        if meta.is_dir() {
            walk_matches(root, &rel, depth + 1, max_depth, matcher, hits)?;
        }
    }
    Ok(())
}

/// Expands normalised selectors below `root` into sorted, unique relative
/// file paths. Every selector must match something.
pub fn expand(root: &Path, selectors: &[String]) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for sel in selectors {
        if !is_glob(sel) {
            let meta = lstat(&root.join(sel)).ok_or_else(|| msg::no_match(sel))?;
            contribute(root, sel, &meta, &mut out)?;
            continue;
        }
        let matcher = GlobBuilder::new(sel)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|_| msg::INPUT_CONFINED.to_string())?
            .compile_matcher();
        // Start the walk at the literal prefix; go only as deep as needed.
        let parts: Vec<&str> = sel.split('/').collect();
        let literal = parts.iter().take_while(|p| !is_glob(p)).count();
        let base = parts[..literal].join("/");
        let max_depth = if sel.contains("**") {
            usize::MAX
        } else {
            parts.len() - literal
        };
        let mut hits = Vec::new();
        if base.is_empty() || lstat(&root.join(&base)).is_some_and(|m| m.is_dir()) {
            walk_matches(root, &base, 0, max_depth, &matcher, &mut hits)?;
        }
        if hits.is_empty() {
            return Err(msg::no_match(sel));
        }
        for (rel, meta) in hits {
            contribute(root, &rel, &meta, &mut out)?;
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for f in [
            "src/a.py",
            "src/pkg/b.py",
            "src/pkg/deep/c.py",
            "src/readme.md",
            ".hidden.py",
            "tests/test_a.py",
            "tests/conftest.py",
        ] {
            let p = d.path().join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, f).unwrap();
        }
        d
    }

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn globs_paths_and_directories() {
        let d = tree();
        let r = d.path();
        assert_eq!(
            expand(r, &s(&["src/**/*.py"])).unwrap(),
            s(&["src/a.py", "src/pkg/b.py", "src/pkg/deep/c.py"])
        );
        assert_eq!(expand(r, &s(&["src/*.py"])).unwrap(), s(&["src/a.py"]));
        assert_eq!(expand(r, &s(&["*.py"])).unwrap(), s(&[".hidden.py"]));
        assert_eq!(
            expand(r, &s(&["tests", "tests/conftest.py"])).unwrap(),
            s(&["tests/conftest.py", "tests/test_a.py"])
        );
        assert_eq!(
            expand(r, &s(&["src/pkg/?.py"])).unwrap(),
            s(&["src/pkg/b.py"])
        );
        assert_eq!(expand(r, &s(&["src/[r]*"])).unwrap(), s(&["src/readme.md"]));
    }

    #[test]
    fn every_selector_must_match_and_links_are_refused() {
        let d = tree();
        let r = d.path();
        assert_eq!(
            expand(r, &s(&["nope.txt"])).unwrap_err(),
            "No declared input matches nope.txt"
        );
        assert_eq!(
            expand(r, &s(&["src/*.rs"])).unwrap_err(),
            "No declared input matches src/*.rs"
        );
        std::os::unix::fs::symlink("/etc/passwd", r.join("src/pw")).unwrap();
        assert_eq!(expand(r, &s(&["src/pw"])).unwrap_err(), msg::INPUT_SYMLINK);
        assert_eq!(expand(r, &s(&["src/p*"])).unwrap_err(), msg::INPUT_SYMLINK);
        assert_eq!(
            expand(r, &s(&["src"])).unwrap_err(),
            msg::INPUT_TREE_SYMLINK
        );
        // A glob that does not reach the link is unaffected.
        assert_eq!(expand(r, &s(&["src/*.py"])).unwrap(), s(&["src/a.py"]));
    }
}
