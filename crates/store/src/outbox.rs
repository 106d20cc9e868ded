//! The durable outbox (`outbox`): a notice is stored before it is sent, and stays until it is
//! sent or has failed for good.

use super::aggregates::Outbox;
use super::sql::{On, QueryScalar};
use super::{
    NoticeState, Result, StoreError, json_list, limit_or, new_token, now, query, query_as,
    query_scalar,
};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// A notice in the outbox: what was queued, and how its delivery goes. Serialised flat
/// (`{id, channel, title, …, state, …}`), as the API has always shown it.
#[derive(Debug, Clone, Serialize, Deserialize, sqlx::FromRow, PartialEq)]
pub struct Notice {
    pub id: i64,
    #[serde(flatten)]
    #[sqlx(flatten)]
    pub queued: NewNotice,
    pub state: NoticeState,
    pub attempts: i64,
    pub last_error: Option<String>,
    pub next_attempt_at: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
    pub sent_at: Option<DateTime<Utc>>,
    /// The notice's random token (see [`super::new_token`]); an email notice's Message-ID
    /// carries it. Never shown by the API: a reply naming it acts on the notice's job.
    #[serde(skip_serializing, default)]
    pub token: Option<String>,
}

/// A notice to queue: where it goes, what it says, and what it came from.
#[derive(Debug, Clone, Default, Serialize, Deserialize, sqlx::FromRow, PartialEq)]
pub struct NewNotice {
    pub channel: String,
    pub title: String,
    pub body: String,
    pub task_id: Option<String>,
    pub job_id: Option<String>,
    pub run_id: Option<i64>,
    /// One address instead of the channel's recipients: a reply to the allowed sender who
    /// wrote (an address from the settings; the email channel refuses any other).
    #[serde(default)]
    pub recipient: Option<String>,
    /// The Message-ID this notice answers (without angle brackets), for threading.
    #[serde(default)]
    pub in_reply_to: Option<String>,
    /// The References of this notice: message ids without angle brackets, space-separated.
    #[serde(default)]
    pub refs: Option<String>,
}

/// Which notices [`Outbox::list`] returns.
#[derive(Debug, Clone, Default)]
pub struct NoticeFilter {
    pub task_id: Option<String>,
    pub run_id: Option<i64>,
    pub job_id: Option<String>,
    pub state: Option<NoticeState>,
    /// At most this many; 0 or less: all.
    pub limit: i64,
    pub newest_first: bool,
}

impl NoticeFilter {
    /// Everything, in the order the notices were queued.
    pub fn oldest_first() -> NoticeFilter {
        NoticeFilter::default()
    }

    /// The newest `limit` notices, of one state or of all: what a person looks at first.
    pub fn newest(state: Option<NoticeState>, limit: i64) -> NoticeFilter {
        NoticeFilter {
            state,
            limit,
            newest_first: true,
            ..NoticeFilter::default()
        }
    }
}

macro_rules! notice_where {
    () => {
        " WHERE (?1 IS NULL OR task_id = ?1) AND (?2 IS NULL OR run_id = ?2) \
          AND (?3 IS NULL OR job_id = ?3) AND (?4 IS NULL OR state = ?4)"
    };
}

