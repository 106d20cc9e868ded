-- hermes-agent schema, version 9 (PostgreSQL): an identity for mail without a Message-ID.
-- SHA-256 (hex) over From, To, Date, Subject, In-Reply-To, References and the body, written
-- for a message that has no Message-ID (NULL otherwise) and for one that cannot be read at
-- all (over its bytes). A mailbox renumbered by its server (a new UIDVALIDITY) gives every
-- message a new UID; the digest, like the Message-ID, is the same, so such mail is not acted
-- on a second time.
ALTER TABLE inbox_messages ADD COLUMN digest TEXT;
CREATE UNIQUE INDEX inbox_by_digest ON inbox_messages (digest) WHERE digest IS NOT NULL;
