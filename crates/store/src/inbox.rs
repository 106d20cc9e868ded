//! Mail read from the inbox (`inbox_messages`, `inbox_watermarks`) and what it became.
//!
//! Each message is recorded exactly once, in ONE transaction with what it became — the task
//! it created, the job change its command made, or nothing — and with the mailbox's
//! watermark (the highest UID read): a crash before the commit leaves the message unread, to
//! be read again; after it, the message is never read again. A message seen twice (the same
//! UID, or under another UID the same Message-ID — or, for mail without one, the same digest
//! of what it says) changes nothing but the watermark.
//!
//! Must not: decide what a message means (the engine's inbox does): an earlier record is
//! replaced only when the caller says so ([`Inbox::record_replacing`]).

use super::aggregates::Inbox;
use super::chat::fence_channel;
pub use super::inbox_kinds::{InboxOutcome, JobChange, MailPlace, NewInboxMessage, Place};
use super::inbox_write::{
    advance_watermark, insert_row, move_past, numbers, seen_query, write_outcome,
};
use super::outbox::insert_notice_on;
use super::{
    Channel, CommandState, IgnoreReason, InboxCommand, InboxState, NewNotice, Result, Task,
    limit_or, now,
};
use super::{query, query_as, query_scalar};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// A mail as recorded, with what it became. Serialised as `GET /v1/inbox` shows it.
#[derive(Debug, Clone, Serialize, Deserialize, sqlx::FromRow, PartialEq)]
pub struct InboxMessage {
    pub id: i64,
    /// The channel it came in on (`email`, `matrix`).
    pub channel: Channel,
    #[serde(skip)]
    pub mailbox: String,
    #[serde(skip)]
    pub uid_validity: i64,
    #[serde(skip)]
    pub uid: i64,
    pub message_id: Option<String>,
    /// The From address, lower case.
    #[serde(rename = "from")]
    #[sqlx(rename = "sender")]
    pub sender: String,
    pub subject: String,
    pub received_at: DateTime<Utc>,
    pub state: InboxState,
    pub reason: Option<IgnoreReason>,
    pub command: Option<InboxCommand>,
    pub command_state: Option<CommandState>,
    /// What a command did (or why it could not), in words.
    pub detail: Option<String>,
    /// The notice the mail answers, when it named one.
    pub notice_id: Option<i64>,
    pub job_id: Option<String>,
    pub task_id: Option<String>,
    /// The notice answered, as the task's first message holds it.
    #[serde(skip)]
    pub context: Option<String>,
    /// The mail's own Message-ID and References, for threading the answer.
    #[serde(skip)]
    pub refs: Option<String>,
    pub reply_notice_id: Option<i64>,
    pub answered_at: Option<DateTime<Utc>>,
    /// A chat message's room (where its answer goes); None for mail.
    pub room: Option<String>,
    /// The event a chat answer hangs under (the thread's root); None for mail.
    #[serde(skip)]
    pub thread_root: Option<String>,
}

/// What [`Inbox::record`] did.
#[derive(Debug, Clone)]
pub enum Recorded {
    /// Recorded now; the task created, if any, and the reply queued, if any.
    New {
        id: i64,
        task_id: Option<String>,
        reply: Option<i64>,
    },
    /// Seen before (same UID, Message-ID or digest): nothing written but the watermark.
    Seen,
}

/// Which messages [`Inbox::list`] returns, newest first.
#[derive(Debug, Clone, Default)]
pub struct InboxFilter {
    pub state: Option<InboxState>,
    pub channel: Option<Channel>,
    /// At most this many; 0 or less: 50.
    pub limit: i64,
}

impl InboxFilter {
    /// At most `limit` messages, of one state and one channel or of all.
    pub fn of(state: Option<InboxState>, channel: Option<Channel>, limit: i64) -> InboxFilter {
        InboxFilter {
            state,
            channel,
            limit,
        }
    }
}

/// A mailbox's watermark: the highest UID read under one UIDVALIDITY.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Watermark {
    pub uid_validity: i64,
    pub last_uid: i64,
    pub updated_at: DateTime<Utc>,
}

macro_rules! inbox_select {
    ($($rest:tt)*) => {
        concat!(
            "SELECT id, mailbox, uid_validity, uid, message_id, sender, subject, received_at, \
             state, reason, command, command_state, detail, notice_id, job_id, task_id, context, \
             refs, reply_notice_id, answered_at, channel, room, thread_root FROM inbox_messages ",
            $($rest)*
        )
    };
}

