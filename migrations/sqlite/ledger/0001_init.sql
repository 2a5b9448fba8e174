-- The memory (ledger) service's tables on SQLite.

CREATE TABLE profiles (
    profile_id TEXT PRIMARY KEY,
    created_at TEXT NOT NULL
);
INSERT INTO profiles (profile_id, created_at)
VALUES ('default', strftime('%Y-%m-%dT%H:%M:%S+00:00', 'now'));

CREATE TABLE memories (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    profile_id TEXT NOT NULL REFERENCES profiles(profile_id) ON DELETE CASCADE,
    content TEXT NOT NULL,
    session_id TEXT NOT NULL DEFAULT '',
    agent_id TEXT NOT NULL DEFAULT '',
    importance INTEGER NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}',
    tags TEXT NOT NULL DEFAULT '[]',
    created_at TEXT NOT NULL
);
CREATE INDEX memories_by_session ON memories (profile_id, session_id, id);
CREATE INDEX memories_by_profile ON memories (profile_id, id);

CREATE TABLE memory_tags (
    profile_id TEXT NOT NULL,
    tag TEXT NOT NULL,
    memory_id INTEGER NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
    PRIMARY KEY (profile_id, tag, memory_id)
) WITHOUT ROWID;
CREATE INDEX memory_tags_by_memory ON memory_tags (memory_id);

-- Full text over content; external content, kept in step by triggers.
CREATE VIRTUAL TABLE memories_fts USING fts5 (
    content,
    content = 'memories',
    content_rowid = 'id',
    tokenize = 'unicode61'
);
CREATE TRIGGER memories_fts_insert AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts (rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER memories_fts_delete AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, content) VALUES ('delete', old.id, old.content);
END;

-- The loop ledger index: one row per lap memory, written only by AppendLap.
CREATE TABLE loop_laps (
    memory_id INTEGER PRIMARY KEY REFERENCES memories(id) ON DELETE CASCADE,
    profile_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    loop_name TEXT NOT NULL,
    lap INTEGER NOT NULL
);
CREATE INDEX loop_laps_by_run ON loop_laps (profile_id, run_id, memory_id);

-- One summary row per run, kept current as laps are appended, so history
-- is an index range scan whatever the number of runs.
CREATE TABLE loop_runs (
    profile_id TEXT NOT NULL REFERENCES profiles(profile_id) ON DELETE CASCADE,
    run_id TEXT NOT NULL,
    loop_name TEXT NOT NULL,
    seq INTEGER NOT NULL,
    rows INTEGER NOT NULL,
    final TEXT NOT NULL,
    started_ts TEXT NOT NULL,
    last_ts TEXT NOT NULL,
    last_detail TEXT NOT NULL,
    gate_detail TEXT,
    gate_passed INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (profile_id, run_id)
);
CREATE INDEX loop_runs_by_name ON loop_runs (profile_id, loop_name, seq);
CREATE INDEX loop_runs_by_seq ON loop_runs (profile_id, seq);
