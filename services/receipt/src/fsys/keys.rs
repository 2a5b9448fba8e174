//! Secrets of the receipt service, in `<data root>/loop-admission/` (0700):
//! the 32-byte HMAC admission key and the operator token. Both are 0600
//! files owned by this user; anything else is refused (RECEIPT-11, GAP-12).

use std::io::{Read, Write};
use std::path::Path;

use rustix::fs::{FileType, Mode, OFlags, ResolveFlags, fstat, openat2};
use rustix::io::Errno;

use super::tree::Dir;
use crate::domain::canon::hex;
use crate::domain::evidence::KEY_LEN;
use crate::domain::msg;

pub const KEY_DIR: &str = "loop-admission";
pub const KEY_FILE: &str = "admission.key";
pub const TOKEN_FILE: &str = "operator.token";

const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

fn random_bytes(n: usize) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0u8; n];
    let mut filled = 0;
    while filled < n {
        filled +=
            rustix::rand::getrandom(&mut buf[filled..], rustix::rand::GetRandomFlags::empty())?;
    }
    Ok(buf)
}

/// The secrets directory, created 0700 when asked; refused unless it is a
/// directory of ours that nobody else can enter.
fn secrets_dir(data_root: &Path, create: bool) -> Result<Dir, String> {
    let root = Dir::open(data_root).map_err(|_| msg::PRIVATE_SYMLINK.to_string())?;
    let dir = root
        .subdir(KEY_DIR, create)
        .map_err(|_| msg::PRIVATE_SYMLINK.to_string())?;
    if create {
        dir.make_private().map_err(|_| msg::KEY_MODE.to_string())?;
    }
    let st = dir.stat().map_err(|_| msg::KEY_MODE.to_string())?;
    if st.st_uid != rustix::process::geteuid().as_raw() || st.st_mode & 0o077 != 0 {
        return Err(msg::KEY_MODE.into());
    }
    Ok(dir)
}

/// Reads a secret file: regular, exactly 0600, ours, at most `max` bytes.
fn read_secret(dir: &Dir, name: &str, max: usize) -> Result<Option<Vec<u8>>, String> {
    let dirfd = rustix::fs::open(
        dir.path(),
        OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|_| msg::PRIVATE_SYMLINK.to_string())?;
    let fd = match openat2(
        &dirfd,
        name,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        RESOLVE,
    ) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(_) => return Err(msg::KEY_MODE.into()),
    };
    let st = fstat(&fd).map_err(|_| msg::KEY_MODE.to_string())?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile
        || st.st_mode & 0o7777 != 0o600
        || st.st_uid != rustix::process::geteuid().as_raw()
    {
        return Err(msg::KEY_MODE.into());
    }
    let mut buf = Vec::with_capacity(max + 1);
    std::fs::File::from(fd)
        .take(max as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(|_| msg::KEY_INVALID.to_string())?;
    Ok(Some(buf))
}

/// Writes a new secret exclusively; when another process won the race,
/// returns None and the caller reads theirs.
fn create_secret(dir: &Dir, name: &str, bytes: &[u8]) -> Result<bool, String> {
    match dir.create_file(name) {
        Ok(mut f) => {
            f.write_all(bytes)
                .and_then(|_| f.sync_all())
                .map_err(|_| msg::KEY_INVALID.to_string())?;
            Ok(true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(_) => Err(msg::KEY_MODE.into()),
    }
}

/// The admission key; created on first use when `create`.
pub fn admission_key(data_root: &Path, create: bool) -> Result<Vec<u8>, String> {
    let dir = secrets_dir(data_root, create)?;
    if create && read_secret(&dir, KEY_FILE, KEY_LEN)?.is_none() {
        let key = random_bytes(KEY_LEN).map_err(|_| msg::KEY_INVALID.to_string())?;
        create_secret(&dir, KEY_FILE, &key)?;
    }
    match read_secret(&dir, KEY_FILE, KEY_LEN)? {
        Some(k) if k.len() == KEY_LEN => Ok(k),
        Some(_) => Err(msg::KEY_INVALID.into()),
        None => Err(msg::KEY_INVALID.into()),
    }
}

/// The operator token (64 hex characters); created on first use when
/// `create`.
pub fn operator_token(data_root: &Path, create: bool) -> Result<String, String> {
    let dir = secrets_dir(data_root, create)?;
    if create && read_secret(&dir, TOKEN_FILE, 64)?.is_none() {
        let token = hex(&random_bytes(32).map_err(|_| msg::KEY_INVALID.to_string())?);
        create_secret(&dir, TOKEN_FILE, token.as_bytes())?;
    }
    let bytes = read_secret(&dir, TOKEN_FILE, 64)?.ok_or_else(|| msg::KEY_INVALID.to_string())?;
    let token = String::from_utf8(bytes).map_err(|_| msg::KEY_INVALID.to_string())?;
    if token.len() != 64 {
        return Err(msg::KEY_INVALID.into());
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn keys_are_created_once_and_checked_on_read() {
        let d = tempfile::tempdir().unwrap();
        let k1 = admission_key(d.path(), true).unwrap();
        assert_eq!(k1.len(), 32);
        assert_eq!(admission_key(d.path(), true).unwrap(), k1);
        assert_eq!(admission_key(d.path(), false).unwrap(), k1);
        let path = d.path().join(KEY_DIR).join(KEY_FILE);
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );

        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(admission_key(d.path(), false).unwrap_err(), msg::KEY_MODE);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();

        std::fs::write(&path, [1u8; 31]).unwrap();
        assert_eq!(
            admission_key(d.path(), false).unwrap_err(),
            msg::KEY_INVALID
        );
        std::fs::write(&path, [1u8; 33]).unwrap();
        assert_eq!(
            admission_key(d.path(), false).unwrap_err(),
            msg::KEY_INVALID
        );

        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", &path).unwrap();
        assert_eq!(admission_key(d.path(), false).unwrap_err(), msg::KEY_MODE);
    }

    #[test]
    fn a_group_readable_secrets_folder_is_refused() {
        let d = tempfile::tempdir().unwrap();
        admission_key(d.path(), true).unwrap();
        let dir = d.path().join(KEY_DIR);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o750)).unwrap();
        assert_eq!(admission_key(d.path(), false).unwrap_err(), msg::KEY_MODE);
    }

    #[test]
    fn operator_token_is_random_hex() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let ta = operator_token(a.path(), true).unwrap();
        assert_eq!(ta.len(), 64);
        assert_eq!(operator_token(a.path(), false).unwrap(), ta);
        assert_ne!(operator_token(b.path(), true).unwrap(), ta);
        assert!(operator_token(tempfile::tempdir().unwrap().path(), false).is_err());
    }
}
