//! Scheduled jobs and the record of every firing (`jobs`, `job_runs`).

use super::aggregates::Jobs;
use super::{Builder, DbRow, query, query_as, query_scalar};
use super::{
    Delivery, NoticeState, Origin, Result, RunOutcome, Store, WithJson, from_json, json_column,
    json_list, limit_or, new_id, now,
};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, sqlx::FromRow)]
pub struct Job {
    pub id: String,
    pub name: String,
    pub task: String,
    pub schedule: String,
    pub timezone: String,
    /// JSON text in the table, so `FromRow` skips it and `read_json` parses it.
    #[sqlx(skip)]
    pub notify: Vec<String>,
    pub profile: Option<String>,
    pub origin: Origin,
    /// JSON text in the table, so `FromRow` skips it and `read_json` parses it.
    #[sqlx(skip)]
    pub precheck: Option<serde_json::Value>,
    pub enabled: bool,
    pub next_run_at: Option<DateTime<Utc>>,
    pub running_task_id: Option<String>,
    pub created_at: DateTime<Utc>,
    /// Why it is paused (`None` while it runs).
    #[serde(default)]
    pub pause_reason: Option<super::PauseReason>,
    /// Tool globs a person approved in advance for this job's firings (never the model).
    /// JSON text in the table, so `FromRow` skips it and `read_json` parses it.
    #[sqlx(skip)]
    #[serde(default)]
    pub pre_approved: Vec<String>,
}

impl WithJson for Job {
    fn read_json(self, row: &DbRow) -> Result<Job> {
        let owner = format!("job {}", self.id);
        let precheck: Option<String> = row.get("precheck")?;
        Ok(Job {
            notify: json_column(row, "notify", &owner)?,
            pre_approved: json_column(row, "pre_approved", &owner)?,
            precheck: precheck
                .map(|p| from_json(&p, "precheck", &owner))
                .transpose()?,
            ..self
        })
    }
}

#[derive(Debug, Clone, Default)]
pub struct NewJob {
    pub name: String,
    pub task: String,
    pub schedule: String,
    pub timezone: String,
    pub notify: Vec<String>,
    pub profile: Option<String>,
    pub origin: Origin,
    pub precheck: Option<serde_json::Value>,
    pub next_run_at: Option<DateTime<Utc>>,
    /// Tool globs approved in advance by the person creating the job.
    pub pre_approved: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, sqlx::FromRow, PartialEq)]
pub struct JobRun {
    pub id: i64,
    pub job_id: String,
    pub scheduled_at: DateTime<Utc>,
    pub fired_at: DateTime<Utc>,
    pub outcome: RunOutcome,
    pub task_id: Option<String>,
    pub reason: Option<String>,
    pub delivery: Delivery,
}

