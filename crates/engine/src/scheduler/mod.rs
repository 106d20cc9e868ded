//! The scheduler: persisted jobs whose firings become fresh tasks.
//!
//! Owns: validating new jobs (schedule, zone, limits, channels, nesting) and their views
//! (`jobs`), computing fire times (`schedule`), the timer loop and the restore at start
//! (`timer`), and the one code path that turns a due time into a recorded firing (`fire`). Every job and every firing lives in the
//! store — `jobs.next_run_at` (UTC, with the job's zone name beside it) is the only schedule
//! state; RAM holds nothing that a restart would miss.
//! Must not: keep state only in RAM; run a task itself (it goes through [`TaskRunner`], which
//! the agent implements) or send a notice itself (it goes through [`Deliver`], over the
//! notifier's outbox); write SQL (the store's, `hermes_store`, does).
//!
//! Why not tokio-cron-scheduler: it keeps a zone's UTC offset from the moment a job is created,
//! so jobs drift by an hour across DST (upstream issues #87, #107), and it holds its jobs in
//! RAM. Instead the loop sleeps (`tokio::time::sleep_until`) until the earliest `next_run_at`
//! in the store — at most [`RESCAN`] so a job added by another process on the same database
//! is picked up — and [`Scheduler::wake`] cuts the sleep short when a job is added or removed.
//! Fire times come from croner + chrono-tz, evaluated in the job's zone at each firing, so a
//! DST change or a restart never shifts them.
//!
//! Firing, the same for the timer, the catch-up at start and "run now":
//! 1. claim: `store.jobs().claim_run(id, due, next)` moves `next_run_at` on before anything runs, so two
//!    firers (two processes, a crash and a restart) can never both run one due time;
//! 2. the run lock: a job whose previous run still holds it is recorded `skipped`
//!    ("previous run still running");
//! 3. the precheck (if the job has one, not for "run now"): a result with `"changed": false`
//!    is recorded `skipped` ("precheck: no change") — no task, no model call;
//! 4. a brand-new task (origin `job`) is created, the run recorded `fired` with its id, run
//!    to its end in the background, and the run row updated: its answer goes to the job's
//!    channels (`delivery` = `queued`, or `failed: …`), an answer of exactly `[SILENT]` is not
//!    sent (`silent`), a failed task makes the run `failed` and — with
//!    `scheduler.notify_on_failure` — sends a short failure notice.
//!
//! One-shots get `next_run_at = NULL` when claimed and stay listed with their runs until
//! removed, so what happened to them stays visible.
//!
//! Call [`Scheduler::start`] once per process. Without it (the CLI with no daemon), `add`,
//! `remove`, `list` and `run_now` work alike; nothing fires by itself.
//!
//! Missed runs (daemon down, machine asleep): of the due times that passed, only the latest
//! may still run — once, as a `catch-up` — and only if it is within `catch_up_grace_s`; all the
//! others become ONE `missed` row ("daemon was down: N runs between X and Y").

mod burst;
mod fire;
mod jobs;
mod precheck;
mod report;
pub mod schedule;
mod timer;
pub mod words;

pub use jobs::{PREVIEW_FIRINGS, describe_job, upcoming};
pub use jobs::{SchedulePreview, next_after_pause};
pub(crate) use schedule::parse_timezone;
pub use schedule::{Schedule, ScheduleError, ZonedSchedule, example_time};

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use hermes_config::SchedulerSettings;
use hermes_store::util::{configure, lock};
use hermes_store::{Job, JobRun, NewNotice, Store, StoreError, Task};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The longest the loop sleeps without looking at the store again: jobs written by another
/// process (the CLI on the same database) are picked up within this time.
pub(crate) const RESCAN: Duration = Duration::from_secs(30);

