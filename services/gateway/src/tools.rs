//! The tool catalogue: names, descriptions, input schemas and annotations.
//! Schemas are written by hand so that they describe exactly what the
//! hand-written argument checks of the gateway accept.

use std::sync::Arc;

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

pub const LOOP_RUN: &str = "slm_loop_run";
pub const LOOP_HISTORY: &str = "slm_loop_history";
pub const LOOP_SHOW: &str = "slm_loop_show";
pub const OBSERVE_EVIDENCE: &str = "observe_bounded_loop_evidence";
pub const OBSERVE_LEARNING: &str = "observe_bounded_loop_execution_learning";
pub const REMEMBER: &str = "remember";
pub const RECALL: &str = "recall";

/// Tools of the named profiles `code`, `full` and `power` (spec MCP-02).
pub const NAMED_PROFILE_TOOLS: &[&str] = &[
    LOOP_RUN,
    LOOP_HISTORY,
    LOOP_SHOW,
    OBSERVE_EVIDENCE,
    REMEMBER,
    RECALL,
];

/// Every tool (profile `whole`).
pub const ALL_TOOLS: &[&str] = &[
    LOOP_RUN,
    LOOP_HISTORY,
    LOOP_SHOW,
    OBSERVE_EVIDENCE,
    REMEMBER,
    RECALL,
    OBSERVE_LEARNING,
];

/// Argument names each tool accepts (anything else is refused).
pub const LOOP_RUN_ARGS: &[&str] = &[
    "name",
    "gate_query",
    "gate_contract",
    "gate_min_score",
    "max_iterations",
    "max_wallclock_s",
    "poll_interval_s",
    "max_tokens",
    "no_progress_window",
    "require_support",
];
pub const LOOP_HISTORY_ARGS: &[&str] = &["name", "limit", "profile_id"];
pub const LOOP_SHOW_ARGS: &[&str] = &["run_id", "limit", "profile_id"];
pub const REMEMBER_ARGS: &[&str] = &["content", "tags", "session_id", "importance", "profile_id"];
pub const RECALL_ARGS: &[&str] = &["query", "limit", "tag", "profile_id"];
pub const OBSERVE_ARGS: &[&str] = &["workspace"];

const NUMBERS_NOTE: &str = "Numbers may also be given as numeric strings; a value that cannot be \
converted is refused with the conversion error. Omitted arguments take their defaults; null is \
not a default.";

const PROFILE_ID_DOC: &str = "Profile to read (empty = the active profile). A tool call never \
creates a profile: an unknown one answers code 'unknown_profile'.";