impl Outbox<'_> {
    pub async fn enqueue(self, n: &NewNotice) -> Result<i64> {
        insert_notice_on(self.store, n).await
    }

    pub async fn get(self, id: i64) -> Result<Option<Notice>> {
        self.store
            .first(query_as(select!(outbox, "WHERE id = ?")).bind(id))
            .await
    }

    /// Pending notices whose next attempt is due, oldest first; of one channel, or of all.
    pub async fn due(
        self,
        channel: Option<&str>,
        at: DateTime<Utc>,
        limit: i64,
    ) -> Result<Vec<Notice>> {
        let sql = select!(
            outbox,
            "WHERE state = 'pending' AND next_attempt_at <= ?1 \
             AND (?2 IS NULL OR channel = ?2) ORDER BY next_attempt_at, id LIMIT ?3"
        );
        self.store
            .all(query_as(sql).bind(at).bind(channel).bind(limit))
            .await
    }

    /// Due pending notices whose channel is none of `channels` (removed from the config).
    pub async fn due_off(
        self,
        channels: &[String],
        at: DateTime<Utc>,
        limit: i64,
    ) -> Result<Vec<Notice>> {
        let sql = select!(
            outbox,
            "WHERE state = 'pending' AND next_attempt_at <= ?1 \
             AND channel NOT IN (SELECT value FROM json_each(?2)) ORDER BY id LIMIT ?3"
        );
        let pg = select!(
            outbox,
            "WHERE state = 'pending' AND next_attempt_at <= $1 \
             AND channel NOT IN (SELECT jsonb_array_elements_text($2::jsonb)) ORDER BY id LIMIT $3"
        );
        let list = json_list(channels);
        self.store
            .all(query_as(sql).pg(pg).bind(at).bind(list).bind(limit))
            .await
    }

    /// The earliest time a pending notice (of one channel, or of any) is due, so the sender
    /// can sleep until then.
    pub async fn next_due(self, channel: Option<&str>) -> Result<Option<DateTime<Utc>>> {
        Ok(query_scalar(
            "SELECT MIN(next_attempt_at) FROM outbox WHERE state = 'pending' \
             AND (?1 IS NULL OR channel = ?1)",
        )
        .bind(channel)
        .fetch_one(self.store)
        .await?)
    }

    /// Take a due notice for one send attempt: its next attempt moves to `until`, so no other
    /// sender on a shared database takes it meanwhile, and if this one dies mid-send another
    /// sends it once `until` passes. False when it is not due any more (taken, sent, failed).
    pub async fn lease(self, id: i64, at: DateTime<Utc>, until: DateTime<Utc>) -> Result<bool> {
        let lease = query(
            "UPDATE outbox SET next_attempt_at = ? WHERE id = ? AND state = 'pending' \
             AND next_attempt_at <= ?",
        )
        .bind(until)
        .bind(id)
        .bind(at);
        self.store.one_row(lease).await
    }

    pub async fn mark_sent(self, id: i64) -> Result<()> {
        let sent = query(
            "UPDATE outbox SET state = 'sent', attempts = attempts + 1, sent_at = ?, last_error = NULL WHERE id = ?",
        )
        .bind(now())
        .bind(id);
        self.store.run(sent).await
    }

    /// A failed attempt: retry at `next`, or give up (`next` = None) and mark it failed.
    pub async fn mark_attempt_failed(
        self,
        id: i64,
        error: &str,
        next: Option<DateTime<Utc>>,
    ) -> Result<()> {
        let attempt = match next {
            Some(at) => query(
                "UPDATE outbox SET attempts = attempts + 1, last_error = ?, next_attempt_at = ? WHERE id = ?",
            )
            .bind(error)
            .bind(at)
            .bind(id),
            None => query(
                "UPDATE outbox SET state = 'failed', attempts = attempts + 1, last_error = ? WHERE id = ?",
            )
            .bind(error)
            .bind(id),
        };
        self.store.run(attempt).await
    }

    pub async fn for_task(self, task_id: &str) -> Result<Vec<Notice>> {
        self.list(&NoticeFilter {
            task_id: Some(task_id.to_string()),
            ..NoticeFilter::oldest_first()
        })
        .await
    }

    pub async fn for_run(self, run_id: i64) -> Result<Vec<Notice>> {
        self.list(&NoticeFilter {
            run_id: Some(run_id),
            ..NoticeFilter::oldest_first()
        })
        .await
    }

    /// Notices matching every filter that is set.
    pub async fn list(self, f: &NoticeFilter) -> Result<Vec<Notice>> {
        let sql = if f.newest_first {
            select!(outbox, notice_where!(), " ORDER BY id DESC LIMIT ?5")
        } else {
            select!(outbox, notice_where!(), " ORDER BY id LIMIT ?5")
        };
        self.store
            .all(
                query_as(sql)
                    .bind(&f.task_id)
                    .bind(f.run_id)
                    .bind(&f.job_id)
                    .bind(f.state)
                    .bind(limit_or(f.limit, i64::MAX)),
            )
            .await
    }

    /// The notice whose token a reply names.
    pub async fn by_token(self, token: &str) -> Result<Option<Notice>> {
        self.store
            .first(query_as(select!(outbox, "WHERE token = ?")).bind(token))
            .await
    }

    /// The notice a chat server knows by `remote_id` (the event it was sent as, or any of the
    /// messages its parts went out as).
    pub async fn by_remote(self, remote_id: &str) -> Result<Option<Notice>> {
        self.store.first(
            query_as(select!(
                outbox,
                "WHERE remote_id = ?1 OR id = (SELECT notice_id FROM chat_parts WHERE remote_id = ?1 LIMIT 1)"
            ))
            .bind(remote_id),
        )
        .await
    }

    /// Record the id a chat server gave notice `id` (its first event), so that replies in its
    /// thread and reactions to it find it. Written before the notice is marked sent.
    pub async fn set_remote(self, id: i64, remote_id: &str) -> Result<()> {
        query("UPDATE outbox SET remote_id = ? WHERE id = ?")
            .bind(remote_id)
            .bind(id)
            .execute(self.store)
            .await?;
        Ok(())
    }
}

/// The statement queuing `n` with a fresh token (see [`new_token`]), returning its id; run on
/// the pool or inside a transaction that writes more.
/// Insert a notice on a pool or inside a transaction, stepping the statement to its end (see
/// `write.rs`): its id.
pub(super) async fn insert_notice_on(on: impl Into<On<'_>>, n: &NewNotice) -> Result<i64> {
    let ids: Vec<i64> = insert_notice(n).fetch_all(on).await?;
    ids.into_iter()
        .next()
        .ok_or_else(|| StoreError::Corrupt("an inserted notice did not come back".into()))
}

fn insert_notice(n: &NewNotice) -> QueryScalar<i64> {
    let t = now();
    query_scalar(
        "INSERT INTO outbox (channel, title, body, task_id, job_id, run_id, state, next_attempt_at, \
         created_at, token, recipient, in_reply_to, refs) \
         VALUES (?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?, ?, ?) RETURNING id",
    )
    .bind(&n.channel)
    .bind(&n.title)
    .bind(&n.body)
    .bind(&n.task_id)
    .bind(&n.job_id)
    .bind(n.run_id)
    .bind(t)
    .bind(t)
    .bind(new_token())
    .bind(&n.recipient)
    .bind(&n.in_reply_to)
    .bind(&n.refs)
}
