-- hermes-agent schema, version 3: email in both directions.

-- Each notice gets a random token when it is queued: an email notice carries it in its
-- Message-ID, and a reply naming it (In-Reply-To, References) is bound to the notice.
ALTER TABLE outbox ADD COLUMN token TEXT;
-- A reply goes to one address (an allowed sender from the settings) instead of the channel's
-- recipients, threaded under the message it answers.
ALTER TABLE outbox ADD COLUMN recipient TEXT;
ALTER TABLE outbox ADD COLUMN in_reply_to TEXT;
-- The References header of a reply: message ids, space-separated.
ALTER TABLE outbox ADD COLUMN refs TEXT;
CREATE UNIQUE INDEX outbox_by_token ON outbox (token);

-- Every message read from the inbox, recorded once, with what it became: a task, a command,
-- or nothing (and why).
CREATE TABLE inbox_messages (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    -- the account and folder: 'user@host:port/INBOX'
    mailbox         TEXT NOT NULL,
    uid_validity    INTEGER NOT NULL,
    uid             INTEGER NOT NULL,
    -- without the angle brackets; NULL when the message had none
    message_id      TEXT,
    -- the From address, lower case ('' when the message had none)
    sender          TEXT NOT NULL,
    subject         TEXT NOT NULL,
    -- when the daemon read it (not the message's own Date, which the sender writes)
    received_at     TEXT NOT NULL,
    state           TEXT NOT NULL CHECK (state IN ('acted', 'ignored')),
    -- why it was ignored: not_allowed, rate_limited, auto_reply, bulk, ...
    reason          TEXT,
    -- pause, resume, run_now
    command         TEXT,
    -- requested, started, done, failed (run_now is carried out after the record is written)
    command_state   TEXT,
    -- what a command did, in words (the confirmation's text)
    detail          TEXT,
    -- the notice the message answers (its token was named), and that notice's job
    notice_id       INTEGER,
    job_id          TEXT,
    -- the task it became (a reply's new task, or the run a `run now` started)
    task_id         TEXT REFERENCES tasks(id) ON DELETE SET NULL,
    -- what the task's first message holds besides the text: the notice answered
    context         TEXT,
    -- the threading of the answer: the message's own id and its References
    refs            TEXT,
    -- the answer queued to the sender (once), and when
    reply_notice_id INTEGER,
    answered_at     TEXT,
    UNIQUE (mailbox, uid_validity, uid)
);
CREATE UNIQUE INDEX inbox_by_message_id ON inbox_messages (message_id) WHERE message_id IS NOT NULL;
CREATE INDEX inbox_by_sender ON inbox_messages (sender, received_at);
CREATE INDEX inbox_by_task ON inbox_messages (task_id);
CREATE INDEX inbox_by_state ON inbox_messages (state, id);
CREATE INDEX inbox_unanswered ON inbox_messages (id) WHERE answered_at IS NULL AND task_id IS NOT NULL;

-- The highest UID read per mailbox and UIDVALIDITY: mail at or below it was read (or was
-- there before the mailbox was configured, and is never replayed).
CREATE TABLE inbox_watermarks (
    mailbox      TEXT NOT NULL,
    uid_validity INTEGER NOT NULL,
    last_uid     INTEGER NOT NULL,
    updated_at   TEXT NOT NULL,
    PRIMARY KEY (mailbox, uid_validity)
);
