//! Bridge status of the separate Bounded Loops product (spec DASH-03..06).
//!
//! Kept small and isolated: the bridge service and its contract are evolving.
//! Detection is a PATH lookup of `bounded-loops-mcp` (no process is started
//! here), then the bridge service's own cached 1.5 s probe when a bridge
//! client is configured. Nothing here claims the bridge contract is live:
//! that needs an MCP handshake, which neither step does.

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;
use slm_proto::v1 as pb;
use slm_proto::v1::bridge_client::BridgeClient;
use slm_runtime::Transport;

/// The executable the separate product installs.
pub const EXECUTABLE: &str = "bounded-loops-mcp";
/// The published bridge contract.
pub const CONTRACT: &str = "bounded-loops.dev/slm-bridge/v1";
/// Upper bound on one bridge call from a page (its probe is 1.5 s).
const CALL_TIMEOUT: Duration = Duration::from_secs(3);
/// Latest observed runs shown.
const RUNS_SHOWN: u32 = 20;

#[derive(Debug, Clone, Serialize)]
pub struct ObservedRun {
    pub run_ref: String,
    pub run_id: String,
    pub outcome: String,
    pub terminal_at: String,
    pub contract: String,
    pub eligible_for_learning: bool,
    pub run_state: String,
    pub demonstration: bool,
    pub observed_at: String,
    pub receipt_sequence: i64,
}

#[derive(Debug, Clone, Serialize)]
pub struct BridgePane {
    /// `installed` | `not installed` | `unknown`.
    pub state: String,
    /// true / false / null (unknown): a failed probe is never "not installed".
    pub installed: Option<bool>,
    pub version: String,
    pub reason: String,
    pub contract: &'static str,
    pub contracts: Vec<String>,
    /// "Bounded Loop observations" stored by SLM.
    pub observations: u64,
    /// How many of the observed runs are demonstrations.
    pub demonstration_count: u64,
    pub runs: Vec<ObservedRun>,
    /// The bridge's probe failed (the state is then `unknown`).
    pub probe_failed: bool,
    /// Always false: SLM only observes; nothing is learned from these runs.
    pub eligible_for_learning: bool,
    pub control_plane: &'static str,
    /// Always false: the probe does no MCP handshake.
    pub contract_verified_live: bool,
    /// `bridge-service` when a bridge service answered, else `path-lookup`.
    pub source: &'static str,
    pub found_on_path: bool,
}

impl BridgePane {
    fn from_path(found: bool) -> Self {
        Self {
            state: if found { "unknown" } else { "not installed" }.into(),
            installed: if found { None } else { Some(false) },
            version: String::new(),
            reason: if found {
                "found_on_path_no_bridge_service".into()
            } else {
                "bounded_loops_mcp_not_in_path".into()
            },
            contract: CONTRACT,
            contracts: Vec::new(),
            observations: 0,
            demonstration_count: 0,
            runs: Vec::new(),
            probe_failed: false,
            eligible_for_learning: false,
            control_plane: "observation_only",
            contract_verified_live: false,
            source: "path-lookup",
            found_on_path: found,
        }
    }
}

/// PATH lookup only: a regular file with an execute bit, no process started.
pub fn on_path(path_var: Option<&OsString>, name: &str) -> bool {
    let Some(p) = path_var else { return false };
    std::env::split_paths(p).any(|dir| is_executable(&dir.join(name)))
}

fn is_executable(p: &Path) -> bool {
    match std::fs::metadata(p) {
        Ok(m) if m.is_file() => {
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                m.permissions().mode() & 0o111 != 0
            }
            #[cfg(not(unix))]
            {
                true
            }
        }
        _ => false,
    }
}

/// The pane's data. `path_var` is the PATH to search (normally the process's).
pub async fn status(
    bridge: Option<&BridgeClient<Transport>>,
    path_var: Option<&OsString>,
) -> BridgePane {
    let found = on_path(path_var, EXECUTABLE);
    let Some(client) = bridge else {
        return BridgePane::from_path(found);
    };
    let mut pane = BridgePane::from_path(found);
    match tokio::time::timeout(
        CALL_TIMEOUT,
        client.clone().status(pb::BridgeStatusRequest {}),
    )
    .await
    {
        Ok(Ok(r)) => {
            let r = r.into_inner();
            pane.probe_failed = r.probe_failed;
            pane.installed = match r.state.as_str() {
                _ if r.probe_failed => None,
                "installed" => Some(true),
                "not installed" => Some(false),
                _ => None,
            };
            pane.state = match pane.installed {
                Some(true) => "installed",
                Some(false) => "not installed",
                None => "unknown",
            }
            .into();
            pane.version = r.version;
            pane.reason = r.reason;
            pane.contracts = r.contracts;
            pane.observations = r.observations;
            pane.source = "bridge-service";
        }
        // A failed probe is "unknown", never "not installed" (GAP-30), unless
        // the PATH lookup already proved absence.
        Ok(Err(s)) if found => {
            pane.probe_failed = true;
            pane.reason = format!("probe_error:{:?}", s.code());
        }
        Err(_) if found => {
            pane.probe_failed = true;
            pane.reason = "probe_error:timeout".into();
        }
        _ => {}
    }
    if let Ok(Ok(r)) = tokio::time::timeout(
        CALL_TIMEOUT,
        client
            .clone()
            .list_observations(pb::ListObservationsRequest {
                profile_id: String::new(),
                limit: RUNS_SHOWN,
            }),
    )
    .await
    {
        let r = r.into_inner();
        pane.observations = pane.observations.max(r.total);
        pane.demonstration_count = r.demonstration_count;
        pane.runs = r
            .observations
            .into_iter()
            .map(|o| ObservedRun {
                run_ref: o.run_ref,
                run_id: o.run_id,
                outcome: o.outcome,
                terminal_at: o.terminal_at,
                contract: o.contract,
                eligible_for_learning: o.eligible_for_learning,
                run_state: o.run_state,
                demonstration: o.demonstration,
                observed_at: o.observed_at,
                receipt_sequence: o.receipt_sequence,
            })
            .collect();
    }
    pane
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_lookup_needs_an_executable_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = OsString::from(dir.path());
        assert!(!on_path(Some(&path), EXECUTABLE));
        let exe = dir.path().join(EXECUTABLE);
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert!(!on_path(Some(&path), EXECUTABLE), "not executable yet");
            std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        assert!(on_path(Some(&path), EXECUTABLE));
        assert!(!on_path(None, EXECUTABLE));
    }
}
