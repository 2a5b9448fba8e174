//! Server-rendered HTML. Every dynamic value goes through [`E`] / [`escape`].

use std::fmt::Write;

use crate::bridge::BridgePane;
use crate::escape::{E, escape};
use crate::model::{CLAIM_LABEL, ChecksPage, RunDetail, RunsPage, ServiceError};

/// Percent-encodes one URL path segment (everything but unreserved chars).
pub fn url_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// `data-*` attributes on `<body>` for the live-update script.
type BodyData<'a> = &'a [(&'a str, &'a str)];

fn layout(title: &str, active: &str, data: BodyData<'_>, main: &str) -> String {
    let mut attrs = String::new();
    for (k, v) in data {
        let _ = write!(attrs, " data-{}=\"{}\"", E(*k), E(*v));
    }
    let nav = [
        ("/", "Runs", "runs"),
        ("/checks", "Checks", "checks"),
        (
            "/integrations/bounded-loops",
            "Integrations › Bounded Loops",
            "integrations",
        ),
    ]
    .iter()
    .map(|(href, label, key)| {
        let cur = if *key == active {
            " aria-current=\"page\""
        } else {
            ""
        };
        format!("<a href=\"{href}\"{cur}>{}</a>", E(*label))
    })
    .collect::<Vec<_>>()
    .join("");
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
<title>{} · SLM</title><link rel=\"stylesheet\" href=\"/assets/app.css\">\
<script src=\"/assets/app.js\" defer></script></head>\
<body{attrs}><header><span class=\"brand\">SLM</span><nav>{nav}</nav></header>\
<main>{main}</main><footer>Read-only view. Data comes from the SLM services over gRPC.</footer></body></html>\n",
        E(title)
    )
}

fn status_badge(status: &str) -> String {
    format!(
        "<span class=\"badge status-{}\">{}</span>",
        escape(&status.to_ascii_lowercase()),
        E(status)
    )
}

pub fn error_page(title: &str, e: &ServiceError) -> String {
    let main = format!(
        "<h1>{}</h1><p class=\"error\">The {} service answered {}: <span class=\"mono\">{}</span></p>",
        E(title),
        E(e.service),
        E(&e.code),
        E(&e.message)
    );
    layout(title, "", &[], &main)
}

pub fn not_found_page() -> String {
    layout(
        "Not found",
        "",
        &[],
        "<h1>Not found</h1><p>No such page or run. <a href=\"/\">Back to runs</a>.</p>",
    )
}

pub fn home(page: &RunsPage) -> String {
    let mut main = String::from("<h1>Loop runs</h1>");
    let live = page.runs.iter().any(|r| r.status == "RUNNING");
    if page.runs.is_empty() {
        main.push_str(
            "<p class=\"empty\">No loop runs recorded yet. Try <code>slm loop demo</code>.</p>",
        );
    } else {
        let _ = write!(
            main,
            "<p class=\"muted\">The {} most recent runs across every loop name, newest first.</p>\
<table id=\"runs\"><thead><tr><th>Name</th><th>Run</th><th>Status</th><th>Reason</th>\
<th class=\"num\">Laps</th><th>Last activity</th></tr></thead><tbody>",
            page.runs.len()
        );
        for r in &page.runs {
            let _ = write!(
                main,
                "<tr data-run-id=\"{id}\"><td class=\"name\">{name}</td>\
<td><a class=\"mono\" href=\"/runs/{href}\">{id}</a></td><td>{status}</td>\
<td class=\"reason\">{reason}</td><td class=\"num\">{laps}</td><td class=\"ts\">{ts}</td></tr>",
                id = E(&r.run_id),
                name = E(&r.name),
                href = E(&url_segment(&r.run_id)),
                status = status_badge(r.status),
                reason = E(&r.reason),
                laps = r.laps,
                ts = E(&r.last_ts),
            );
        }
        main.push_str("</tbody></table>");
    }
    layout(
        "Loop runs",
        "runs",
        &[
            ("page", "home"),
            ("live", if live { "true" } else { "false" }),
        ],
        &main,
    )
}