fn loop_run() -> Tool {
    let description = format!(
        "Wait, under hard bounds, for an operator-verified check to pass. This is a watcher, \
not a worker: it blocks and polls until, on the same lap, (1) recalling gate_query finds a \
memory that is not one of the loop's own ledger rows, clears the evidence floor and scores at \
least gate_min_score, and (2) an independent execution receipt exists for the operator-registered \
job named in gate_contract ({{\"job_id\": \"<32 hex>\"}}), produced by someone other than you, \
after this call started, on the current files. Your own claim that the work is done never \
counts, and no MCP tool can register or run a check: the operator does that on the SLM \
computer. Without a valid gate_contract the run cannot end DONE; it runs to a bound and ends \
HALT, and `reason` names the refusal (e.g. 'operator-registered job_id required', 'no execution \
receipt', 'check FAILED (exit 1)'). Report the exact status: only DONE (passed=true) is success. \
Returns {{ok, status (DONE|HALT|PAUSE|KILLED|ERROR), reason, bound_reason, receipt_reason, \
passed, laps, run_id, ledger:[{{lap, decision, passed, detail}}], note, ledger_write_errors, \
write_errors}}; each lap is also sent as a progress notification when you pass a progressToken. \
On failure returns {{ok:false, error}}. Limits: name 1–128 chars, gate_query 1–2000 chars \
(both trimmed); max_iterations is clamped to 1..200 (fractions truncate); max_wallclock_s is \
capped at 120 and 0 or a negative value means no wall-clock bound (the engine still keeps an \
absolute ceiling); poll_interval_s is at least 0.25 and at most the wall-clock bound; \
max_tokens and no_progress_window <= 0 mean none. Leave no_progress_window at 0 for a pure \
watcher. Runs in the active profile. {NUMBERS_NOTE}"
    );
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 128,
                "description": "Loop name (trimmed, 1–128 characters); also the memory tag loop:<name> and the watcher name the operator's job was registered for."},
            "gate_query": {"type": "string", "minLength": 1, "maxLength": 2000,
                "description": "Recall query that must find a locator memory (where the work is / what the task is) on the passing lap (trimmed, 1–2000 characters)."},
            "gate_contract": {"type": ["object", "null"], "default": null,
                "properties": {"job_id": {"type": "string", "description": "32 lowercase hex characters"}},
                "description": "{\"job_id\": \"<32 lowercase hex>\"} from the operator's check registration; required for DONE. Forwarded as given; the receipt service decides whether it is admitted."},
            "gate_min_score": {"type": "number", "default": 0.0,
                "description": "Minimum top recall score (not clamped; 0.0 = any confident hit above the evidence floor)."},
            "max_iterations": {"type": "integer", "default": 20, "minimum": 1, "maximum": 200,
                "description": "Lap bound, clamped to 1..200."},
            "max_wallclock_s": {"type": "number", "default": 15.0, "maximum": 120,
                "description": "Wall-clock bound in seconds, capped at 120; 0 (or negative) removes it."},
            "poll_interval_s": {"type": "number", "default": 1.0, "minimum": 0.25,
                "description": "Sleep between laps, at least 0.25 and at most the wall-clock bound (120 when unbounded)."},
            "max_tokens": {"type": "integer", "default": 0, "minimum": 0,
                "description": "Token budget; 0 (or negative) means none."},
            "no_progress_window": {"type": "integer", "default": 0, "minimum": 0,
                "description": "Halt after this many laps without change; 0 disables it (keep 0 for a watcher, which never changes)."},
            "require_support": {"type": "boolean", "default": false,
                "description": "Also require the answer check to judge the recalled memories sufficient."}
        },
        "required": ["name", "gate_query"],
        "additionalProperties": false
    });
    tool(LOOP_RUN, description, schema).with_annotations(
        ToolAnnotations::new()
            .read_only(false)
            .destructive(false)
            .idempotent(false)
            .open_world(false),
    )
}

fn loop_history() -> Tool {
    let description = format!(
        "List recorded runs of one bounded loop, newest first. Read-only. Returns {{ok, name, \
count, runs:[{{run_id, laps (ledger rows of the run), final (last decision or 'unknown'), \
reason (the receipt refusal or pass that explains the run, else the last detail), ts, and for \
a run without a terminal lap ended:false and state (running|unfinished|interrupted)}}]}}, or \
{{ok:false, error}}. Use slm_loop_show with a run_id for every lap. {NUMBERS_NOTE}"
    );
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "description": "Loop name (trimmed; required)."},
            "limit": {"type": "integer", "default": 20, "minimum": 1, "maximum": 200,
                "description": "Most runs to return, clamped to 1..200."},
            "profile_id": {"type": "string", "default": "", "description": PROFILE_ID_DOC}
        },
        "required": ["name"],
        "additionalProperties": false
    });
    tool(LOOP_HISTORY, description, schema).with_annotations(read_only())
}

fn loop_show() -> Tool {
    let description = format!(
        "Show every recorded lap of one loop run, oldest first. Read-only. Returns {{ok, run_id, \
count, laps:[{{lap, ts, decision (continue|done|halt|pause|killed|error), passed, detail, \
agent_claimed_done (recorded for audit, never used to decide), tokens}}], and for a run \
without a terminal lap ended:false and state}}, or {{ok:false, error}}. {NUMBERS_NOTE}"
    );
    let schema = json!({
        "type": "object",
        "properties": {
            "run_id": {"type": "string", "minLength": 1, "description": "Run id from slm_loop_run or slm_loop_history (trimmed; required)."},
            "limit": {"type": "integer", "default": 200, "minimum": 1, "maximum": 1000,
                "description": "Most laps to return, clamped to 1..1000."},
            "profile_id": {"type": "string", "default": "", "description": PROFILE_ID_DOC}
        },
        "required": ["run_id"],
        "additionalProperties": false
    });
    tool(LOOP_SHOW, description, schema).with_annotations(read_only())
}

