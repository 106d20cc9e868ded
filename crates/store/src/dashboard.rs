//! Queries behind the dashboard (`crates/surfaces/src/http/pages`) and the API endpoints it uses: task search, the
//! overview's counts (recent failures, the outbox backlog, tokens spent), pausing a job and
//! retrying a notice. They read the same tables as everything else, each query under its
//! table's aggregate (`store.tasks().search`, `store.jobs().set_enabled`,
//! `store.outbox().retry`, …); nothing here is cached.

use super::aggregates::{Jobs, Outbox, Tasks};
use super::{
    JobRun, Notice, NoticeState, Origin, PauseReason, Result, StoreError, Task, TaskState, found,
    limit_or, now,
};
use super::{query, query_as, query_scalar};
use chrono::{DateTime, Utc};

/// Filters for [`Tasks::search`]; every filter that is set must match.
#[derive(Debug, Clone, Default)]
pub struct TaskSearch {
    pub state: Option<TaskState>,
    pub origin: Option<Origin>,
    pub job_id: Option<String>,
    /// Words that must appear in the task text or its answer (case-insensitive for ASCII).
    pub text: Option<String>,
    /// At most this many; 0 or less: 50.
    pub limit: i64,
}

/// The outbox at a glance: how many notices are in each state, and since when the oldest
/// pending one waits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Backlog {
    pub pending: i64,
    pub sent: i64,
    pub failed: i64,
    pub oldest_pending: Option<DateTime<Utc>>,
}

/// Tokens the model was sent and wrote, summed over model calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tokens {
    pub prompt: i64,
    pub completion: i64,
    pub calls: i64,
}

impl Tasks<'_> {
    /// Tasks matching `f`, newest first.
    pub async fn search(self, f: &TaskSearch) -> Result<Vec<Task>> {
        let sql = select!(
            tasks,
            "WHERE (?1 IS NULL OR state = ?1) AND (?2 IS NULL OR origin = ?2) \
             AND (?3 IS NULL OR job_id = ?3) \
             AND (?4 IS NULL OR instr(lower(task), lower(?4)) > 0 \
                  OR instr(lower(COALESCE(answer, '')), lower(?4)) > 0) \
             ORDER BY created_at DESC, id LIMIT ?5"
        );
        // PostgreSQL has `strpos` where SQLite has `instr`.
        let pg = select!(
            tasks,
            "WHERE ($1::text IS NULL OR state = $1) AND ($2::text IS NULL OR origin = $2) \
             AND ($3::text IS NULL OR job_id = $3) \
             AND ($4::text IS NULL OR strpos(lower(task), lower($4)) > 0 \
                  OR strpos(lower(COALESCE(answer, '')), lower($4)) > 0) \
             ORDER BY created_at DESC, id LIMIT $5"
        );
        let text = f.text.as_deref().map(str::trim).filter(|t| !t.is_empty());
        self.store
            .all(
                query_as(sql)
                    .pg(pg)
                    .bind(f.state)
                    .bind(f.origin)
                    .bind(&f.job_id)
                    .bind(text)
                    .bind(limit_or(f.limit, 50)),
            )
            .await
    }

    /// Tasks that failed at or after `since`, newest first.
    pub async fn failed_since(self, since: DateTime<Utc>, limit: i64) -> Result<Vec<Task>> {
        let sql = select!(
            tasks,
            "WHERE state = 'failed' AND finished_at >= ? ORDER BY finished_at DESC, id LIMIT ?"
        );
        self.store.all(query_as(sql).bind(since).bind(limit)).await
    }

    /// Tokens of every model call recorded at or after `since`, whatever task it was for
    /// (sub-agents included, each call counted once), running tasks included.
    pub async fn tokens_since(self, since: DateTime<Utc>) -> Result<Tokens> {
        let (prompt, completion, calls): (Option<i64>, Option<i64>, i64) = query_as(
            "SELECT CAST(SUM(request_tokens) AS BIGINT), CAST(SUM(result_tokens) AS BIGINT), COUNT(*) FROM task_steps \
             WHERE kind = 'model' AND created_at >= ?",
        )
        .bind(since)
        .fetch_one(self.store)
        .await?;
        Ok(Tokens {
            prompt: prompt.unwrap_or(0),
            completion: completion.unwrap_or(0),
            calls,
        })
    }
}

impl Jobs<'_> {
    /// Job runs recorded `failed` or `missed` at or after `since` that have no task (a failed
    /// precheck, a task that could not be created, a daemon that was down): the failures a
    /// list of failed tasks does not show. Newest first.
    pub async fn taskless_run_failures_since(
        self,
        since: DateTime<Utc>,
        limit: i64,
    ) -> Result<Vec<JobRun>> {
        let sql = select!(
            job_runs,
            "WHERE outcome IN ('failed', 'missed') AND task_id IS NULL \
             AND fired_at >= ? ORDER BY id DESC LIMIT ?"
        );
        self.store.all(query_as(sql).bind(since).bind(limit)).await
    }

    /// Pause or resume a job, setting its next due time in the same statement: paused with
    /// `Some(reason)`, resumed with `None`. False when there is no such job.
    pub async fn set_enabled(
        self,
        id: &str,
        paused: Option<PauseReason>,
        next_run_at: Option<DateTime<Utc>>,
    ) -> Result<bool> {
        let set =
            query("UPDATE jobs SET enabled = ?, pause_reason = ?, next_run_at = ? WHERE id = ?")
                .bind(paused.is_none())
                .bind(paused)
                .bind(next_run_at)
                .bind(id);
        self.store.one_row(set).await
    }
}