pub fn run(d: &RunDetail) -> String {
    let mut main = String::new();
    let _ = write!(
        main,
        "<p class=\"crumbs\"><a href=\"/\">Runs</a> › <span class=\"mono\">{id}</span></p>\
<h1>Run <span class=\"mono\">{id}</span></h1>\
<dl class=\"facts\"><dt>Loop</dt><dd id=\"run-name\">{name}</dd>\
<dt>Status</dt><dd id=\"run-status\">{status}</dd>\
<dt>Reason</dt><dd id=\"run-reason\">{reason}</dd>\
<dt>Ledger rows</dt><dd id=\"run-laps\">{n}</dd></dl>\
<p id=\"live\" class=\"live\"{hidden}>In progress: updating as laps arrive…</p>\
<p class=\"note\">The independent gate decides; the agent's claim of being done is recorded \
for audit only and never read by any decision. It is shown as <em>{claim}</em>.</p>\
<table id=\"laps\"><thead><tr><th class=\"num\">Lap</th><th>Time</th><th>Decision</th>\
<th>Gate pass</th><th>Detail</th><th>Agent claim</th><th class=\"num\">Tokens</th>\
<th class=\"num\">Wall clock (s)</th></tr></thead><tbody>",
        id = E(&d.run_id),
        name = E(&d.name),
        status = status_badge(d.status),
        reason = E(&d.reason),
        n = d.laps.len(),
        hidden = if d.terminal { " hidden" } else { "" },
        claim = E(CLAIM_LABEL),
    );
    for l in &d.laps {
        let _ = write!(
            main,
            "<tr><td class=\"num\">{lap}</td><td class=\"ts\">{ts}</td><td>{dec}</td>\
<td>{pass}</td><td class=\"detail\">{detail}</td>\
<td class=\"claim\">{said} <em>{claim}</em></td><td class=\"num\">{tok}</td>\
<td class=\"num\">{wall:.3}</td></tr>",
            lap = l.lap,
            ts = E(&l.ts),
            dec = E(&l.decision),
            pass = if l.gate_passed { "yes" } else { "no" },
            detail = E(&l.detail),
            said = if l.agent_claimed_done {
                "says done"
            } else {
                "no claim"
            },
            claim = E(l.agent_claim),
            tok = l.tokens,
            wall = l.wallclock_s,
        );
    }
    main.push_str("</tbody></table>");
    layout(
        &format!("Run {}", d.run_id),
        "runs",
        &[
            ("page", "run"),
            ("run-id", &d.run_id),
            ("terminal", if d.terminal { "true" } else { "false" }),
        ],
        &main,
    )
}

pub fn checks(c: &ChecksPage) -> String {
    let mut main = String::from(
        "<h1>Registered checks and receipts</h1>\
<p class=\"note\">Read-only. Checks are registered and run by the operator on the SLM computer, \
never through MCP or this page. Check output is not stored, so it is never shown: only the \
latest receipt's verdict, reason, containment and sandbox.</p>",
    );
    if !c.available {
        main.push_str("<p class=\"empty\">No receipt service is connected.</p>");
    } else if c.jobs.is_empty() {
        main.push_str("<p class=\"empty\">No checks are registered.</p>");
    } else {
        main.push_str(
            "<table id=\"checks\"><thead><tr><th>Job</th><th>Task</th><th>Watcher</th>\
<th>Producer</th><th>Expires</th><th>Latest verdict</th><th>Reason</th><th>Containment</th>\
<th>Sandbox</th><th>Receipt time</th></tr></thead><tbody>",
        );
        for j in &c.jobs {
            let expiry = if j.expired {
                format!(
                    "{} <span class=\"badge neutral\">expired</span>",
                    E(&j.expires_at)
                )
            } else if !j.current {
                format!(
                    "{} <span class=\"badge neutral\">superseded</span>",
                    E(&j.expires_at)
                )
            } else {
                E(&j.expires_at).to_string()
            };
            let verdict = if j.latest_verdict.is_empty() {
                "<span class=\"muted\">no receipt</span>".to_string()
            } else {
                let class = if j.latest_verdict == "PASS" {
                    "ok"
                } else {
                    "danger"
                };
                format!(
                    "<span class=\"badge {class}\">{}</span>",
                    E(&j.latest_verdict)
                )
            };
            let _ = write!(
                main,
                "<tr><td class=\"mono\">{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"ts\">{}</td>\
<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"ts\">{}</td></tr>",
                E(&j.job_id),
                E(&j.task_id),
                E(&j.watcher),
                E(&j.producer),
                expiry,
                verdict,
                E(&j.latest_reason),
                E(&j.containment),
                E(&j.sandbox),
                E(&j.latest_at),
            );
        }
        main.push_str("</tbody></table>");
    }
    layout("Checks", "checks", &[("page", "checks")], &main)
}

