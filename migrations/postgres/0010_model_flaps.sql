-- A server whose model identity flaps (another id on every reply, or two taking turns) is one
-- change told once per window, not one per id: a change seen within the window of the last
-- one told is recorded as part of that one's flap (the id of the change that was told), and
-- nothing is told or run for it.
ALTER TABLE model_changes ADD COLUMN flap_of BIGINT;
