//! The gateway end to end over MCP (rmcp's own client, in-memory duplex)
//! against in-process ledger and loop-engine services.

mod common;

use rmcp::ClientServiceExt;
use rmcp::model::ProtocolVersion;
use serde_json::{Value, json};

use common::{Client, call, connect, embedded, run_demo, try_call};
use slm_gateway::{Gateway, ToolProfile};
use slm_proto::v1 as pb;

const NAME_ERR: &str = "name must be 1–128 chars";
const QUERY_ERR: &str = "gate_query must be 1–2000 chars";
const UNKNOWN_PROFILE: &str =
    "There is no profile 'nope' on this computer. A tool call never creates a profile.";

async fn client(profile: ToolProfile) -> (common::Embedded, Client) {
    let env = embedded().await;
    let client = connect(Gateway::new(env.backends.clone(), profile, None)).await;
    (env, client)
}

fn failed(v: &Value, error: &str) {
    assert_eq!(v, &json!({"ok": false, "error": error}));
}

#[tokio::test]
async fn tools_list_per_profile_with_annotations() {
    let env = embedded().await;
    for profile in ToolProfile::ALL {
        let client = connect(Gateway::new(env.backends.clone(), profile, None)).await;
        let tools = client.list_all_tools().await.unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        let mut want = vec![
            "slm_loop_run",
            "slm_loop_history",
            "slm_loop_show",
            "observe_bounded_loop_evidence",
            "remember",
            "recall",
        ];
        if profile == ToolProfile::Whole {
            want.push("observe_bounded_loop_execution_learning");
        }
        assert_eq!(names, want, "profile {profile}");
        for t in &tools {
            assert!(
                t.description.as_ref().is_some_and(|d| d.len() > 80),
                "{}",
                t.name
            );
            assert_eq!(t.input_schema["type"], json!("object"));
            let a = t.annotations.as_ref();
            match t.name.as_ref() {
                "slm_loop_run" => {
                    let a = a.unwrap();
                    assert_eq!(a.read_only_hint, Some(false));
                    assert_eq!(a.destructive_hint, Some(false));
                }
                "slm_loop_history" | "slm_loop_show" | "recall" => {
                    assert_eq!(a.unwrap().read_only_hint, Some(true), "{}", t.name);
                }
                "observe_bounded_loop_evidence" | "observe_bounded_loop_execution_learning" => {
                    assert!(a.is_none(), "{} has no annotations", t.name);
                }
                _ => {}
            }
        }
        let run = tools.iter().find(|t| t.name == "slm_loop_run").unwrap();
        assert_eq!(run.input_schema["required"], json!(["name", "gate_query"]));
        assert_eq!(
            run.input_schema["properties"]["max_iterations"]["default"],
            json!(20)
        );
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn a_tool_outside_the_profile_cannot_be_called() {
    let (_env, client) = client(ToolProfile::Code).await;
    let err = try_call(
        &client,
        "observe_bounded_loop_execution_learning",
        json!({"workspace": "/tmp"}),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("unknown tool"), "{err}");
    let err = try_call(&client, "register_check", json!({}))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("unknown tool"), "{err}");
}

#[tokio::test]
async fn remember_then_recall() {
    let (_env, client) = client(ToolProfile::Full).await;
    let (stored, is_error) = call(
        &client,
        "remember",
        json!({"content": "The nightly build status is published in ci/status.txt",
               "tags": ["project-x", "ci"], "session_id": "s1", "importance": 7}),
    )
    .await;
    assert!(!is_error);
    assert_eq!(stored["ok"], json!(true));
    let id = stored["id"].as_i64().unwrap();
    assert!(id > 0);
    assert!(stored["created_at"].as_str().unwrap().contains('T'));

    let (found, is_error) = call(
        &client,
        "recall",
        json!({"query": "nightly build status", "limit": "5"}),
    )
    .await;
    assert!(!is_error);
    assert_eq!(found["ok"], json!(true));
    assert_eq!(found["no_confident_match"], json!(false));
    let hit = &found["results"][0];
    assert_eq!(hit["id"], json!(id));
    assert_eq!(hit["tags"], json!(["project-x", "ci"]));
    assert_eq!(hit["session_id"], json!("s1"));
    assert_eq!(hit["created_at"], stored["created_at"]);
    assert!(hit["score"].as_f64().unwrap() > 0.0);
    let keys: Vec<&String> = hit.as_object().unwrap().keys().collect();
    assert_eq!(keys.len(), 6);

    // Tag filter, and nothing for an unrelated tag.
    let (tagged, _) = call(&client, "recall", json!({"query": "build", "tag": "other"})).await;
    assert_eq!(tagged["results"], json!([]));

    // Bad arguments are tool results, not protocol errors.
    let (v, is_error) = call(&client, "remember", json!({})).await;
    assert!(is_error);
    failed(&v, "content is required");
    let (v, _) = call(&client, "remember", json!({"content": "   "})).await;
    failed(&v, "content must not be empty");
    let (v, _) = call(&client, "remember", json!({"content": "a\u{0}b"})).await;
    failed(&v, "content must not contain NUL characters");
    let (v, _) = call(&client, "remember", json!({"content": "x", "tags": [1]})).await;
    failed(&v, "tags must be a list of text");
    let (v, _) = call(
        &client,
        "remember",
        json!({"content": "x", "importance": 11}),
    )
    .await;
    failed(&v, "importance must be 1–10");
    let (v, _) = call(&client, "recall", json!({"query": 3})).await;
    failed(&v, "query must be text");
    let (v, _) = call(&client, "recall", json!({})).await;
    failed(&v, "query is required");
    let (v, _) = call(&client, "recall", json!({"query": "x", "limit": "many"})).await;
    failed(&v, "invalid literal for int() with base 10: 'many'");
}

#[tokio::test]
async fn profiles_are_read_but_never_created() {
    let (env, client) = client(ToolProfile::Full).await;
    env.backends
        .ledger
        .clone()
        .create_profile(pb::CreateProfileRequest {
            profile_id: "work".into(),
        })
        .await
        .unwrap();
    let (v, _) = call(
        &client,
        "remember",
        json!({"content": "quarterly report draft lives in docs/q3.md", "profile_id": "work"}),
    )
    .await;
    assert_eq!(v["ok"], json!(true));
    let (v, _) = call(
        &client,
        "recall",
        json!({"query": "quarterly report", "profile_id": "work"}),
    )
    .await;
    assert_eq!(v["results"].as_array().unwrap().len(), 1);
    let (v, _) = call(&client, "recall", json!({"query": "quarterly report"})).await;
    assert_eq!(v["results"], json!([]));

    let unknown = json!({"ok": false, "success": false, "code": "unknown_profile",
                         "retryable": false, "error": UNKNOWN_PROFILE});
    for (tool, args) in [
        (
            "slm_loop_history",
            json!({"name": "x", "profile_id": "nope"}),
        ),
        (
            "slm_loop_show",
            json!({"run_id": "x", "profile_id": "nope"}),
        ),
        ("recall", json!({"query": "x", "profile_id": "nope"})),
    ] {
        let (v, is_error) = call(&client, tool, args).await;
        assert!(is_error);
        assert_eq!(v, unknown, "{tool}");
    }
    // Writing to an unknown profile does not create it.
    let (v, _) = call(
        &client,
        "remember",
        json!({"content": "x", "profile_id": "nope"}),
    )
    .await;
    assert_eq!(v["ok"], json!(false));
    let (v, _) = call(
        &client,
        "recall",
        json!({"query": "x", "profile_id": "nope"}),
    )
    .await;
    assert_eq!(v, unknown);

    for bad in [
        json!(5),
        json!(null),
        json!(["work"]),
        json!({"id": "work"}),
        json!(true),
    ] {
        for (tool, mut args) in [
            ("slm_loop_history", json!({"name": "x"})),
            ("slm_loop_show", json!({"run_id": "x"})),
        ] {
            args["profile_id"] = bad.clone();
            let (v, _) = call(&client, tool, args).await;
            failed(&v, "profile_id must be text");
        }
    }
}

#[tokio::test]
async fn history_and_show_after_the_demo() {
    let (env, client) = client(ToolProfile::Code).await;
    let outcome = run_demo(&env.backends.loop_engine).await;
    assert_eq!(outcome.status, "DONE");
    let second = run_demo(&env.backends.loop_engine).await;

    let (h, is_error) = call(
        &client,
        "slm_loop_history",
        json!({"name": "  convergence-demo  "}),
    )
    .await;
    assert!(!is_error, "{h}");
    assert_eq!(h["ok"], json!(true));
    assert_eq!(h["name"], json!("convergence-demo"));
    assert_eq!(h["count"], json!(2));
    let runs = h["runs"].as_array().unwrap();
    // Newest first.
    assert_eq!(runs[0]["run_id"], json!(second.run_id));
    assert_eq!(runs[1]["run_id"], json!(outcome.run_id));
    let run = &runs[1];
    assert_eq!(run["laps"], json!(outcome.laps));
    assert_eq!(run["final"], json!("done"));
    assert_eq!(run["reason"], json!("demo gate: lap 3"));
    assert!(run["ts"].as_str().unwrap().contains('T'));
    assert_eq!(run.as_object().unwrap().len(), 5);

    let (h, _) = call(
        &client,
        "slm_loop_history",
        json!({"name": "convergence-demo", "limit": 0}),
    )
    .await;
    assert_eq!(h["count"], json!(1));
    let (h, _) = call(&client, "slm_loop_history", json!({"name": "no-such-loop"})).await;
    assert_eq!(
        h,
        json!({"ok": true, "name": "no-such-loop", "count": 0, "runs": []})
    );

    let (s, is_error) = call(
        &client,
        "slm_loop_show",
        json!({"run_id": format!(" {} ", outcome.run_id)}),
    )
    .await;
    assert!(!is_error, "{s}");
    assert_eq!(s["ok"], json!(true));
    assert_eq!(s["run_id"], json!(outcome.run_id));
    assert_eq!(s["count"], json!(3));
    let laps = s["laps"].as_array().unwrap();
    for (i, lap) in laps.iter().enumerate() {
        assert_eq!(lap["lap"], json!(i + 1));
        assert_eq!(lap["tokens"], json!(8 * (i + 1)));
        assert_eq!(lap["agent_claimed_done"], json!(false));
        assert_eq!(lap["detail"], json!(format!("demo gate: lap {}", i + 1)));
        assert!(lap["ts"].is_string());
        assert_eq!(lap.as_object().unwrap().len(), 7);
    }
    assert_eq!(laps[0]["decision"], json!("continue"));
    assert_eq!(laps[0]["passed"], json!(false));
    assert_eq!(laps[2]["decision"], json!("done"));
    assert_eq!(laps[2]["passed"], json!(true));

    let (s, _) = call(
        &client,
        "slm_loop_show",
        json!({"run_id": outcome.run_id, "limit": -3}),
    )
    .await;
    assert_eq!(s["count"], json!(1));
    let (s, _) = call(&client, "slm_loop_show", json!({"run_id": "unknown-run"})).await;
    assert_eq!(
        s,
        json!({"ok": true, "run_id": "unknown-run", "count": 0, "laps": []})
    );
}

/// A run whose engine stopped before its terminal lap (here: one
/// `continue` row written long ago) is reported as not ended, never as done.
#[tokio::test]
async fn a_run_without_a_terminal_lap_says_so() {
    let (env, client) = client(ToolProfile::Code).await;
    let entry = pb::LapEntry {
        run_id: "cut-short-1".into(),
        name: "cut-short".into(),
        lap: 1,
        ts: "2026-01-01T00:00:00.000000+00:00".into(),
        decision: "continue".into(),
        passed: false,
        detail: "lap 1".into(),
        ..Default::default()
    };
    env.backends
        .ledger
        .clone()
        .append_lap(pb::AppendLapRequest {
            profile_id: String::new(),
            entry: Some(entry),
            agent_id: "test".into(),
            gate_row: false,
        })
        .await
        .unwrap();
    let (h, is_error) = call(&client, "slm_loop_history", json!({"name": "cut-short"})).await;
    assert!(!is_error, "{h}");
    let run = &h["runs"][0];
    assert_eq!(run["final"], json!("continue"));
    assert_eq!(run["ended"], json!(false));
    assert_eq!(run["state"], json!("interrupted"));
    let (s, _) = call(&client, "slm_loop_show", json!({"run_id": "cut-short-1"})).await;
    assert_eq!(s["count"], json!(1));
    assert_eq!(s["ended"], json!(false));
    assert_eq!(s["state"], json!("interrupted"));
}

#[tokio::test]
async fn read_tool_validation() {
    let (_env, client) = client(ToolProfile::Power).await;
    for args in [json!({}), json!({"name": ""}), json!({"name": " \t\n "})] {
        let (v, is_error) = call(&client, "slm_loop_history", args).await;
        assert!(is_error);
        failed(&v, "name is required");
    }
    let (v, _) = call(&client, "slm_loop_history", json!({"name": 12})).await;
    failed(&v, "name must be text");
    let (v, _) = call(
        &client,
        "slm_loop_history",
        json!({"name": "x", "limit": "ten"}),
    )
    .await;
    failed(&v, "invalid literal for int() with base 10: 'ten'");
    let (v, _) = call(
        &client,
        "slm_loop_history",
        json!({"name": "x", "limit": [1]}),
    )
    .await;
    failed(
        &v,
        "int() argument must be a string, a bytes-like object or a real number, not 'list'",
    );
    for args in [json!({}), json!({"run_id": "  "})] {
        let (v, _) = call(&client, "slm_loop_show", args).await;
        failed(&v, "run_id is required");
    }
    let (v, _) = call(&client, "slm_loop_show", json!({"run_id": "r", "extra": 1})).await;
    failed(
        &v,
        "unexpected argument 'extra' (this tool takes: run_id, limit, profile_id)",
    );
    // No arguments object at all.
    let (v, _) = call(&client, "slm_loop_show", Value::Null).await;
    failed(&v, "run_id is required");
}

#[tokio::test]
async fn loop_run_validation_messages() {
    let (_env, client) = client(ToolProfile::Full).await;
    let cases = [
        (json!({"name": "", "gate_query": "q"}), NAME_ERR),
        (json!({"name": "   ", "gate_query": "q"}), NAME_ERR),
        (json!({"gate_query": "q"}), NAME_ERR),
        (
            json!({"name": "n".repeat(129), "gate_query": "q"}),
            NAME_ERR,
        ),
        (json!({"name": ["n"], "gate_query": "q"}), NAME_ERR),
        (json!({"name": "n", "gate_query": ""}), QUERY_ERR),
        (json!({"name": "n"}), QUERY_ERR),
        (
            json!({"name": "n", "gate_query": "q".repeat(2001)}),
            QUERY_ERR,
        ),
        (
            json!({"name": "n", "gate_query": "q".repeat(1 << 20)}),
            QUERY_ERR,
        ),
        (
            json!({"name": "n", "gate_query": "q", "max_wallclock_s": "abc"}),
            "could not convert string to float: 'abc'",
        ),
        (
            json!({"name": "n", "gate_query": "q", "gate_min_score": {}}),
            "float() argument must be a string or a real number, not 'dict'",
        ),
        (
            json!({"name": "n", "gate_query": "q", "max_iterations": "7.5"}),
            "invalid literal for int() with base 10: '7.5'",
        ),
        (
            json!({"name": "n", "gate_query": "q", "max_tokens": "1e9"}),
            "invalid literal for int() with base 10: '1e9'",
        ),
        (
            json!({"name": "n", "gate_query": "q", "poll_interval_s": "a\u{0}b"}),
            "could not convert string to float: 'a\\x00b'",
        ),
        (
            json!({"name": "n", "gate_query": "q", "require_support": "maybe"}),
            "require_support must be true or false",
        ),
    ];
    for (args, error) in cases {
        let (v, is_error) = call(&client, "slm_loop_run", args.clone()).await;
        assert!(is_error, "{args}");
        assert_eq!(v, json!({"ok": false, "error": error}), "{args}");
    }
    // The dash is U+2013 and lengths are counted in characters.
    assert!(NAME_ERR.contains('\u{2013}'));
    let (v, _) = call(
        &client,
        "slm_loop_run",
        json!({"name": "é".repeat(129), "gate_query": "q"}),
    )
    .await;
    failed(&v, NAME_ERR);
    let (v, _) = call(
        &client,
        "slm_loop_run",
        json!({"name": "n", "gate_query": "q", "max_iteration": 3}),
    )
    .await;
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .starts_with("unexpected argument 'max_iteration' (this tool takes: name, gate_query,"),
        "{v}"
    );
}

