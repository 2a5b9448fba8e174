//! `slm loop demo|history|show|kill` (spec CLI-01..09).

use serde_json::json;
use tokio_stream::StreamExt;

use slm_gateway::mark_unfinished;
use slm_proto::v1 as pb;

use crate::cli::LoopCommand;
use crate::services::Services;
use crate::{print_json, rpc};

/// History pages fetched per call when listing every run.
const HISTORY_PAGE: u32 = 500;
/// Rows shown for one run (the per-run read cap).
const SHOW_LIMIT: u32 = 5000;

/// Exit status of a finished loop; documented in `slm --help`.
pub fn exit_code(status: &str) -> i32 {
    match status {
        "DONE" => 0,
        "HALT" => 3,
        "PAUSE" => 4,
        "KILLED" => 5,
        _ => 6,
    }
}

fn gate_word(passed: bool) -> &'static str {
    if passed { "gate-pass" } else { "gate-fail" }
}

pub async fn run(s: &mut Services, profile: &str, c: LoopCommand) -> anyhow::Result<i32> {
    match c {
        LoopCommand::Demo { iterations, json } => demo(s, profile, iterations, json).await,
        LoopCommand::History { name, limit, json } => history(s, profile, name, limit, json).await,
        LoopCommand::Show { run_id, json } => show(s, profile, run_id, json).await,
        LoopCommand::Kill { run, clear, json } => kill(s, run, clear, json).await,
    }
}

async fn demo(s: &mut Services, profile: &str, iterations: i64, json: bool) -> anyhow::Result<i32> {
    let mut stream = s
        .loop_engine
        .run_loop(pb::RunLoopRequest {
            profile_id: profile.to_string(),
            kind: Some(pb::run_loop_request::Kind::Demo(pb::DemoSpec {
                iterations,
            })),
        })
        .await
        .map_err(rpc)?
        .into_inner();
    let mut laps = Vec::new();
    let mut outcome = None;
    while let Some(ev) = stream.next().await {
        match ev.map_err(rpc)?.event {
            Some(pb::run_event::Event::Lap(l)) => laps.push(l),
            Some(pb::run_event::Event::Outcome(o)) => outcome = Some(o),
            None => {}
        }
    }
    let o = outcome
        .ok_or_else(|| anyhow::anyhow!("the loop engine ended the run without an outcome"))?;
    if json {
        let ledger: Vec<_> = laps
            .iter()
            .map(|l| json!({"lap": l.lap, "decision": l.decision, "passed": l.passed}))
            .collect();
        print_json(&json!({
            "status": o.status,
            "reason": o.reason,
            "laps": o.laps,
            "run_id": o.run_id,
            "ledger": ledger,
            "write_errors": o.write_errors,
        }));
    } else {
        let mark = if o.status == "DONE" { "✓" } else { "✗" };
        println!("{mark} [{}] {} (laps: {})", o.status, o.reason, o.laps);
        for l in &laps {
            println!(
                "   lap {}: {:<8} {}  {}",
                l.lap,
                l.decision,
                gate_word(l.passed),
                l.detail
            );
        }
        println!(
            "run_id: {}  (recall with tag loop:convergence-demo)",
            o.run_id
        );
        if let Some(first) = o.write_errors.first() {
            println!(
                "WARNING: {} ledger write error(s): {first}",
                o.write_errors.len()
            );
        }
    }
    Ok(exit_code(&o.status))
}

