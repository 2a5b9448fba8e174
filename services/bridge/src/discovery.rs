//! Finding and trusting the producer (spec BRIDGE-03..05, 18; GAP-28).
//! Callers never supply a command: only `bounded-loops-mcp` on `PATH` is
//! considered, and the workspace is the only caller input.

use std::ffi::OsString;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::domain::{EXECUTABLE, refusal, sha256_hex};

/// Which contract's refusal texts apply where v1 and v2 differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    V1,
    V2,
}

/// The approved launch: resolved executable and workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approved {
    pub executable: PathBuf,
    pub workspace: PathBuf,
}

/// `PATH` lookup of `bounded-loops-mcp` (like `shutil.which`): the first
/// entry holding an executable file of that name. No process is started.
pub fn which(path_var: Option<OsString>) -> Option<PathBuf> {
    let path_var = path_var?;
    for dir in std::env::split_paths(&path_var) {
        let candidate = if dir.as_os_str().is_empty() {
            PathBuf::from(EXECUTABLE)
        } else {
            dir.join(EXECUTABLE)
        };
        if let Ok(m) = std::fs::metadata(&candidate)
            && m.is_file()
            && m.permissions().mode() & 0o111 != 0
        {
            return Some(candidate);
        }
    }
    None
}

/// BRIDGE-03: discovery on this process's `PATH`, before anything else.
pub fn discover(flavor: Flavor) -> Result<PathBuf, &'static str> {
    discover_in(std::env::var_os("PATH"), flavor)
}

pub fn discover_in(path_var: Option<OsString>, flavor: Flavor) -> Result<PathBuf, &'static str> {
    let found = which(path_var).ok_or(refusal::NOT_INSTALLED)?;
    if !found.is_absolute() {
        return Err(match flavor {
            Flavor::V1 => refusal::UNSAFE_PATH,
            Flavor::V2 => refusal::NOT_INSTALLED,
        });
    }
    let resolved = std::fs::canonicalize(&found).map_err(|_| refusal::PATH_UNAVAILABLE)?;
    let name = resolved.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if name != EXECUTABLE && name != "bounded-loops-mcp.exe" {
        return Err(refusal::UNSAFE_EXECUTABLE);
    }
    Ok(found)
}

/// BRIDGE-04 and BRIDGE-05 (+ GAP-28: every parent directory of the
/// resolved executable is trusted too).
pub fn approve(executable: &Path, workspace: &str) -> Result<Approved, &'static str> {
    let ws = Path::new(workspace);
    let exe_ok = executable.is_absolute() && executable.is_file();
    let ws_ok = ws.is_absolute()
        && !workspace.contains('\0')
        && std::fs::symlink_metadata(ws).is_ok_and(|m| m.is_dir());
    if !exe_ok || !ws_ok {
        return Err(refusal::NOT_APPROVED);
    }
    let exe = std::fs::canonicalize(executable).map_err(|_| refusal::PATH_UNAVAILABLE)?;
    let workspace = std::fs::canonicalize(ws).map_err(|_| refusal::PATH_UNAVAILABLE)?;
    trust_executable(&exe)?;
    Ok(Approved {
        executable: exe,
        workspace,
    })
}

fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// The resolved executable is a regular file, not writable by group or
/// others, owned by root or this user; so is every directory above it,
/// except that a sticky directory (like `/tmp`) may be world-writable.
pub fn trust_executable(exe: &Path) -> Result<(), &'static str> {
    let m = std::fs::metadata(exe).map_err(|_| refusal::PATH_UNAVAILABLE)?;
    if !m.is_file() || m.mode() & 0o022 != 0 {
        return Err(refusal::UNTRUSTED_FILE);
    }
    let me = euid();
    if m.uid() != 0 && m.uid() != me {
        return Err(refusal::UNTRUSTED_OWNER);
    }
    let mut dir = exe.parent();
    while let Some(d) = dir {
        let m = std::fs::metadata(d).map_err(|_| refusal::PATH_UNAVAILABLE)?;
        if m.uid() != 0 && m.uid() != me {
            return Err(refusal::UNTRUSTED_OWNER);
        }
        let sticky = m.mode() & 0o1000 != 0;
        if m.mode() & 0o022 != 0 && !sticky {
            return Err(refusal::UNTRUSTED_FILE);
        }
        dir = d.parent();
    }
    Ok(())
}

