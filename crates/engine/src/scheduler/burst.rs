//! Many jobs due at the same moment (a thousand digests at 08:00): claimed, locked, given
//! their tasks and recorded `fired` in a handful of statements for the whole burst, where the
//! one-job path (`fire.rs`) costs five round trips a job and the last of 1,000 fired seconds
//! late. Only the plain case takes this path — on time, nothing missed, no precheck; every
//! other job, and any job the burst could not claim, goes the one-job way.
//!
//! Owns: choosing the burst and its few statements. Must not: decide anything the one-job
//! path decides differently (the run row, the log line and the run itself are the same).

use super::fire::{LOOP_SLACK, Started, firing_token};
use super::schedule::ZonedSchedule;
use super::{JobTask, Scheduler};
use chrono::{DateTime, Utc};
use hermes_store::{BurstClaim, Job, StoreError};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// How long the pass took before the burst: reading the due jobs, choosing the burst.
pub(crate) struct Lead {
    pub(crate) read: Duration,
    pub(crate) split: Duration,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Fewer due jobs than this go the one-job way: a burst is for when it pays.
pub(crate) const BURST_MIN: usize = 2;

impl Scheduler {
    /// The due jobs that can fire as one burst, with their claims; the rest are returned for
    /// the one-job path.
    pub(crate) fn split_burst(
        &self,
        due: Vec<Job>,
        now: DateTime<Utc>,
    ) -> (Vec<(Job, BurstClaim)>, Vec<Job>) {
        let mut burst = Vec::new();
        let mut rest = Vec::new();
        for job in due {
            match plain_claim(&job, now, self.inner.store.node()) {
                Some(claim) => burst.push((job, claim)),
                None => rest.push(job),
            }
        }
        if burst.len() < BURST_MIN {
            rest.extend(burst.drain(..).map(|(job, _)| job));
        }
        (burst, rest)
    }

    /// Fire a burst: how many jobs it claimed, and the jobs it did not claim (their previous
    /// run still holds the lock, or another firer moved them on), for the one-job path to
    /// handle as it always does.
    pub(crate) async fn fire_burst(
        &self,
        burst: Vec<(Job, BurstClaim)>,
        lead: Lead,
    ) -> Result<(usize, Vec<Job>), StoreError> {
        let began = Instant::now();
        let (claimed, left) = self.claim_burst(burst).await?;
        let claim_ms = ms(began.elapsed());
        let left = self.still_due(left).await;
        let count = claimed.len();
        let created_from = Instant::now();
        let started = self.create_burst_tasks(claimed).await?;
        let create_ms = ms(created_from.elapsed());
        let recorded_from = Instant::now();
        let fired = self.record_burst_runs(started).await?;
        // Where a late burst's time went (the fire-time error is roughly their sum).
        tracing::info!(
            jobs = count,
            read_ms = ms(lead.read),
            split_ms = ms(lead.split),
            claim_ms,
            create_ms,
            record_ms = ms(recorded_from.elapsed()),
            "job burst fired"
        );
        for started in fired {
            tracing::info!(job = %started.job.id, outcome = "fired", task = %started.task.id(),
                run = started.run_id, reason = "schedule", "job firing");
            self.count_firing(
                hermes_store::RunOutcome::Fired,
                1,
                Some(started.scheduled_at),
            );
            let me = self.clone();
            self.spawn(async move { me.finish(started).await });
        }
        Ok((count, left))
    }

    /// Claim the burst's jobs in one statement: those claimed with their claims, and the
    /// others.
    async fn claim_burst(
        &self,
        burst: Vec<(Job, BurstClaim)>,
    ) -> Result<(Vec<(Job, BurstClaim)>, Vec<Job>), StoreError> {
        let claims: Vec<BurstClaim> = burst.iter().map(|(_, c)| c.clone()).collect();
        let claimed: HashSet<String> = self
            .inner
            .store
            .jobs()
            .claim_burst(&claims)
            .await?
            .into_iter()
            .collect();
        let (claimed, left): (Vec<_>, Vec<_>) = burst
            .into_iter()
            .partition(|(job, _)| claimed.contains(&job.id));
        Ok((claimed, left.into_iter().map(|(job, _)| job).collect()))
    }

