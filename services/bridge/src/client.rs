//! The MCP client to the producer (spec BRIDGE-06..08): rmcp over the
//! child's stdio, the child in its own process group with cwd = workspace,
//! a minimal environment and captured stderr; one deadline over the whole
//! exchange; the group always killed and the child always reaped; stdout
//! lines capped while they are read.

use std::pin::Pin;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, ProtocolVersion,
};
use rmcp::service::{Peer, RoleClient, ServiceExt};
use serde_json::{Map, Value};
use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};

use crate::discovery::Approved;
use crate::domain::{MAX_TEXT_BYTES, refusal};
use crate::reply;

/// The deadline of one observation, spawn to last reply (BRIDGE-07).
pub const OBSERVATION_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest stdout line accepted. A reply whose one text item is at most
/// 2 MiB of valid JSON encodes in at most 3x that (escapes of quotes,
/// backslashes and whitespace are 2x; `\uXXXX` surrogate pairs of a 4-byte
/// character 3x), plus the JSON-RPC envelope. Longer lines are refused
/// as they arrive, never buffered.
pub const MAX_LINE_BYTES: usize = 3 * MAX_TEXT_BYTES + 64 * 1024;

const STDERR_KEEP: usize = 16 * 1024;

/// Why an exchange stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fail {
    /// A bridge refusal with its exact text.
    Refusal(String),
    /// Spawn failure, timeout or transport error: the caller maps it to its
    /// contract's "timed out or could not start" text.
    Transport,
}

impl From<&'static str> for Fail {
    fn from(s: &'static str) -> Self {
        Fail::Refusal(s.to_string())
    }
}

/// The running producer, as the observation sees it.
pub struct Producer {
    peer: Peer<RoleClient>,
    oversized: Arc<AtomicBool>,
    /// Server version from `initialize` (`serverInfo.version`).
    pub server_version: Option<String>,
}

impl Producer {
    /// One `tools/call`, decoded as BRIDGE-08 says.
    pub async fn call(&self, name: &'static str, args: Value) -> Result<Map<String, Value>, Fail> {
        let Value::Object(args) = args else {
            unreachable!("tool arguments are objects")
        };
        let mut params = CallToolRequestParams::new(name);
        params.arguments = Some(args);
        let result = match self.peer.call_tool(params).await {
            Ok(r) => r,
            Err(_) if self.oversized.load(Ordering::SeqCst) => {
                return Err(refusal::INVALID_PAYLOAD.into());
            }
            Err(_) => return Err(Fail::Transport),
        };
        if result.is_error == Some(true) {
            return Err(refusal::REJECTED.into());
        }
        if result.content.len() != 1 {
            return Err(refusal::INVALID_PAYLOAD.into());
        }
        let Some(text) = result.content[0].as_text() else {
            return Err(refusal::INVALID_PAYLOAD.into());
        };
        reply::decode_text(&text.text).map_err(Fail::from)
    }
}

/// The child's environment: only `HOME, LOGNAME, PATH, SHELL, TERM, USER`
/// (values starting with `()` skipped), `PATH` as given.
fn minimal_env(path: Option<&std::ffi::OsStr>) -> Vec<(String, std::ffi::OsString)> {
    let mut env = Vec::new();
    for k in ["HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"] {
        let v = if k == "PATH" {
            path.map(|p| p.to_os_string())
        } else {
            std::env::var_os(k)
        };
        if let Some(v) = v
            && !v.to_string_lossy().starts_with("()")
        {
            env.push((k.to_string(), v));
        }
    }
    env
}

fn client_config() -> ClientConfig {
    let mut c = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("slm-bridge", env!("CARGO_PKG_VERSION")),
    );
    c.protocol_version = ProtocolVersion::V_2025_11_25;
    c
}

/// Launches the approved producer, runs `f` under one `deadline` that also
/// covers spawn and `initialize`, then kills the whole process group and
/// reaps the child whatever happened.
pub async fn with_producer<T>(
    approved: &Approved,
    path_var: Option<&std::ffi::OsStr>,
    deadline: Duration,
    f: impl AsyncFnOnce(&Producer) -> Result<T, Fail>,
) -> Result<T, Fail> {
    let mut cmd = tokio::process::Command::new(&approved.executable);
    cmd.current_dir(&approved.workspace)
        .env_clear()
        .envs(minimal_env(path_var))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|e| {
        tracing::debug!("bounded-loops-mcp could not start: {e}");
        Fail::Transport
    })?;
    let pid = child.id();
    let stdin = child.stdin.take().expect("piped stdin");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let stderr_task = tokio::spawn(async move {
        let mut kept = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = stderr.read(&mut buf).await {
            if n == 0 {
                break;
            }
            let room = STDERR_KEEP.saturating_sub(kept.len());
            kept.extend_from_slice(&buf[..n.min(room)]);
        }
        kept
    });
    let oversized = Arc::new(AtomicBool::new(false));
    let reader = CappedLines::new(stdout, MAX_LINE_BYTES, oversized.clone());
    let flag = oversized.clone();
    let exchange = async move {
        let service = client_config().serve((reader, stdin)).await.map_err(|e| {
            tracing::debug!("bounded-loops-mcp initialize failed: {e}");
            Fail::Transport
        })?;
        let producer = Producer {
            peer: service.peer().clone(),
            oversized: flag,
            server_version: service
                .peer_info()
                .and_then(|i| i.server_info.as_ref().map(|s| s.version.clone())),
        };
        let r = f(&producer).await;
        drop(producer);
        let _ = service.cancel().await;
        r
    };
    let mut result = tokio::time::timeout(deadline, exchange)
        .await
        .unwrap_or(Err(Fail::Transport));
    if matches!(result, Err(Fail::Transport)) && oversized.load(Ordering::SeqCst) {
        result = Err(refusal::INVALID_PAYLOAD.into());
    }
    // The leader is not reaped yet, so its pid still names our group.
    if let Some(pid) = pid {
        // SAFETY: kill(2) with a negative pid signals that process group.
        unsafe {
            libc::kill(-(pid as i32), libc::SIGKILL);
        }
    }
    let _ = child.wait().await;
    if let Ok(Ok(kept)) = tokio::time::timeout(Duration::from_millis(200), stderr_task).await
        && !kept.is_empty()
    {
        tracing::debug!(
            "bounded-loops-mcp stderr: {}",
            String::from_utf8_lossy(&kept)
        );
    }
    result
}

/// Reads the child's stdout, ending the stream (EOF) as soon as one line
/// grows past `cap` bytes and recording that in `oversized`.
pub struct CappedLines<R> {
    inner: R,
    cap: usize,
    line: usize,
    stopped: bool,
    oversized: Arc<AtomicBool>,
}

impl<R> CappedLines<R> {
    pub fn new(inner: R, cap: usize, oversized: Arc<AtomicBool>) -> Self {
        Self {
            inner,
            cap,
            line: 0,
            stopped: false,
            oversized,
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for CappedLines<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.stopped {
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let new = &buf.filled()[before..];
                let mut keep = new.len();
                let mut last_newline = None;
                for (i, b) in new.iter().enumerate() {
                    if *b == b'\n' {
                        this.line = 0;
                        last_newline = Some(i);
                    } else {
                        this.line += 1;
                        if this.line > this.cap {
                            this.stopped = true;
                            this.oversized.store(true, Ordering::SeqCst);
                            keep = last_newline.map_or(0, |n| n + 1);
                            break;
                        }
                    }
                }
                buf.set_filled(before + keep);
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}
