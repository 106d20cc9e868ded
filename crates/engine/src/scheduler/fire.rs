//! The firing path shared by the timer, the catch-up at start and "run now": claim, missed
//! bookkeeping, run lock, precheck, a fresh task, its run, and the run row's outcome and
//! delivery. Every decision here writes a `job_runs` row and one log line.

use super::schedule::{ScheduleError, ZonedSchedule, parse_timezone};
use super::{JobTask, RunnerError, Scheduler, SchedulerError};
use chrono::{DateTime, Duration, Utc};
use hermes_store::{
    Delivery, FailReason, Job, RunOutcome, SavedSnapshot, StoreError, Task, TaskState, new_id,
};

/// Counting missed due times stops here (a per-minute job down for months).
const MISSED_COUNT_CAP: u64 = 100_000;
/// While the daemon stops, how often a firing looks whether its task now waits for a person.
const STOPPING_CHECK: std::time::Duration = std::time::Duration::from_millis(500);

/// In the running loop, a due time this late is still "on time" however small the grace: the
/// loop itself may be a moment late (a busy database, a slow wake-up).
pub(crate) const LOOP_SLACK: Duration = Duration::seconds(60);

/// An answer that asks for no delivery.
pub(crate) const SILENT: &str = "[SILENT]";

/// What started a firing; named in the run row's reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Trigger {
    Timer,
    CatchUp,
    RunNow,
}

impl Trigger {
    fn reason(self) -> Option<&'static str> {
        match self {
            Trigger::Timer => None,
            Trigger::CatchUp => Some("catch-up"),
            Trigger::RunNow => Some("run now"),
        }
    }
}

/// A firing whose task was created and recorded `fired`, waiting to be run.
pub(crate) struct Started {
    pub(crate) job: Job,
    pub(crate) run_id: i64,
    pub(crate) task: Box<dyn JobTask>,
    pub(crate) scheduled_at: DateTime<Utc>,
    /// The job's looks at pages and feeds before this firing's precheck, put back when its
    /// run fails or is cut off: the change it saw stays news for the next run. `None` where
    /// unknown (a run followed after a restart, a burst's).
    pub(crate) looks: Option<Vec<SavedSnapshot>>,
}

/// How the start of a firing went.
pub(crate) enum Begin {
    Started(Box<Started>),
    /// Recorded `skipped` (overlap, precheck) or `failed` (precheck error, task not created).
    Ended {
        outcome: RunOutcome,
        reason: String,
    },
    /// The job was removed meanwhile: nothing to record it against.
    Gone,
}

impl Scheduler {
    /// A job found due at `now`: claim its due time (moving `next_run_at` on), record the due
    /// times it is too late for as one `missed` row, and fire the latest one if it is within
    /// the grace. Returns false when another firer had already claimed it.
    pub(crate) async fn handle_due(
        &self,
        job: Job,
        now: DateTime<Utc>,
        at_start: bool,
    ) -> Result<bool, StoreError> {
        let store = &self.inner.store;
        let Some(due) = job.next_run_at else {
            return Ok(false);
        };
        let schedule = match ZonedSchedule::parse(&job.schedule, &job.timezone, due) {
            Ok(s) => s,
            Err(e) => return self.stop_unparseable(&job, due, e).await,
        };
        let (count, last) = schedule.due_times(due, now, MISSED_COUNT_CAP);
        if !store
            .jobs()
            .claim_run(&job.id, Some(due), schedule.next_due(now))
            .await?
        {
            tracing::debug!(job = %job.id, due = %due, "due time already claimed elsewhere");
            return Ok(false);
        }
        let grace = self.catch_up_grace();
        let window = if at_start {
            grace
        } else {
            grace.max(LOOP_SLACK)
        };
        let fire_at = (now - last <= window).then_some(last);
        let missed = count - u64::from(fire_at.is_some());
        if missed > 0 {
            let last_missed = match fire_at {
                Some(at) => schedule.previous_before(at).unwrap_or(due).max(due),
                None => last,
            };
            self.record_missed(&job, &schedule, missed, due, last_missed, at_start)
                .await?;
        }
        if let Some(at) = fire_at {
            let trigger = if at_start || missed > 0 || now - at > LOOP_SLACK {
                Trigger::CatchUp
            } else {
                Trigger::Timer
            };
            self.fire_apart(job, at, trigger);
        }
        Ok(true)
    }