async fn history(
    s: &mut Services,
    profile: &str,
    name: String,
    limit: Option<u32>,
    json: bool,
) -> anyhow::Result<i32> {
    // No limit, or 0, lists every run.
    let want = limit
        .filter(|l| *l > 0)
        .map(|l| l as usize)
        .unwrap_or(usize::MAX);
    let mut runs = Vec::new();
    let mut cursor = String::new();
    let mut name_out = name.clone();
    while runs.len() < want {
        let page = s
            .loop_engine
            .history(pb::HistoryRequest {
                profile_id: profile.to_string(),
                name: name.clone(),
                limit: HISTORY_PAGE.min(u32::try_from(want - runs.len()).unwrap_or(u32::MAX)),
                cursor,
            })
            .await
            .map_err(rpc)?
            .into_inner();
        name_out = page.name;
        runs.extend(page.runs);
        if page.next_cursor.is_empty() {
            break;
        }
        cursor = page.next_cursor;
    }
    runs.truncate(want);
    if json {
        let rows: Vec<_> = runs
            .iter()
            .map(|r| {
                let mut row = json!({"run_id": r.run_id, "laps": r.laps, "final": r.r#final, "reason": r.reason, "ts": r.ts});
                mark_unfinished(&mut row, r.ended, &r.state);
                row
            })
            .collect();
        print_json(&json!({"name": name_out, "runs": rows}));
    } else if runs.is_empty() {
        println!("No recorded runs for loop '{name_out}'.");
    } else {
        println!("Runs for loop '{name_out}':");
        for r in &runs {
            // A run without a terminal row says so: its final decision is
            // not an outcome.
            let state = if r.ended {
                String::new()
            } else {
                format!("  ({})", r.state)
            };
            println!(
                "  {:<28} laps={:<3} final={:<8} {}{state}",
                r.run_id, r.laps, r.r#final, r.ts
            );
        }
    }
    Ok(0)
}

async fn show(s: &mut Services, profile: &str, run_id: String, json: bool) -> anyhow::Result<i32> {
    let r = s
        .loop_engine
        .show(pb::ShowRequest {
            profile_id: profile.to_string(),
            run_id,
            limit: SHOW_LIMIT,
        })
        .await
        .map_err(rpc)?
        .into_inner();
    if json {
        let laps: Vec<_> = r
            .laps
            .iter()
            .map(|l| {
                let b = l.budget.unwrap_or_default();
                json!({
                    "lap": l.lap,
                    "ts": l.ts,
                    "decision": l.decision,
                    "passed": l.passed,
                    "detail": l.detail,
                    "agent_claimed_done": l.agent_claimed_done,
                    "tokens": b.tokens,
                    "budget": {"tokens": b.tokens, "wallclock_s": b.wallclock_s},
                })
            })
            .collect();
        let mut out = json!({"run_id": r.run_id, "laps": laps});
        if !laps.is_empty() {
            mark_unfinished(&mut out, r.ended, &r.state);
        }
        print_json(&out);
    } else if r.laps.is_empty() {
        println!("No ledger entries for run '{}'.", r.run_id);
    } else {
        println!("Loop run {} ({}):", r.run_id, r.laps[0].name);
        for l in &r.laps {
            let tokens = l.budget.map(|b| b.tokens).unwrap_or(0);
            println!(
                "  lap {}: {:<8} {}  {}  [tokens={tokens}]",
                l.lap,
                l.decision,
                gate_word(l.passed),
                l.detail
            );
        }
        if !r.ended {
            println!("  (run {}: no terminal lap)", r.state);
        }
    }
    Ok(0)
}

async fn kill(
    s: &mut Services,
    run: Option<String>,
    clear: bool,
    json: bool,
) -> anyhow::Result<i32> {
    let r = s
        .loop_engine
        .kill(pb::KillRequest {
            run_id: run.clone().unwrap_or_default(),
            clear,
        })
        .await
        .map_err(rpc)?
        .into_inner();
    let scope = run
        .map(|r| format!("run {r}"))
        .unwrap_or_else(|| "every loop".into());
    if json {
        print_json(
            &json!({"ok": true, "engaged": r.engaged, "scope": scope, "running": r.run_ids}),
        );
    } else if r.engaged {
        println!("Kill switch tripped for {scope}; loops stop before their next lap.");
    } else {
        println!("Kill switch cleared for {scope}.");
    }
    Ok(0)
}
