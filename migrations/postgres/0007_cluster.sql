-- Several daemons on one database (PostgreSQL; SQLite has one daemon, and records the same so
-- both engines keep one schema).
-- A daemon shows it is alive by touching `seen_at`; one silent past `storage.node_lease_s` is
-- taken for dead by the others, which end its running tasks and take over its job firings.
CREATE TABLE nodes (
    id         TEXT PRIMARY KEY,
    host       TEXT NOT NULL,
    pid        BIGINT NOT NULL,
    api        TEXT,
    started_at TIMESTAMPTZ NOT NULL,
    seen_at    TIMESTAMPTZ NOT NULL
);
-- The node whose process runs the task (set when it is claimed), and the node that follows a
-- job run to its end (set when it fires, moved when another node takes it over).
ALTER TABLE tasks ADD COLUMN node_id TEXT;
ALTER TABLE job_runs ADD COLUMN node_id TEXT;
CREATE INDEX tasks_running_by_node ON tasks (node_id) WHERE state = 'running';
CREATE INDEX job_runs_open_by_node ON job_runs (node_id) WHERE outcome = 'fired';
-- Every change of a fact, in order: each node's search index catches up from it.
CREATE TABLE fact_changes (
    seq        BIGSERIAL PRIMARY KEY,
    fact_id    TEXT NOT NULL,
    changed_at TIMESTAMPTZ NOT NULL
);
-- Dashboard sign-ins, so a session works on every node: the cookie's SHA-256 (never the cookie
-- itself) and its CSRF token.
CREATE TABLE sessions (
    id_hash    TEXT PRIMARY KEY,
    csrf       TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX sessions_by_expiry ON sessions (expires_at);
