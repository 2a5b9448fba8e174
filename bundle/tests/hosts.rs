//! The agent-host plugins in `deploy/hosts/` (Claude Code, Codex, GitHub
//! Copilot): every manifest, config and frontmatter parses and has the
//! structure its host expects, the instructions stay accurate to the product,
//! and every configured MCP server command, run with the real `slm` binary on
//! a fresh data root, answers `initialize` over stdio and exits when its stdin
//! closes.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const MCP_ARGS: [&str; 3] = ["mcp", "--profile", "code"];
const STATUSES: [&str; 5] = ["DONE", "HALT", "PAUSE", "KILLED", "ERROR"];
/// The tools the runner uses; all are served by profile `code`.
const LOOP_TOOLS: [&str; 5] = [
    "slm_loop_run",
    "slm_loop_history",
    "slm_loop_show",
    "remember",
    "recall",
];
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------- helpers

fn hosts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/hosts")
}

fn read(rel: &str) -> String {
    let path = hosts().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn json_file(rel: &str) -> Value {
    serde_json::from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel}: invalid JSON: {e}"))
}

fn toml_file(rel: &str) -> toml::Table {
    read(rel)
        .parse::<toml::Table>()
        .unwrap_or_else(|e| panic!("{rel}: invalid TOML: {e}"))
}

/// A Markdown file with YAML frontmatter, parsed strictly: the file starts
/// with `---`, every frontmatter line is `key: value` with a single-line
/// plain scalar that YAML would read as the same string (no `: `, no ` #`,
/// no leading indicator), keys are unique, and a closing `---` follows.
struct Doc {
    front: BTreeMap<String, String>,
    body: String,
}

fn frontmatter(rel: &str) -> Doc {
    let text = read(rel);
    let rest = text
        .strip_prefix("---\n")
        .unwrap_or_else(|| panic!("{rel}: must start with a `---` frontmatter line"));
    let end = rest
        .find("\n---\n")
        .unwrap_or_else(|| panic!("{rel}: frontmatter is not closed by `---`"));
    let mut front = BTreeMap::new();
    for line in rest[..end].lines() {
        let (key, value) = line
            .split_once(": ")
            .unwrap_or_else(|| panic!("{rel}: frontmatter line is not `key: value`: {line:?}"));
        assert!(
            !key.is_empty()
                && key
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c == '-' || c == '_'),
            "{rel}: bad frontmatter key {key:?}"
        );
        let value = value.trim_end();
        assert!(!value.is_empty(), "{rel}: empty value for {key}");
        assert!(
            !value.contains(": ") && !value.contains(" #"),
            "{rel}: {key}: a plain YAML scalar cannot contain ': ' or ' #'"
        );
        let first = value.chars().next().unwrap();
        assert!(
            !"[]{}&*!|>'\"%@`#,?:-".contains(first),
            "{rel}: {key}: value starts with a YAML indicator {first:?}"
        );
        assert!(
            front.insert(key.to_owned(), value.to_owned()).is_none(),
            "{rel}: duplicate key {key}"
        );
    }
    let body = rest[end + "\n---\n".len()..].to_owned();
    assert!(!body.trim().is_empty(), "{rel}: empty body");
    Doc { front, body }
}

fn field<'a>(doc: &'a Doc, rel: &str, key: &str) -> &'a str {
    doc.front
        .get(key)
        .unwrap_or_else(|| panic!("{rel}: frontmatter lacks `{key}`"))
}