    /// `scheduler.catch_up_grace_s`: how late a due time may still run.
    pub(crate) fn catch_up_grace(&self) -> Duration {
        Duration::seconds(
            i64::try_from(self.inner.settings.catch_up_grace_s).unwrap_or(i64::MAX / 1000),
        )
    }

    /// Fire `job` for its due time `at` on the scheduler's tracker, and run it to its end.
    pub(crate) fn fire_apart(&self, job: Job, at: DateTime<Utc>, trigger: Trigger) {
        let me = self.clone();
        self.spawn(async move {
            match me.begin(&job, at, trigger).await {
                Ok(Begin::Started(started)) => me.finish(*started).await,
                Ok(_) => {}
                Err(e) => {
                    tracing::error!(job = %job.id, error = %e, "job firing could not be recorded")
                }
            }
        });
    }

    /// A stored job that no longer parses (a zone dropped from tzdata): stop it, visibly,
    /// rather than retrying forever. False when another firer claimed it first.
    async fn stop_unparseable(
        &self,
        job: &Job,
        due: DateTime<Utc>,
        e: ScheduleError,
    ) -> Result<bool, StoreError> {
        let store = &self.inner.store;
        if !store.jobs().claim_run(&job.id, Some(due), None).await? {
            return Ok(false);
        }
        let reason = format!(
            "the job's schedule can no longer be evaluated: {e}; remove the job and add it again"
        );
        store
            .jobs()
            .add_run(&job.id, due, RunOutcome::Failed, None, Some(&reason))
            .await?;
        tracing::warn!(job = %job.id, %reason, "job stopped");
        self.count_firing(RunOutcome::Failed, 1, None);
        Ok(true)
    }

    /// One `missed` row for `missed` due times from `first` to `last`.
    async fn record_missed(
        &self,
        job: &Job,
        schedule: &ZonedSchedule,
        missed: u64,
        first: DateTime<Utc>,
        last: DateTime<Utc>,
        at_start: bool,
    ) -> Result<(), StoreError> {
        let why = if at_start {
            "daemon was down"
        } else {
            "the scheduler was not running (machine asleep?)"
        };
        let at_least = if missed >= MISSED_COUNT_CAP {
            "at least "
        } else {
            ""
        };
        let local = |t| schedule.local(t).format("%Y-%m-%d %H:%M %Z");
        let reason = if missed == 1 {
            format!("{why}: 1 run at {}", local(first))
        } else {
            format!(
                "{why}: {at_least}{missed} runs between {} and {}",
                local(first),
                local(last)
            )
        };
        self.inner
            .store
            .jobs()
            .add_run(&job.id, first, RunOutcome::Missed, None, Some(&reason))
            .await?;
        tracing::info!(job = %job.id, outcome = "missed", %reason, "job firing");
        self.count_firing(RunOutcome::Missed, missed, None);
        Ok(())
    }

    /// "Run now": the same start as a timer firing, minus the claim; its precheck runs, but a
    /// "no change" does not skip it.
    pub(crate) async fn begin_now(&self, id: &str) -> Result<Started, SchedulerError> {
        let job = self.inner.store.jobs().get(id).await?;
        let now = self.inner.clock.now();
        match self.begin(&job, now, Trigger::RunNow).await? {
            Begin::Started(s) => Ok(*s),
            Begin::Gone => Err(SchedulerError::NotFound(id.to_string())),
            Begin::Ended {
                outcome: RunOutcome::Skipped,
                ..
            } => {
                let task_id = self
                    .inner
                    .store
                    .jobs()
                    .get(id)
                    .await
                    .ok()
                    .and_then(|j| j.running_task_id)
                    .unwrap_or_else(|| "?".into());
                Err(SchedulerError::Busy {
                    job_id: id.to_string(),
                    task_id,
                })
            }
            Begin::Ended { reason, .. } => Err(SchedulerError::NotStarted(reason)),
        }
    }

