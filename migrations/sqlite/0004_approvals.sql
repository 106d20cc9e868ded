-- Approvals: a person decides before a tool that needs it runs.

-- One request per held call: the tool and the exact arguments (canonical JSON) a person
-- approves or denies. An approved call runs once (`used_at`).
CREATE TABLE approvals (
    id          TEXT PRIMARY KEY,
    task_id     TEXT NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
    tool        TEXT NOT NULL,
    arguments   TEXT NOT NULL,
    state       TEXT NOT NULL CHECK (state IN ('open', 'approved', 'denied', 'expired')),
    -- a denial's reason ('expired' for an expiry, 'timeout' for `run --approval-timeout`)
    reason      TEXT,
    created_at  TEXT NOT NULL,
    expires_at  TEXT NOT NULL,
    decided_at  TEXT,
    -- who answered: 'api', 'dashboard', 'cli', 'email:ADDRESS', 'expiry', ...
    decided_by  TEXT,
    used_at     TEXT
);
CREATE INDEX approvals_by_state ON approvals (state, created_at);
CREATE INDEX approvals_by_task ON approvals (task_id);

-- The notices that asked a person about a request (one per channel of tools.approval_notify):
-- a reply to one of them answers that request.
CREATE TABLE approval_notices (
    approval_id TEXT NOT NULL REFERENCES approvals(id) ON DELETE CASCADE,
    notice_id   INTEGER NOT NULL REFERENCES outbox(id) ON DELETE CASCADE,
    PRIMARY KEY (approval_id, notice_id)
);
CREATE INDEX approval_notices_by_notice ON approval_notices (notice_id);

-- A task waiting (on a person, or on a sub-agent that waits on one): its conversation so far,
-- from which it continues once answered. The task stays 'running' with `waiting` set.
CREATE TABLE task_holds (
    task_id    TEXT PRIMARY KEY REFERENCES tasks(id) ON DELETE CASCADE,
    -- JSON: the message window, the held round, counters, the execution's options
    checkpoint TEXT NOT NULL,
    -- who continues it: NULL = the daemon's workers; else the id of the task whose process
    -- (a `hermes-agent run`) continues it
    owner      TEXT,
    created_at TEXT NOT NULL
);

ALTER TABLE tasks ADD COLUMN waiting INTEGER NOT NULL DEFAULT 0;

-- Tool globs a person approved in advance for a job's firings.
ALTER TABLE jobs ADD COLUMN pre_approved TEXT NOT NULL DEFAULT '[]';

-- Trace rows of kind 'approval': the CHECK is part of the table, so the table is rebuilt.
CREATE TABLE task_steps_new (
    task_id        TEXT NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
    seq            INTEGER NOT NULL,
    step           INTEGER NOT NULL,
    kind           TEXT NOT NULL CHECK (kind IN ('model', 'tool', 'note', 'approval')),
    name           TEXT NOT NULL DEFAULT '',
    request_tokens INTEGER NOT NULL DEFAULT 0,
    result_tokens  INTEGER NOT NULL DEFAULT 0,
    arguments      TEXT,
    output         TEXT,
    error          TEXT,
    duration_ms    INTEGER NOT NULL DEFAULT 0,
    created_at     TEXT NOT NULL,
    PRIMARY KEY (task_id, seq)
);
INSERT INTO task_steps_new SELECT task_id, seq, step, kind, name, request_tokens, result_tokens,
    arguments, output, error, duration_ms, created_at FROM task_steps;
DROP TABLE task_steps;
ALTER TABLE task_steps_new RENAME TO task_steps;