fn is_kebab(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('-')
        && !s.ends_with('-')
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// `command`/`args` of an MCP server entry must launch `slm mcp --profile code`.
fn assert_slm_server(what: &str, command: Option<&str>, args: Vec<String>) {
    assert_eq!(command, Some("slm"), "{what}: command");
    assert_eq!(args, MCP_ARGS, "{what}: args");
}

fn json_args(entry: &Value) -> Vec<String> {
    entry["args"]
        .as_array()
        .expect("args is an array")
        .iter()
        .map(|a| a.as_str().expect("args are strings").to_owned())
        .collect()
}

/// Instructions every host's loop prompt must carry to be accurate.
fn assert_accurate(rel: &str, text: &str) {
    for status in STATUSES {
        assert!(
            text.contains(status),
            "{rel}: does not name status {status}"
        );
    }
    for needle in [
        "gate_contract",
        "job_id",
        "slm_loop_run",
        "slm check run",
        "slm_loop_history",
        "slm_loop_show",
        "remember",
        "operator-registered job_id required",
        "verbatim",
    ] {
        assert!(text.contains(needle), "{rel}: does not mention {needle:?}");
    }
}

/// Every file under `deploy/hosts`, relative, with `/` separators.
fn all_files(dir: &Path, base: &Path, out: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            all_files(&path, base, out);
        } else {
            let rel = path.strip_prefix(base).unwrap();
            out.insert(rel.to_string_lossy().replace('\\', "/"));
        }
    }
}

// ------------------------------------------------------- structure tests

