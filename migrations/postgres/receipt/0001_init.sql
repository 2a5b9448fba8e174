-- The receipt service's tables on PostgreSQL. Registrations and receipts are
-- append-only: the service never updates them, and the database refuses to.

CREATE TABLE profile_erasures (
    profile_id TEXT PRIMARY KEY,
    erased_at TEXT NOT NULL
);

CREATE TABLE loop_gate_jobs (
    seq BIGSERIAL PRIMARY KEY,
    job_id TEXT NOT NULL UNIQUE,
    profile_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    watcher_name TEXT NOT NULL,
    producer TEXT NOT NULL,
    command_digest TEXT NOT NULL,
    command_json TEXT NOT NULL,
    cwd TEXT NOT NULL,
    artifacts_json TEXT NOT NULL,
    revision_digest TEXT NOT NULL,
    registered_at TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    registered_us BIGINT NOT NULL,
    expires_us BIGINT NOT NULL,
    allow_prestart_evidence BIGINT NOT NULL CHECK (allow_prestart_evidence IN (0, 1)),
    artifact_paths_json TEXT NOT NULL,
    check_paths_json TEXT NOT NULL,
    definition_json TEXT NOT NULL,
    definition_digest TEXT NOT NULL
);
CREATE INDEX loop_gate_jobs_by_watcher ON loop_gate_jobs (profile_id, watcher_name, seq);

CREATE TABLE loop_execution_receipts (
    seq BIGSERIAL PRIMARY KEY,
    receipt_id TEXT NOT NULL UNIQUE,
    profile_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    producer TEXT NOT NULL,
    command_digest TEXT NOT NULL,
    verdict TEXT NOT NULL,
    exit_code BIGINT NOT NULL,
    produced_at TEXT NOT NULL,
    produced_us BIGINT NOT NULL,
    evidence_digest TEXT NOT NULL,
    evidence TEXT NOT NULL,
    CHECK ((exit_code = 0 AND verdict = 'PASS') OR (exit_code <> 0 AND verdict = 'FAIL'))
);
CREATE INDEX loop_execution_receipts_by_job ON loop_execution_receipts (profile_id, run_id, seq);

CREATE FUNCTION slm_jobs_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND EXISTS (SELECT 1 FROM profile_erasures e WHERE e.profile_id = OLD.profile_id) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'gate registrations are operator-owned and immutable';
END $$;
CREATE TRIGGER loop_gate_jobs_immutable BEFORE UPDATE OR DELETE ON loop_gate_jobs
    FOR EACH ROW EXECUTE FUNCTION slm_jobs_immutable();

CREATE FUNCTION slm_receipts_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND EXISTS (SELECT 1 FROM profile_erasures e WHERE e.profile_id = OLD.profile_id) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'execution receipts are append-only';
END $$;
CREATE TRIGGER loop_execution_receipts_append_only BEFORE UPDATE OR DELETE ON loop_execution_receipts
    FOR EACH ROW EXECUTE FUNCTION slm_receipts_append_only();