/// The nine framework adapters, in the reference pane's order (DASH-09).
pub const ADAPTERS: [&str; 9] = [
    "CrewAI",
    "LangChain",
    "LangGraph",
    "Semantic Kernel",
    "LlamaIndex",
    "Microsoft Agent Framework",
    "AutoGen",
    "Google ADK",
    "OpenAI Agents",
];

/// The five terminal statuses with the seed's meanings (DASH-07).
pub const STATUSES: [(&str, &str, &str); 5] = [
    (
        "DONE",
        "The gate passed, and approval was granted or not required. The only success state.",
        "gate-passed",
    ),
    (
        "HALT",
        "Any safety bound tripped before the gate passed. Not a success.",
        "max-iterations, token-budget, wallclock, no-progress",
    ),
    (
        "PAUSE",
        "The gate passed but required approval was not granted: awaiting approval.",
        "awaiting-approval",
    ),
    (
        "KILLED",
        "The kill switch tripped between laps (SLM_LOOP_KILL).",
        "killed",
    ),
    (
        "ERROR",
        "The runner or the gate raised before a verdict.",
        "the error text",
    ),
];

fn bridge_section(b: &BridgePane) -> String {
    let badge_class = match b.installed {
        Some(true) => "ok",
        _ => "neutral",
    };
    let mut s = format!(
        "<section id=\"bridge-status\"><h2>Bridge status</h2>\
<p><span class=\"badge {badge_class}\" id=\"bridge-state\">{}</span> \
<span class=\"mono\">{}</span></p>",
        E(&b.state),
        E(b.contract)
    );
    if b.installed == Some(false) {
        s.push_str(
            "<p>Bounded Loops is a separate, optional product. It is not installed here, \
which is a normal, complete state: SLM only reads from it when it is present.</p>",
        );
    } else {
        if !b.version.is_empty() {
            let _ = write!(
                s,
                "<p>Version <span class=\"mono\">{}</span></p>",
                E(&b.version)
            );
        }
        if !b.contracts.is_empty() {
            let list = b
                .contracts
                .iter()
                .map(|c| format!("<span class=\"mono\">{}</span>", E(c)))
                .collect::<Vec<_>>()
                .join(", ");
            let _ = write!(s, "<p>Negotiated contracts: {list}</p>");
        }
        if !b.reason.is_empty() {
            let _ = write!(
                s,
                "<p class=\"muted\">Detail: <span class=\"mono\">{}</span></p>",
                E(&b.reason)
            );
        }
        s.push_str(
            "<ul class=\"guarantees\"><li>Observation only: <code>eligible_for_learning = false</code>; \
nothing observed changes recall, ranking or behaviour.</li>\
<li>Workspaces travel as digests, not paths.</li>\
<li>Receipts are a local append-only hash chain (<code>local_hash_chain_only</code>): \
tamper-evident, not verified.</li></ul>",
        );
        if b.runs.is_empty() {
            s.push_str(
                "<p class=\"empty\">Nothing has been observed yet. Evidence is imported only through the \
<code>observe_bounded_loop_evidence</code> tool, never automatically.</p>",
            );
        } else {
            if b.demonstration_count > 0 {
                let total = b.observations.max(b.runs.len() as u64);
                let verb = if b.demonstration_count == 1 {
                    "is a demonstration"
                } else {
                    "are demonstrations"
                };
                let _ = write!(
                    s,
                    "<p class=\"note\" id=\"demonstrations\">{} of {} observed run(s) {verb}.</p>",
                    b.demonstration_count, total
                );
            }
            s.push_str(
                "<table id=\"observed\"><thead><tr><th>Run</th><th>Outcome</th><th>Receipt</th>\
<th>Terminal at</th><th>Contract</th><th>eligible_for_learning</th></tr></thead><tbody>",
            );
            for r in &b.runs {
                let id = if r.run_ref.is_empty() {
                    &r.run_id
                } else {
                    &r.run_ref
                };
                let short: String = if id.chars().count() > 24 {
                    id.chars().take(23).chain(std::iter::once('…')).collect()
                } else {
                    id.clone()
                };
                let class = match r.outcome.as_str() {
                    "SUCCEEDED" => "ok",
                    "CANCELLED" => "neutral",
                    _ => "danger",
                };
                let demo = if r.demonstration {
                    " <span class=\"badge neutral\">demo</span>"
                } else {
                    ""
                };
                let state = if !r.run_state.is_empty() && r.run_state != r.outcome {
                    format!(" <span class=\"muted\">({})</span>", E(&r.run_state))
                } else {
                    String::new()
                };
                let _ = write!(
                    s,
                    "<tr><td class=\"mono\" title=\"{}\">{}{demo}</td>\
<td><span class=\"badge {class}\">{}</span>{state}</td><td class=\"mono\">seq {}</td>\
<td class=\"ts\">{}</td><td class=\"mono\">{}</td><td class=\"mono\">{}</td></tr>",
                    E(id),
                    E(&short),
                    E(&r.outcome),
                    r.receipt_sequence,
                    E(&r.terminal_at),
                    E(&r.contract),
                    r.eligible_for_learning,
                );
            }
            s.push_str("</tbody></table>");
        }
    }
    let _ = write!(
        s,
        "<p class=\"muted\" id=\"observations\">Bounded Loop observations: <strong>{}</strong> · \
<code>eligible_for_learning = {}</code></p>\
<p class=\"muted small\">Detection: a PATH lookup of <code>bounded-loops-mcp</code>, then the bridge's \
cached 1.5 s version probe. Neither does an MCP handshake, so this never claims the bridge is live.</p>\
</section>",
        b.observations, b.eligible_for_learning
    );
    s
}

