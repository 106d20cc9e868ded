-- hermes-agent schema, version 15: the process that claimed a task as it made it (`run`,
-- `mcp` and `eval` on the data dir, beside the daemon or without it). A daemon starting ends
-- the tasks a dead process left running; one whose owner is alive on this machine is that
-- process's to finish, and is left alone. NULL: claimed by a daemon's worker. With the
-- process's start time (clock ticks since boot, where the system tells it), a pid reused by
-- another program after a crash or a reboot is not taken for the owner.
ALTER TABLE tasks ADD COLUMN owner_pid INTEGER;
ALTER TABLE tasks ADD COLUMN owner_start INTEGER;
