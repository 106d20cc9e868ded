-- hermes-agent schema, version 13: conversations on more than one channel.
-- A message read on any channel (email, Matrix) is one row of inbox_messages, recorded once
-- with what it became. Email rows keep their mailbox and UID; a chat message has neither
-- (mailbox is the account, uid_validity 0, uid numbers its messages in order) and is known
-- by its event id in message_id. An answer goes back to the room it came from, in the thread
-- it hangs under.
ALTER TABLE inbox_messages ADD COLUMN channel TEXT NOT NULL DEFAULT 'email';
ALTER TABLE inbox_messages ADD COLUMN room TEXT;
ALTER TABLE inbox_messages ADD COLUMN thread_root TEXT;
CREATE INDEX inbox_by_channel ON inbox_messages (channel, id);
-- The id a chat server gave a sent notice (its first event): a reply in that event's thread,
-- or a reaction to it, names the notice the way an email reply names its Message-ID.
ALTER TABLE outbox ADD COLUMN remote_id TEXT;
CREATE UNIQUE INDEX outbox_by_remote ON outbox (remote_id) WHERE remote_id IS NOT NULL;
-- Where a chat channel's intake has read up to (Matrix: the sync token), written after the
-- events before it were recorded: killed in between, they are read again and known by id.
CREATE TABLE channel_cursors (
    channel    TEXT PRIMARY KEY,
    position   TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
-- With several daemons on one database, one node reads a chat channel at a time: the one
-- named here, while its row in nodes still holds the epoch it claimed the channel under.
-- Another node takes the channel over once that row is gone (the node lease lapsed).
CREATE TABLE channel_holders (
    channel  TEXT PRIMARY KEY,
    node_id  TEXT NOT NULL,
    epoch    TEXT NOT NULL,
    since    TEXT NOT NULL
);