/// BRIDGE-18: the v2 producer identity of a resolved launcher script.
pub fn producer_identity(exe: &Path) -> Result<String, &'static str> {
    use std::io::Read;
    let mut head = Vec::with_capacity(4096);
    std::fs::File::open(exe)
        .and_then(|f| f.take(4096).read_to_end(&mut head))
        .map_err(|_| refusal::NO_READABLE_INTERPRETER)?;
    let line_end = head.iter().position(|b| *b == b'\n').unwrap_or(head.len());
    let line =
        std::str::from_utf8(&head[..line_end]).map_err(|_| refusal::NO_READABLE_INTERPRETER)?;
    let Some(rest) = line.strip_prefix("#!") else {
        return Err(refusal::NO_ABSOLUTE_INTERPRETER);
    };
    let interp = rest.split_whitespace().next().unwrap_or("");
    let interp = Path::new(interp);
    if !interp.is_absolute() {
        return Err(refusal::NO_ABSOLUTE_INTERPRETER);
    }
    if !interp.is_file() {
        return Err(refusal::INTERPRETER_UNAVAILABLE);
    }
    let bin = interp.parent().ok_or(refusal::NOT_ISOLATED)?;
    if !matches!(
        bin.file_name().and_then(|n| n.to_str()),
        Some("bin" | "Scripts")
    ) {
        return Err(refusal::NOT_ISOLATED);
    }
    let root = bin.parent().ok_or(refusal::SOURCE_AMBIGUOUS)?;
    let package = find_package(root)?;
    let mut files = Vec::new();
    collect_py(&package, &package, &mut files).map_err(|_| refusal::SOURCE_UNIDENTIFIED)?;
    if files.is_empty() {
        return Err(refusal::SOURCE_EMPTY);
    }
    files.sort();
    let mut h = Sha256::new();
    for rel in &files {
        let bytes = std::fs::read(package.join(rel)).map_err(|_| refusal::SOURCE_UNIDENTIFIED)?;
        h.update(rel.as_bytes());
        h.update([0]);
        h.update(&bytes);
        h.update([0]);
    }
    let package_digest = format!("sha256:{}", hex(&h.finalize()));
    let launcher = std::fs::read(exe).map_err(|_| refusal::SOURCE_UNIDENTIFIED)?;
    let mut id = Vec::new();
    id.extend_from_slice(b"bounded-loops-launcher\0");
    id.extend_from_slice(&launcher);
    id.extend_from_slice(b"\0bounded-loops-package\0");
    id.extend_from_slice(package_digest.as_bytes());
    Ok(format!("sha256:{}", sha256_hex(&id)))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Exactly one non-symlink `lib/python*/site-packages/bounded_loops`.
fn find_package(root: &Path) -> Result<PathBuf, &'static str> {
    let mut found = Vec::new();
    let lib = root.join("lib");
    let entries = std::fs::read_dir(&lib).map_err(|_| refusal::SOURCE_AMBIGUOUS)?;
    for e in entries.flatten() {
        let name = e.file_name();
        if !name.to_string_lossy().starts_with("python") {
            continue;
        }
        let p = lib.join(name).join("site-packages/bounded_loops");
        if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir()) {
            found.push(p);
        }
    }
    if found.len() != 1 {
        return Err(refusal::SOURCE_AMBIGUOUS);
    }
    Ok(found.remove(0))
}

/// Relative POSIX paths of every non-symlink `*.py` file below `dir`.
fn collect_py(base: &Path, dir: &Path, out: &mut Vec<String>) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let ft = e.file_type()?;
        let p = e.path();
        if ft.is_symlink() {
            continue;
        }
        if ft.is_dir() {
            collect_py(base, &p, out)?;
        } else if ft.is_file() && p.extension().is_some_and(|x| x == "py") {
            let rel = p.strip_prefix(base).expect("below base");
            let parts: Vec<String> = rel
                .components()
                .filter_map(|c| match c {
                    Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
                    _ => None,
                })
                .collect();
            out.push(parts.join("/"));
        }
    }
    Ok(())
}
