//! Configuration from the environment: the data root, per-service database
//! URLs and peer addresses.

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot find a data root: set SLM_DATA_DIR (no HOME in the environment)")]
    NoHome,
    #[error("SLM_DATA_DIR must be an absolute path, got {0:?}")]
    NotAbsolute(PathBuf),
    #[error("cannot create the data root {path}: {source}")]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The directory holding a local installation's databases and keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataRoot(PathBuf);

impl DataRoot {
    /// `SLM_DATA_DIR`, else `$XDG_DATA_HOME/slm`, else `~/.local/share/slm`.
    /// A separate default from the Python reference's `~/.superlocalmemory`,
    /// whose `memory.db` has another schema.
    pub fn from_env() -> Result<Self, ConfigError> {
        let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
        let path = if let Some(dir) = var("SLM_DATA_DIR") {
            PathBuf::from(dir)
        } else if let Some(xdg) = var("XDG_DATA_HOME") {
            PathBuf::from(xdg).join("slm")
        } else {
            PathBuf::from(var("HOME").ok_or(ConfigError::NoHome)?).join(".local/share/slm")
        };
        Self::new(path)
    }

    pub fn new(path: impl Into<PathBuf>) -> Result<Self, ConfigError> {
        let path = path.into();
        if !path.is_absolute() {
            return Err(ConfigError::NotAbsolute(path));
        }
        Ok(Self(path))
    }

    /// Creates the directory (mode 0700) when it is missing.
    pub fn ensure(&self) -> Result<(), ConfigError> {
        use std::os::unix::fs::DirBuilderExt;
        if self.0.is_dir() {
            return Ok(());
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.0)
            .map_err(|source| ConfigError::Create {
                path: self.0.clone(),
                source,
            })
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn join(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.0.join(rel)
    }

    /// The database URL of `service`: `SLM_<SERVICE>_DATABASE_URL`, else
    /// `SLM_DATABASE_URL`, else an SQLite file `file` in the data root.
    pub fn database_url(&self, service: &str, file: &str) -> String {
        env_nonempty(&format!("SLM_{}_DATABASE_URL", env_key(service)))
            .or_else(|| env_nonempty("SLM_DATABASE_URL"))
            .unwrap_or_else(|| sqlite_url(&self.0.join(file)))
    }
}

/// `sqlite://` URL for a file, created when missing.
pub fn sqlite_url(path: &Path) -> String {
    format!("sqlite://{}?mode=rwc", path.display())
}

/// The gRPC address of a remote peer service (`SLM_<SERVICE>_URL`), if any.
pub fn peer_url(service: &str) -> Option<String> {
    env_nonempty(&format!("SLM_{}_URL", env_key(service)))
}

fn env_key(service: &str) -> String {
    service.to_ascii_uppercase().replace('-', "_")
}

fn env_nonempty(key: &str) -> Option<String> {
    std::env::var(key).ok().filter(|v| !v.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_data_root_is_refused() {
        assert!(matches!(
            DataRoot::new("rel/dir"),
            Err(ConfigError::NotAbsolute(_))
        ));
    }

    #[test]
    fn sqlite_file_is_the_default_database() {
        let root = DataRoot::new("/tmp/slm-x").unwrap();
        // The test environment does not set the override variables.
        if std::env::var_os("SLM_DATABASE_URL").is_none()
            && std::env::var_os("SLM_LEDGER_DATABASE_URL").is_none()
        {
            assert_eq!(
                root.database_url("ledger", "memory.db"),
                "sqlite:///tmp/slm-x/memory.db?mode=rwc"
            );
        }
        assert_eq!(env_key("loop-engine"), "LOOP_ENGINE");
    }
}
