//! Bad input over MCP: every tool of every profile called with wrong types,
//! out-of-range numbers, huge strings, NUL bytes, unknown and missing
//! arguments answers a structured refusal (a tool result with `isError`,
//! never a panic or a dropped connection), and the server keeps serving.
//! Then raw bodies over streamable HTTP: invalid JSON, invalid UTF-8, an
//! oversized body, deep nesting and wrong JSON-RPC shapes are refused with
//! an HTTP error status or a JSON-RPC error, and the server keeps serving.

mod common;

use std::time::Duration;

use axum::body::Body;
use http::Request;
use serde_json::{Value, json};
use tower::ServiceExt;

use common::{Client, call, connect, embedded, try_call};
use slm_gateway::{Gateway, ToolProfile, http_router};

const NAME_ERR: &str = "name must be 1–128 chars";
const QUERY_ERR: &str = "gate_query must be 1–2000 chars";
/// The ledger's content cap (the tool schema: at most 1 MiB).
const CONTENT_CAP: &str = "content must be at most 1048576 bytes";
const TEN_MB: usize = 10 * 1024 * 1024;

/// How one argument is converted (crate docs of `slm_gateway`).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    /// Must be a JSON string: `"<name> must be text"`.
    Text,
    /// `slm_loop_run`'s `name` / `gate_query`: always the spec message.
    Bounded(&'static str),
    /// A list of text (or one string).
    List,
    /// Python `int()`.
    Int,
    /// Python `float()`.
    Float,
    Bool,
    /// Any JSON, forwarded as given (`gate_contract`).
    Any,
}

struct ToolSpec {
    name: &'static str,
    /// Arguments that make a valid call (required ones, plus bounds that
    /// keep a watcher run short).
    base: Value,
    args: &'static [(&'static str, Kind)],
    /// What `{}` answers.
    missing: &'static str,
    /// Whether refusals use the observe shape (`success: false`).
    observe: bool,
}

fn specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "slm_loop_run",
            base: json!({"name": "bad-input", "gate_query": "where is it",
                         "max_iterations": 1, "max_wallclock_s": 2, "poll_interval_s": 0.25}),
            args: &[
                ("name", Kind::Bounded(NAME_ERR)),
                ("gate_query", Kind::Bounded(QUERY_ERR)),
                ("gate_contract", Kind::Any),
                ("gate_min_score", Kind::Float),
                ("max_iterations", Kind::Int),
                ("max_wallclock_s", Kind::Float),
                ("poll_interval_s", Kind::Float),
                ("max_tokens", Kind::Int),
                ("no_progress_window", Kind::Int),
                ("require_support", Kind::Bool),
            ],
            missing: NAME_ERR,
            observe: false,
        },
        ToolSpec {
            name: "slm_loop_history",
            base: json!({"name": "bad-input"}),
            args: &[
                ("name", Kind::Text),
                ("limit", Kind::Int),
                ("profile_id", Kind::Text),
            ],
            missing: "name is required",
            observe: false,
        },
        ToolSpec {
            name: "slm_loop_show",
            base: json!({"run_id": "bad-input-1"}),
            args: &[
                ("run_id", Kind::Text),
                ("limit", Kind::Int),
                ("profile_id", Kind::Text),
            ],
            missing: "run_id is required",
            observe: false,
        },
        ToolSpec {
            name: "remember",
            base: json!({"content": "bad input probe"}),
            args: &[
                ("content", Kind::Text),
                ("tags", Kind::List),
                ("session_id", Kind::Text),
                ("importance", Kind::Int),
                ("profile_id", Kind::Text),
            ],
            missing: "content is required",
            observe: false,
        },
        ToolSpec {
            name: "recall",
            base: json!({"query": "probe"}),
            args: &[
                ("query", Kind::Text),
                ("limit", Kind::Int),
                ("tag", Kind::Text),
                ("profile_id", Kind::Text),
            ],
            missing: "query is required",
            observe: false,
        },
        ToolSpec {
            name: "observe_bounded_loop_evidence",
            base: json!({"workspace": "/tmp"}),
            args: &[("workspace", Kind::Text)],
            missing: "workspace is required",
            observe: true,
        },
        ToolSpec {
            name: "observe_bounded_loop_execution_learning",
            base: json!({"workspace": "/tmp"}),
            args: &[("workspace", Kind::Text)],
            missing: "workspace is required",
            observe: true,
        },
    ]
}

