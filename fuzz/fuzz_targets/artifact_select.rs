//! Receipt artifact path/glob selection (spec RECEIPT-12/13/14):
//! `domain::selectors::normalise` on arbitrary selector strings, then
//! `fsys::select::expand` over a small fixed tree in a temporary folder
//! (regular files, hidden files, names with glob characters, a
//! `.slm-runtime` folder, and symlinks to a file and to a folder outside the
//! root), then the no-follow open of each selected file.
//!
//! Invariants: an accepted selector is a confined, relative POSIX path
//! (no `..`, `.` or empty component, not absolute, not `.slm-runtime`),
//! normalisation is idempotent, every selected file is lexically inside the
//! root, is covered by one of the selectors, is not itself a symlink, and
//! can only be opened (RECEIPT-14) when it physically lies inside the root.

#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use arbitrary::Arbitrary;
use globset::GlobBuilder;
use libfuzzer_sys::fuzz_target;
use slm_receipt::domain::msg;
use slm_receipt::domain::selectors::{is_glob, normalise};
use slm_receipt::fsys::select::expand;
use slm_receipt::fsys::tree::{Dir, platform_supported};

#[derive(Arbitrary, Debug)]
enum Part {
    Known(u8),
    Raw(String),
}

#[derive(Arbitrary, Debug)]
enum Selector {
    Raw(String),
    Built {
        /// 0: relative, 1: below the root (absolute), 2: absolute elsewhere.
        anchor: u8,
        parts: Vec<Part>,
    },
}

const VOCAB: &[&str] = &[
    "src",
    "pkg",
    "deep",
    "tests",
    "*",
    "**",
    "?.py",
    "*.py",
    "[r]*",
    "[!a]*",
    "..",
    ".",
    "",
    ".slm-runtime",
    "home",
    "secret",
    "links",
    "to_dir",
    "to_file",
    "secret.txt",
    "we[ird]",
    "f*le?.txt",
    "\\*",
    "a.py",
    "[",
    "]",
    "{a,b}",
    "é",
    "sp ace",
    ".hidden.py",
    "readme.md",
    "empty",
    "conftest.py",
];

struct Tree {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

fn tree() -> &'static Tree {
    static T: OnceLock<Tree> = OnceLock::new();
    T.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = std::fs::canonicalize(dir.path()).expect("canonical tempdir");
        let root = base.join("root");
        let files = [
            "src/a.py",
            "src/pkg/b.py",
            "src/pkg/deep/c.py",
            "src/readme.md",
            ".hidden.py",
            "tests/test_a.py",
            "tests/conftest.py",
            ".slm-runtime/home/secret",
            "we[ird]/f*le?.txt",
            "we[ird]/file1.txt",
            "sp ace/é.txt",
            "links/plain.txt",
        ];
        for f in files {
            let p = root.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, f).unwrap();
        }
        std::fs::create_dir_all(root.join("empty")).unwrap();
        let outside = base.join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret.txt"), "outside").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("links/to_dir")).unwrap();
        std::os::unix::fs::symlink(outside.join("secret.txt"), root.join("links/to_file")).unwrap();
        Tree { _dir: dir, root }
    })
}

fn build(sel: &Selector, root: &Path) -> String {
    match sel {
        Selector::Raw(s) => s.clone(),
        Selector::Built { anchor, parts } => {
            let parts: Vec<&str> = parts
                .iter()
                .take(8)
                .map(|p| match p {
                    Part::Known(i) => VOCAB[*i as usize % VOCAB.len()],
                    Part::Raw(s) => s.as_str(),
                })
                .collect();
            let rel = parts.join("/");
            match anchor % 3 {
                0 => rel,
                1 => format!("{}/{rel}", root.display()),
                _ => format!("/elsewhere/{rel}"),
            }
        }
    }
}

fn matcher(sel: &str) -> Option<globset::GlobMatcher> {
    GlobBuilder::new(sel)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .ok()
        .map(|g| g.compile_matcher())
}

fn check_normalised(sel: &[String]) {
    assert!(sel.windows(2).all(|w| w[0] < w[1]), "not sorted/unique");
    for s in sel {
        assert!(!s.is_empty());
        assert!(!s.starts_with('/'), "absolute selector {s:?}");
        let parts: Vec<&str> = s.split('/').collect();
        assert_ne!(parts[0], ".slm-runtime", "runtime selector {s:?}");
        for p in parts {
            assert!(
                !p.is_empty() && p != "." && p != "..",
                "unconfined selector {s:?}"
            );
        }
    }
}

fuzz_target!(|input: Vec<Selector>| {
    let t = tree();
    let root = t.root.as_path();
    let entries: Vec<String> = input.iter().take(6).map(|s| build(s, root)).collect();
    let selectors = match normalise(&entries, root) {
        Ok(s) => s,
        Err(e) => {
            assert!(e == msg::INPUT_OUTSIDE || e == msg::INPUT_CONFINED, "{e}");
            return;
        }
    };
    check_normalised(&selectors);
    // Idempotent, whether given relative or absolute below the root.
    assert_eq!(normalise(&selectors, root).as_ref(), Ok(&selectors));
    let absolute: Vec<String> = selectors
        .iter()
        .map(|s| format!("{}/{s}", root.display()))
        .collect();
    assert_eq!(normalise(&absolute, root).as_ref(), Ok(&selectors));

    let files = match expand(root, &selectors) {
        Ok(f) => f,
        Err(e) => {
            let known = [
                msg::INPUT_CONFINED,
                msg::INPUT_SYMLINK,
                msg::INPUT_TREE_SYMLINK,
                msg::INPUT_IO,
            ];
            assert!(
                known.contains(&e.as_str()) || selectors.iter().any(|s| e == msg::no_match(s)),
                "unexpected expansion error {e:?}"
            );
            return;
        }
    };
    assert!(files.windows(2).all(|w| w[0] < w[1]), "not sorted/unique");
    let dir = if platform_supported() {
        Dir::open(root).ok()
    } else {
        None
    };
    for f in &files {
        assert!(!f.is_empty() && !f.starts_with('/'), "{f:?}");
        let comps: Vec<&str> = f.split('/').collect();
        assert!(
            comps
                .iter()
                .all(|c| !c.is_empty() && *c != "." && *c != ".."),
            "selected path is not confined: {f:?}"
        );
        let meta = std::fs::symlink_metadata(root.join(f)).expect("a selected file exists");
        assert!(
            !meta.file_type().is_symlink() && !meta.is_dir(),
            "selected a link or a folder: {f:?}"
        );
        // Covered by a selector: the path itself, a file below a selected
        // folder, or a glob match of the file or of one of its folders.
        let covered = selectors.iter().any(|s| {
            if is_glob(s) {
                let Some(m) = matcher(s) else { return false };
                (1..=comps.len()).any(|n| m.is_match(comps[..n].join("/")))
            } else {
                f == s || f.starts_with(&format!("{s}/"))
            }
        });
        assert!(covered, "{f:?} is not covered by {selectors:?}");
        // RECEIPT-14: the no-follow open succeeds only physically inside.
        let physical = std::fs::canonicalize(root.join(f)).expect("canonical");
        let inside = physical.starts_with(root);
        if let Some(dir) = &dir {
            let opened = dir.open_regular(f);
            if !inside {
                assert!(opened.is_err(), "{f:?} opened outside the root");
            }
            if opened.is_ok() {
                assert!(inside);
            }
        }
    }
});
