//! `slm profile …`, `slm backup`, `slm restore`.

use std::fs::File;
use std::path::Path;

use anyhow::{Context, bail};
use serde_json::json;

use slm_proto::v1 as pb;
use slm_runtime::DataRoot;

use crate::cli::ProfileCommand;
use crate::operator::{operator, operator_token};
use crate::services::{LEARNING_DB, LEDGER_DB, RECEIPT_DB, SERVE_LOCK, Services};
use crate::{print_json, rpc};
use slm_runtime::config::peer_url;

/// The databases a backup holds, by file name in the data root.
const DATABASES: &[&str] = &[LEDGER_DB, RECEIPT_DB, LEARNING_DB];
const REMOTE: &str = "backup and restore work on the data root of this machine; unset SLM_LEDGER_URL and SLM_RECEIPT_URL and run them on the host that holds the data";
const MANIFEST: &str = "backup.json";

pub async fn profile(s: &mut Services, c: ProfileCommand) -> anyhow::Result<i32> {
    match c {
        ProfileCommand::List { json } => {
            let ps = s
                .ledger
                .list_profiles(pb::ListProfilesRequest {})
                .await
                .map_err(rpc)?
                .into_inner()
                .profiles;
            if json {
                let rows: Vec<_> = ps
                    .iter()
                    .map(|p| json!({"profile_id": p.profile_id, "created_at": p.created_at}))
                    .collect();
                print_json(&json!({"profiles": rows}));
            } else {
                for p in ps {
                    println!("{}  (created {})", p.profile_id, p.created_at);
                }
            }
        }
        ProfileCommand::Create { name, json } => {
            let p = s
                .ledger
                .create_profile(pb::CreateProfileRequest { profile_id: name })
                .await
                .map_err(rpc)?
                .into_inner();
            // A new profile under an erased name may record evidence again.
            s.bridge
                .reopen_profile(pb::ProfileErasure {
                    profile_id: p.profile_id.clone(),
                })
                .await
                .map_err(rpc)?;
            if json {
                print_json(&json!({"ok": true, "profile_id": p.profile_id}));
            } else {
                println!("created profile {}", p.profile_id);
            }
        }
        ProfileCommand::Delete { name, json } => {
            let known = s
                .ledger
                .list_profiles(pb::ListProfilesRequest {})
                .await
                .map_err(rpc)?
                .into_inner()
                .profiles
                .iter()
                .any(|p| p.profile_id == name.trim());
            if !known {
                bail!(
                    "There is no profile '{}' on this computer. A tool call never creates a profile.",
                    name.trim()
                );
            }
            if name.trim() == "default" {
                bail!("the default profile cannot be deleted");
            }
            // Every service forgets the profile: the bridge first (its
            // tombstone refuses evidence arriving meanwhile), then jobs and
            // receipts, then the memories and the profile itself.
            s.bridge
                .erase_profile(pb::ProfileErasure {
                    profile_id: name.clone(),
                })
                .await
                .map_err(rpc)?;
            let token = operator_token(s)?;
            let erased = s
                .receipt
                .erase_profile(operator(
                    &token,
                    pb::EraseReceiptsRequest {
                        profile_id: name.clone(),
                    },
                )?)
                .await
                .map_err(rpc)?
                .into_inner();
            let r = s
                .ledger
                .delete_profile(pb::DeleteProfileRequest {
                    profile_id: name.clone(),
                })
                .await
                .map_err(rpc)?
                .into_inner();
            if json {
                print_json(&json!({
                    "ok": true,
                    "profile_id": name,
                    "memories_deleted": r.memories_deleted,
                    "jobs_deleted": erased.jobs,
                    "receipts_deleted": erased.receipts,
                }));
            } else {
                println!(
                    "deleted profile {name}: {} memories, {} jobs, {} receipts, its bridge evidence",
                    r.memories_deleted, erased.jobs, erased.receipts
                );
            }
        }
    }
    Ok(0)
}

pub async fn backup(s: &mut Services, dest: &Path, json: bool) -> anyhow::Result<i32> {
    let dbs = s
        .embedded_databases()
        .ok_or_else(|| anyhow::anyhow!(REMOTE))?;
    let dest = std::path::absolute(dest)?;
    if dest.exists() {
        bail!("backup destination {} already exists", dest.display());
    }
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dest)
            .with_context(|| format!("creating {}", dest.display()))?;
    }
    let mut files = Vec::new();
    for (file, db) in dbs {
        let bytes = db
            .backup_to(&dest.join(file))
            .await
            .with_context(|| format!("backing up {file}"))?;
        files.push(json!({"file": file, "bytes": bytes}));
    }
    let manifest = json!({
        "format": "slm-backup/v1",
        "created_at": slm_runtime::time::now_iso(),
        "source": s.root.path().display().to_string(),
        "files": files,
    });
    std::fs::write(
        dest.join(MANIFEST),
        serde_json::to_string_pretty(&manifest)?,
    )?;
    if json {
        print_json(&json!({"ok": true, "destination": dest.display().to_string(), "files": files}));
    } else {
        for f in &files {
            println!(
                "backed up {} ({} bytes)",
                f["file"].as_str().unwrap_or(""),
                f["bytes"]
            );
        }
        println!("into {}", dest.display());
    }
    Ok(0)
}

/// True when a file starts like an SQLite database.
fn is_sqlite(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 16];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok()
        && &head == b"SQLite format 3\0"
}

pub fn restore(src: &Path, json: bool) -> anyhow::Result<i32> {
    if peer_url("ledger").is_some() || peer_url("receipt").is_some() {
        bail!(REMOTE);
    }
    let root = DataRoot::from_env()?;
    root.ensure()?;
    if !src.join(MANIFEST).is_file() {
        bail!(
            "{} is not a backup made by `slm backup` (no {MANIFEST})",
            src.display()
        );
    }
    let present: Vec<&str> = DATABASES
        .iter()
        .copied()
        .filter(|f| src.join(f).exists())
        .collect();
    if present.is_empty() {
        bail!("{} holds no database to restore", src.display());
    }
    for f in &present {
        if !is_sqlite(&src.join(f)) {
            bail!("{} is not an SQLite database", src.join(f).display());
        }
    }
    // Refuse while a server holds the data root: it would keep writing to
    // the files being replaced.
    let lock = File::create(root.join(SERVE_LOCK))?;
    if lock.try_lock().is_err() {
        bail!(
            "slm serve is running on {}; stop it before restoring",
            root.path().display()
        );
    }
    let stamp = slm_runtime::time::now_iso().replace([':', '+'], "-");
    let mut restored = Vec::new();
    for f in present {
        let live = root.join(f);
        if live.exists() {
            std::fs::rename(&live, root.join(format!("{f}.pre-restore-{stamp}")))?;
        }
        for suffix in ["-wal", "-shm"] {
            let side = root.join(format!("{f}{suffix}"));
            if side.exists() {
                std::fs::rename(&side, root.join(format!("{f}{suffix}.pre-restore-{stamp}")))?;
            }
        }
        std::fs::copy(src.join(f), &live)
            .with_context(|| format!("copying {} into the data root", f))?;
        restored.push(f.to_string());
    }
    drop(lock);
    if json {
        print_json(
            &json!({"ok": true, "restored": restored, "data_root": root.path().display().to_string()}),
        );
    } else {
        println!(
            "restored {} into {} (previous files kept as *.pre-restore-{stamp})",
            restored.join(", "),
            root.path().display()
        );
    }
    Ok(0)
}