#[test]
fn every_host_file_is_validated_here() {
    let mut found = BTreeSet::new();
    all_files(&hosts(), &hosts(), &mut found);
    let known: BTreeSet<String> = [
        "README.md",
        ".claude-plugin/marketplace.json",
        "claude-code/.claude-plugin/plugin.json",
        "claude-code/.mcp.json",
        "claude-code/commands/slm-loop.md",
        "claude-code/skills/slm-loop/SKILL.md",
        "claude-code/agents/slm-loop-runner.md",
        "codex/config.toml",
        "codex/skills/slm-loop/SKILL.md",
        "codex/prompts/slm-loop.md",
        "codex/agents/slm-loop-runner.toml",
        "copilot/mcp.json",
        "copilot/prompts/slm-loop.prompt.md",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(
        found, known,
        "files in deploy/hosts without a check here (or missing)"
    );
}

#[test]
fn claude_code_plugin_manifest() {
    let rel = "claude-code/.claude-plugin/plugin.json";
    let m = json_file(rel);
    let name = m["name"].as_str().expect("plugin.json: name");
    assert_eq!(name, "slm");
    assert!(is_kebab(name));
    let version = m["version"].as_str().expect("plugin.json: version");
    assert_eq!(version.split('.').count(), 3, "semantic version");
    assert!(version.split('.').all(|p| p.parse::<u32>().is_ok()));
    assert!(!m["description"].as_str().unwrap_or("").is_empty());
    assert!(m["author"]["name"].is_string());
    // Components are found in the default folders at the plugin root, never
    // inside .claude-plugin/.
    for key in ["commands", "agents", "skills", "mcpServers", "hooks"] {
        assert!(
            m.get(key).is_none(),
            "{rel}: {key} overrides the default layout"
        );
    }
    let entries: Vec<_> = std::fs::read_dir(hosts().join("claude-code/.claude-plugin"))
        .unwrap()
        .collect();
    assert_eq!(entries.len(), 1, ".claude-plugin/ holds only plugin.json");
}

#[test]
fn claude_code_marketplace_lists_the_plugin() {
    let m = json_file(".claude-plugin/marketplace.json");
    assert!(is_kebab(m["name"].as_str().expect("marketplace name")));
    assert!(m["owner"]["name"].is_string());
    let plugins = m["plugins"].as_array().expect("plugins array");
    assert_eq!(plugins.len(), 1);
    assert_eq!(plugins[0]["name"], "slm");
    let source = plugins[0]["source"].as_str().expect("relative source");
    assert_eq!(source, "./claude-code");
    let manifest = json_file("claude-code/.claude-plugin/plugin.json");
    assert_eq!(
        manifest["name"], plugins[0]["name"],
        "marketplace entry names the plugin"
    );
    assert!(
        hosts()
            .join(source)
            .join(".claude-plugin/plugin.json")
            .is_file()
    );
}

#[test]
fn claude_code_mcp_json() {
    let m = json_file("claude-code/.mcp.json");
    let servers = m["mcpServers"].as_object().expect("mcpServers object");
    assert_eq!(servers.keys().collect::<Vec<_>>(), ["slm"]);
    let slm = &servers["slm"];
    assert_eq!(slm["type"], "stdio");
    assert_slm_server(
        "claude-code/.mcp.json",
        slm["command"].as_str(),
        json_args(slm),
    );
}

#[test]
fn codex_config_toml() {
    let rel = "codex/config.toml";
    let t = toml_file(rel);
    assert_eq!(
        t.keys().collect::<Vec<_>>(),
        ["mcp_servers"],
        "{rel}: only [mcp_servers.*]"
    );
    let servers = t["mcp_servers"].as_table().expect("mcp_servers table");
    assert_eq!(servers.keys().collect::<Vec<_>>(), ["slm"]);
    let slm = servers["slm"].as_table().expect("[mcp_servers.slm]");
    let args = slm["args"]
        .as_array()
        .expect("args array")
        .iter()
        .map(|a| a.as_str().expect("string arg").to_owned())
        .collect();
    assert_slm_server(rel, slm.get("command").and_then(|c| c.as_str()), args);
    // slm_loop_run may block for up to 120 s of wall clock.
    let timeout = slm["tool_timeout_sec"]
        .as_integer()
        .expect("tool_timeout_sec");
    assert!(
        timeout > 120,
        "tool_timeout_sec must outlast a 120 s watcher"
    );
    for key in slm.keys() {
        assert!(
            [
                "command",
                "args",
                "env",
                "tool_timeout_sec",
                "startup_timeout_sec"
            ]
            .contains(&key.as_str()),
            "{rel}: unexpected key {key}"
        );
    }
}

#[test]
fn copilot_vscode_mcp_json() {
    let m = json_file("copilot/mcp.json");
    let servers = m["servers"].as_object().expect("servers object");
    assert_eq!(servers.keys().collect::<Vec<_>>(), ["slm"]);
    let slm = &servers["slm"];
    assert_eq!(slm["type"], "stdio");
    assert_slm_server("copilot/mcp.json", slm["command"].as_str(), json_args(slm));
}

#[test]
fn slash_commands_and_prompts() {
    for rel in [
        "claude-code/commands/slm-loop.md",
        "codex/prompts/slm-loop.md",
        "copilot/prompts/slm-loop.prompt.md",
    ] {
        let doc = frontmatter(rel);
        assert!(!field(&doc, rel, "description").is_empty());
        assert!(field(&doc, rel, "argument-hint").starts_with("<loop-name>"));
        let file = Path::new(rel).file_name().unwrap().to_str().unwrap();
        assert!(file.starts_with("slm-loop."), "{rel}: invoked as /slm-loop");
        if rel.starts_with("copilot/") {
            assert_eq!(
                field(&doc, rel, "agent"),
                "agent",
                "{rel}: runs in agent mode"
            );
            assert!(rel.ends_with(".prompt.md"));
        } else {
            assert!(
                doc.body.contains("$ARGUMENTS"),
                "{rel}: passes the arguments"
            );
        }
        for status in STATUSES {
            assert!(doc.body.contains(status), "{rel}: status {status}");
        }
        assert!(doc.body.contains("slm check run"), "{rel}");
        assert!(doc.body.contains("gate_contract"), "{rel}");
    }
    let claude = frontmatter("claude-code/commands/slm-loop.md");
    assert!(
        claude.body.contains("slm-loop-runner"),
        "the command delegates to the runner"
    );
}

#[test]
fn skills() {
    let claude = read("claude-code/skills/slm-loop/SKILL.md");
    assert_eq!(
        claude,
        read("codex/skills/slm-loop/SKILL.md"),
        "the Claude Code and Codex skills are the same file"
    );
    let rel = "claude-code/skills/slm-loop/SKILL.md";
    let doc = frontmatter(rel);
    assert_eq!(
        doc.front.keys().collect::<Vec<_>>(),
        ["description", "name"]
    );
    let name = field(&doc, rel, "name");
    assert_eq!(name, "slm-loop");
    assert!(is_kebab(name) && name.len() <= 64);
    let description = field(&doc, rel, "description");
    assert!(description.len() <= 1024, "skill description too long");
    assert!(doc.body.contains("slm-loop-runner"));
    assert!(doc.body.contains("slm mcp --profile code"));
    assert_accurate(rel, &doc.body);
}

#[test]
fn runner_agents() {
    let rel = "claude-code/agents/slm-loop-runner.md";
    let doc = frontmatter(rel);
    assert_eq!(field(&doc, rel, "name"), "slm-loop-runner");
    let description = field(&doc, rel, "description");
    assert!(description.contains("slm_loop_run"));
    let tools: BTreeSet<&str> = field(&doc, rel, "tools").split(", ").collect();
    for builtin in ["Read", "Edit", "Write", "Bash", "Grep", "Glob"] {
        assert!(tools.contains(builtin), "{rel}: tools lacks {builtin}");
    }
    // Installed as a plugin the server's tools are mcp__plugin_slm_slm__*;
    // configured by hand (claude mcp add slm ...) they are mcp__slm__*.
    for tool in LOOP_TOOLS {
        for prefix in ["mcp__plugin_slm_slm__", "mcp__slm__"] {
            assert!(
                tools.contains(format!("{prefix}{tool}").as_str()),
                "{rel}: {prefix}{tool}"
            );
        }
    }
    for t in &tools {
        if let Some(rest) = t.strip_prefix("mcp__") {
            let tool = rest.split_once("__").expect("mcp__<server>__<tool>").1;
            assert!(LOOP_TOOLS.contains(&tool), "{rel}: unknown MCP tool {t}");
        }
    }
    assert_accurate(rel, &doc.body);
    for needle in [
        "never register, run or edit a check",
        "slm check register",
        "gate-passed",
        "no execution receipt",
        "check FAILED (exit 1)",
        "awaiting-approval",
        "bound_reason",
        "receipt_reason",
    ] {
        assert!(doc.body.contains(needle), "{rel}: {needle:?}");
    }

    let trel = "codex/agents/slm-loop-runner.toml";
    let t = toml_file(trel);
    assert_eq!(
        t.keys().collect::<Vec<_>>(),
        ["description", "developer_instructions", "name"]
    );
    assert_eq!(t["name"].as_str(), Some("slm-loop-runner"));
    assert_eq!(t["description"].as_str(), Some(description));
    assert_eq!(
        t["developer_instructions"].as_str().unwrap().trim(),
        doc.body.trim(),
        "{trel}: instructions must match {rel}"
    );
}

#[test]
fn readme_covers_every_host() {
    let text = read("README.md");
    for needle in [
        "claude plugin marketplace add ./deploy/hosts",
        "claude plugin install slm@slm-hosts",
        "--plugin-dir",
        "~/.codex/config.toml",
        "codex mcp add slm -- slm mcp --profile code",
        "~/.agents/skills",
        "~/.codex/prompts",
        "~/.codex/agents",
        ".vscode/mcp.json",
        ".github/prompts",
        "slm check register",
        "slm check run",
        "SLM_DATA_DIR",
    ] {
        assert!(text.contains(needle), "README.md: {needle:?}");
    }
}

// ------------------------------------------------ the configured servers

/// A server started from a host configuration, with its stdout read by a
/// thread so that every wait has a deadline.
struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    _tmp: tempfile::TempDir,
}

