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

-- Work left by a daemon of an earlier version, which claimed no node: it belongs to a node
-- that never beats again, so the first sweep of a daemon takes it over like any silent node's.
INSERT INTO nodes (id, host, pid, api, started_at, seen_at)
SELECT 'before-nodes', '', 0, NULL, TIMESTAMPTZ 'epoch', TIMESTAMPTZ 'epoch'
WHERE EXISTS (SELECT 1 FROM tasks WHERE state = 'running')
   OR EXISTS (SELECT 1 FROM job_runs WHERE outcome = 'fired');
UPDATE tasks SET node_id = 'before-nodes' WHERE state = 'running';
UPDATE job_runs SET node_id = 'before-nodes' WHERE outcome = 'fired';
-- Placeholder run locks then named no node; no firing of that daemon is in flight now.
UPDATE jobs SET running_task_id = NULL WHERE running_task_id LIKE 'firing:%';

-- The change feed (LISTEN hermes): which task to look at, sent at commit. Identical payloads
-- in one transaction arrive once, so a burst of 1,000 pending tasks is one wake-up. A wake-up,
-- not a record: every listener reads the tables, and polls in case one is lost. Only what
-- someone waits for is sent — work queued, a task ended or waiting for a person —: a
-- transaction that notifies is serialised with the others at commit, and a notification per
-- trace row cost a third of the throughput at 100 tasks at once (BENCHMARKS.md §12). Trace
-- rows are followed by polling.
CREATE FUNCTION hermes_task_queued() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('hermes', 'pending');
    RETURN NULL;
END
$$;
CREATE TRIGGER tasks_queued AFTER INSERT ON tasks
    FOR EACH ROW WHEN (NEW.state = 'pending') EXECUTE FUNCTION hermes_task_queued();

CREATE FUNCTION hermes_task_settled() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('hermes', 'task:' || NEW.id);
    RETURN NULL;
END
$$;
CREATE TRIGGER tasks_settled AFTER UPDATE ON tasks
    FOR EACH ROW WHEN (
        (NEW.state IS DISTINCT FROM OLD.state AND NEW.state IN ('succeeded', 'failed', 'cancelled'))
        OR (NEW.waiting AND NOT OLD.waiting)
    ) EXECUTE FUNCTION hermes_task_settled();

-- An answered approval may let a held task go on: a worker anywhere takes it.
CREATE FUNCTION hermes_work_ready() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('hermes', 'pending');
    RETURN NULL;
END
$$;
CREATE TRIGGER approvals_decided AFTER UPDATE OF state ON approvals
    FOR EACH ROW WHEN (NEW.state IS DISTINCT FROM OLD.state) EXECUTE FUNCTION hermes_work_ready();

CREATE FUNCTION hermes_fact_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('hermes', 'facts');
    RETURN NULL;
END
$$;
CREATE TRIGGER fact_changes_added AFTER INSERT ON fact_changes
    FOR EACH ROW EXECUTE FUNCTION hermes_fact_changed();
