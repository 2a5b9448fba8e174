//! The check's command (spec RECEIPT-04, 07, 15, 24): an argv, never a shell;
//! paths confined; absolute arguments inside the project rewritten so the
//! pinned definition is location-independent and runs on the private copy.

use std::path::{Component, Path, PathBuf};

use super::msg;

/// The path part of an argument: after the first `=` of `-opt=value`.
fn split_option(arg: &str) -> (&str, &str) {
    if arg.starts_with('-')
        && let Some(i) = arg.find('=')
    {
        return (&arg[..=i], &arg[i + 1..]);
    }
    ("", arg)
}

fn has_traversal(p: &str) -> bool {
    Path::new(p).components().any(|c| c == Component::ParentDir)
}

/// RECEIPT-04: a non-empty argv of non-empty strings without NUL.
pub fn validate_argv(argv: &[String]) -> Result<(), String> {
    if argv.is_empty() || argv.iter().any(|a| a.is_empty() || a.contains('\0')) {
        return Err(msg::ARGV.into());
    }
    Ok(())
}

/// RECEIPT-07. `resolve` canonicalises a path that exists (symlinks
/// resolved) and returns None otherwise.
pub fn normalise(
    argv: &[String],
    cwd: &Path,
    resolve: &dyn Fn(&Path) -> Option<PathBuf>,
) -> Result<Vec<String>, String> {
    let exe = Path::new(&argv[0]);
    if exe.is_absolute() {
        let inside = exe.starts_with(cwd) || resolve(exe).is_some_and(|r| r.starts_with(cwd));
        if inside {
            return Err(msg::EXECUTABLE.into());
        }
    } else if argv[0].contains(['/', '\\']) {
        return Err(msg::EXECUTABLE.into());
    }
    argv.iter()
        .map(|arg| {
            let (prefix, value) = split_option(arg);
            if has_traversal(value) {
                return Err(msg::TRAVERSAL.to_string());
            }
            let p = Path::new(value);
            if p.is_absolute()
                && let Some(r) = resolve(p).filter(|r| r.starts_with(cwd))
            {
                return Ok(format!("{prefix}{}", r.display()));
            }
            Ok(arg.clone())
        })
        .collect()
}

/// Rewrites every absolute argument inside `from` to the same relative
/// location under `to` (`to` empty: plain relative paths, RECEIPT-15).
pub fn rebase(argv: &[String], from: &Path, to: &Path) -> Result<Vec<String>, String> {
    argv.iter()
        .map(|arg| {
            let (prefix, value) = split_option(arg);
            if has_traversal(value) {
                return Err(msg::TRAVERSAL.to_string());
            }
            match Path::new(value).strip_prefix(from) {
                Ok(rel) if Path::new(value).is_absolute() => {
                    let moved = match (rel.as_os_str().is_empty(), to.as_os_str().is_empty()) {
                        (true, true) => PathBuf::from("."),
                        (true, false) => to.to_path_buf(),
                        (false, true) => rel.to_path_buf(),
                        (false, false) => to.join(rel),
                    };
                    Ok(format!("{prefix}{}", moved.display()))
                }
                _ => Ok(arg.clone()),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    /// Pretends every absolute path exists and is already canonical.
    fn ident(p: &Path) -> Option<PathBuf> {
        Some(p.to_path_buf())
    }

    #[test]
    fn argv_must_be_nonempty_strings() {
        assert!(validate_argv(&argv(&["python3", "-m", "pytest"])).is_ok());
        for bad in [vec![], argv(&[""]), argv(&["a", ""]), argv(&["a\0b"])] {
            assert_eq!(validate_argv(&bad).unwrap_err(), msg::ARGV);
        }
    }

    #[test]
    fn executable_must_be_outside_the_project() {
        let cwd = Path::new("/proj");
        assert_eq!(
            normalise(&argv(&["/proj/run.sh"]), cwd, &ident).unwrap_err(),
            msg::EXECUTABLE
        );
        assert_eq!(
            normalise(&argv(&["./run.sh"]), cwd, &ident).unwrap_err(),
            msg::EXECUTABLE
        );
        assert_eq!(
            normalise(&argv(&["bin\\x"]), cwd, &ident).unwrap_err(),
            msg::EXECUTABLE
        );
        // A symlink outside that resolves inside is inside.
        let sneaky = |p: &Path| {
            Some(if p == Path::new("/usr/local/bin/t") {
                PathBuf::from("/proj/t")
            } else {
                p.to_path_buf()
            })
        };
        assert_eq!(
            normalise(&argv(&["/usr/local/bin/t"]), cwd, &sneaky).unwrap_err(),
            msg::EXECUTABLE
        );
        assert!(normalise(&argv(&["python3"]), cwd, &ident).is_ok());
    }

    #[test]
    fn arguments_are_confined_and_resolved() {
        let cwd = Path::new("/proj");
        assert_eq!(
            normalise(&argv(&["sh", "../x"]), cwd, &ident).unwrap_err(),
            msg::TRAVERSAL
        );
        assert_eq!(
            normalise(&argv(&["sh", "--cfg=/proj/../etc"]), cwd, &ident).unwrap_err(),
            msg::TRAVERSAL
        );
        assert_eq!(
            normalise(
                &argv(&[
                    "/usr/bin/python3",
                    "--rootdir=/proj/t",
                    "/proj/tests",
                    "-k",
                    "x"
                ]),
                cwd,
                &ident
            )
            .unwrap(),
            argv(&[
                "/usr/bin/python3",
                "--rootdir=/proj/t",
                "/proj/tests",
                "-k",
                "x"
            ])
        );
    }

    #[test]
    fn rebase_to_relative_and_to_the_run_folder() {
        let a = argv(&[
            "/usr/bin/python3",
            "/proj/tests",
            "--c=/proj/p.ini",
            "/proj",
            "-x",
        ]);
        assert_eq!(
            rebase(&a, Path::new("/proj"), Path::new("")).unwrap(),
            argv(&["/usr/bin/python3", "tests", "--c=p.ini", ".", "-x"])
        );
        assert_eq!(
            rebase(&a, Path::new("/proj"), Path::new("/tmp/run")).unwrap(),
            argv(&[
                "/usr/bin/python3",
                "/tmp/run/tests",
                "--c=/tmp/run/p.ini",
                "/tmp/run",
                "-x"
            ])
        );
    }
}