impl Server {
    fn start(what: &str, command: &str, args: &[String], env: &[(String, String)]) -> Self {
        assert_eq!(command, "slm", "{what}");
        let tmp = tempfile::Builder::new()
            .prefix("slm-hosts-test-")
            .tempdir()
            .unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_slm"));
        cmd.args(args);
        for (k, _) in std::env::vars() {
            if k.starts_with("SLM_") {
                cmd.env_remove(k);
            }
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.env("SLM_DATA_DIR", tmp.path().join("data"))
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            stdin,
            lines,
            _tmp: tmp,
        }
    }

    fn send(&mut self, msg: Value) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{msg}").unwrap();
        stdin.flush().unwrap();
    }

    /// The JSON-RPC response with this id (notifications are skipped).
    fn reply(&self, what: &str, id: i64) -> Value {
        let deadline = Instant::now() + REPLY_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|e| panic!("{what}: no reply to request {id}: {e}"));
            let msg: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("{what}: stdout is not JSON-RPC ({e}): {line}"));
            assert_eq!(msg["jsonrpc"], "2.0", "{what}: {line}");
            if msg["id"] == json!(id) {
                return msg;
            }
        }
    }

    /// Close stdin and wait for the process to exit on its own.
    fn close(mut self, what: &str) {
        drop(self.stdin.take());
        let deadline = Instant::now() + REPLY_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "{what}: exited with {status}");
                return;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("{what}: still running {REPLY_TIMEOUT:?} after stdin closed");
            }
            thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