    /// The lock is held: by a run still going, or by one whose task ended but whose release was
    /// lost to a storage fault. The latter is freed and taken; true if this firing holds the
    /// lock now.
    async fn free_ended(&self, job: &Job, token: &str) -> Result<bool, StoreError> {
        let store = &self.inner.store;
        if !store.jobs().free_ended_lock(&job.id).await? {
            return Ok(false);
        }
        tracing::warn!(job = %job.id,
            "the job's run lock was still held by a task that had ended (its release was lost to a storage fault); freed");
        store.jobs().lock(&job.id, token).await
    }

    /// Take the run lock, run the precheck, create the task and record the firing.
    pub(crate) async fn begin(
        &self,
        job: &Job,
        scheduled_at: DateTime<Utc>,
        trigger: Trigger,
    ) -> Result<Begin, StoreError> {
        let store = &self.inner.store;
        // A placeholder holder first: an overlapping firing is refused before any precheck
        // runs (a precheck may consume the change it reports) and before any task exists.
        let token = firing_token(self.inner.store.node());
        if !store.jobs().lock(&job.id, &token).await? && !self.free_ended(job, &token).await? {
            let holder = match store.jobs().get(&job.id).await {
                Ok(j) => j.running_task_id,
                Err(StoreError::NotFound { .. }) => return Ok(Begin::Gone),
                Err(e) => return Err(e),
            };
            tracing::debug!(job = %job.id, running = ?holder, "the previous run holds the lock");
            return self
                .record_skipped(job, scheduled_at, "previous run still running")
                .await;
        }
        match self.begin_locked(job, scheduled_at, trigger, &token).await {
            Ok(b) => Ok(b),
            Err(e) => {
                let _ = store.jobs().release_lock(&job.id, &token).await;
                Err(e)
            }
        }
    }

    async fn begin_locked(
        &self,
        job: &Job,
        scheduled_at: DateTime<Utc>,
        trigger: Trigger,
        token: &str,
    ) -> Result<Begin, StoreError> {
        let store = &self.inner.store;
        let looks = store
            .snapshots()
            .under(&hermes_store::job_snapshots(&job.id))
            .await?;
        // "Run now" runs the precheck too — it is how a person checks a fix to a failing one —
        // but fires whatever change it reports: the person asked for a run.
        // The precheck's look uses the change up (the task's own look would see none): what it
        // found goes to the task.
        let mut to_run = std::borrow::Cow::Borrowed(job);
        if let Some(precheck) = &job.precheck {
            match self
                .precheck(job, precheck, scheduled_at, token, trigger)
                .await?
            {
                Err(ended) => return Ok(ended),
                Ok(with_finding) => to_run = std::borrow::Cow::Owned(with_finding),
            }
        }
        let task = match self.inner.runner.create(&to_run).await {
            Ok(task) => task,
            Err(e) => {
                store.jobs().release_lock(&job.id, token).await?;
                let reason = format!("could not create the task: {e}");
                return self.record_failed_start(job, scheduled_at, reason).await;
            }
        };
        let task_id = task.id().to_string();
        if !store.jobs().swap_lock(&job.id, token, &task_id).await? {
            // Only a restore in another process clears a lock; take it again if free.
            tracing::warn!(job = %job.id, task = %task_id, "run lock lost before the run started");
            let _ = store.jobs().lock(&job.id, &task_id).await?;
        }
        let run_id = match store
            .jobs()
            .add_run(
                &job.id,
                scheduled_at,
                RunOutcome::Fired,
                Some(&task_id),
                trigger.reason(),
            )
            .await
        {
            Ok(id) => id,
            Err(e) => {
                // Without its run row nothing would deliver the task's answer: it must not run.
                task.abandon(abandoned(&e)).await;
                // The lock is the task's now; the caller's release (by the placeholder token)
                // would not free it, and the job would stay locked until a restart.
                let _ = store.jobs().release_lock(&job.id, &task_id).await;
                return Err(e);
            }
        };
        tracing::info!(job = %job.id, outcome = "fired", task = %task_id, run = run_id,
            reason = trigger.reason().unwrap_or("schedule"), "job firing");
        let on_schedule = (trigger != Trigger::RunNow).then_some(scheduled_at);
        self.count_firing(RunOutcome::Fired, 1, on_schedule);
        Ok(Begin::Started(Box::new(Started {
            job: job.clone(),
            run_id,
            task,
            scheduled_at,
            looks: Some(looks),
        })))
    }

