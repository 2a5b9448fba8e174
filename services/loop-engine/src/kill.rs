//! The kill switch of a running engine. `SLM_LOOP_KILL` (any non-empty value)
//! still works, but an environment variable cannot be changed on a running
//! daemon, so the switch also reads two files in the data root that any
//! process (the CLI, the Kill RPC) can create: `loop-kill` stops every run,
//! `loop-kill.d/<run id>` stops one. Checked at the start of every lap.

use std::path::{Path, PathBuf};

use crate::domain::{EnvKillSwitch, KillSwitch};

#[derive(Debug, Clone)]
pub struct KillFiles {
    root: Option<PathBuf>,
}

/// A run id as a file name: itself when it is plain, else hex of its bytes.
fn run_file_name(run_id: &str) -> Option<String> {
    let plain = !run_id.is_empty()
        && !run_id.starts_with('.')
        && run_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if plain && run_id.len() <= 200 {
        return Some(run_id.to_string());
    }
    (run_id.len() <= 100).then(|| {
        let hex: String = run_id.bytes().map(|b| format!("{b:02x}")).collect();
        format!("x-{hex}")
    })
}

impl KillFiles {
    /// Without a data root only the environment variable and nothing else
    /// can kill (an in-memory engine, e.g. in benchmarks).
    pub fn new(root: Option<&Path>) -> Self {
        Self {
            root: root.map(Path::to_path_buf),
        }
    }

    fn global(&self) -> Option<PathBuf> {
        self.root.as_ref().map(|r| r.join("loop-kill"))
    }

    fn run(&self, run_id: &str) -> Option<PathBuf> {
        Some(
            self.root
                .as_ref()?
                .join("loop-kill.d")
                .join(run_file_name(run_id)?),
        )
    }

    /// Trips the switch for one run, or for all runs when `run_id` is None.
    pub fn engage(&self, run_id: Option<&str>) -> std::io::Result<PathBuf> {
        let path = match run_id {
            None => self.global(),
            Some(r) => self.run(r),
        }
        .ok_or_else(|| std::io::Error::other("this engine has no data root to hold a kill file"))?;
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, b"killed\n")?;
        Ok(path)
    }

    /// Releases the switch; a missing file is not an error.
    pub fn clear(&self, run_id: Option<&str>) -> std::io::Result<()> {
        let path = match run_id {
            None => self.global(),
            Some(r) => self.run(r),
        };
        match path.map(std::fs::remove_file) {
            Some(Err(e)) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    pub fn is_engaged(&self) -> bool {
        self.global().is_some_and(|p| p.exists())
    }

    pub fn switch_for(&self, run_id: &str) -> RunKillSwitch {
        RunKillSwitch {
            global: self.global(),
            run: self.run(run_id),
        }
    }
}

/// The switch one run consults.
#[derive(Debug, Clone)]
pub struct RunKillSwitch {
    global: Option<PathBuf>,
    run: Option<PathBuf>,
}

impl KillSwitch for RunKillSwitch {
    fn tripped(&self) -> bool {
        EnvKillSwitch.tripped()
            || self.global.as_ref().is_some_and(|p| p.exists())
            || self.run.as_ref().is_some_and(|p| p.exists())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_trip_one_run_or_all() {
        let dir = tempfile::tempdir().unwrap();
        let k = KillFiles::new(Some(dir.path()));
        let a = k.switch_for("build-1");
        let b = k.switch_for("other/../x");
        assert!(!a.tripped() || std::env::var_os("SLM_LOOP_KILL").is_some());
        k.engage(Some("build-1")).unwrap();
        assert!(a.tripped());
        k.clear(Some("build-1")).unwrap();
        k.engage(None).unwrap();
        assert!(a.tripped() && b.tripped() && k.is_engaged());
        k.clear(None).unwrap();
        k.clear(None).unwrap();
        assert!(!k.is_engaged());
        // Odd run ids never escape the kill directory.
        assert_eq!(
            run_file_name("other/../x").unwrap(),
            "x-6f746865722f2e2e2f78"
        );
        assert_eq!(run_file_name(".."), Some("x-2e2e".into()));
        assert_eq!(run_file_name(&"é".repeat(100)), None);
    }

    #[test]
    fn no_root_means_no_files() {
        let k = KillFiles::new(None);
        assert!(k.engage(None).is_err());
        assert!(k.clear(None).is_ok());
    }
}
