//! The two observations (spec BRIDGE-09, 16, 19, 22) and the status probe
//! (DASH-06): discovery → trust → one bounded MCP exchange → store.

use std::ffi::OsString;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use crate::client::{Fail, OBSERVATION_TIMEOUT, Producer, with_producer};
use crate::discovery::{self, Flavor};
use crate::domain::{self, *};
use crate::reply;
use crate::store::Store;

/// The result of one observation (BRIDGE-16 / BRIDGE-22 shapes).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Outcome {
    pub success: bool,
    pub durable: bool,
    pub observed: u32,
    pub created: u32,
    pub retryable: Option<bool>,
    pub error: Option<String>,
    pub control_plane: &'static str,
}

impl Outcome {
    fn refused(error: impl Into<String>) -> Self {
        Self {
            error: Some(error.into()),
            ..Default::default()
        }
    }

    /// The MCP tool result as the spec shapes it.
    pub fn to_json(&self) -> Value {
        if self.success {
            return json!({"success": true, "durable": true, "observed": self.observed,
                "created": self.created, "control_plane": self.control_plane});
        }
        let mut v = json!({"success": false, "durable": self.durable, "created": self.created,
            "error": self.error.clone().unwrap_or_default()});
        if let Some(r) = self.retryable {
            v["retryable"] = Value::Bool(r);
        }
        v
    }
}

/// Rows created so far and the first write failure.
#[derive(Default)]
struct Tally {
    created: u32,
    failed: Option<crate::store::WriteError>,
}

impl Tally {
    fn add(&mut self, r: Result<bool, crate::store::WriteError>) -> bool {
        match r {
            Ok(created) => {
                self.created += u32::from(created);
                true
            }
            Err(e) => {
                self.failed = Some(e);
                false
            }
        }
    }

    fn outcome(self, observed: usize) -> Outcome {
        match self.failed {
            Some(e) => Outcome {
                durable: self.created > 0,
                created: self.created,
                retryable: Some(e.retryable),
                error: Some(e.message),
                ..Default::default()
            },
            None => Outcome {
                success: true,
                durable: true,
                observed: observed as u32,
                created: self.created,
                ..Default::default()
            },
        }
    }
}

/// The bridge: where to look for the producer and where evidence goes.
#[derive(Clone)]
pub struct Bridge {
    store: Store,
    /// The `PATH` searched for `bounded-loops-mcp` and given to the child;
    /// None = this process's `PATH`.
    search_path: Option<OsString>,
    timeout: Duration,
    probe: Arc<tokio::sync::Mutex<Option<(Instant, Probe)>>>,
}

/// DASH-06 detection result. `installed == None` is "unknown" (probe failed).
#[derive(Debug, Clone, PartialEq)]
pub struct Probe {
    pub installed: Option<bool>,
    pub version: String,
    pub reason: String,
    pub contracts: Vec<String>,
}

pub const PROBE_TIMEOUT: Duration = Duration::from_millis(1500);
pub const PROBE_CACHE: Duration = Duration::from_secs(60);

impl Bridge {
    pub fn new(store: Store) -> Self {
        Self {
            store,
            search_path: None,
            timeout: OBSERVATION_TIMEOUT,
            probe: Arc::default(),
        }
    }