/// Wrong-typed values for `kind` with the exact refusal of each.
fn wrong_types(arg: &str, kind: Kind) -> Vec<(Value, String)> {
    let int_type = |t: &str| {
        format!("int() argument must be a string, a bytes-like object or a real number, not '{t}'")
    };
    let float_type =
        |t: &str| format!("float() argument must be a string or a real number, not '{t}'");
    match kind {
        Kind::Text => [
            json!(5),
            json!(1.5),
            json!(true),
            Value::Null,
            json!(["x"]),
            json!({"a": 1}),
        ]
        .into_iter()
        .map(|v| (v, format!("{arg} must be text")))
        .collect(),
        Kind::Bounded(msg) => [
            json!(5),
            json!(true),
            Value::Null,
            json!(["x"]),
            json!({"a": 1}),
        ]
        .into_iter()
        .map(|v| (v, msg.to_string()))
        .collect(),
        Kind::List => [
            json!(5),
            json!(true),
            Value::Null,
            json!([1]),
            json!(["ok", null]),
            json!({"a": "b"}),
        ]
        .into_iter()
        .map(|v| (v, format!("{arg} must be a list of text")))
        .collect(),
        Kind::Int => vec![
            (Value::Null, int_type("NoneType")),
            (json!([1]), int_type("list")),
            (json!({"n": 1}), int_type("dict")),
            (
                json!("abc"),
                "invalid literal for int() with base 10: 'abc'".into(),
            ),
            (
                json!("2.5"),
                "invalid literal for int() with base 10: '2.5'".into(),
            ),
            (
                json!("NaN"),
                "invalid literal for int() with base 10: 'NaN'".into(),
            ),
            (
                json!("1e400"),
                "invalid literal for int() with base 10: '1e400'".into(),
            ),
            (
                json!("inf"),
                "invalid literal for int() with base 10: 'inf'".into(),
            ),
            (
                json!("a\u{0}b"),
                "invalid literal for int() with base 10: 'a\\x00b'".into(),
            ),
            (
                json!(""),
                "invalid literal for int() with base 10: ''".into(),
            ),
        ],
        Kind::Float => vec![
            (Value::Null, float_type("NoneType")),
            (json!([1.5]), float_type("list")),
            (json!({"x": 1}), float_type("dict")),
            (
                json!("abc"),
                "could not convert string to float: 'abc'".into(),
            ),
            (
                json!("1e400e"),
                "could not convert string to float: '1e400e'".into(),
            ),
            (
                json!("0x10"),
                "could not convert string to float: '0x10'".into(),
            ),
            (
                json!("1\u{0}"),
                "could not convert string to float: '1\\x00'".into(),
            ),
        ],
        Kind::Bool => [
            json!("maybe"),
            Value::Null,
            json!([true]),
            json!({"b": true}),
        ]
        .into_iter()
        .map(|v| (v, format!("{arg} must be true or false")))
        .collect(),
        Kind::Any => Vec::new(),
    }
}

fn with(base: &Value, key: &str, value: Value) -> Value {
    let mut v = base.clone();
    v[key] = value;
    v
}

fn error_of(v: &Value) -> &str {
    v["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error text in {v}"))
}

/// One call that must be refused: a tool result with `isError` and the
/// tool's failure shape; `want` is the exact message when given.
async fn refused(client: &Client, spec: &ToolSpec, args: Value, want: Option<&str>) -> String {
    let what = format!("{} {}", spec.name, short(&args));
    let (v, is_error) =
        tokio::time::timeout(Duration::from_secs(60), call(client, spec.name, args))
            .await
            .unwrap_or_else(|_| panic!("{what}: no answer in 60 s"));
    assert!(is_error, "{what}: not refused: {}", short(&v));
    if spec.observe {
        assert_eq!(v["success"], json!(false), "{what}: {v}");
        assert_eq!(v["durable"], json!(false), "{what}: {v}");
    } else {
        assert_eq!(v["ok"], json!(false), "{what}: {}", short(&v));
    }
    let error = error_of(&v).to_string();
    assert!(!error.is_empty(), "{what}");
    if let Some(want) = want {
        assert_eq!(error, want, "{what}");
    }
    error
}