impl Jobs<'_> {
    pub async fn create(self, new: &NewJob) -> Result<Job> {
        let id = format!("j_{}", new_id());
        let precheck = new.precheck.as_ref().map(|p| p.to_string());
        query(
            "INSERT INTO jobs (id, name, task, schedule, timezone, notify, profile, origin, precheck, \
             next_run_at, created_at, pre_approved) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&id)
        .bind(&new.name)
        .bind(&new.task)
        .bind(&new.schedule)
        .bind(&new.timezone)
        .bind(json_list(&new.notify))
        .bind(&new.profile)
        .bind(new.origin)
        .bind(precheck)
        .bind(new.next_run_at)
        .bind(now())
        .bind(json_list(&new.pre_approved))
        .execute(self.store)
        .await?;
        self.get(&id).await
    }

    pub async fn get(self, id: &str) -> Result<Job> {
        self.store
            .json_row(select!(jobs, "WHERE id = ?"), "job", id)
            .await
    }

    pub async fn list(self) -> Result<Vec<Job>> {
        self.store
            .json_rows(query(select!(jobs, "ORDER BY created_at, id")))
            .await
    }

    /// The enabled jobs due at `at`, oldest first: a scheduler pass reads these, not every
    /// job (a pass per job made would otherwise read all of them each time).
    pub async fn due(self, at: DateTime<Utc>) -> Result<Vec<Job>> {
        let sql = select!(
            jobs,
            "WHERE enabled = TRUE AND next_run_at <= ? ORDER BY created_at, id"
        );
        self.store.json_rows(query(sql).bind(at)).await
    }

    /// When the next enabled job is due, if any is.
    pub async fn next_due(self) -> Result<Option<DateTime<Utc>>> {
        Ok(
            query_scalar("SELECT MIN(next_run_at) FROM jobs WHERE enabled = TRUE")
                .fetch_one(self.store)
                .await?,
        )
    }

    /// The jobs that can still fire: enabled with a next due time, or paused (a resume gives
    /// them one). A fired one-shot stays listed with its run, but counts no more.
    pub async fn count(self) -> Result<i64> {
        self.store
            .count("SELECT COUNT(*) FROM jobs WHERE enabled = FALSE OR next_run_at IS NOT NULL")
            .await
    }

    /// Returns false when there was no such job.
    pub async fn delete(self, id: &str) -> Result<bool> {
        self.store
            .one_row(query("DELETE FROM jobs WHERE id = ?").bind(id))
            .await
    }

    /// Move a job's next due time, but only if it is still `expected`: two firers racing for
    /// the same due time cannot both win, so a due run is claimed exactly once.
    pub async fn claim_run(
        self,
        id: &str,
        expected: Option<DateTime<Utc>>,
        next: Option<DateTime<Utc>>,
    ) -> Result<bool> {
        let claim = query(
            "UPDATE jobs SET next_run_at = ? WHERE id = ? AND next_run_at IS NOT DISTINCT FROM ?",
        )
        .bind(next)
        .bind(id)
        .bind(expected);
        self.store.one_row(claim).await
    }

    /// Take the job's run lock for `task_id`; false when a run is already in progress.
    pub async fn lock(self, id: &str, task_id: &str) -> Result<bool> {
        self.store.move_job_lock(id, None, Some(task_id)).await
    }

    /// At start-up no run can be in progress: clear locks a crash left behind.
    pub async fn clear_locks(self) -> Result<u64> {
        self.store
            .rows(query(
                "UPDATE jobs SET running_task_id = NULL WHERE running_task_id IS NOT NULL",
            ))
            .await
    }

    pub async fn add_run(
        self,
        job_id: &str,
        scheduled_at: DateTime<Utc>,
        outcome: RunOutcome,
        task_id: Option<&str>,
        reason: Option<&str>,
    ) -> Result<i64> {
        let insert = query_as(
            "INSERT INTO job_runs (job_id, scheduled_at, fired_at, outcome, task_id, reason, node_id, \
             node_epoch) VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
        )
        .bind(job_id)
        .bind(scheduled_at)
        .bind(now())
        .bind(outcome)
        .bind(task_id)
        .bind(reason)
        .bind(self.store.node())
        .bind(self.store.stamp());
        let (id,): (i64,) = self.store.inserted(insert).await?;
        Ok(id)
    }

    /// Update a run after its task ended (a fired run may still fail, and its delivery moves on).
    pub async fn update_run(
        self,
        run_id: i64,
        outcome: RunOutcome,
        reason: Option<&str>,
        delivery: &Delivery,
    ) -> Result<()> {
        let update = query(
            "UPDATE job_runs SET outcome = ?, reason = COALESCE(?, reason), delivery = ? WHERE id = ?",
        )
        .bind(outcome)
        .bind(reason)
        .bind(delivery)
        .bind(run_id);
        self.store.run(update).await?;
        self.settle_run_delivery(run_id).await
    }

    pub async fn set_run_delivery(self, run_id: i64, delivery: &Delivery) -> Result<()> {
        let set = query("UPDATE job_runs SET delivery = ? WHERE id = ?")
            .bind(delivery)
            .bind(run_id);
        self.store.run(set).await?;
        self.settle_run_delivery(run_id).await
    }

    /// Once every notice of run `run_id` has settled, its `queued` delivery says how: `sent`,
    /// or `failed: CHANNEL: ERROR; …` for those that failed for good. Called by the outbox as
    /// each notice settles and after a run's delivery is written (whichever comes last sees
    /// them all); while one is pending, or for another delivery, nothing changes.
    pub async fn settle_run_delivery(self, run_id: i64) -> Result<()> {
        let filter = crate::NoticeFilter {
            run_id: Some(run_id),
            ..Default::default()
        };
        let notices = self.store.outbox().list(&filter).await?;
        if notices.is_empty() || notices.iter().any(|n| n.state == NoticeState::Pending) {
            return Ok(());
        }
        let failed: Vec<String> = notices
            .iter()
            .filter(|n| n.state == NoticeState::Failed)
            .map(|n| {
                let why = n.last_error.as_deref().unwrap_or("failed");
                format!("{}: {why}", n.queued.channel)
            })
            .collect();
        let settled = if failed.is_empty() {
            Delivery::Sent
        } else {
            Delivery::Failed(failed.join("; "))
        };
        let set = query("UPDATE job_runs SET delivery = ? WHERE id = ? AND delivery = ?")
            .bind(&settled)
            .bind(run_id)
            .bind(Delivery::Queued);
        self.store.run(set).await
    }

    /// Newest first.
    pub async fn runs(self, job_id: &str, limit: i64) -> Result<Vec<JobRun>> {
        let sql = select!(job_runs, "WHERE job_id = ? ORDER BY id DESC LIMIT ?");
        self.store
            .all(query_as(sql).bind(job_id).bind(limit_or(limit, 50)))
            .await
    }
}

