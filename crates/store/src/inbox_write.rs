//! The writes of recording one inbox message: where it goes (its numbers), what it became
//! (its task, its job's change, its reply), its row, and the watermark or cursor moved past it.
//! `store.inbox().record` (`inbox.rs`) runs them in one transaction.
//!
//! Owns: those statements. Must not: decide what a message becomes (the inbox does) or open a
//! transaction of its own.

use super::chat::save_cursor;
use super::inbox_kinds::{InboxOutcome, MailPlace, NewInboxMessage, Place};
use super::outbox::insert_notice_on;
use super::sql::{QueryAs, QueryScalar};
use super::{
    CommandState, IgnoreReason, InboxCommand, InboxState, NewTask, Result, Task, TaskState, Tx,
    new_id, now, query, query_as, query_scalar,
};

/// The columns of a message row that depend on what it became.
pub(crate) struct Row {
    pub(super) state: InboxState,
    pub(super) reason: Option<IgnoreReason>,
    pub(super) command: Option<InboxCommand>,
    pub(super) command_state: Option<CommandState>,
    pub(super) detail: Option<String>,
    pub(super) notice_id: Option<i64>,
    pub(super) job_id: Option<String>,
    pub(super) task_id: Option<String>,
    pub(super) context: Option<String>,
}

impl Row {
    fn acted() -> Row {
        Row {
            state: InboxState::Acted,
            reason: None,
            command: None,
            command_state: None,
            detail: None,
            notice_id: None,
            job_id: None,
            task_id: None,
            context: None,
        }
    }
}

/// The id of the row that records `mail` at `place` already, if any. At a chat place a row
/// ignored for `besides` does not count (the record that is to give way to this one, as
/// [`crate::Inbox::record_replacing`] does by event id); no mail record ever gives way.
pub(crate) fn seen_query(
    place: Place<'_>,
    mail: &NewInboxMessage,
    besides: Option<IgnoreReason>,
) -> QueryScalar<i64> {
    let Place::Mail(place) = place else {
        // A chat message is known by its event id alone.
        return query_scalar(
            "SELECT id FROM inbox_messages WHERE message_id = ?1 \
             AND (?2 IS NULL OR reason IS NULL OR reason <> ?2) LIMIT 1",
        )
        .bind(&mail.message_id)
        .bind(besides);
    };
    query_scalar(
        "SELECT id FROM inbox_messages WHERE (mailbox = ?1 AND uid_validity = ?2 AND uid = ?3) \
         OR (?4 IS NOT NULL AND message_id = ?4) OR (?5 IS NOT NULL AND digest = ?5) LIMIT 1",
    )
    .bind(&place.mailbox)
    .bind(place.uid_validity)
    .bind(place.uid)
    .bind(&mail.message_id)
    .bind(&mail.digest)
}

/// Move the mailbox's watermark, or the chat channel's cursor, past a message just recorded
/// (or found recorded already).
pub(crate) async fn move_past(tx: &mut Tx, place: Place<'_>) -> Result<()> {
    if let Place::Mail(place) = place {
        advance_watermark(tx, place).await?;
    }
    if let Some((key, position)) = place.cursor() {
        save_cursor(tx, key, position).await?;
    }
    Ok(())
}

/// Where a message is recorded: its mailbox, UIDVALIDITY and UID. A chat message has no UID:
/// it gets the next number of its account, under the write lock the record holds, so that
/// (mailbox, uid_validity, uid) stays unique.
pub(crate) async fn numbers(tx: &mut Tx, place: Place<'_>) -> Result<(String, i64, i64)> {
    if let Place::Mail(p) = place {
        return Ok((
            p.mailbox.clone(),
            i64::from(p.uid_validity),
            i64::from(p.uid),
        ));
    }
    let account = place.account().unwrap_or_default();
    let last: Option<i64> =
        query_scalar("SELECT MAX(uid) FROM inbox_messages WHERE mailbox = ? AND uid_validity = 0")
            .bind(account)
            .fetch_one(&mut *tx)
            .await?;
    Ok((account.to_string(), 0, last.unwrap_or(0) + 1))
}