/// One call whose out-of-range or odd value is clamped or ignored rather
/// than refused: a successful, well-formed result.
async fn accepted(client: &Client, tool: &str, args: Value) -> Value {
    let what = format!("{tool} {}", short(&args));
    let (v, is_error) = tokio::time::timeout(Duration::from_secs(60), call(client, tool, args))
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer in 60 s"));
    assert!(!is_error, "{what}: refused: {}", short(&v));
    assert_eq!(v["ok"], json!(true), "{what}: {}", short(&v));
    v
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 300 {
        format!("{}… ({} bytes)", &s[..s.floor_char_boundary(300)], s.len())
    } else {
        s
    }
}

/// The server still answers normal calls: remember, then recall finds it.
async fn still_serving(client: &Client, marker: &str) {
    let (stored, is_error) = call(
        client,
        "remember",
        json!({"content": format!("the {marker} survives bad input"), "tags": ["probe"]}),
    )
    .await;
    assert!(!is_error, "{stored}");
    let id = stored["id"].as_i64().unwrap();
    let (found, is_error) = call(
        client,
        "recall",
        json!({"query": format!("{marker} survives"), "tag": "probe"}),
    )
    .await;
    assert!(!is_error, "{found}");
    assert_eq!(found["results"][0]["id"], json!(id), "{found}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tool_refuses_bad_arguments_and_the_server_keeps_serving() {
    let env = embedded().await;
    // Every profile lists a subset of `whole`; each profile's tools are
    // driven through a gateway of that profile.
    let mut covered = 0usize;
    for profile in ToolProfile::ALL {
        let client = connect(Gateway::new(env.backends.clone(), profile, None)).await;
        let listed: Vec<String> = client
            .list_all_tools()
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.name.to_string())
            .collect();
        let specs = specs();
        for name in &listed {
            assert!(
                specs.iter().any(|s| s.name == name),
                "tool {name} has no bad-input cases"
            );
        }
        // The full barrage once, on `whole`; the other profiles get the
        // type and missing-argument cases of the tools they list.
        let full = profile == ToolProfile::Whole;
        for spec in specs.iter().filter(|s| listed.iter().any(|l| l == s.name)) {
            covered += barrage(&client, spec, full).await;
        }
        still_serving(&client, &format!("marker-{profile}")).await;
        client.cancel().await.unwrap();
    }
    eprintln!("{covered} bad-input calls answered");
}

/// Runs every case for one tool; returns how many calls were made.
async fn barrage(client: &Client, spec: &ToolSpec, full: bool) -> usize {
    let mut n = 0;
    let base = &spec.base;
    // Missing required arguments: `{}` and no `arguments` at all.
    refused(client, spec, json!({}), Some(spec.missing)).await;
    refused(client, spec, Value::Null, Some(spec.missing)).await;
    n += 2;
    // Unknown extra arguments.
    let taken: Vec<&str> = spec.args.iter().map(|(a, _)| *a).collect();
    let accepted_list = taken.join(", ");
    refused(
        client,
        spec,
        with(base, "zz_unknown", json!(1)),
        Some(&format!(
            "unexpected argument 'zz_unknown' (this tool takes: {accepted_list})"
        )),
    )
    .await;
    refused(
        client,
        spec,
        with(&with(base, "a\u{0}b", json!(null)), "Ω", json!({})),
        Some(&format!(
            "unexpected arguments 'a\\x00b', 'Ω' (this tool takes: {accepted_list})"
        )),
    )
    .await;
    n += 2;
    // Wrong types, argument by argument.
    for (arg, kind) in spec.args {
        for (value, want) in wrong_types(arg, *kind) {
            let args = with(base, arg, value);
            // For the observe tools, type checks come before discovery.
            refused(client, spec, args, Some(&want)).await;
            n += 1;
        }
    }
    if !full {
        return n;
    }
    n += out_of_range(client, spec).await;
    n += huge_and_nul(client, spec).await;
    n
}

