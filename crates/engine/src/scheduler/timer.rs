//! The timer loop and the restore at start. The loop keeps no schedule of its own: each pass
//! reads the jobs from the store, fires the due ones, and sleeps until the earliest
//! `next_run_at` (at most [`RESCAN`]), a wake-up, or cancellation.

use super::fire::{Started, Trigger, cut_by_a_stop};
use super::{RESCAN, Scheduler, SchedulerError};
use chrono::{DateTime, Utc};
use hermes_store::{Delivery, Job, JobRun, RunOutcome, SavedSnapshot, StoreError, Task, TaskState};
use std::time::Duration;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

/// After a store error the loop waits this long before trying again.
const ERROR_BACKOFF: Duration = Duration::from_secs(5);

impl Scheduler {
    pub(crate) async fn run_loop(self, cancel: CancellationToken) {
        tracing::info!("scheduler started");
        loop {
            let wait = match self.pass().await {
                Ok(wait) => wait,
                Err(e) => {
                    tracing::error!(error = %e, "scheduler pass failed; retrying");
                    ERROR_BACKOFF
                }
            };
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = self.inner.wake.notified() => {}
                _ = sleep_until(Instant::now() + wait) => {}
            }
        }
        tracing::info!("scheduler stopped");
    }

    /// Fire what is due; return how long to sleep before the next due time.
    async fn pass(&self) -> Result<Duration, SchedulerError> {
        self.tick().await?;
        let now = self.inner.clock.now();
        let earliest = self.inner.store.jobs().next_due().await?;
        Ok(match earliest {
            Some(t) => (t - now).to_std().unwrap_or(Duration::ZERO).min(RESCAN),
            None => RESCAN,
        })
    }

    /// At start: runs a crash interrupted are recorded `failed` and their locks cleared; a run
    /// whose task waits for a person (its wait survives restarts) keeps its lock and is
    /// followed to its end, delivered and recorded as if the daemon had never stopped; a run
    /// whose task had ended is recorded and delivered now. Then
    /// the due times missed while down are handled (one catch-up at most per job).
    pub(crate) async fn restore(&self) -> Result<(), SchedulerError> {
        if self.inner.store.shared().is_some() {
            self.restore_node().await?;
        } else {
            self.restore_alone().await?;
        }
        let store = &self.inner.store;
        let now = self.inner.clock.now();
        for job in store.jobs().list().await? {
            if job.enabled && job.next_run_at.is_some_and(|t| t <= now) {
                let id = job.id.clone();
                if let Err(e) = self.handle_due(job, now, true).await {
                    tracing::error!(job = %id, error = %e, "could not handle the job's missed runs; the loop will try again");
                }
            }
        }
        Ok(())
    }

    /// On a database other daemons may share: only this node's own leftovers are its to
    /// restore — the placeholders its firings held, the runs it was following (each followed
    /// to its end wherever its task runs, and delivered). Another node's are taken over when
    /// that node falls silent ([`Scheduler::take_over`]).
    async fn restore_node(&self) -> Result<(), SchedulerError> {
        let store = &self.inner.store;
        let Some(me) = store.node().map(str::to_string) else {
            return Ok(());
        };
        let freed = store.jobs().release_placeholders_of(&me).await?;
        let followed = self.take_over(&me).await?;
        if freed + followed as u64 > 0 {
            tracing::info!(
                freed,
                followed,
                "run locks of this node's last start freed, its job runs followed"
            );
        }
        Ok(())
    }

    /// Take over the job runs `node` fired and was following: each followed to its end and
    /// delivered by this node, as if it had fired it. A run moves only from the lease it was
    /// followed under to this node's, in one compare-and-set; so of a node restarting (`node`
    /// is this one's last start) and another taking it over at once, exactly one follows each
    /// run, and a run whose node still holds its lease is not taken. Returns how many runs
    /// this node took.
    pub async fn take_over(&self, node: &str) -> Result<usize, SchedulerError> {
        let store = &self.inner.store;
        let mut taken = 0;
        for open in store.jobs().open_runs_of(node).await? {
            if !store.jobs().take_run(&open, node).await? {
                continue;
            }
            let job = match store.jobs().get(&open.job_id).await {
                Ok(job) => job,
                Err(StoreError::NotFound { .. }) => continue,
                Err(e) => return Err(e.into()),
            };
            let Some(started) = self
                .follow_held(
                    job,
                    open.run_id,
                    &open.task_id,
                    open.scheduled_at,
                    "a job run taken over",
                )
                .await?
            else {
                continue;
            };
            tracing::info!(job = %started.job.id, task = %open.task_id, run = open.run_id, from = node,
                "job run taken over: followed to its end here");
            let me = self.clone();
            self.spawn(async move { me.finish(started).await });
            taken += 1;
        }
        Ok(taken)
    }

    /// The only daemon on its database (SQLite): nothing a dead process ran is still running
    /// (the start-up ended those before this).
    async fn restore_alone(&self) -> Result<(), SchedulerError> {
        let store = &self.inner.store;
        let mut followed = Vec::new();
        let mut cut = Vec::new();
        for job in store.jobs().list().await? {
            let Some(holder) = job.running_task_id.clone() else {
                continue;
            };
            let runs = store.jobs().runs(&job.id, 20).await?;
            let Some(run) = runs.into_iter().find(|r| {
                r.outcome == RunOutcome::Fired && r.task_id.as_deref() == Some(holder.as_str())
            }) else {
                continue;
            };
            let task = match store.tasks().get(&holder).await {
                Ok(t) => Some(t),
                Err(StoreError::NotFound { .. }) => None,
                Err(e) => return Err(e.into()),
            };
            // Not over: waiting for a person, for a worker (pending at the stop), or running
            // already — the start-up ended every task a dead process left running, so one
            // running now is this daemon's worker's (it took the pending task meanwhile) or a
            // live `run`'s. Followed to its end from here, as if the daemon had never stopped.
            if task.as_ref().is_some_and(|t| !t.state.is_finished()) {
                followed.push((job, run));
                continue;
            }
            if let Some(done) = task.filter(|t| t.state.is_finished()) {
                if cut_by_a_stop(&done) {
                    // Run again below, once the locks a crash left are cleared.
                    cut.push((job, run, done));
                    continue;
                }
                // The task ended before the stop; only its run was not recorded yet.
                self.complete_ended(job, run, done).await?;
                continue;
            }
            let reason = "interrupted: the daemon stopped during this run";
            let delivery = self
                .failure_notice(&job, run.id, Some(&holder), reason)
                .await;
            store
                .jobs()
                .update_run(run.id, RunOutcome::Failed, Some(reason), &delivery)
                .await?;
            tracing::warn!(job = %job.id, task = %holder, "job run interrupted by a stop");
        }
        // The followed runs' locks are taken back below: not left by a crash.
        let cleared = (store.jobs().clear_locks().await? as usize).saturating_sub(followed.len());
        // Nothing fires before `restore` returns (the loop and the API start after it), so
        // taking the followed runs' locks back cannot race a firing.
        for (job, run) in followed {
            let Some(task_id) = run.task_id.clone() else {
                continue;
            };
            if !store.jobs().lock(&job.id, &task_id).await? {
                continue;
            }
            let Some(started) = self
                .follow_held(
                    job,
                    run.id,
                    &task_id,
                    run.scheduled_at,
                    "the job's held run",
                )
                .await?
            else {
                continue;
            };
            tracing::info!(job = %started.job.id, task = %task_id, "job run not over at the last stop; followed to its end");
            let me = self.clone();
            self.spawn(async move { me.finish(started).await });
        }
        if cleared > 0 {
            tracing::warn!(count = cleared, "cleared job run locks left by a crash");
        }
        for (job, run, task) in cut {
            self.run_cut_again(job, run.id, run.scheduled_at, &task)
                .await?;
        }
        Ok(())
    }

    /// A run that failed or was cut off reported nothing: the looks its precheck or its task
    /// took at pages and feeds are put back as they were before it, so the next run still sees
    /// the change. Best effort: a failure here is logged, and the change is then lost.
    pub(crate) async fn put_looks_back(&self, job: &Job, looks: Option<Vec<SavedSnapshot>>) {
        let Some(looks) = looks else {
            return;
        };
        let prefix = hermes_store::job_snapshots(&job.id);
        if let Err(e) = self.inner.store.snapshots().restore(&prefix, &looks).await {
            tracing::warn!(job = %job.id, error = %e, "cannot put the job's page snapshots back after a failed run; a change it saw may not be reported again");
        }
    }

    /// A run's task ended by the daemon ([`cut_by_a_stop`]). Stopping now: the run stays
    /// `fired`, its lock held, for the next start to run again. Live (a take-over, the
    /// restore): run again now.
    pub(crate) async fn cut_off(
        &self,
        job: Job,
        run_id: i64,
        scheduled_at: DateTime<Utc>,
        task: &Task,
    ) {
        let stopping = hermes_store::util::lock(&self.inner.stopping)
            .as_ref()
            .is_some_and(CancellationToken::is_cancelled);
        if stopping {
            tracing::info!(job = %job.id, task = %task.id, run = run_id,
                "job run cut off by the stop; the next start runs its due time again");
        } else if let Err(e) = self.run_cut_again(job, run_id, scheduled_at, task).await {
            tracing::error!(run = run_id, error = %e, "cannot record a job run cut off by a stop");
        }
    }

    /// A run whose task the daemon stopped — its grace ran out, it was killed, or its node was
    /// declared dead — served nothing: recorded `missed` (neither a failure nor a break in a
    /// failure streak), and its due time fired again now as a catch-up when still within
    /// `scheduler.catch_up_grace_s`, as if the daemon had been down at that time.
    pub(crate) async fn run_cut_again(
        &self,
        job: Job,
        run_id: i64,
        scheduled_at: DateTime<Utc>,
        task: &Task,
    ) -> Result<(), SchedulerError> {
        let store = &self.inner.store;
        store.jobs().release_lock(&job.id, &task.id).await?;
        let again = self.inner.clock.now() - scheduled_at <= self.catch_up_grace();
        let reason = if again {
            "the daemon stopped during this run; its due time was run again (catch-up)"
        } else {
            "the daemon stopped during this run, and came back after scheduler.catch_up_grace_s: not run again"
        };
        store
            .jobs()
            .update_run(run_id, RunOutcome::Missed, Some(reason), &Delivery::None)
            .await?;
        tracing::info!(job = %job.id, task = %task.id, run = run_id, again, "job run cut off by a stop");
        self.count_firing(RunOutcome::Missed, 1, None);
        if again {
            self.fire_apart(job, scheduled_at, Trigger::CatchUp);
        }
        Ok(())
    }

    /// A run whose lock this node holds, ready to be followed here. A task this node cannot
    /// follow gives the lock back, else the job could never fire again; `None` then.
    /// A run whose task had ended when the daemon stopped: recorded, and delivered as its end
    /// would have been — unless the stop came after its notices were queued.
    async fn complete_ended(
        &self,
        job: Job,
        run: JobRun,
        task: Task,
    ) -> Result<(), SchedulerError> {
        let store = &self.inner.store;
        if store.outbox().for_run(run.id).await?.is_empty() {
            tracing::warn!(job = %job.id, task = %task.id, "job run ended just before a stop; recording and delivering it now");
            let started = Started {
                job,
                run_id: run.id,
                task: Box::new(Ended(task)),
                scheduled_at: run.scheduled_at,
                looks: None,
            };
            self.finish(started).await;
            return Ok(());
        }
        let (outcome, reason) = match task.state {
            TaskState::Succeeded => (RunOutcome::Fired, None),
            _ => (RunOutcome::Failed, task.error.as_deref()),
        };
        store
            .jobs()
            .update_run(run.id, outcome, reason, &Delivery::Queued)
            .await?;
        store.jobs().release_lock(&job.id, &task.id).await?;
        Ok(())
    }

    async fn follow_held(
        &self,
        job: Job,
        run_id: i64,
        task_id: &str,
        scheduled_at: DateTime<Utc>,
        what: &str,
    ) -> Result<Option<Started>, SchedulerError> {
        match self.inner.runner.follow(task_id) {
            Ok(task) => Ok(Some(Started {
                job,
                run_id,
                task,
                scheduled_at,
                looks: None,
            })),
            Err(e) => {
                tracing::error!(job = %job.id, task = %task_id, error = %e, "cannot follow {what}");
                self.inner
                    .store
                    .jobs()
                    .release_lock(&job.id, task_id)
                    .await?;
                Ok(None)
            }
        }
    }
}

/// A task that ended already: its run has nothing left to wait for.
struct Ended(Task);

impl super::JobTask for Ended {
    fn id(&self) -> &str {
        &self.0.id
    }

    fn run(
        self: Box<Self>,
    ) -> futures::future::BoxFuture<'static, Result<Task, super::RunnerError>> {
        Box::pin(std::future::ready(Ok(self.0)))
    }

    fn abandon(self: Box<Self>, _why: String) -> futures::future::BoxFuture<'static, ()> {
        Box::pin(std::future::ready(()))
    }
}
