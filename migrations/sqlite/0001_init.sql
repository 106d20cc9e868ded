-- hermes-agent schema, version 1.
-- Times are RFC 3339 UTC text (sortable); JSON columns hold JSON text.

CREATE TABLE tasks (
    id                TEXT PRIMARY KEY,
    state             TEXT NOT NULL CHECK (state IN ('pending', 'running', 'succeeded', 'failed', 'cancelled')),
    -- who asked: 'cli', 'api', 'job', 'agent' (a sub-agent's parent), 'model'
    origin            TEXT NOT NULL,
    parent_id         TEXT REFERENCES tasks(id) ON DELETE SET NULL,
    job_id            TEXT,
    profile           TEXT NOT NULL,
    task              TEXT NOT NULL,
    answer            TEXT,
    error             TEXT,
    -- machine-readable cause of a failure: max_steps, timeout, interrupted, shutdown, model, cancelled
    reason            TEXT,
    parse_failures    INTEGER NOT NULL DEFAULT 0,
    prompt_tokens     INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    created_at        TEXT NOT NULL,
    started_at        TEXT,
    finished_at       TEXT
);
CREATE INDEX tasks_by_state ON tasks (state, created_at);
CREATE INDEX tasks_by_created ON tasks (created_at);
CREATE INDEX tasks_by_job ON tasks (job_id, created_at);

-- The trace: one row per model call or tool call.
CREATE TABLE task_steps (
    task_id        TEXT NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
    seq            INTEGER NOT NULL,
    -- the loop iteration this row belongs to (1-based)
    step           INTEGER NOT NULL,
    kind           TEXT NOT NULL CHECK (kind IN ('model', 'tool', 'note')),
    -- tool name for tool rows, profile name for model rows
    name           TEXT NOT NULL DEFAULT '',
    -- model: prompt tokens; tool: 0
    request_tokens INTEGER NOT NULL DEFAULT 0,
    -- model: completion tokens; tool: tokens of the shaped result
    result_tokens  INTEGER NOT NULL DEFAULT 0,
    -- tool: the arguments as JSON; model: the tool calls it asked for as JSON
    arguments      TEXT,
    -- model: the text it answered; tool: the shaped result the model saw
    output         TEXT,
    error          TEXT,
    duration_ms    INTEGER NOT NULL DEFAULT 0,
    created_at     TEXT NOT NULL,
    PRIMARY KEY (task_id, seq)
);

CREATE TABLE working_memory (
    key        TEXT PRIMARY KEY,
    task_id    TEXT NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
    content    TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX working_memory_by_task ON working_memory (task_id);
CREATE INDEX working_memory_by_created ON working_memory (created_at);

CREATE TABLE jobs (
    id              TEXT PRIMARY KEY,
    name            TEXT NOT NULL,
    task            TEXT NOT NULL,
    -- as the user wrote it: '0 8 * * *', 'every 2h', 'in 30m', an ISO 8601 time
    schedule        TEXT NOT NULL,
    timezone        TEXT NOT NULL,
    -- JSON array of channel names
    notify          TEXT NOT NULL DEFAULT '[]',
    profile         TEXT,
    -- 'model', 'cli', 'api'
    origin          TEXT NOT NULL,
    -- JSON {"tool": ..., "arguments": {...}} run without the model before each firing
    precheck        TEXT,
    enabled         INTEGER NOT NULL DEFAULT 1,
    next_run_at     TEXT,
    -- the task of the run in progress; cleared when it ends (and at start-up after a crash)
    running_task_id TEXT,
    created_at      TEXT NOT NULL
);

CREATE TABLE job_runs (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id       TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    -- the time the run was due
    scheduled_at TEXT NOT NULL,
    fired_at     TEXT NOT NULL,
    outcome      TEXT NOT NULL CHECK (outcome IN ('fired', 'skipped', 'missed', 'failed')),
    task_id      TEXT,
    reason       TEXT,
    -- delivery state of the run's notices: none, pending, sent, failed, silent
    delivery     TEXT NOT NULL DEFAULT 'none'
);
CREATE INDEX job_runs_by_job ON job_runs (job_id, fired_at);

CREATE TABLE outbox (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    -- 'email' or a configured webhook name
    channel         TEXT NOT NULL,
    title           TEXT NOT NULL,
    body            TEXT NOT NULL,
    task_id         TEXT,
    job_id          TEXT,
    run_id          INTEGER,
    state           TEXT NOT NULL CHECK (state IN ('pending', 'sent', 'failed')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT,
    next_attempt_at TEXT NOT NULL,
    created_at      TEXT NOT NULL,
    sent_at         TEXT
);
CREATE INDEX outbox_due ON outbox (state, next_attempt_at);
CREATE INDEX outbox_by_task ON outbox (task_id);
CREATE INDEX outbox_by_job ON outbox (job_id);

-- Long-term facts. The tantivy index is derived from this table and rebuilt from it.
CREATE TABLE facts (
    id         TEXT PRIMARY KEY,
    text       TEXT NOT NULL,
    -- normalised text, so the same fact said twice is merged
    norm       TEXT NOT NULL UNIQUE,
    tags       TEXT NOT NULL DEFAULT '[]',
    source     TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);

-- Last seen content of watched pages and feeds.
CREATE TABLE snapshots (
    key        TEXT PRIMARY KEY,
    content    TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