/// Creates a firing's task. Implemented by the agent (a brand-new task from the job's text,
/// origin "job", job_id set — no earlier messages), which also decides where it runs.
pub trait TaskRunner: Send + Sync {
    /// Create the task (not yet running) and hand it back to be run or abandoned.
    fn create<'a>(&'a self, job: &'a Job) -> BoxFuture<'a, Result<Box<dyn JobTask>, RunnerError>>;
    /// [`TaskRunner::create`] for a burst of jobs due at once, in their order; a runner that
    /// can store them in one go should.
    fn create_many<'a>(&'a self, jobs: &'a [Job]) -> BoxFuture<'a, CreatedMany> {
        Box::pin(async move {
            let mut tasks = Vec::with_capacity(jobs.len());
            for job in jobs {
                tasks.push(self.create(job).await);
            }
            Ok(tasks)
        })
    }
    /// A firing's task that outlived the process which started it — it waits for a person, and
    /// its wait survives restarts —, to be waited for to its end like a fresh one.
    fn follow(&self, task_id: &str) -> Result<Box<dyn JobTask>, RunnerError>;
    /// Run one tool call without the model (a precheck): the tool's result JSON.
    fn precheck<'a>(
        &'a self,
        tool: &'a str,
        arguments: Value,
        job: &'a Job,
    ) -> BoxFuture<'a, Result<Value, RunnerError>>;
    /// Would a precheck call be accepted (the tool exists and is allowed, the arguments fit
    /// its schema)? Asked when a job is made, so a typo is refused then, not at every firing.
    fn check_precheck<'a>(
        &'a self,
        tool: &'a str,
        arguments: &'a Value,
    ) -> BoxFuture<'a, Result<(), RunnerError>>;
}

/// What [`TaskRunner::create_many`] gives back: per job, in order, its task or why it was not
/// created; the outer error when none was.
pub(crate) type CreatedMany = Result<Vec<Result<Box<dyn JobTask>, RunnerError>>, RunnerError>;

/// A firing's task, created and not yet run.
pub trait JobTask: Send {
    fn id(&self) -> &str;
    /// Run it to a final state and return it.
    fn run(self: Box<Self>) -> BoxFuture<'static, Result<Task, RunnerError>>;
    /// End it without running it: its firing could not be recorded, so nothing would deliver
    /// its answer or free its job when it ended. `why` goes in its error.
    fn abandon(self: Box<Self>, why: String) -> BoxFuture<'static, ()>;
}

