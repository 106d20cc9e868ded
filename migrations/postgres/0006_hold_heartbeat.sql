-- A held task's owner (a `hermes-agent run` continuing its own task) shows it is alive by
-- touching this; one silent past `storage.node_lease_s` is taken for dead, and the daemon's
-- workers continue its task.
ALTER TABLE task_holds ADD COLUMN owner_seen_at TIMESTAMPTZ;
UPDATE task_holds SET owner_seen_at = created_at WHERE owner IS NOT NULL;