type Launch = (String, Vec<String>, Vec<(String, String)>);

fn json_launch(entry: &Value) -> Launch {
    let env = entry
        .get("env")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
                .collect()
        })
        .unwrap_or_default();
    (
        entry["command"].as_str().unwrap().to_owned(),
        json_args(entry),
        env,
    )
}

/// (host config, command, args, env) of every configuration in the repository.
fn launches() -> Vec<(&'static str, Launch)> {
    let codex = toml_file("codex/config.toml");
    let slm = codex["mcp_servers"]["slm"].as_table().unwrap();
    let codex_launch = (
        slm["command"].as_str().unwrap().to_owned(),
        slm["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_owned())
            .collect(),
        slm.get("env")
            .and_then(|e| e.as_table())
            .map(|t| {
                t.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
                    .collect()
            })
            .unwrap_or_default(),
    );
    vec![
        (
            "claude-code/.mcp.json",
            json_launch(&json_file("claude-code/.mcp.json")["mcpServers"]["slm"]),
        ),
        ("codex/config.toml", codex_launch),
        (
            "copilot/mcp.json",
            json_launch(&json_file("copilot/mcp.json")["servers"]["slm"]),
        ),
    ]
}

#[test]
fn every_configured_server_answers_initialize_and_exits_on_eof() {
    for (what, (command, args, env)) in launches() {
        let mut server = Server::start(what, &command, &args, &env);
        server.send(json!({
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "slm-hosts-test", "version": "0.1.0"}
            }
        }));
        let init = server.reply(what, 1);
        assert!(init.get("error").is_none(), "{what}: {init}");
        let result = &init["result"];
        assert!(
            !result["serverInfo"]["name"]
                .as_str()
                .unwrap_or("")
                .is_empty(),
            "{what}: serverInfo.name: {init}"
        );
        assert!(
            result["serverInfo"]["version"].is_string(),
            "{what}: {init}"
        );
        assert!(
            result["capabilities"]["tools"].is_object(),
            "{what}: {init}"
        );
        assert!(result["protocolVersion"].is_string(), "{what}: {init}");

        // The tools the plugins name are the ones this configuration serves.
        server.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        server.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}));
        let list = server.reply(what, 2);
        let served: BTreeSet<&str> = list["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("{what}: tools/list: {list}"))
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        for tool in LOOP_TOOLS {
            assert!(
                served.contains(tool),
                "{what}: profile code lacks {tool}: {served:?}"
            );
        }
        let run = list["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "slm_loop_run")
            .unwrap();
        assert!(
            run["inputSchema"]["properties"]["gate_contract"].is_object(),
            "{what}: slm_loop_run takes gate_contract"
        );
        server.close(what);
    }
}