fn remember() -> Tool {
    let description = format!(
        "Store a memory (text, optional tags and session) so that later recall can find it. A \
memory is context only: it can locate work for slm_loop_run but can never make a loop pass. \
Returns {{ok, id, created_at}} or {{ok:false, error}}. {NUMBERS_NOTE}"
    );
    let schema = json!({
        "type": "object",
        "properties": {
            "content": {"type": "string", "minLength": 1, "description": "The text to remember (non-empty, at most 1 MiB, no NUL characters)."},
            "tags": {"type": "array", "items": {"type": "string"}, "default": [],
                "description": "Tags (each 1–128 characters, at most 32); recall can filter on one."},
            "session_id": {"type": "string", "default": "", "description": "Optional session the memory belongs to."},
            "importance": {"type": "integer", "default": 0, "minimum": 0, "maximum": 10,
                "description": "1–10; 0 means the default (5)."},
            "profile_id": {"type": "string", "default": "",
                "description": "Profile to write (empty = the active profile). A tool call never creates a profile."}
        },
        "required": ["content"],
        "additionalProperties": false
    });
    tool(REMEMBER, description, schema).with_annotations(
        ToolAnnotations::new()
            .read_only(false)
            .destructive(false)
            .idempotent(false)
            .open_world(false),
    )
}

fn recall() -> Tool {
    let description = format!(
        "Find memories by full-text recall, best first. Read-only. Returns {{ok, results:[{{id, \
content, score (0..1), tags, session_id, created_at}}], no_confident_match}}; when \
no_confident_match is true, treat the results as weak. {NUMBERS_NOTE}"
    );
    let schema = json!({
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "description": "What to look for (required)."},
            "limit": {"type": "integer", "default": 10, "minimum": 1, "maximum": 100,
                "description": "Most results, clamped to 1..100."},
            "tag": {"type": "string", "default": "", "description": "Only memories carrying this exact tag."},
            "profile_id": {"type": "string", "default": "", "description": PROFILE_ID_DOC}
        },
        "required": ["query"],
        "additionalProperties": false
    });
    tool(RECALL, description, schema).with_annotations(read_only())
}

fn observe(name: &'static str, what: &str, contract: &str) -> Tool {
    let description = format!(
        "{what} Takes one explicit snapshot from the separate Bounded Loops product's bridge \
(bounded-loops-mcp, contract {contract}) for an absolute workspace path. \
Observation only: the evidence never influences recall, ranking or any loop decision. Returns \
{{success, durable, created, error?}}."
    );
    let schema = json!({
        "type": "object",
        "properties": {
            "workspace": {"type": "string", "description": "Absolute path of the Bounded Loops workspace."}
        },
        "required": ["workspace"],
        "additionalProperties": false
    });
    // No annotations (spec MCP-04): these write to the learning store.
    tool(name, description, schema)
}

fn read_only() -> ToolAnnotations {
    ToolAnnotations::new().read_only(true).open_world(false)
}

fn tool(name: &'static str, description: String, schema: Value) -> Tool {
    let Value::Object(schema) = schema else {
        unreachable!("tool schemas are objects")
    };
    Tool::new(name, description, Arc::new(schema as JsonObject))
}

/// The definition of a tool by name.
pub fn definition(name: &str) -> Option<Tool> {
    Some(match name {
        LOOP_RUN => loop_run(),
        LOOP_HISTORY => loop_history(),
        LOOP_SHOW => loop_show(),
        REMEMBER => remember(),
        RECALL => recall(),
        OBSERVE_EVIDENCE => observe(
            OBSERVE_EVIDENCE,
            "Record read-only evidence of finished Bounded Loops graph runs.",
            "bounded-loops.dev/slm-bridge/v1",
        ),
        OBSERVE_LEARNING => observe(
            OBSERVE_LEARNING,
            "Ingest terminal Bounded Loops execution evidence into the execution-reliability store (never semantic facts or preferences).",
            "bounded-loops.dev/slm-bridge/v2",
        ),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_has_a_definition_matching_its_arguments() {
        for name in ALL_TOOLS {
            let t = definition(name).unwrap();
            assert_eq!(t.name, *name);
            let props = t.input_schema["properties"].as_object().unwrap();
            let accepted = match *name {
                LOOP_RUN => LOOP_RUN_ARGS,
                LOOP_HISTORY => LOOP_HISTORY_ARGS,
                LOOP_SHOW => LOOP_SHOW_ARGS,
                REMEMBER => REMEMBER_ARGS,
                RECALL => RECALL_ARGS,
                _ => OBSERVE_ARGS,
            };
            let mut keys: Vec<&str> = props.keys().map(String::as_str).collect();
            let mut want = accepted.to_vec();
            keys.sort_unstable();
            want.sort_unstable();
            assert_eq!(keys, want, "{name}");
            assert_eq!(t.input_schema["additionalProperties"], json!(false));
        }
        assert!(definition("register_check").is_none());
    }
}