    /// The claimed jobs' tasks, created together; a job whose task could not be created is
    /// unlocked and its run recorded failed.
    async fn create_burst_tasks(
        &self,
        claimed: Vec<(Job, BurstClaim)>,
    ) -> Result<Vec<(Job, BurstClaim, Box<dyn JobTask>)>, StoreError> {
        let jobs: Vec<Job> = claimed.iter().map(|(job, _)| job.clone()).collect();
        // Per job, its task or the words its failed run will record.
        let tasks: Vec<Result<_, String>> = match self.inner.runner.create_many(&jobs).await {
            Ok(tasks) => tasks
                .into_iter()
                .map(|t| t.map_err(|e| e.to_string()))
                .collect(),
            // Nothing was created: every job's firing fails with the same words.
            Err(e) => jobs.iter().map(|_| Err(e.to_string())).collect(),
        };
        let mut started = Vec::with_capacity(claimed.len());
        for ((job, claim), task) in claimed.into_iter().zip(tasks) {
            match task {
                Ok(task) => started.push((job, claim, task)),
                Err(e) => {
                    let store = &self.inner.store;
                    store.jobs().release_lock(&job.id, &claim.holder).await?;
                    let reason = format!("could not create the task: {e}");
                    self.record_failed_start(&job, claim.due, reason).await?;
                }
            }
        }
        Ok(started)
    }

    /// Record the started jobs' runs `fired` in one statement: each job's firing, to finish as
    /// the one-job path does. When the runs cannot be recorded, the tasks are ended unrun.
    async fn record_burst_runs(
        &self,
        started: Vec<(Job, BurstClaim, Box<dyn JobTask>)>,
    ) -> Result<Vec<Started>, StoreError> {
        let store = &self.inner.store;
        let pairs: Vec<(BurstClaim, String)> = started
            .iter()
            .map(|(_, claim, task)| (claim.clone(), task.id().to_string()))
            .collect();
        let runs: HashMap<String, i64> = match store.jobs().start_burst(&pairs).await {
            Ok(runs) => runs.into_iter().collect(),
            Err(e) => {
                // The tasks exist; without run rows nothing would deliver their answers or
                // record their end: end them unrun, and free the jobs rather than leave them
                // locked until a restart.
                let why = super::fire::abandoned(&e);
                for (job, claim, task) in started {
                    let task_id = task.id().to_string();
                    task.abandon(why.clone()).await;
                    let _ = store.jobs().release_lock(&job.id, &claim.holder).await;
                    let _ = store.jobs().release_lock(&job.id, &task_id).await;
                }
                return Err(e);
            }
        };
        let mut fired = Vec::with_capacity(started.len());
        for (job, claim, task) in started {
            let Some(&run_id) = runs.get(&job.id) else {
                tracing::error!(job = %job.id, task = %task.id(), "the burst recorded no run for this job");
                continue;
            };
            fired.push(Started {
                job,
                run_id,
                task,
                scheduled_at: claim.due,
                looks: None,
            });
        }
        Ok(fired)
    }
}

impl Scheduler {
    /// Of the jobs a burst did not claim, those still due as they were (their previous run
    /// holds the lock), read back in one query. The others were claimed by another node on
    /// the same database: handing each to the one-job path would cost a read and a failed
    /// claim per job, a thousand of them per node when nodes race for a burst.
    /// The burst's claims are made by now: a failed read hands every job on, as before.
    async fn still_due(&self, left: Vec<Job>) -> Vec<Job> {
        if left.is_empty() {
            return left;
        }
        let jobs = match self.inner.store.jobs().list().await {
            Ok(jobs) => jobs,
            Err(e) => {
                tracing::warn!(error = %e, "cannot re-read the jobs a burst left; each is tried alone");
                return left;
            }
        };
        let now: HashMap<String, Option<DateTime<Utc>>> =
            jobs.into_iter().map(|j| (j.id, j.next_run_at)).collect();
        left.into_iter()
            .filter(|job| now.get(&job.id) == Some(&job.next_run_at))
            .collect()
    }
}

/// The claim of a job that fires on time with nothing missed and no precheck; `None` for any
/// other job.
fn plain_claim(job: &Job, now: DateTime<Utc>, node: Option<&str>) -> Option<BurstClaim> {
    if job.precheck.is_some() || !job.enabled {
        return None;
    }
    let due = job.next_run_at?;
    if now - due > LOOP_SLACK {
        return None;
    }
    let schedule = ZonedSchedule::parse(&job.schedule, &job.timezone, due).ok()?;
    let (count, last) = schedule.due_times(due, now, 2);
    if count != 1 || last != due {
        return None;
    }
    Some(BurstClaim {
        job_id: job.id.clone(),
        due,
        next: schedule.next_due(now),
        holder: firing_token(node),
    })
}