/// Out-of-range numbers: refused where a range is a rule, clamped where
/// the spec clamps.
async fn out_of_range(client: &Client, spec: &ToolSpec) -> usize {
    let base = &spec.base;
    let mut n = 0;
    match spec.name {
        "remember" => {
            for v in [
                json!(-1),
                json!(11),
                json!(1e300),
                json!(-1e300),
                json!(i64::MAX),
                json!(u64::MAX),
                json!("-99999999999999999999999999999999999999999999"),
                json!("+11"),
            ] {
                refused(
                    client,
                    spec,
                    with(base, "importance", v),
                    Some("importance must be 1–10"),
                )
                .await;
                n += 1;
            }
            // Between the ledger's 1 MiB content cap and its gRPC limit.
            refused(
                client,
                spec,
                with(base, "content", json!("c".repeat(2 << 20))),
                Some(CONTENT_CAP),
            )
            .await;
            n += 1;
            // Numbers as numeric strings and truncated fractions.
            let v = accepted(client, "remember", with(base, "importance", json!(" 7 "))).await;
            assert!(v["id"].as_i64().is_some());
            accepted(client, "remember", with(base, "importance", json!(9.99))).await;
            n += 2;
        }
        "recall" | "slm_loop_history" | "slm_loop_show" => {
            let max = match spec.name {
                "recall" => 100,
                "slm_loop_history" => 200,
                _ => 1000,
            };
            for v in [
                json!(-1),
                json!(0),
                json!(1e300),
                json!(-1e300),
                json!(u64::MAX),
                json!(i64::MIN),
                json!("99999999999999999999999999999999999999999999"),
                json!(true),
            ] {
                let r = accepted(client, spec.name, with(base, "limit", v)).await;
                let list = ["results", "runs", "laps"]
                    .iter()
                    .find_map(|k| r[*k].as_array())
                    .unwrap_or_else(|| panic!("{r}"));
                assert!(list.len() <= max);
                n += 1;
            }
        }
        "slm_loop_run" => {
            // Every extreme is clamped (spec WATCH-01/02); with one lap the
            // run halts quickly. No gate contract: it can never pass.
            let one_lap = with(base, "max_iterations", json!(1));
            let cases = [
                ("max_iterations", json!(-1e300)),
                ("max_iterations", json!(i64::MIN)),
                ("max_iterations", json!("-999999999999999999999999999999")),
                ("max_iterations", json!(0)),
                ("max_wallclock_s", json!("nan")),
                ("max_wallclock_s", json!("-inf")),
                ("max_wallclock_s", json!("1e400")),
                ("max_wallclock_s", json!(-1e300)),
                ("poll_interval_s", json!("nan")),
                ("poll_interval_s", json!(-5)),
                ("poll_interval_s", json!(1e300)),
                ("poll_interval_s", json!("-infinity")),
                ("max_tokens", json!(-1e300)),
                ("max_tokens", json!(1e300)),
                ("max_tokens", json!(u64::MAX)),
                ("no_progress_window", json!(-1)),
                ("no_progress_window", json!(1e300)),
                ("gate_min_score", json!("nan")),
                ("gate_min_score", json!("-inf")),
                ("gate_min_score", json!(1e300)),
                ("require_support", json!(1e300)),
                ("gate_contract", json!(5)),
                ("gate_contract", json!("not an object")),
                ("gate_contract", json!({"job_id": "\u{0}".repeat(40)})),
                (
                    "gate_contract",
                    json!([[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]),
                ),
            ];
            for (arg, v) in cases {
                let r = accepted(client, spec.name, with(&one_lap, arg, v.clone())).await;
                assert_eq!(r["passed"], json!(false), "{arg}={v}: {r}");
                assert_ne!(r["status"], json!("DONE"), "{arg}={v}: {r}");
                assert_eq!(r["laps"], json!(1), "{arg}={v}: {r}");
                n += 1;
            }
            // A huge lap bound is clamped to 200 and the wall clock ends it.
            let t = std::time::Instant::now();
            let r = accepted(
                client,
                spec.name,
                with(
                    &with(base, "max_iterations", json!(1e300)),
                    "max_wallclock_s",
                    json!(0.6),
                ),
            )
            .await;
            assert_eq!(r["status"], json!("HALT"), "{r}");
            assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
            n += 1;
        }
        _ => {}
    }
    n
}

/// 10 MB strings and NUL bytes in every text argument.
async fn huge_and_nul(client: &Client, spec: &ToolSpec) -> usize {
    let base = &spec.base;
    let huge = "x".repeat(TEN_MB);
    let mut n = 0;
    for (arg, kind) in spec.args {
        let (huge_value, nul_value) = match kind {
            Kind::Text | Kind::Bounded(_) => (json!(huge), json!("a\u{0}b")),
            Kind::List => (json!([huge]), json!(["a\u{0}b"])),
            _ => continue,
        };
        // A huge value is always refused: by the tool's own limits, or by
        // the size limit of the gRPC service it is sent to.
        let want: Option<&str> = match (spec.name, *arg) {
            (_, "name") | (_, "gate_query") if spec.name == "slm_loop_run" => match kind {
                Kind::Bounded(m) => Some(m),
                _ => None,
            },
            _ => None,
        };
        let e = refused(client, spec, with(base, arg, huge_value), want).await;
        if want.is_none() {
            // Refused by the receiving gRPC service's message-size limit
            // (ledger 8 MiB, loop engine and bridge 4 MiB), e.g. "Error,
            // decoded message length too large: found … bytes, the limit
            // is: 8388608 bytes".
            assert!(e.contains("too large"), "{} {arg}: {e}", spec.name);
        }
        assert!(
            e.len() < 1000,
            "{} {arg}: the refusal echoes the input",
            spec.name
        );
        n += 1;
        // NUL bytes.
        let args = with(base, arg, nul_value);
        let nul_refusal: Option<&str> = match (spec.name, *arg) {
            ("remember", "content") => Some("content must not contain NUL characters"),
            ("remember", "session_id") => Some("session_id must not contain NUL characters"),
            ("remember", "tags") => {
                Some("each tag must be 1–128 characters without control characters")
            }
            ("recall", "query") => Some("query must not contain NUL characters"),
            (_, "profile_id") => {
                Some("profile_id must be 1–64 characters of letters, digits, '.', '_' or '-'")
            }
            // Discovery comes first: the producer is not on this PATH.
            (_, "workspace") => Some("bounded-loops-mcp is not installed"),
            _ => None,
        };
        match nul_refusal {
            Some(want) => {
                refused(client, spec, args, Some(want)).await;
            }
            None => {
                // A NUL in a lookup key or a name is harmless: it simply
                // matches nothing (a watcher named so runs to its bound).
                let r = accepted(client, spec.name, args).await;
                if spec.name == "slm_loop_run" {
                    assert_eq!(r["passed"], json!(false), "{r}");
                }
            }
        }
        n += 1;
    }
    n
}

/// A tool outside the profile, and names that are no tool at all, are
/// JSON-RPC errors (invalid params), not crashes.
#[tokio::test]
async fn unknown_tool_names_are_protocol_errors() {
    let env = embedded().await;
    let client = connect(Gateway::new(env.backends.clone(), ToolProfile::Code, None)).await;
    for name in [
        "observe_bounded_loop_execution_learning",
        "",
        "a\u{0}b",
        &"t".repeat(100_000),
        "remember ",
    ] {
        let err = try_call(&client, name, json!({})).await.unwrap_err();
        assert!(err.to_string().contains("unknown tool"), "{err}");
    }
    still_serving(&client, "after-unknown-tools").await;
}

// ---- streamable HTTP: raw bodies -----------------------------------------

async fn post_raw(
    router: &axum::Router,
    session: Option<&str>,
    content_type: &str,
    body: impl Into<Body>,
) -> (u16, Option<String>, String) {
    let mut req = Request::post("/mcp")
        .header("host", "127.0.0.1:8080")
        .header("content-type", content_type)
        .header("accept", "application/json, text/event-stream");
    if let Some(s) = session {
        req = req
            .header("mcp-session-id", s)
            .header("mcp-protocol-version", "2025-11-25");
    }
    let resp = router
        .clone()
        .oneshot(req.body(body.into()).unwrap())
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let session = resp
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_string());
    let bytes = axum::body::to_bytes(resp.into_body(), 64 << 20)
        .await
        .unwrap();
    (
        status,
        session,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

/// The JSON-RPC messages of a JSON or SSE body.
fn messages(text: &str) -> Vec<Value> {
    if text.trim_start().starts_with('{') {
        return vec![serde_json::from_str(text).unwrap()];
    }
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

async fn http_session(router: &axum::Router) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "bad-input", "version": "1"}}});
    let (status, session, body) =
        post_raw(router, None, "application/json", init.to_string()).await;
    assert_eq!(status, 200, "{body}");
    let session = session.expect("session id");
    let (status, _, _) = post_raw(
        router,
        Some(&session),
        "application/json",
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string(),
    )
    .await;
    assert_eq!(status, 202);
    session
}