/// The real watcher with no receipt service: no receipt can ever count, so
/// the run ends HALT at its iteration bound and the reason names the refusal
/// (WATCH-15/16). Two laps plus the pre-lap halt row (ENGINE-15).
#[tokio::test]
async fn loop_run_against_the_real_engine() {
    let (_env, client) = client(ToolProfile::Full).await;
    let (v, is_error) = call(
        &client,
        "slm_loop_run",
        json!({"name": "build", "gate_query": "build status", "max_iterations": 2,
               "max_wallclock_s": 10, "poll_interval_s": 0.25}),
    )
    .await;
    assert!(!is_error, "{v}");
    assert_eq!(v["ok"], json!(true), "{v}");
    assert_eq!(v["status"], json!("HALT"), "{v}");
    assert_eq!(v["passed"], json!(false));
    assert_eq!(v["laps"], json!(2));
    assert_eq!(v["bound_reason"], json!("max-iterations"));
    assert!(!v["receipt_reason"].as_str().unwrap().is_empty(), "{v}");
    assert_eq!(v["reason"], v["receipt_reason"], "a HALT names the refusal");
    assert_eq!(v["note"], json!(slm_gateway::RUN_NOTE));
    assert_eq!(v["ledger_write_errors"], json!(0));
    assert_eq!(v["write_errors"], json!([]));
    assert!(v["run_id"].as_str().unwrap().starts_with("build-"), "{v}");
    let ledger = v["ledger"].as_array().unwrap();
    let decisions: Vec<&str> = ledger
        .iter()
        .map(|r| r["decision"].as_str().unwrap())
        .collect();
    assert_eq!(decisions, ["continue", "continue", "halt"]);
    for (i, row) in ledger.iter().enumerate() {
        assert_eq!(row.as_object().unwrap().len(), 4, "{row}");
        assert_eq!(row["lap"], json!(i + 1));
        assert_eq!(row["passed"], json!(false));
    }
    assert!(
        ledger[0]["detail"]
            .as_str()
            .unwrap()
            .starts_with("recall 'build status': hits=0 ")
    );
    // The run is in the history, as any loop is.
    let (h, _) = call(&client, "slm_loop_history", json!({"name": "build"})).await;
    assert_eq!(h["runs"][0]["run_id"], v["run_id"]);
    assert_eq!(h["runs"][0]["laps"], json!(3));
    assert_eq!(h["runs"][0]["final"], json!("halt"));
}

