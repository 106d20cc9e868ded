-- Models change under you: which model answered each call, what each profile's server was
-- seen to serve, which of those a passing eval verified, the changes seen, and the eval runs.

-- A model call's trace row names the profile that answered (`name`) and, beside it, the model
-- the server reported, its system_fingerprint, and the profile's identity as last checked.
ALTER TABLE task_steps ADD COLUMN model TEXT;
ALTER TABLE task_steps ADD COLUMN fingerprint TEXT;
ALTER TABLE task_steps ADD COLUMN identity TEXT;

-- Why a paused job is paused: 'person' (the API, the CLI, the dashboard) or 'model_changed'
-- (model.on_change: hold). NULL while the job runs.
ALTER TABLE jobs ADD COLUMN pause_reason TEXT;

-- Every identity each profile's server was seen to serve.
CREATE TABLE model_identities (
    profile       TEXT NOT NULL,
    -- the identity in one line (llm::Identity::key): the model id and what the server told
    identity      TEXT NOT NULL,
    -- where it came from, in words
    source        TEXT NOT NULL,
    first_seen_at TEXT NOT NULL,
    last_seen_at  TEXT NOT NULL,
    -- set when an eval run in which every case on this profile passed saw this identity
    verified_at   TEXT,
    verified_run  INTEGER,
    PRIMARY KEY (profile, identity)
);
CREATE INDEX model_identities_by_seen ON model_identities (profile, last_seen_at);

-- A profile answering with an identity other than its verified one (or, before any was
-- verified, other than the one before): recorded once per (profile, from, to).
CREATE TABLE model_changes (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    profile       TEXT NOT NULL,
    old_identity  TEXT NOT NULL,
    new_identity  TEXT NOT NULL,
    -- the old one was verified (else it was only the one seen before)
    old_verified  INTEGER NOT NULL,
    -- model.on_change when it was seen
    action        TEXT NOT NULL CHECK (action IN ('warn', 'eval', 'hold')),
    -- JSON array of the ids of the jobs paused for it (hold)
    paused_jobs   TEXT NOT NULL DEFAULT '[]',
    -- the eval run started for it (eval), once it is recorded
    eval_run_id   INTEGER,
    seen_at       TEXT NOT NULL,
    UNIQUE (profile, old_identity, new_identity)
);

CREATE TABLE eval_runs (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    -- the profile asked for (--profile, or the default); cases may name their own
    profile     TEXT NOT NULL,
    -- that profile's identity when the run started (NULL: its server told nothing)
    identity    TEXT,
    -- who started it: 'cli', or 'model_change' (model.on_change: eval)
    trigger     TEXT NOT NULL CHECK (trigger IN ('cli', 'model_change')),
    started_at  TEXT NOT NULL,
    finished_at TEXT,
    passed      INTEGER NOT NULL DEFAULT 0,
    failed      INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX eval_runs_by_started ON eval_runs (started_at);

CREATE TABLE eval_results (
    run_id      INTEGER NOT NULL REFERENCES eval_runs(id) ON DELETE CASCADE,
    seq         INTEGER NOT NULL,
    case_name   TEXT NOT NULL,
    profile     TEXT NOT NULL,
    identity    TEXT,
    verdict     TEXT NOT NULL CHECK (verdict IN ('passed', 'failed')),
    model_calls INTEGER NOT NULL DEFAULT 0,
    tokens      INTEGER NOT NULL DEFAULT 0,
    duration_ms INTEGER NOT NULL DEFAULT 0,
    -- why it failed, in words (NULL when it passed)
    why         TEXT,
    -- the task's final state and answer, for a person reading why
    state       TEXT,
    answer      TEXT,
    PRIMARY KEY (run_id, seq)
);
