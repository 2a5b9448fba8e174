//! `slm remember` and `slm recall`.

use serde_json::json;

use slm_proto::v1 as pb;

use crate::cli::{RecallArgs, RememberArgs};
use crate::services::Services;
use crate::{print_json, rpc};

pub async fn remember(s: &mut Services, profile: &str, a: RememberArgs) -> anyhow::Result<i32> {
    let m = s
        .ledger
        .remember(pb::RememberRequest {
            profile_id: profile.to_string(),
            content: a.text,
            tags: a.tags,
            session_id: a.session,
            importance: a.importance,
            agent_id: "slm-cli".into(),
            ..Default::default()
        })
        .await
        .map_err(rpc)?
        .into_inner()
        .memory
        .unwrap_or_default();
    if a.json {
        print_json(&json!({
            "ok": true,
            "id": m.id,
            "profile_id": m.profile_id,
            "tags": m.tags,
            "session_id": m.session_id,
            "created_at": m.created_at,
        }));
    } else {
        println!("remembered #{} ({})", m.id, m.created_at);
    }
    Ok(0)
}

pub async fn recall(s: &mut Services, profile: &str, a: RecallArgs) -> anyhow::Result<i32> {
    let r = s
        .ledger
        .recall(pb::RecallRequest {
            profile_id: profile.to_string(),
            query: a.query,
            limit: a.limit,
            tag: a.tag,
            evidence_floor: None,
            exclude_loop_rows: false,
        })
        .await
        .map_err(rpc)?
        .into_inner();
    if a.json {
        let results: Vec<_> = r
            .results
            .iter()
            .map(|h| {
                let m = h.memory.clone().unwrap_or_default();
                json!({
                    "id": m.id,
                    "content": m.content,
                    "score": h.score,
                    "tags": m.tags,
                    "session_id": m.session_id,
                    "created_at": m.created_at,
                })
            })
            .collect();
        print_json(&json!({"results": results, "no_confident_match": r.no_confident_match}));
        return Ok(0);
    }
    if r.results.is_empty() {
        println!("No memories found.");
        return Ok(0);
    }
    if r.no_confident_match {
        println!(
            "(no confident match: nothing reaches the evidence floor {:.2})",
            r.evidence_floor
        );
    }
    for h in &r.results {
        let m = h.memory.clone().unwrap_or_default();
        let tags = if m.tags.is_empty() {
            String::new()
        } else {
            format!("  [{}]", m.tags.join(", "))
        };
        println!(
            "{:.2}  #{}  {}{}",
            h.score,
            m.id,
            one_line(&m.content, 160),
            tags
        );
    }
    Ok(0)
}

/// Content on one line, cut at `max` characters.
fn one_line(s: &str, max: usize) -> String {
    let flat: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    match flat.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &flat[..i]),
        None => flat,
    }
}