/// Why a firing's task could not be created or run, or its precheck not run.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    #[error("the daemon is shutting down and takes no new tasks")]
    ShuttingDown,
    /// The agent took the request and stopped before answering it.
    #[error(
        "the agent stopped before answering (it is shutting down, or the work crashed: see the \
         log); the job's next firing tries again"
    )]
    Unanswered,
    /// The agent refused the task; its words say why and what to change.
    #[error("{0}")]
    Refused(String),
    /// The precheck's tool refused the call or failed; its words say why.
    #[error("{0}")]
    Tool(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Delivers a finished run. Implemented over the notifier's outbox.
pub trait Deliver: Send + Sync {
    /// Queue a notice (linked to its job run); returns the outbox id.
    fn deliver(&self, notice: NewNotice) -> BoxFuture<'_, Result<i64, DeliverError>>;
    /// The configured channel names (`email`, webhook names).
    fn channels(&self) -> Vec<String>;
}

/// Why a notice could not be queued.
#[derive(Debug, thiserror::Error)]
pub enum DeliverError {
    /// The channel is not (or no longer) configured; its words name the configured ones.
    #[error("{0}")]
    UnknownChannel(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Wall-clock "now" for every schedule decision; injectable so tests control time.
pub trait Clock: Send + Sync {
    fn now(&self) -> DateTime<Utc>;
}

/// The real clock.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A new job, the one shape for every way in: the model's `schedule_task` arguments, the
/// API's `POST /v1/jobs` body and `hermes-agent jobs add`'s flags. [`Scheduler::add`] checks
/// it; nothing in front of it does the same checks again.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct JobRequest {
    /// What to do at each firing: a self-contained task (a fresh task runs it each time).
    pub task: String,
    /// 5-field cron ("0 8 * * *"), an interval ("every 2h") or a one-shot ("in 30m", ISO 8601).
    pub schedule: String,
    /// A short name, used in notice titles (default: the start of the task).
    #[serde(default)]
    pub name: Option<String>,
    /// IANA time zone (default: scheduler.timezone).
    #[serde(default)]
    pub timezone: Option<String>,
    /// Channel to deliver the answer to ("email" or a webhook name); repeatable.
    #[serde(default)]
    pub notify: Vec<String>,
    /// Model profile for the runs (default: model.default_profile).
    #[serde(default)]
    pub profile: Option<String>,
    /// A tool call run before each firing, without the model, as JSON:
    /// '{"tool": "watch_page", "arguments": {"url": "https://…"}}'. When it reports
    /// `"changed": false` the run is skipped and no tokens are spent.
    #[serde(default)]
    pub precheck: Option<Value>,
    /// Tools (globs) whose calls the firings may make without asking a person: a person's
    /// decision, refused from the model (`schedule_task` has no such field).
    #[serde(default)]
    pub pre_approved: Vec<String>,
}

/// A job as the API, the CLI and the model see it (the contract's job object): the stored job
/// and its newest run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct JobView {
    #[serde(flatten)]
    pub job: Job,
    /// The newest run, or null.
    pub last_run: Option<JobRun>,
}

/// A view reads as the job it shows (`view.id`, `view.next_run_at`).
impl std::ops::Deref for JobView {
    type Target = Job;
    fn deref(&self) -> &Job {
        &self.job
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
    #[error("{0}")]
    Invalid(String),
    #[error("the task has {chars} characters; the limit is {max}")]
    TaskTooLong { chars: usize, max: usize },
    #[error(
        "the limit of {max} jobs is reached (scheduler.max_jobs); cancel a job first (cancel_schedule, `hermes-agent jobs rm ID` or DELETE /v1/jobs/ID)"
    )]
    TooManyJobs { max: u32 },
    #[error("unknown notify channel '{channel}'; configured channels: {}", known_list(.known))]
    UnknownChannel { channel: String, known: Vec<String> },
    #[error(
        "a task started by a scheduled job cannot create jobs (scheduler.allow_nested is off); do the work in this run instead"
    )]
    NestedNotAllowed,
    #[error("job '{0}' not found; list the jobs to see their ids")]
    NotFound(String),
    #[error(
        "job '{job_id}' is still running task {task_id}; wait for it to finish, then run it again"
    )]
    Busy { job_id: String, task_id: String },
    #[error("could not start the job's task: {0}")]
    Runner(#[from] RunnerError),
    /// "Run now" could not start the run; the reason is the one recorded in its run row.
    #[error("{0}")]
    NotStarted(String),
    #[error(transparent)]
    Store(StoreError),
}

fn known_list(known: &[String]) -> String {
    if known.is_empty() {
        "none (configure notify.email or notify.webhooks)".to_string()
    } else {
        known.join(", ")
    }
}

impl From<StoreError> for SchedulerError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound { what: "job", id } => SchedulerError::NotFound(id),
            other => SchedulerError::Store(other),
        }
    }
}

/// The scheduler handle: cheap to clone, shared by the daemon, the API, the CLI and the
/// schedule tools.
#[derive(Clone)]
pub struct Scheduler {
    inner: Arc<Inner>,
}