    /// Searches `path` instead of this process's `PATH` (tests, operators).
    pub fn with_search_path(mut self, path: impl Into<OsString>) -> Self {
        self.search_path = Some(path.into());
        self
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    fn path_var(&self) -> Option<OsString> {
        self.search_path
            .clone()
            .or_else(|| std::env::var_os("PATH"))
    }

    /// `observe_bounded_loop_evidence(workspace)` under `profile`.
    pub async fn observe_evidence(&self, profile: &str, workspace: &str) -> Outcome {
        let mut out = match self.collect_v1(profile, workspace).await {
            Ok(payloads) => {
                let mut t = Tally::default();
                for p in &payloads {
                    if !t.add(self.store.insert_v1(p).await) {
                        break;
                    }
                }
                t.outcome(payloads.len())
            }
            Err(e) => Outcome::refused(e),
        };
        out.control_plane = CONTROL_PLANE_V1;
        out
    }

    /// `observe_bounded_loop_execution_learning(workspace)` under `profile`.
    pub async fn observe_execution_learning(&self, profile: &str, workspace: &str) -> Outcome {
        let mut out = match self.collect_v2(profile, workspace).await {
            Ok(sealed) => {
                let mut t = Tally::default();
                for s in &sealed {
                    if !t.add(self.store.insert_v2(s).await) {
                        break;
                    }
                }
                t.outcome(sealed.len())
            }
            Err(e) => Outcome::refused(e),
        };
        out.control_plane = CONTROL_PLANE_V2;
        out
    }

    async fn collect_v1(
        &self,
        profile: &str,
        workspace: &str,
    ) -> Result<Vec<Map<String, Value>>, String> {
        let path = self.path_var();
        let exe = discovery::discover_in(path.clone(), Flavor::V1)?;
        let approved = discovery::approve(&exe, workspace)?;
        let profile = profile.to_string();
        let r = with_producer(
            &approved,
            path.as_deref(),
            self.timeout,
            async move |p: &Producer| {
                let caps = p.call("bl_capabilities", json!({})).await?;
                if !advertises(&caps, V1_CONTRACT, V1_TOOL, V1_OPERATION) {
                    return Err(refusal::NO_V1.into());
                }
                let listing = p
                    .call("bl_graph_terminal_runs", json!({"limit": MAX_RUNS}))
                    .await?;
                if listing.get("status").and_then(Value::as_str) != Some("ok")
                    || listing.get("contract").and_then(Value::as_str) != Some(V1_CONTRACT)
                {
                    return Err(refusal::LISTING_UNAVAILABLE.into());
                }
                let Some(Value::Array(runs)) = listing.get("runs") else {
                    return Err(refusal::LISTING_MALFORMED.into());
                };
                let mut out = Vec::new();
                for run in runs.iter().take(MAX_RUNS) {
                    let Some(run_ref) = run
                        .as_object()
                        .and_then(|r| r.get("run_ref"))
                        .and_then(Value::as_str)
                    else {
                        return Err(refusal::LISTING_MALFORMED.into());
                    };
                    let reply = p.call(V1_TOOL, json!({"run_ref": run_ref})).await?;
                    let Some(evidence) = reply::evidence(&reply)
                        .map_err(|()| Fail::from(refusal::EVIDENCE_MALFORMED))?
                    else {
                        continue;
                    };
                    out.push(domain::v1_bridge_payload(evidence, &profile).map_err(Fail::from)?);
                }
                Ok(out)
            },
        )
        .await;
        r.map_err(|f| match f {
            Fail::Refusal(s) => s,
            Fail::Transport => refusal::TIMED_OUT.to_string(),
        })
    }

    async fn collect_v2(
        &self,
        profile: &str,
        workspace: &str,
    ) -> Result<Vec<domain::Sealed>, String> {
        let path = self.path_var();
        let exe = discovery::discover_in(path.clone(), Flavor::V2)?;
        let approved = discovery::approve(&exe, workspace)?;
        let identity = discovery::producer_identity(&approved.executable)?;
        if identity.is_empty() {
            return Err(refusal::NO_IDENTITY.into());
        }
        let profile = profile.to_string();
        let r = with_producer(
            &approved,
            path.as_deref(),
            self.timeout,
            async move |p: &Producer| {
                let caps = p.call("bl_capabilities", json!({})).await?;
                if !advertises(&caps, V2_CONTRACT, V2_TOOL, V2_OPERATION) {
                    return Err(refusal::NO_V2.into());
                }
                let capability_digest =
                    canon_digest(caps.get("capabilities").unwrap_or(&Value::Null));
                let listing = p
                    .call("bl_graph_terminal_runs", json!({"limit": MAX_RUNS}))
                    .await?;
                // GAP-27: the reference wants the v1 id here; v2 is accepted too.
                let contract = listing.get("contract").and_then(Value::as_str);
                let runs = match listing.get("runs") {
                    Some(Value::Array(runs))
                        if listing.get("status").and_then(Value::as_str) == Some("ok")
                            && (contract == Some(V1_CONTRACT) || contract == Some(V2_CONTRACT)) =>
                    {
                        runs
                    }
                    _ => return Err(refusal::LISTING_UNAVAILABLE.into()),
                };
                let listing_digest = canon_digest(&Value::Array(runs.clone()));
                let mut out = Vec::new();
                for run in runs.iter().take(MAX_RUNS) {
                    let Some(fields) = reply::listed_run(run) else {
                        return Err(refusal::LISTING_MALFORMED.into());
                    };
                    let reply = p.call(V2_TOOL, json!({"run_ref": fields[0]})).await?;
                    let Some(evidence) = reply::evidence(&reply)
                        .map_err(|()| Fail::from(refusal::V2_EVIDENCE_MALFORMED))?
                    else {
                        continue;
                    };
                    if evidence.get("contract").and_then(Value::as_str) != Some(V2_CONTRACT) {
                        return Err(refusal::V2_UNSUPPORTED_CONTRACT.into());
                    }
                    let same = reply::LISTED_RUN_FIELDS
                        .iter()
                        .zip(&fields)
                        .all(|(k, v)| evidence.get(*k).and_then(Value::as_str) == Some(*v));
                    if !same {
                        return Err(refusal::V2_MISMATCH.into());
                    }
                    let mut payload = evidence.clone();
                    payload.insert("profile_id".into(), Value::String(profile.clone()));
                    let sealed = domain::Sealed::seal(
                        payload,
                        &identity,
                        &capability_digest,
                        &listing_digest,
                    )
                    .map_err(|_| Fail::from(refusal::V2_INVALID))?;
                    out.push(sealed);
                }
                Ok(out)
            },
        )
        .await;
        r.map_err(|f| match f {
            Fail::Refusal(s) => s,
            Fail::Transport => refusal::V2_TIMED_OUT.to_string(),
        })
    }

    /// DASH-06: PATH lookup, then (cached 60 s, single-flight) one version
    /// call of at most 1.5 s. Never claims the bridge contract is live.
    pub async fn probe(&self) -> Probe {
        let Some(found) = discovery::which(self.path_var()) else {
            return Probe {
                installed: Some(false),
                version: String::new(),
                reason: "bounded_loops_mcp_not_in_path".into(),
                contracts: vec![],
            };
        };
        let mut cache = self.probe.lock().await;
        if let Some((at, p)) = cache.as_ref()
            && at.elapsed() < PROBE_CACHE
        {
            return p.clone();
        }
        let p = self.version_call(&found).await;
        *cache = Some((Instant::now(), p.clone()));
        p
    }

    /// `bl --version` when `bl` sits next to the resolved executable (the
    /// same installation); otherwise `serverInfo.version` from an
    /// `initialize`-only exchange. Both bounded by 1.5 s.
    async fn version_call(&self, found: &std::path::Path) -> Probe {
        let failed = |kind: &str| Probe {
            installed: None,
            version: String::new(),
            reason: format!("probe_error:{kind}"),
            contracts: vec![],
        };
        let Ok(exe) = std::fs::canonicalize(found) else {
            return failed("unresolvable");
        };
        if discovery::trust_executable(&exe).is_err() {
            return failed("untrusted");
        }
        let bl = exe.with_file_name("bl");
        let version = if bl.is_file() && discovery::trust_executable(&bl).is_ok() {
            bl_version(&bl).await
        } else {
            let ws = exe
                .parent()
                .unwrap_or(std::path::Path::new("/"))
                .to_path_buf();
            let approved = discovery::Approved {
                executable: exe.clone(),
                workspace: ws,
            };
            with_producer(
                &approved,
                self.path_var().as_deref(),
                PROBE_TIMEOUT,
                async |p: &Producer| Ok(p.server_version.clone().unwrap_or_default()),
            )
            .await
            .map_err(|_| "timeout")
        };
        match version {
            Ok(v) => Probe {
                installed: Some(true),
                version: v,
                reason: String::new(),
                contracts: vec![],
            },
            Err(kind) => failed(kind),
        }
    }
}

async fn bl_version(bl: &std::path::Path) -> Result<String, &'static str> {
    let mut cmd = tokio::process::Command::new(bl);
    cmd.arg("--version")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .kill_on_drop(true);
    let child = cmd.spawn().map_err(|_| "spawn")?;
    let pid = child.id();
    match tokio::time::timeout(PROBE_TIMEOUT, child.wait_with_output()).await {
        Ok(Ok(out)) => {
            let s = String::from_utf8_lossy(&out.stdout);
            s.trim()
                .strip_prefix("bl ")
                .map(str::to_string)
                .ok_or("output")
        }
        Ok(Err(_)) => Err("io"),
        Err(_) => {
            if let Some(pid) = pid {
                // SAFETY: signals the probe's own process group.
                unsafe {
                    libc::kill(-(pid as i32), libc::SIGKILL);
                }
            }
            Err("timeout")
        }
    }
}

/// `status == "ok"` and `capabilities.evidence_contracts` lists the triple.
#[doc(hidden)]
pub fn advertises(caps: &Map<String, Value>, id: &str, tool: &str, op: &str) -> bool {
    caps.get("status").and_then(Value::as_str) == Some("ok")
        && caps
            .get("capabilities")
            .and_then(|c| c.get("evidence_contracts"))
            .and_then(Value::as_array)
            .is_some_and(|list| {
                list.iter().any(|c| {
                    c.get("id").and_then(Value::as_str) == Some(id)
                        && c.get("tool").and_then(Value::as_str) == Some(tool)
                        && c.get("operation").and_then(Value::as_str) == Some(op)
                })
            })
}