/// Write what a message became (its task, its job's change, its reply) and say how its row
/// reads; the reply's id, if one was queued.
pub(crate) async fn write_outcome(
    tx: &mut Tx,
    outcome: &InboxOutcome,
) -> Result<(Row, Option<i64>)> {
    let mut row = Row::acted();
    let mut reply = None;
    match outcome {
        InboxOutcome::Ignored {
            reason,
            notice_id,
            job_id,
            reply: answer,
        } => {
            row.state = InboxState::Ignored;
            row.reason = Some(*reason);
            row.notice_id = *notice_id;
            row.job_id = job_id.clone();
            if let Some(n) = answer {
                reply = Some(insert_notice_on(&mut *tx, n).await?);
            }
        }
        InboxOutcome::Task {
            task: new,
            context,
            notice_id,
            job_id,
        } => {
            let created = insert_task(new).fetch_one(&mut *tx).await?;
            row.task_id = Some(created.id.clone());
            row.context = context.clone();
            row.notice_id = *notice_id;
            row.job_id = job_id.clone();
        }
        InboxOutcome::Command {
            command,
            state,
            notice_id,
            job_id,
            change,
            detail,
            reply: answer,
        } => {
            if let Some(c) = change {
                // Paused by a person (a reply), or resumed: whatever held it is cleared.
                let paused = (!c.enabled).then_some(super::PauseReason::Person);
                query(
                    "UPDATE jobs SET enabled = ?, pause_reason = ?, next_run_at = ? WHERE id = ?",
                )
                .bind(c.enabled)
                .bind(paused)
                .bind(c.next_run_at)
                .bind(job_id)
                .execute(&mut *tx)
                .await?;
            }
            row.command = Some(*command);
            row.command_state = Some(*state);
            row.detail = Some(detail.clone());
            row.notice_id = Some(*notice_id);
            row.job_id = job_id.clone();
            if let Some(n) = answer {
                reply = Some(insert_notice_on(&mut *tx, n).await?);
            }
        }
    }
    Ok((row, reply))
}

/// The message's row; its id.
pub(crate) async fn insert_row(
    tx: &mut Tx,
    (mailbox, uid_validity, uid): &(String, i64, i64),
    mail: &NewInboxMessage,
    row: &Row,
    reply: Option<i64>,
) -> Result<i64> {
    let t = now();
    // A reply queued with the record is the message's answer: nothing more goes out later.
    let answered = reply.map(|_| t);
    Ok(query_scalar(
        "INSERT INTO inbox_messages (mailbox, uid_validity, uid, message_id, digest, sender, \
         subject, received_at, state, reason, command, command_state, detail, notice_id, \
         job_id, task_id, context, refs, reply_notice_id, answered_at, channel, room, \
         thread_root) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
    )
    .bind(mailbox)
    .bind(uid_validity)
    .bind(uid)
    .bind(&mail.message_id)
    .bind(&mail.digest)
    .bind(&mail.sender)
    .bind(&mail.subject)
    .bind(t)
    .bind(row.state)
    .bind(row.reason)
    .bind(row.command)
    .bind(row.command_state)
    .bind(&row.detail)
    .bind(row.notice_id)
    .bind(&row.job_id)
    .bind(&row.task_id)
    .bind(&row.context)
    .bind(&mail.refs)
    .bind(reply)
    .bind(answered)
    .bind(mail.channel)
    .bind(&mail.room)
    .bind(&mail.thread_root)
    .fetch_one(&mut *tx)
    .await?)
}

/// Move the mailbox's watermark up to `place.uid` (never down).
pub(crate) async fn advance_watermark(tx: &mut Tx, place: &MailPlace) -> Result<()> {
    query(
        "INSERT INTO inbox_watermarks (mailbox, uid_validity, last_uid, updated_at) \
         VALUES (?1, ?2, ?3, ?4) ON CONFLICT (mailbox, uid_validity) DO UPDATE SET \
         last_uid = MAX(last_uid, excluded.last_uid), updated_at = excluded.updated_at",
    )
    // PostgreSQL's two-argument maximum is GREATEST (its MAX is only the aggregate).
    .pg(
        "INSERT INTO inbox_watermarks (mailbox, uid_validity, last_uid, updated_at) \
         VALUES ($1, $2, $3, $4) ON CONFLICT (mailbox, uid_validity) DO UPDATE SET \
         last_uid = GREATEST(inbox_watermarks.last_uid, excluded.last_uid), \
         updated_at = excluded.updated_at",
    )
    .bind(&place.mailbox)
    .bind(place.uid_validity)
    .bind(place.uid)
    .bind(now())
    .execute(tx)
    .await?;
    Ok(())
}

/// A new pending task, as `store.tasks().create` writes it, for a transaction that writes more.
fn insert_task(new: &NewTask) -> QueryAs<Task> {
    query_as(concat!(
        "INSERT INTO tasks (id, state, origin, parent_id, job_id, profile, task, created_at) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING ",
        columns!(tasks)
    ))
    .bind(new_id())
    .bind(TaskState::Pending)
    .bind(new.origin)
    .bind(&new.parent_id)
    .bind(&new.job_id)
    .bind(&new.profile)
    .bind(&new.task)
    .bind(now())
}