pub fn bounded_loops(b: &BridgePane) -> String {
    let mut main =
        String::from("<p class=\"crumbs\">Integrations › Bounded Loops</p><h1>Bounded Loops</h1>");
    main.push_str(&bridge_section(b));
    main.push_str(
        "<section id=\"how-it-works\"><h2>How it works</h2>\
<p>An independent gate, not the agent's claim, ends a loop. The agent may say it is done; \
that flag is logged and never read. Every lap is stored as ordinary memory tagged \
<code>loop:&lt;name&gt;</code>, so history survives restarts and shows up in recall.</p>\
<p>Recall alone never completes a loop: for <code>slm_loop_run</code>, DONE needs a recalled \
locator <em>and</em> an independent execution receipt from an operator-registered check that \
passed against the current files.</p>\
<table id=\"statuses\"><thead><tr><th>Status</th><th>Meaning</th><th>Reasons you may see</th></tr></thead><tbody>",
    );
    for (st, meaning, reasons) in STATUSES {
        let _ = write!(
            main,
            "<tr><td>{}</td><td>{}</td><td class=\"mono\">{}</td></tr>",
            status_badge(st),
            E(meaning),
            E(reasons)
        );
    }
    main.push_str("</tbody></table></section>");
    main.push_str(&format!(
        "<section id=\"run-it\"><h2>Run it</h2><p>From the command line:</p>\
<pre><code>slm loop demo\nslm loop history\nslm loop show {}</code></pre>\
<p>Over MCP, wait for a verified check with a receipt contract:</p>\
<pre><code>{}</code></pre>\
<p class=\"note\">The operator registers the job and runs the check on the SLM computer; no MCP \
call can register or execute a check. The read-only tools <code>slm_loop_history</code> and \
<code>slm_loop_show</code> list runs and laps.</p></section>",
        E("<run_id>"),
        E(r#"slm_loop_run(name="build", gate_query="build status", gate_contract={"job_id": "<registered job id>"})"#),
    ));
    main.push_str("<section id=\"adapters\"><h2>Framework adapters</h2><ul class=\"chips\">");
    for a in ADAPTERS {
        let _ = write!(main, "<li class=\"chip adapter\">{}</li>", E(a));
    }
    main.push_str(
        "<li class=\"chip other\">any MCP-compatible agent</li></ul>\
<p class=\"note\">Each framework stamps <code>SLM_AGENT_ID</code>, so lap history records which \
agent a lap came from.</p></section>",
    );
    layout(
        "Bounded Loops",
        "integrations",
        &[("page", "bounded-loops")],
        &main,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_segments_are_encoded() {
        assert_eq!(url_segment("abc-1_2.x~"), "abc-1_2.x~");
        assert_eq!(url_segment("a/b c<"), "a%2Fb%20c%3C");
    }
}