// Queries added for the scheduler's run lock: the lock is first taken with a placeholder (so
// an overlapping firing is refused before any precheck or task exists), then handed to the
// task, and released only by its holder (so a late unlock never frees someone else's run).
impl Store {
    /// The lock goes from `from` to `to` (`None`: free) in one statement, or not at all: two
    /// firers can never both believe they hold it. `IS` compares NULL as a value.
    async fn move_job_lock(&self, id: &str, from: Option<&str>, to: Option<&str>) -> Result<bool> {
        let swap = query(
            "UPDATE jobs SET running_task_id = ? WHERE id = ? AND running_task_id IS NOT DISTINCT FROM ?",
        )
        .bind(to)
        .bind(id)
        .bind(from);
        self.one_row(swap).await
    }
}

impl Jobs<'_> {
    /// Move the run lock from `from` to `to`; false when `from` no longer holds it.
    pub async fn swap_lock(self, id: &str, from: &str, to: &str) -> Result<bool> {
        self.store.move_job_lock(id, Some(from), Some(to)).await
    }

    /// Release the run lock if `holder` still holds it; false otherwise.
    pub async fn release_lock(self, id: &str, holder: &str) -> Result<bool> {
        self.store.move_job_lock(id, Some(holder), None).await
    }

    /// Free `id`'s run lock if the task holding it has ended. The firing that made the task
    /// frees it as the task ends; when that write met a storage fault (a pool timeout under
    /// load) the lock would keep every later firing skipped as "previous run still running"
    /// until a restart. An ended task overlaps nothing, so freeing its lock is always safe
    /// (a task waiting for a person is still running, and keeps it).
    pub async fn free_ended_lock(self, id: &str) -> Result<bool> {
        let free = query(
            "UPDATE jobs SET running_task_id = NULL WHERE id = ? AND EXISTS \
             (SELECT 1 FROM tasks t WHERE t.id = jobs.running_task_id \
              AND t.state IN ('succeeded', 'failed', 'cancelled'))",
        )
        .bind(id);
        self.store.one_row(free).await
    }
}

/// One job of a burst due at once: its due time moves from `due` to `next`, and its run lock
/// is taken by `holder` (the firing's placeholder until its task exists).
#[derive(Debug, Clone)]
pub struct BurstClaim {
    pub job_id: String,
    pub due: DateTime<Utc>,
    pub next: Option<DateTime<Utc>>,
    pub holder: String,
}

