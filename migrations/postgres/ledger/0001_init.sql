-- The memory (ledger) service's tables on PostgreSQL.

CREATE TABLE profiles (
    profile_id TEXT PRIMARY KEY,
    created_at TEXT NOT NULL
);
INSERT INTO profiles (profile_id, created_at)
VALUES ('default', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"+00:00"'));

CREATE TABLE memories (
    id BIGSERIAL PRIMARY KEY,
    profile_id TEXT NOT NULL REFERENCES profiles(profile_id) ON DELETE CASCADE,
    content TEXT NOT NULL,
    session_id TEXT NOT NULL DEFAULT '',
    agent_id TEXT NOT NULL DEFAULT '',
    importance BIGINT NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}',
    tags TEXT NOT NULL DEFAULT '[]',
    created_at TEXT NOT NULL,
    content_tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple', content)) STORED
);
CREATE INDEX memories_by_session ON memories (profile_id, session_id, id);
CREATE INDEX memories_by_profile ON memories (profile_id, id);
CREATE INDEX memories_fts ON memories USING GIN (content_tsv);

CREATE TABLE memory_tags (
    profile_id TEXT NOT NULL,
    tag TEXT NOT NULL,
    memory_id BIGINT NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
    PRIMARY KEY (profile_id, tag, memory_id)
);
CREATE INDEX memory_tags_by_memory ON memory_tags (memory_id);

CREATE TABLE loop_laps (
    memory_id BIGINT PRIMARY KEY REFERENCES memories(id) ON DELETE CASCADE,
    profile_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    loop_name TEXT NOT NULL,
    lap BIGINT NOT NULL
);
CREATE INDEX loop_laps_by_run ON loop_laps (profile_id, run_id, memory_id);

CREATE TABLE loop_runs (
    profile_id TEXT NOT NULL REFERENCES profiles(profile_id) ON DELETE CASCADE,
    run_id TEXT NOT NULL,
    loop_name TEXT NOT NULL,
    seq BIGINT NOT NULL,
    rows BIGINT NOT NULL,
    final TEXT NOT NULL,
    started_ts TEXT NOT NULL,
    last_ts TEXT NOT NULL,
    last_detail TEXT NOT NULL,
    gate_detail TEXT,
    gate_passed BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (profile_id, run_id)
);
CREATE INDEX loop_runs_by_name ON loop_runs (profile_id, loop_name, seq);
CREATE INDEX loop_runs_by_seq ON loop_runs (profile_id, seq);