    pub(crate) async fn record_skipped(
        &self,
        job: &Job,
        scheduled_at: DateTime<Utc>,
        reason: &str,
    ) -> Result<Begin, StoreError> {
        self.inner
            .store
            .jobs()
            .add_run(
                &job.id,
                scheduled_at,
                RunOutcome::Skipped,
                None,
                Some(reason),
            )
            .await?;
        tracing::info!(job = %job.id, outcome = "skipped", reason, "job firing");
        self.count_firing(RunOutcome::Skipped, 1, None);
        Ok(Begin::Ended {
            outcome: RunOutcome::Skipped,
            reason: reason.into(),
        })
    }

    pub(crate) async fn record_failed_start(
        &self,
        job: &Job,
        scheduled_at: DateTime<Utc>,
        reason: String,
    ) -> Result<Begin, StoreError> {
        let store = &self.inner.store;
        let run_id = store
            .jobs()
            .add_run(
                &job.id,
                scheduled_at,
                RunOutcome::Failed,
                None,
                Some(&reason),
            )
            .await?;
        tracing::info!(job = %job.id, outcome = "failed", %reason, "job firing");
        self.count_firing(RunOutcome::Failed, 1, None);
        let delivery = self.failure_notice(job, run_id, None, &reason).await;
        store.jobs().set_run_delivery(run_id, &delivery).await?;
        Ok(Begin::Ended {
            outcome: RunOutcome::Failed,
            reason,
        })
    }

    /// Count `count` firings that ended with `outcome` in the metrics; one that created its
    /// task for a scheduled time (not "run now") gives that time, to count how late it was.
    pub(crate) fn count_firing(
        &self,
        outcome: RunOutcome,
        count: u64,
        scheduled_at: Option<DateTime<Utc>>,
    ) {
        let late =
            scheduled_at.map(|at| (self.inner.clock.now() - at).to_std().unwrap_or_default());
        self.inner
            .metrics
            .observe_job_firing(outcome.as_str(), count, late);
    }

    /// Run a started firing's task to its end, release the lock, deliver, record.
    pub(crate) async fn finish(&self, started: Started) {
        let Started {
            job,
            run_id,
            task,
            scheduled_at,
            looks,
        } = started;
        let store = &self.inner.store;
        let task_id = task.id().to_string();
        let Some(result) = self.run_to_end(task).await else {
            tracing::info!(job = %job.id, task = %task_id, run = run_id,
                "job run not over at the stop (its task waits for a person or a worker); the next start follows it");
            return;
        };
        match store.jobs().get(&job.id).await {
            Ok(_) => {}
            Err(StoreError::NotFound { .. }) => {
                tracing::info!(job = %job.id, task = %task_id, "job removed during its run; not delivered");
                return;
            }
            Err(e) => tracing::error!(job = %job.id, error = %e, "cannot re-read the job"),
        }
        if let Ok(task) = &result
            && cut_by_a_stop(task)
        {
            self.put_looks_back(&job, looks).await;
            self.cut_off(job, run_id, scheduled_at, task).await;
            return;
        }
        let (outcome, reason, delivery) = match result {
            Ok(task) if task.state == TaskState::Succeeded => {
                let answer = task.answer.unwrap_or_default();
                self.recovery_notice(&job, run_id, &task_id).await;
                let delivery = if answer.trim() == SILENT {
                    Delivery::Silent
                } else {
                    let title = format!("{} — {}", job.name, local_date(scheduled_at, &job));
                    let footer = self.digest_footer(&job, &task_id).await;
                    let body = format!("{}{footer}", answer.trim_end());
                    self.deliver_all(&job, run_id, Some(&task_id), &title, &body)
                        .await
                };
                (RunOutcome::Fired, None, delivery)
            }
            Ok(task) => {
                self.put_looks_back(&job, looks).await;
                let why = match (task.error, task.reason) {
                    (Some(e), _) => e,
                    (None, Some(r)) => format!("task {} ({r})", task.state),
                    (None, None) => format!("task {}", task.state),
                };
                let delivery = self
                    .failure_notice(&job, run_id, Some(&task_id), &why)
                    .await;
                (RunOutcome::Failed, Some(why), delivery)
            }
            Err(e) => {
                self.put_looks_back(&job, looks).await;
                let message = e.to_string();
                let delivery = self
                    .failure_notice(&job, run_id, Some(&task_id), &message)
                    .await;
                (RunOutcome::Failed, Some(message), delivery)
            }
        };
        if let Err(e) = store
            .jobs()
            .update_run(run_id, outcome, reason.as_deref(), &delivery)
            .await
        {
            tracing::error!(job = %job.id, run = run_id, error = %e, "cannot record the run's end");
        }
        // Only now: a stop before this leaves the lock naming the ended task, and the next
        // start records and delivers what is missing (`complete_ended`) — freed earlier, the
        // run would look over and its answer be lost.
        if let Err(e) = store.jobs().release_lock(&job.id, &task_id).await {
            // The next firing frees a lock its ended task still holds (`free_ended`).
            tracing::error!(job = %job.id, error = %e, "cannot release the job's run lock; the next firing frees it");
        }
        tracing::info!(job = %job.id, task = %task_id, run = run_id, outcome = ?outcome,
            delivery = %delivery, reason = reason.as_deref().unwrap_or(""), "job run finished");
    }