struct Inner {
    settings: SchedulerSettings,
    store: Store,
    runner: Arc<dyn TaskRunner>,
    deliver: Arc<dyn Deliver>,
    clock: Arc<dyn Clock>,
    /// Cuts the loop's sleep short: a job was added or removed.
    wake: Notify,
    /// Serialises `add` so two concurrent adds cannot both pass the `max_jobs` check.
    adding: tokio::sync::Mutex<()>,
    /// The daemon's tracker once `start` ran: background runs are spawned on it, so a
    /// shutdown waits for them. Before that (CLI in-process), plain `tokio::spawn`.
    tracker: Mutex<Option<TaskTracker>>,
    /// Cancelled when the daemon stops (`start`'s token): a firing whose task waits for a person
    /// then stops waiting, and the next start follows it ([`Scheduler::restore`]).
    stopping: Mutex<Option<CancellationToken>>,
    /// Firings in flight in this process, for `wait_idle`.
    inflight: watch::Sender<usize>,
    /// Model profiles a job may name; empty means "not checked here".
    profiles: Vec<String>,
    /// The dashboard's address from outside (`server.public_url`), for the links in a
    /// digest's footer ([`Scheduler::with_public_url`]); empty: no links.
    public_url: String,
    /// Where firings and their lateness are counted ([`Scheduler::with_metrics`]).
    metrics: crate::metrics::Metrics,
}

impl Scheduler {
    pub fn new(
        settings: SchedulerSettings,
        store: Store,
        runner: Arc<dyn TaskRunner>,
        deliver: Arc<dyn Deliver>,
    ) -> Scheduler {
        Scheduler::with_clock(settings, store, runner, deliver, Arc::new(SystemClock))
    }

    /// As [`Scheduler::new`], with a chosen clock (tests).
    pub fn with_clock(
        settings: SchedulerSettings,
        store: Store,
        runner: Arc<dyn TaskRunner>,
        deliver: Arc<dyn Deliver>,
        clock: Arc<dyn Clock>,
    ) -> Scheduler {
        Scheduler {
            inner: Arc::new(Inner {
                settings,
                store,
                runner,
                deliver,
                clock,
                wake: Notify::new(),
                adding: tokio::sync::Mutex::new(()),
                tracker: Mutex::new(None),
                stopping: Mutex::new(None),
                inflight: watch::Sender::new(0),
                profiles: Vec::new(),
                public_url: String::new(),
                metrics: Default::default(),
            }),
        }
    }

    /// Check the `profile` of new jobs against these names, so a typo is refused when the job
    /// is made instead of failing every firing. Call right after construction.
    pub fn with_profiles(mut self, names: Vec<String>) -> Scheduler {
        configure(&mut self.inner, |inner| inner.profiles = names);
        self
    }

    /// Link digests to the dashboard at `url` (`server.public_url`); empty: no links. Call
    /// right after construction.
    pub fn with_public_url(mut self, url: &str) -> Scheduler {
        configure(&mut self.inner, |inner| {
            inner.public_url = url.trim().to_string()
        });
        self
    }

    /// Count firings by outcome, and how late they fired, in `metrics`. Call right after
    /// construction.
    pub fn with_metrics(mut self, metrics: crate::metrics::Metrics) -> Scheduler {
        configure(&mut self.inner, |inner| inner.metrics = metrics);
        self
    }

    pub fn settings(&self) -> &SchedulerSettings {
        &self.inner.settings
    }

    /// The configured delivery channels (for tool descriptions and validation messages).
    pub fn channels(&self) -> Vec<String> {
        self.inner.deliver.channels()
    }

    /// Fire a job now, whatever its schedule (its `next_run_at` is left alone, and no
    /// precheck gates it: the user asked for this run). Records a `fired` run, returns the new
    /// task's id at once and runs it in the background. Works with or without the loop.
    pub async fn run_now(&self, id: &str) -> Result<String, SchedulerError> {
        let started = self.begin_now(id).await?;
        let task_id = started.task.id().to_string();
        let me = self.clone();
        self.spawn(async move {
            me.finish(started).await;
        });
        Ok(task_id)
    }

