-- A node's lease as a fencing token. Each join of a node (its start, or its return after the
-- others took it for dead) draws a new random epoch; the tasks it claims and the job runs it
-- follows carry that epoch, and a write of a step or an end for one is taken only while the
-- node's row still holds the same epoch. A node declared dead loses its row, so whatever it
-- still tries under the old epoch is refused, even after it joined again.
ALTER TABLE nodes ADD COLUMN epoch TEXT NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN node_epoch TEXT;
ALTER TABLE job_runs ADD COLUMN node_epoch TEXT;