    /// Run a firing's task to its end; `None` when the daemon stops while the task waits for a
    /// person: its run stays `fired` with its lock held, for the next start to follow, rather
    /// than the stop waiting out its grace on an answer that may take a day.
    async fn run_to_end(&self, task: Box<dyn JobTask>) -> Option<Result<Task, RunnerError>> {
        let id = task.id().to_string();
        let mut run = task.run();
        let Some(stopping) = hermes_store::util::lock(&self.inner.stopping).clone() else {
            return Some(run.await);
        };
        tokio::select! {
            r = &mut run => return Some(r),
            _ = stopping.cancelled() => {}
        }
        // Stopping: a task still running gets the grace to end; one that waits (now, or once
        // its round reaches a held call) is left for the next start, and so is one no worker
        // took yet (none will before then).
        loop {
            match self.inner.store.tasks().get(&id).await {
                Ok(t) if t.waiting && !t.state.is_finished() => return None,
                Ok(t) if t.state == TaskState::Pending => return None,
                _ => {}
            }
            tokio::select! {
                r = &mut run => return Some(r),
                _ = tokio::time::sleep(STOPPING_CHECK) => {}
            }
        }
    }
}

/// Who holds a job's run lock while its firing starts, before its task exists: unique, so a
/// firing releases only its own hold, and naming the node, so the placeholders of a node that
/// died can be freed by the others (see `store::placeholder_prefix`).
pub(super) fn firing_token(node: Option<&str>) -> String {
    format!("{}{}", hermes_store::placeholder_prefix(node), new_id())
}

/// Whether the daemon, not the task, ended it: stopped past the shutdown grace, or found cut
/// off by a crash (its node's start, or the other nodes, ended it `interrupted`).
pub(crate) fn cut_by_a_stop(task: &Task) -> bool {
    task.state == TaskState::Failed
        && matches!(
            task.reason,
            Some(FailReason::Shutdown | FailReason::Interrupted)
        )
}

/// The date of `t` in the job's zone (UTC if the zone no longer parses).
fn local_date(t: DateTime<Utc>, job: &Job) -> String {
    match parse_timezone(&job.timezone) {
        Ok(tz) => t.with_timezone(&tz).format("%Y-%m-%d").to_string(),
        Err(_) => t.format("%Y-%m-%d").to_string(),
    }
}

/// Why a firing's task ended unrun: its run row could not be written.
pub(super) fn abandoned(e: &StoreError) -> String {
    format!("the job's run could not be recorded ({e}); this firing was abandoned")
}