impl Outbox<'_> {
    pub async fn backlog(self) -> Result<Backlog> {
        let counts: Vec<(NoticeState, i64)> =
            query_as("SELECT state, COUNT(*) FROM outbox GROUP BY state")
                .fetch_all(self.store)
                .await?;
        let oldest_pending: Option<DateTime<Utc>> =
            query_scalar("SELECT MIN(created_at) FROM outbox WHERE state = 'pending'")
                .fetch_one(self.store)
                .await?;
        let mut b = Backlog {
            oldest_pending,
            ..Backlog::default()
        };
        for (state, n) in counts {
            match state {
                NoticeState::Pending => b.pending = n,
                NoticeState::Sent => b.sent = n,
                NoticeState::Failed => b.failed = n,
            }
        }
        Ok(b)
    }

    /// Make a pending or failed notice due now, as pending; its attempts so far stay counted.
    /// A sent notice is a conflict (sending it again would be a duplicate, not a retry).
    pub async fn retry(self, id: i64) -> Result<Notice> {
        let retry = query(
            "UPDATE outbox SET state = 'pending', next_attempt_at = ? \
             WHERE id = ? AND state IN ('pending', 'failed')",
        )
        .bind(now())
        .bind(id);
        let retried = self.store.one_row(retry).await?;
        // "Delivery": the word of the API and the dashboard, where this error is read.
        let notice = found(self.get(id).await?, "delivery", id)?;
        if !retried {
            return Err(StoreError::Conflict(format!(
                "delivery {id} was already sent; queue a new one instead of sending it twice"
            )));
        }
        Ok(notice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FailReason, NewStep, NewTask, StepKind, Store, TaskOutcome};

    #[tokio::test]
    async fn search_filters_combine() {
        let store = Store::open_in_memory().await.expect("store");
        for (text, origin) in [
            ("Summarise the News", Origin::Web),
            ("water the plants", Origin::Cli),
        ] {
            let new = NewTask {
                task: text.into(),
                origin,
                profile: "fast".into(),
                ..Default::default()
            };
            store.tasks().create(&new).await.expect("task");
        }
        let find = |text: &str, origin: Option<Origin>| TaskSearch {
            text: Some(text.into()),
            origin,
            ..Default::default()
        };
        let hits = store
            .tasks()
            .search(&find("news", None))
            .await
            .expect("search");
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].task, "Summarise the News");
        let none = store.tasks().search(&find("news", Some(Origin::Cli))).await;
        assert!(none.expect("search").is_empty());
        let all = store.tasks().search(&TaskSearch::default()).await;
        assert_eq!(all.expect("search").len(), 2);
    }

    #[tokio::test]
    async fn tokens_and_failures_since() {
        let store = Store::open_in_memory().await.expect("store");
        let before = now();
        let new = NewTask {
            task: "t".into(),
            profile: "fast".into(),
            ..Default::default()
        };
        let t = store.tasks().create(&new).await.expect("task");
        let step = NewStep {
            request_tokens: 100,
            result_tokens: 7,
            duration_ms: 3,
            ..NewStep::new(1, StepKind::Model, "fast")
        };
        store.tasks().add_step(&t.id, &step).await.expect("step");
        let tokens = store.tasks().tokens_since(before).await.expect("tokens");
        assert_eq!(
            (tokens.prompt, tokens.completion, tokens.calls),
            (100, 7, 1)
        );
        let outcome =
            TaskOutcome::ended(TaskState::Failed, "x", FailReason::Model).counted(0, 100, 7);
        store.tasks().finish(&t.id, &outcome).await.expect("finish");
        let failed = store
            .tasks()
            .failed_since(before, 10)
            .await
            .expect("failed");
        assert_eq!(failed.len(), 1);
        assert!(
            store
                .tasks()
                .failed_since(now(), 10)
                .await
                .expect("failed")
                .is_empty()
        );
    }

    #[tokio::test]
    async fn retry_makes_a_failed_notice_due_but_never_a_sent_one() {
        let store = Store::open_in_memory().await.expect("store");
        let id = crate::tests::notice(&store, "hook").await;
        store
            .outbox()
            .mark_attempt_failed(id, "404", None)
            .await
            .expect("failed");
        assert_eq!(store.outbox().backlog().await.expect("backlog").failed, 1);
        let retried = store.outbox().retry(id).await.expect("retried");
        assert_eq!((retried.state, retried.attempts), (NoticeState::Pending, 1));
        store.outbox().mark_sent(id).await.expect("sent");
        assert!(matches!(
            store.outbox().retry(id).await,
            Err(StoreError::Conflict(_))
        ));
        assert!(matches!(
            store.outbox().retry(id + 100).await,
            Err(StoreError::NotFound { .. })
        ));
    }
}