/// A burst's statements carry this many jobs at most (4 bound values each, well under SQLite's
/// 32,766-variable limit).
const BURST_CHUNK: usize = 500;

/// Many jobs due at the same moment: claimed, locked and recorded in a few statements for the
/// whole burst, where one job at a time costs five round trips each and the last of 1,000 fires
/// seconds late. Each statement is all-or-nothing per job, exactly as the one-job statements.
impl Jobs<'_> {
    /// Claim each job's due time and take its run lock in one statement per chunk; the ids of
    /// the jobs claimed. A job whose due time moved on (claimed elsewhere) or whose previous
    /// run still holds the lock is left untouched, for the one-job path to handle.
    pub async fn claim_burst(self, claims: &[BurstClaim]) -> Result<Vec<String>> {
        let mut claimed = Vec::with_capacity(claims.len());
        for chunk in claims.chunks(BURST_CHUNK) {
            let mut update = Builder::new(
                "UPDATE jobs SET next_run_at = v.column3, running_task_id = v.column4 FROM (",
            );
            update.push_values(chunk, |b, c| {
                b.push_bind(&c.job_id)
                    .push_bind(c.due)
                    .push_bind(c.next)
                    .push_bind(&c.holder);
            });
            update.push(
                ") AS v WHERE jobs.id = v.column1 AND jobs.next_run_at = v.column2 \
                 AND jobs.running_task_id IS NULL RETURNING jobs.id",
            );
            // Not kept in the connection's statement cache: a burst's statement differs with
            // its size, and a cache of 100 prepared many-row statements per connection grows
            // the daemon by megabytes (BENCHMARKS.md §3, the job firings).
            let ids: Vec<(String,)> = self
                .store
                .returning(update.build_query_as().persistent(false))
                .await?;
            claimed.extend(ids.into_iter().map(|(id,)| id));
        }
        Ok(claimed)
    }

    /// Hand each firing's run lock from its placeholder to its task, and record each run
    /// `fired`; `(job id, run id)` of the runs recorded. A lock no longer held by its
    /// placeholder (a restore in another process cleared it) is taken if free, as
    /// [`Jobs::swap_lock`]'s callers do.
    pub async fn start_burst(self, started: &[(BurstClaim, String)]) -> Result<Vec<(String, i64)>> {
        let mut runs = Vec::with_capacity(started.len());
        for chunk in started.chunks(BURST_CHUNK) {
            let mut swap = Builder::new("UPDATE jobs SET running_task_id = v.column3 FROM (");
            swap.push_values(chunk, |b, (c, task_id)| {
                b.push_bind(&c.job_id)
                    .push_bind(&c.holder)
                    .push_bind(task_id);
            });
            swap.push(
                ") AS v WHERE jobs.id = v.column1 \
                 AND (jobs.running_task_id = v.column2 OR jobs.running_task_id IS NULL)",
            );
            let mut insert = Builder::new(
                "INSERT INTO job_runs (job_id, scheduled_at, fired_at, outcome, task_id, reason, node_id, \
                 node_epoch) ",
            );
            let fired_at = now();
            let epoch = self.store.stamp();
            insert.push_values(chunk, |b, (c, task_id)| {
                b.push_bind(&c.job_id)
                    .push_bind(c.due)
                    .push_bind(fired_at)
                    .push_bind(RunOutcome::Fired)
                    .push_bind(task_id)
                    .push_bind(None::<String>)
                    .push_bind(self.store.node())
                    .push_bind(&epoch);
            });
            insert.push(" RETURNING job_id, id");
            let mut tx = self.store.begin().await?;
            // Sized by the burst, so not cached (see `claim_burst`).
            swap.build().persistent(false).execute(&mut tx).await?;
            let rows: Vec<(String, i64)> = insert
                .build_query_as()
                .persistent(false)
                .fetch_all(&mut tx)
                .await?;
            tx.commit().await?;
            runs.extend(rows);
        }
        Ok(runs)
    }
}