    /// As [`Scheduler::run_now`], but runs the task and its delivery to the end here and
    /// returns the final run row (the CLI's `jobs run` without a daemon).
    pub async fn run_now_wait(&self, id: &str) -> Result<JobRun, SchedulerError> {
        let started = self.begin_now(id).await?;
        let (job_id, run_id) = (started.job.id.clone(), started.run_id);
        self.finish(started).await;
        let runs = self.inner.store.jobs().runs(&job_id, 50).await?;
        runs.into_iter()
            .find(|r| r.id == run_id)
            .ok_or_else(|| SchedulerError::NotFound(job_id))
    }

    /// Restore and start: record runs a crash interrupted, clear the run locks it left,
    /// handle the due times missed while down (one catch-up at most per job), then spawn the
    /// timer loop on `tracker`; it stops when `cancel` fires.
    pub async fn start(
        &self,
        tracker: &TaskTracker,
        cancel: CancellationToken,
    ) -> Result<(), SchedulerError> {
        *lock(&self.inner.tracker) = Some(tracker.clone());
        *lock(&self.inner.stopping) = Some(cancel.clone());
        self.restore().await?;
        let me = self.clone();
        tracker.spawn(async move { me.run_loop(cancel).await });
        Ok(())
    }

    /// Make the loop look at the store now (a job was added or removed).
    pub fn wake(&self) {
        self.inner.wake.notify_one();
    }

    /// One pass of the loop: fire every job due at the clock's now. Returns how many due
    /// times this call claimed (a claim lost to another firer is not counted).
    pub async fn tick(&self) -> Result<usize, SchedulerError> {
        let now = self.inner.clock.now();
        let began = std::time::Instant::now();
        let due: Vec<Job> = self.inner.store.jobs().due(now).await?;
        let read = began.elapsed();
        let (burst, mut rest) = self.split_burst(due, now);
        let mut claimed = 0;
        if !burst.is_empty() {
            let ids: Vec<Job> = burst.iter().map(|(job, _)| job.clone()).collect();
            let lead = burst::Lead {
                read,
                split: began.elapsed() - read,
            };
            match self.fire_burst(burst, lead).await {
                Ok((fired, left)) => {
                    claimed += fired;
                    rest.extend(left);
                }
                // What the burst did not finish is still due or locked as it was: the one-job
                // path takes every job of it again.
                Err(e) => {
                    tracing::error!(error = %e, jobs = ids.len(), "a burst of firings failed; firing them one by one");
                    rest.extend(ids);
                }
            }
        }
        for job in rest {
            let id = job.id.clone();
            // One job's failure must not keep the jobs after it from firing.
            match self.handle_due(job, now, false).await {
                Ok(true) => claimed += 1,
                Ok(false) => {}
                Err(e) => {
                    tracing::error!(job = %id, error = %e, "could not fire the job; will try again")
                }
            }
        }
        Ok(claimed)
    }

    /// Wait until every firing this process started has finished and been recorded.
    pub async fn wait_idle(&self) {
        let mut rx = self.inner.inflight.subscribe();
        // The sender lives in `inner`, which `self` keeps alive: this cannot fail.
        let _ = rx.wait_for(|n| *n == 0).await;
    }

    /// Run `fut` in the background, counted in `inflight`, on the daemon's tracker if any.
    fn spawn<F>(&self, fut: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.inner.inflight.send_modify(|n| *n += 1);
        let guard = InflightGuard(self.clone());
        let fut = async move {
            fut.await;
            drop(guard);
        };
        let tracker = lock(&self.inner.tracker).clone();
        match tracker {
            Some(t) => {
                t.spawn(fut);
            }
            None => {
                tokio::spawn(fut);
            }
        }
    }
}

/// Decrements `inflight` when a background firing ends — even by panic.
struct InflightGuard(Scheduler);

impl Drop for InflightGuard {
    fn drop(&mut self) {
        self.0
            .inner
            .inflight
            .send_modify(|n| *n = n.saturating_sub(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_channels_say_how_to_configure_one() {
        let e = SchedulerError::UnknownChannel {
            channel: "sms".into(),
            known: vec![],
        };
        assert!(e.to_string().contains("configure notify.email"), "{e}");
    }
}
