//! `slm check register|run|status|list`: the operator's side of the receipt
//! service.

use serde_json::json;
use tokio_stream::StreamExt;

use slm_proto::v1 as pb;

use crate::cli::CheckCommand;
use crate::operator::{operator, operator_token};
use crate::services::Services;
use crate::{print_json, rpc};

pub async fn run(s: &mut Services, profile: &str, c: CheckCommand) -> anyhow::Result<i32> {
    match c {
        CheckCommand::Register {
            task,
            watcher,
            producer,
            cwd,
            check,
            artifact,
            ttl,
            allow_prestart_evidence,
            json,
            argv,
        } => {
            let cwd = match cwd {
                Some(c) => std::path::absolute(c)?,
                None => std::env::current_dir()?,
            };
            let token = operator_token(s)?;
            let job = s
                .receipt
                .register_job(operator(
                    &token,
                    pb::RegisterJobRequest {
                        profile_id: profile.to_string(),
                        task_id: task,
                        watcher_name: watcher,
                        producer,
                        argv,
                        cwd: cwd.display().to_string(),
                        artifact_paths: artifact,
                        check_paths: check,
                        allow_prestart_evidence,
                        ttl_seconds: Some(ttl),
                    },
                )?)
                .await
                .map_err(rpc)?
                .into_inner();
            if json {
                print_json(&json!({
                    "job_id": job.job_id,
                    "task_id": job.task_id,
                    "watcher_name": job.watcher_name,
                    "producer": job.producer,
                    "argv": job.argv,
                    "cwd": job.cwd,
                    "artifact_paths": job.artifact_paths,
                    "revision_digest": job.revision_digest,
                    "definition_digest": job.definition_digest,
                    "registered_at": job.registered_at,
                    "expires_at": job.expires_at,
                }));
            } else {
                println!("registered job {}", job.job_id);
                println!(
                    "  watcher {}  producer {}  expires {}",
                    job.watcher_name, job.producer, job.expires_at
                );
                println!("  command {}", job.argv.join(" "));
                println!(
                    "  the agent waits with: slm_loop_run(name={:?}, gate_query=..., gate_contract={{\"job_id\": \"{}\"}})",
                    job.watcher_name, job.job_id
                );
            }
            Ok(0)
        }
        CheckCommand::Run {
            job_id,
            timeout,
            json,
        } => {
            let token = operator_token(s)?;
            let mut stream = s
                .receipt
                .run_check(operator(
                    &token,
                    pb::RunCheckRequest {
                        job_id,
                        timeout_s: timeout,
                    },
                )?)
                .await
                .map_err(rpc)?
                .into_inner();
            let mut receipt = None;
            while let Some(ev) = stream.next().await {
                match ev.map_err(rpc)?.event {
                    Some(pb::run_check_event::Event::Progress(p)) => eprintln!("… {p}"),
                    Some(pb::run_check_event::Event::Receipt(r)) => receipt = Some(r),
                    None => {}
                }
            }
            let r = receipt.ok_or_else(|| {
                anyhow::anyhow!("the receipt service ended the run without a receipt")
            })?;
            if json {
                print_json(&json!({
                    "verdict": r.verdict,
                    "exit_code": r.exit_code,
                    "stop_reason": if r.stop_reason.is_empty() { serde_json::Value::Null } else { json!(r.stop_reason) },
                    "receipt_id": r.receipt_id,
                    "containment": r.containment,
                    "sandbox": r.sandbox,
                    "produced_at": r.produced_at,
                    "revision_digest": r.revision_digest,
                    "output_sha256": r.output_sha256,
                }));
            } else {
                let mark = if r.verdict == "PASS" { "✓" } else { "✗" };
                let why = if r.stop_reason.is_empty() {
                    String::new()
                } else {
                    format!(" — {}", r.stop_reason)
                };
                println!("{mark} {} (exit {}){why}", r.verdict, r.exit_code);
                println!(
                    "  receipt {}  containment {}  sandbox {}",
                    r.receipt_id, r.containment, r.sandbox
                );
            }
            Ok(if r.verdict == "PASS" { 0 } else { 3 })
        }
        CheckCommand::Status {
            job_id,
            watcher,
            agent,
            since,
            json,
        } => {
            let agent = agent
                .or_else(|| std::env::var("SLM_AGENT_ID").ok().filter(|a| !a.is_empty()))
                .unwrap_or_else(|| "mcp_client".into());
            let since = match since {
                Some(s) => s,
                None => match s
                    .receipt
                    .get_job(pb::GetJobRequest {
                        job_id: job_id.clone(),
                    })
                    .await
                {
                    Ok(j) => j.into_inner().registered_at,
                    Err(_) => String::new(),
                },
            };
            let r = s
                .receipt
                .gate_status(pb::GateStatusRequest {
                    profile_id: profile.to_string(),
                    contract_json: json!({"job_id": job_id}).to_string(),
                    watcher_name: watcher,
                    running_agent: agent,
                    watcher_started_at: since,
                })
                .await
                .map_err(rpc)?
                .into_inner();
            if json {
                print_json(&json!({"passed": r.passed, "reason": r.reason}));
            } else {
                let mark = if r.passed { "✓" } else { "✗" };
                println!("{mark} {}", r.reason);
            }
            Ok(if r.passed { 0 } else { 3 })
        }
        CheckCommand::List { limit, json } => {
            let jobs = s
                .receipt
                .list_jobs(pb::ListJobsRequest {
                    profile_id: profile.to_string(),
                    limit,
                })
                .await
                .map_err(rpc)?
                .into_inner()
                .jobs;
            if json {
                let rows: Vec<_> = jobs
                    .iter()
                    .map(|js| {
                        let j = js.job.clone().unwrap_or_default();
                        let l = js.latest.clone();
                        json!({
                            "job_id": j.job_id, "task_id": j.task_id, "watcher_name": j.watcher_name,
                            "producer": j.producer, "expires_at": j.expires_at, "current": j.current,
                            "latest": l.map(|r| json!({"verdict": r.verdict, "exit_code": r.exit_code,
                                "stop_reason": r.stop_reason, "produced_at": r.produced_at, "containment": r.containment,
                                "sandbox": r.sandbox})),
                        })
                    })
                    .collect();
                print_json(&json!({"jobs": rows}));
            } else if jobs.is_empty() {
                println!("No registered checks.");
            } else {
                for js in &jobs {
                    let j = js.job.clone().unwrap_or_default();
                    let latest = js
                        .latest
                        .as_ref()
                        .map(|r| format!("{} (exit {})", r.verdict, r.exit_code))
                        .unwrap_or_else(|| "no receipt".into());
                    let state = if j.current {
                        "current"
                    } else {
                        "superseded/expired"
                    };
                    println!(
                        "{}  watcher={}  {state}  {latest}",
                        j.job_id, j.watcher_name
                    );
                }
            }
            Ok(0)
        }
    }
}
