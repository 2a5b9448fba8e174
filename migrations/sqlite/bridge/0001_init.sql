-- The Bounded Loops bridge's tables in learning.db (SQLite).
-- M041 external evidence (observation only), the M040 profile-closure
-- tombstone and the M050 execution-reliability store. Additive.

CREATE TABLE IF NOT EXISTS external_evidence_receipts (
    profile_id TEXT NOT NULL,
    contract_id TEXT NOT NULL,
    workspace_id TEXT NOT NULL,
    run_ref TEXT NOT NULL,
    run_id TEXT NOT NULL,
    outcome TEXT NOT NULL,
    run_state TEXT NOT NULL,
    demonstration INTEGER NOT NULL CHECK (demonstration IN (0, 1)),
    eligible_for_learning INTEGER NOT NULL CHECK (eligible_for_learning IN (0, 1)),
    terminal_at TEXT NOT NULL,
    graph_digest TEXT NOT NULL,
    plan_digest TEXT NOT NULL,
    policy_digest TEXT NOT NULL,
    receipt_sequence INTEGER NOT NULL,
    receipt_head_digest TEXT NOT NULL,
    receipt_trust TEXT NOT NULL,
    nodes_json TEXT NOT NULL,
    artifact_digests_json TEXT NOT NULL,
    payload_sha256 TEXT NOT NULL,
    observed_at TEXT NOT NULL,
    PRIMARY KEY (profile_id, contract_id, workspace_id, run_ref)
);
CREATE INDEX IF NOT EXISTS idx_external_evidence_profile_terminal
    ON external_evidence_receipts (profile_id, terminal_at DESC);
CREATE INDEX IF NOT EXISTS idx_external_evidence_profile_workspace
    ON external_evidence_receipts (profile_id, workspace_id, terminal_at DESC);

CREATE TABLE IF NOT EXISTS agent_receipt_profile_closures (
    profile_id TEXT PRIMARY KEY,
    closed_at TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS execution_learning_receipts (
    profile_id TEXT NOT NULL,
    workspace_id TEXT NOT NULL,
    run_ref TEXT NOT NULL,
    run_id TEXT NOT NULL,
    receipt_head_digest TEXT NOT NULL,
    payload_json TEXT NOT NULL,
    payload_sha256 TEXT NOT NULL,
    producer_identity TEXT NOT NULL,
    capability_digest TEXT NOT NULL,
    terminal_listing_digest TEXT NOT NULL,
    observed_at TEXT NOT NULL,
    PRIMARY KEY (profile_id, workspace_id, run_ref)
);
CREATE TABLE IF NOT EXISTS execution_learning_events (
    profile_id TEXT NOT NULL,
    workspace_id TEXT NOT NULL,
    run_ref TEXT NOT NULL,
    receipt_head_digest TEXT NOT NULL,
    route_key TEXT NOT NULL,
    signal INTEGER NOT NULL CHECK (signal IN (-1, 1)),
    created_at TEXT NOT NULL,
    PRIMARY KEY (profile_id, workspace_id, run_ref, receipt_head_digest)
);
CREATE INDEX IF NOT EXISTS idx_execution_learning_events_profile_route
    ON execution_learning_events (profile_id, route_key);