async fn http_call(
    router: &axum::Router,
    session: &str,
    id: u64,
    tool: &str,
    args: Value,
) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                      "params": {"name": tool, "arguments": args}});
    let (status, _, text) =
        post_raw(router, Some(session), "application/json", body.to_string()).await;
    assert_eq!(status, 200, "{text}");
    let m = messages(&text);
    m.last().unwrap()["result"].clone()
}

/// Normal service over HTTP: remember, then recall finds it.
async fn http_still_serving(router: &axum::Router, session: &str, marker: &str) {
    let r = http_call(
        router,
        session,
        900,
        "remember",
        json!({"content": format!("http {marker} keeps serving")}),
    )
    .await;
    assert_eq!(r["isError"], json!(false), "{r}");
    let id = r["structuredContent"]["id"].clone();
    let r = http_call(
        router,
        session,
        901,
        "recall",
        json!({"query": format!("{marker} keeps serving")}),
    )
    .await;
    assert_eq!(r["structuredContent"]["results"][0]["id"], id, "{r}");
}

/// A refused raw body: an HTTP client error, or a JSON-RPC error object.
fn assert_refused(what: &str, status: u16, body: &str) {
    assert!(status < 500, "{what}: server error {status}: {body}");
    if (400..500).contains(&status) {
        return;
    }
    // A JSON-RPC *response* the server never asked for is simply accepted
    // (202, no body): there is nothing to answer it with.
    if what.starts_with("response without request") && status == 202 {
        return;
    }
    let m = messages(body);
    assert!(
        m.iter()
            .any(|m| m.get("error").is_some_and(|e| e["message"].is_string())),
        "{what}: neither an HTTP error nor a JSON-RPC error ({status}): {body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_raw_bodies_are_refused_and_the_server_keeps_serving() {
    let env = embedded().await;
    let router = http_router(env.backends.clone(), ToolProfile::Whole);
    let session = http_session(&router).await;

    let deep = "[".repeat(100_000);
    let deep_obj = "{\"a\":".repeat(100_000);
    let bodies: Vec<(&str, Vec<u8>)> = vec![
        ("empty body", Vec::new()),
        ("truncated JSON", br#"{"jsonrpc": "2.0", "id": 1, "method":"#.to_vec()),
        ("not JSON", b"hello, server".to_vec()),
        ("invalid UTF-8", b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\",\"x\":\"\xff\xfe\xc0\"}".to_vec()),
        ("lone surrogate escape", br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"recall","arguments":{"query":"\ud800"}}}"#.to_vec()),
        ("100k nested arrays", deep.clone().into_bytes()),
        ("100k nested objects", deep_obj.into_bytes()),
        ("nested arguments", format!(r#"{{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{{"name":"recall","arguments":{{"query":{deep}}}}}}}"#).into_bytes()),
        ("1e400", br#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"recall","arguments":{"query":"x","limit":1e400}}}"#.to_vec()),
        ("number as body", b"42".to_vec()),
        ("string as body", b"\"tools/list\"".to_vec()),
        ("null body", b"null".to_vec()),
        ("empty batch", b"[]".to_vec()),
        ("jsonrpc 1.0", br#"{"jsonrpc":"1.0","id":6,"method":"tools/list"}"#.to_vec()),
        ("no method", br#"{"jsonrpc":"2.0","id":7}"#.to_vec()),
        ("object id", br#"{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list"}"#.to_vec()),
        ("method is a number", br#"{"jsonrpc":"2.0","id":8,"method":5}"#.to_vec()),
        ("unknown method", br#"{"jsonrpc":"2.0","id":9,"method":"tools/explode"}"#.to_vec()),
        ("arguments is a list", br#"{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"recall","arguments":[1,2]}}"#.to_vec()),
        ("arguments is a string", br#"{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"recall","arguments":"query=x"}}"#.to_vec()),
        ("tool name is a number", br#"{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":7}}"#.to_vec()),
        ("no params", br#"{"jsonrpc":"2.0","id":13,"method":"tools/call"}"#.to_vec()),
        ("params is a list", br#"{"jsonrpc":"2.0","id":14,"method":"tools/call","params":[1]}"#.to_vec()),
        ("response without request", br#"{"jsonrpc":"2.0","id":15,"result":{}}"#.to_vec()),
        ("unknown tool", br#"{"jsonrpc":"2.0","id":16,"method":"tools/call","params":{"name":"rm_rf","arguments":{}}}"#.to_vec()),
    ];
    for (what, body) in &bodies {
        for session in [None, Some(session.as_str())] {
            let (status, _, text) =
                post_raw(&router, session, "application/json", body.clone()).await;
            assert_refused(
                &format!("{what} (session {})", session.is_some()),
                status,
                &text,
            );
        }
    }

    // Bad arguments reach the tool as tool results, NUL escapes included.
    let r = http_call(
        &router,
        &session,
        20,
        "remember",
        json!({"content": "a\u{0}b"}),
    )
    .await;
    assert_eq!(r["isError"], json!(true));
    assert_eq!(
        r["structuredContent"]["error"],
        json!("content must not contain NUL characters")
    );
    // Unknown top-level and params fields are ignored (JSON-RPC objects are
    // open), the call itself is answered normally.
    let body =
        br#"{"jsonrpc":"2.0","id":21,"method":"tools/list","params":{"zz":1},"extra":[1,2,3]}"#;
    let (status, _, text) =
        post_raw(&router, Some(&session), "application/json", body.to_vec()).await;
    assert_eq!(status, 200, "{text}");
    let tools = messages(&text).last().unwrap()["result"]["tools"].clone();
    assert_eq!(tools.as_array().map(Vec::len), Some(7), "{text}");

    // Wrong media types.
    let ok = json!({"jsonrpc":"2.0","id":22,"method":"tools/list"}).to_string();
    for ct in ["text/plain", "application/x-www-form-urlencoded", ""] {
        let (status, _, text) = post_raw(&router, Some(&session), ct, ok.clone()).await;
        assert!(
            (400..500).contains(&status),
            "content-type {ct:?}: {status} {text}"
        );
    }

    // A 20 MB body is refused (rmcp caps request bodies at 4 MiB) while it
    // streams, whatever it claims to be.
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":23,"method":"tools/call","params":{{"name":"remember","arguments":{{"content":"{}"}}}}}}"#,
        "z".repeat(20 << 20)
    );
    let (status, _, text) = post_raw(&router, Some(&session), "application/json", big).await;
    assert_eq!(status, 413, "{}", &text[..text.len().min(300)]);
    let chunks = futures::stream::iter(
        (0..20).map(|_| Ok::<_, std::io::Error>(bytes_of(vec![b' '; 1 << 20]))),
    );
    let (status, _, _) = post_raw(
        &router,
        Some(&session),
        "application/json",
        Body::from_stream(chunks),
    )
    .await;
    assert_eq!(status, 413, "chunked 20 MB body");

    http_still_serving(&router, &session, "raw-bodies").await;
    // A new session still starts.
    let other = http_session(&router).await;
    http_still_serving(&router, &other, "new-session").await;
}

fn bytes_of(v: Vec<u8>) -> axum::body::Bytes {
    axum::body::Bytes::from(v)
}

/// The same over a real socket (`serve_http`): a 20 MB body is answered
/// 413 without killing the listener.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_socket_survives_an_oversized_body() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let env = embedded().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(slm_gateway::serve_http(
        listener,
        env.backends.clone(),
        ToolProfile::Full,
        async move {
            let _ = stopped.await;
        },
    ));

    let len = 20 << 20;
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut rd, mut wr) = stream.into_split();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {len}\r\n\r\n"
    );
    let writer = tokio::spawn(async move {
        wr.write_all(head.as_bytes()).await?;
        let chunk = vec![b'['; 1 << 20];
        for _ in 0..20 {
            wr.write_all(&chunk).await?;
        }
        Ok::<_, std::io::Error>(())
    });
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let read = tokio::time::timeout(Duration::from_secs(30), async {
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = rd.read(&mut buf).await.unwrap_or(0);
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
    })
    .await;
    assert!(read.is_ok(), "no response to a 20 MB body");
    let head = String::from_utf8_lossy(&got);
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
    writer.abort();

    // A fresh connection is served normally.
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "x", "version": "1"}}})
    .to_string();
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(
        format!(
            "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut got = Vec::new();
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0, "connection closed");
        got.extend_from_slice(&buf[..n]);
    }
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    drop(s);
    stop.send(()).unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
}