#[tokio::test]
async fn observe_tools_reach_the_bridge() {
    let (_env, client) = client(ToolProfile::Whole).await;
    let installed = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("bounded-loops-mcp").is_file()));
    for tool in [
        "observe_bounded_loop_evidence",
        "observe_bounded_loop_execution_learning",
    ] {
        let (v, is_error) = call(&client, tool, json!({"workspace": "/srv/work"})).await;
        assert!(is_error);
        assert_eq!(v["success"], json!(false));
        if !installed {
            // The bridge's own refusal, passed through in its shape.
            assert_eq!(
                v,
                json!({"success": false, "durable": false, "created": 0,
                       "error": "bounded-loops-mcp is not installed"})
            );
        }
        let (v, _) = call(&client, tool, json!({})).await;
        assert_eq!(v["error"], json!("workspace is required"));
        let (v, _) = call(&client, tool, json!({"workspace": 1})).await;
        assert_eq!(v["error"], json!("workspace must be text"));
    }
}

/// A client on the 2026-07-28 lifecycle (no `initialize`; per-request
/// metadata) is served too.
#[tokio::test]
async fn modern_discover_lifecycle_client() {
    let env = embedded().await;
    let gateway = Gateway::new(env.backends.clone(), ToolProfile::Code, None);
    let (server_io, client_io) = tokio::io::duplex(1 << 20);
    tokio::spawn(async move {
        if let Ok(running) = rmcp::ServiceExt::serve(gateway, server_io).await {
            let _ = running.waiting().await;
        }
    });
    let client = common::TestClient::new("modern")
        .serve_with_lifecycle(
            client_io,
            rmcp::ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::LATEST],
            },
        )
        .await
        .unwrap();
    let tools = client.list_all_tools().await.unwrap();
    assert_eq!(tools.len(), 6);
    let mut params = rmcp::model::CallToolRequestParams::new("slm_loop_history");
    params.arguments = json!({"name": ""}).as_object().cloned();
    let result = client.call_tool(params).await.unwrap();
    let (v, _) = common::decode(&result);
    failed(&v, "name is required");
}
