-- hermes-agent schema, version 14: the messages a notice went out as on a chat channel.
-- Telegram has no idempotency key for sends: each part a server took is recorded as it is
-- sent, so a send retried after a failure goes on after the parts already there instead of
-- posting them again, and a reply to any part names its notice.
CREATE TABLE chat_parts (
    notice_id  INTEGER NOT NULL REFERENCES outbox (id) ON DELETE CASCADE,
    part       INTEGER NOT NULL,
    remote_id  TEXT NOT NULL,
    sent_at    TEXT NOT NULL,
    PRIMARY KEY (notice_id, part)
);
CREATE INDEX chat_parts_by_remote ON chat_parts (remote_id);