impl Inbox<'_> {
    /// Record a message and what it became, and move the watermark past it, in one
    /// transaction. A message already recorded (by UID or Message-ID) writes nothing else.
    pub async fn record(
        self,
        place: Place<'_>,
        mail: &NewInboxMessage,
        outcome: &InboxOutcome,
    ) -> Result<Recorded> {
        self.record_in(place, mail, outcome, None).await
    }

    /// [`Inbox::record`], deleting first an earlier record of the same message (its
    /// Message-ID or event id) that was ignored for `ignored`: the new record takes its place
    /// in the same transaction, so a crash between leaves the one or the other, never neither.
    pub async fn record_replacing(
        self,
        place: Place<'_>,
        mail: &NewInboxMessage,
        outcome: &InboxOutcome,
        ignored: IgnoreReason,
    ) -> Result<Recorded> {
        self.record_in(place, mail, outcome, Some(ignored)).await
    }

    async fn record_in(
        self,
        place: Place<'_>,
        mail: &NewInboxMessage,
        outcome: &InboxOutcome,
        replacing: Option<IgnoreReason>,
    ) -> Result<Recorded> {
        // IMMEDIATE: the write lock is taken before the duplicate check, so the check and the
        // insert see the same database.
        let mut tx = self.store.begin_writing(super::Locked::Inbox).await?;
        if let Some(reason) = replacing {
            query("DELETE FROM inbox_messages WHERE message_id = ? AND reason = ?")
                .bind(&mail.message_id)
                .bind(reason)
                .execute(&mut tx)
                .await?;
        }
        let seen = seen_query(place, mail, None)
            .fetch_optional(&mut tx)
            .await?;
        if seen.is_some() {
            move_past(&mut tx, place).await?;
            tx.commit().await?;
            return Ok(Recorded::Seen);
        }
        // A node that lost the channel to another (its lease lapsed) records nothing more: the
        // check holds the node's row until the commit on PostgreSQL, so a take-over comes
        // after this write or refuses it.
        if place.account().is_some() {
            fence_channel(&mut tx, self.store, mail.channel).await?;
        }
        let numbers = numbers(&mut tx, place).await?;
        let (row, reply) = write_outcome(&mut tx, outcome).await?;
        let id = insert_row(&mut tx, &numbers, mail, &row, reply).await?;
        move_past(&mut tx, place).await?;
        tx.commit().await?;
        Ok(Recorded::New {
            id,
            task_id: row.task_id,
            reply,
        })
    }

    /// Whether `mail` at `place` was recorded already (its UID, its Message-ID, or its digest
    /// when it has none): looked at before a message is decided, so that nothing a replayed
    /// message would do (an approval's answer) is done twice.
    pub async fn seen(self, place: Place<'_>, mail: &NewInboxMessage) -> Result<bool> {
        Ok(seen_query(place, mail, None)
            .fetch_optional(self.store)
            .await?
            .is_some())
    }

    /// [`Inbox::seen`], not counting a chat record ignored for `ignored`: the one
    /// [`Inbox::record_replacing`] would replace (an event recorded undecryptable, read now).
    /// A mail place is looked up as by [`Inbox::seen`]: no mail record gives way to another.
    pub async fn seen_besides(
        self,
        place: Place<'_>,
        mail: &NewInboxMessage,
        ignored: IgnoreReason,
    ) -> Result<bool> {
        Ok(seen_query(place, mail, Some(ignored))
            .fetch_optional(self.store)
            .await?
            .is_some())
    }

    /// The watermarks of `mailbox`, the most recently moved first.
    pub async fn watermarks(self, mailbox: &str) -> Result<Vec<Watermark>> {
        self.store
            .all(
                query_as(
                    "SELECT uid_validity, last_uid, updated_at FROM inbox_watermarks \
                 WHERE mailbox = ? ORDER BY updated_at DESC, uid_validity DESC",
                )
                .bind(mailbox),
            )
            .await
    }

    /// Set the watermark of a mailbox never read under this UIDVALIDITY: mail up to `uid` was
    /// there before and is not read. An existing watermark only ever moves up.
    pub async fn start_watermark(self, place: &MailPlace) -> Result<()> {
        let mut tx = self.store.begin_writing(super::Locked::Inbox).await?;
        advance_watermark(&mut tx, place).await?;
        tx.commit().await?;
        Ok(())
    }

    /// How many tasks messages from `sender` on `channel` started since `since` (the rate
    /// limit).
    pub async fn tasks_since(
        self,
        channel: Channel,
        sender: &str,
        since: DateTime<Utc>,
    ) -> Result<i64> {
        Ok(query_scalar(
            "SELECT COUNT(*) FROM inbox_messages WHERE sender = ? AND received_at >= ? \
             AND command IS NULL AND task_id IS NOT NULL AND channel = ?",
        )
        .bind(sender)
        .bind(since)
        .bind(channel)
        .fetch_one(self.store)
        .await?)
    }

    /// Messages, newest first.
    pub async fn list(self, f: &InboxFilter) -> Result<Vec<InboxMessage>> {
        self.store
            .all(
                query_as(inbox_select!(
                    "WHERE (?1 IS NULL OR state = ?1) AND (?3 IS NULL OR channel = ?3) \
                 ORDER BY id DESC LIMIT ?2"
                ))
                .bind(f.state)
                .bind(limit_or(f.limit, 50))
                .bind(f.channel),
            )
            .await
    }

    pub async fn get(self, id: i64) -> Result<Option<InboxMessage>> {
        self.store
            .first(query_as(inbox_select!("WHERE id = ?")).bind(id))
            .await
    }

    /// Whether any message of `channel` was ever recorded.
    pub async fn any(self, channel: Channel) -> Result<bool> {
        let found: Option<i64> =
            query_scalar("SELECT id FROM inbox_messages WHERE channel = ? LIMIT 1")
                .bind(channel)
                .fetch_optional(self.store)
                .await?;
        Ok(found.is_some())
    }

    /// The message recorded with `message_id` (a chat event id, a mail's Message-ID).
    pub async fn by_message_id(self, message_id: &str) -> Result<Option<InboxMessage>> {
        self.store
            .first(query_as(inbox_select!("WHERE message_id = ?")).bind(message_id))
            .await
    }

    /// What a task from the inbox holds in its first message besides what the person wrote:
    /// the notice answered.
    pub async fn context(self, task_id: &str) -> Result<Option<String>> {
        let ctx: Option<Option<String>> = query_scalar(
            "SELECT context FROM inbox_messages WHERE task_id = ? AND command IS NULL LIMIT 1",
        )
        .bind(task_id)
        .fetch_optional(self.store)
        .await?;
        Ok(ctx.flatten())
    }

    /// Messages whose task has finished and whose answer has not been queued yet (a task
    /// that ended while the daemon was down is found here at the next start), oldest first.
    pub async fn unanswered(self, limit: i64) -> Result<Vec<(InboxMessage, Task)>> {
        let messages: Vec<InboxMessage> = self
            .store
            .all(
                query_as(inbox_select!(
                    "WHERE answered_at IS NULL AND task_id IS NOT NULL AND command IS NULL \
                     AND task_id IN (SELECT id FROM tasks WHERE state IN \
                     ('succeeded', 'failed', 'cancelled')) ORDER BY id LIMIT ?"
                ))
                .bind(limit),
            )
            .await?;
        let mut out = Vec::with_capacity(messages.len());
        for m in messages {
            if let Some(task_id) = &m.task_id
                && let Some(t) = self.store.tasks().find(task_id).await?
                && t.state.is_finished()
            {
                out.push((m, t));
            }
        }
        Ok(out)
    }

    /// Queue the answer to message `id` (or record that none goes out: `reply` = None), once:
    /// the notice and the mark are one transaction, and a message already answered gets
    /// nothing. The notice's id, or None when nothing was queued.
    pub async fn answer(self, id: i64, reply: Option<&NewNotice>) -> Result<Option<i64>> {
        let mut tx = self.store.begin_writing(super::Locked::Inbox).await?;
        let notice = match reply {
            Some(n) => Some(insert_notice_on(&mut tx, n).await?),
            None => None,
        };
        let marked = query(
            "UPDATE inbox_messages SET answered_at = ?, reply_notice_id = ? \
             WHERE id = ? AND answered_at IS NULL",
        )
        .bind(now())
        .bind(notice)
        .bind(id)
        .execute(&mut tx)
        .await?;
        if marked == 0 {
            tx.rollback().await?;
            return Ok(None);
        }
        tx.commit().await?;
        Ok(notice)
    }

    /// Commands in `state`, oldest first (at start: `requested` ones still to carry out,
    /// `started` ones a stop interrupted).
    pub async fn commands(self, state: CommandState) -> Result<Vec<InboxMessage>> {
        self.store
            .all(
                query_as(inbox_select!(
                    "WHERE command IS NOT NULL AND command_state = ? ORDER BY id"
                ))
                .bind(state),
            )
            .await
    }

    /// Move a command from `from` to `to` (false when it was not in `from`: someone else moved
    /// it), with what it did and the run it started, and queue its confirmation — one
    /// transaction.
    pub async fn move_command(
        self,
        id: i64,
        from: CommandState,
        to: CommandState,
        detail: &str,
        task_id: Option<&str>,
        reply: Option<&NewNotice>,
    ) -> Result<bool> {
        let mut tx = self.store.begin_writing(super::Locked::Inbox).await?;
        let notice = match reply {
            Some(n) => Some(insert_notice_on(&mut tx, n).await?),
            None => None,
        };
        let moved = query(
            "UPDATE inbox_messages SET command_state = ?, detail = ?, task_id = COALESCE(?, task_id), \
             reply_notice_id = COALESCE(?, reply_notice_id), \
             answered_at = CASE WHEN ? IS NULL THEN answered_at ELSE ? END \
             WHERE id = ? AND command_state = ?",
        )
        .bind(to)
        .bind(detail)
        .bind(task_id)
        .bind(notice)
        .bind(notice)
        .bind(now())
        .bind(id)
        .bind(from)
        .execute(&mut tx)
        .await?;
        if moved == 0 {
            tx.rollback().await?;
            return Ok(false);
        }
        tx.commit().await?;
        Ok(true)
    }
}

#[cfg(test)]
#[path = "inbox_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "inbox_reply_tests.rs"]
mod reply_tests;

#[cfg(test)]
#[path = "inbox_chat_tests.rs"]
mod chat_tests;
