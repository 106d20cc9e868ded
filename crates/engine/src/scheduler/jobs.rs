//! Job bookkeeping on the scheduler handle: validating and adding jobs, removing them, and
//! the views the API, the CLI and the tools show. Firing is in `fire`, the loop in `timer`.

use super::schedule::ZonedSchedule;
use super::{JobRequest, JobView, Scheduler, SchedulerError, words};
use chrono::{DateTime, Utc};
use hermes_store::{Job, JobRun, MAX_TASK_CHARS, NewJob, Origin, PauseReason};
use serde::Serialize;
use serde_json::Value;

/// How many firings a preview lists.
pub const PREVIEW_FIRINGS: usize = 5;

/// A schedule checked as a new job's would be, without creating anything: the answer of
/// `GET /v1/schedule` and the dashboard's preview as you type.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SchedulePreview {
    pub valid: bool,
    /// Why the schedule cannot be used, and how to write it instead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// In words, e.g. "every day at 08:00"; empty when invalid.
    pub description: String,
    /// The zone the times are in.
    pub timezone: String,
    /// The next firings, RFC 3339 in the job's zone.
    pub next: Vec<String>,
}

impl Scheduler {
    /// Validate and persist a new job; `origin` is who asked. [`Origin::Job`] (a task started
    /// by a job) is refused unless `scheduler.allow_nested`.
    pub async fn add(&self, req: JobRequest, origin: Origin) -> Result<Job, SchedulerError> {
        let settings = &self.inner.settings;
        self.check_origin(&req, origin)?;
        let pre_approved = check_globs(&req.pre_approved)?;
        let task = task_text(&req.task)?;
        let zone = req
            .timezone
            .as_deref()
            .map(str::trim)
            .filter(|z| !z.is_empty())
            .unwrap_or(&settings.timezone);
        let now = self.inner.clock.now();
        let (schedule, first) =
            ZonedSchedule::validate(&req.schedule, zone, now, settings.min_interval_s)?;
        let notify = self.check_channels(&req.notify)?;
        if let Some(p) = &req.precheck {
            self.check_precheck_runs(p).await?;
        }
        self.check_profile(req.profile.as_deref())?;
        let name = match req.name.as_deref().map(str::trim) {
            Some(n) if !n.is_empty() => n.to_string(),
            _ => default_name(task),
        };
        let new = NewJob {
            name,
            task: task.to_string(),
            schedule: req.schedule.trim().to_string(),
            timezone: schedule.zone().to_string(),
            notify,
            profile: req
                .profile
                .map(|p| p.trim().to_string())
                .filter(|p| !p.is_empty()),
            origin,
            precheck: req.precheck,
            next_run_at: Some(first),
            pre_approved,
        };
        let job = {
            let _one_at_a_time = self.inner.adding.lock().await;
            let max = settings.max_jobs;
            if self.inner.store.jobs().count().await? >= i64::from(max) {
                return Err(SchedulerError::TooManyJobs { max });
            }
            self.inner.store.jobs().create(&new).await?
        };
        tracing::info!(job = %job.id, name = %job.name, schedule = %job.schedule,
            timezone = %job.timezone, %origin, next_run_at = %first, "job created");
        self.wake();
        Ok(job)
    }

    /// Who may ask for what: a job's task makes no job unless `scheduler.allow_nested`, and
    /// approving calls in advance is a person's decision, never a model's.
    fn check_origin(&self, req: &JobRequest, origin: Origin) -> Result<(), SchedulerError> {
        if origin == Origin::Job && !self.inner.settings.allow_nested {
            return Err(SchedulerError::NestedNotAllowed);
        }
        if matches!(
            origin,
            Origin::Model | Origin::Job | Origin::Agent | Origin::Mcp
        ) && !req.pre_approved.is_empty()
        {
            return Err(SchedulerError::Invalid(
                "pre_approved can only be set by a person (the API, the CLI, the dashboard)".into(),
            ));
        }
        Ok(())
    }

    /// A precheck of the right shape that the runner would run with no model and no person.
    async fn check_precheck_runs(&self, precheck: &Value) -> Result<(), SchedulerError> {
        check_precheck(precheck)?;
        let tool = precheck
            .get("tool")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let args = precheck
            .get("arguments")
            .cloned()
            .unwrap_or_else(|| Value::Object(Default::default()));
        self.inner
            .runner
            .check_precheck(tool, &args)
            .await
            .map_err(|why| SchedulerError::Invalid(format!("the precheck cannot run: {why}")))
    }

    /// The channels named, each configured, without repeats.
    fn check_channels(&self, names: &[String]) -> Result<Vec<String>, SchedulerError> {
        let known = self.inner.deliver.channels();
        let mut notify: Vec<String> = Vec::new();
        for channel in names.iter().map(|c| c.trim()) {
            if !known.iter().any(|k| k == channel) {
                return Err(SchedulerError::UnknownChannel {
                    channel: channel.to_string(),
                    known,
                });
            }
            if !notify.iter().any(|c| c == channel) {
                notify.push(channel.to_string());
            }
        }
        Ok(notify)
    }

    /// A profile named for the runs must exist, so a typo is refused now rather than failing
    /// every firing.
    fn check_profile(&self, profile: Option<&str>) -> Result<(), SchedulerError> {
        let profiles = &self.inner.profiles;
        match profile.filter(|p| !p.is_empty()) {
            Some(p) if !profiles.is_empty() && !profiles.iter().any(|k| k == p) => {
                Err(SchedulerError::Invalid(format!(
                    "unknown model profile '{p}'; defined profiles: {}",
                    profiles.join(", ")
                )))
            }
            _ => Ok(()),
        }
    }

    /// Delete a job and its run history; false when there was no such job. A run in progress
    /// finishes, but is not delivered, and the job never fires again.
    pub async fn remove(&self, id: &str) -> Result<bool, SchedulerError> {
        let removed = self.inner.store.jobs().delete(id).await?;
        if removed {
            tracing::info!(job = %id, "job removed");
            self.wake();
        }
        Ok(removed)
    }

    /// Every job, oldest first, with its newest run.
    pub async fn list(&self) -> Result<Vec<JobView>, SchedulerError> {
        let jobs = self.inner.store.jobs().list().await?;
        let mut views = Vec::with_capacity(jobs.len());
        for job in jobs {
            views.push(self.view(job).await?);
        }
        Ok(views)
    }

    /// One job as a view.
    pub async fn get(&self, id: &str) -> Result<JobView, SchedulerError> {
        let job = self.inner.store.jobs().get(id).await?;
        self.view(job).await
    }

    /// A stored job as the contract's job object (adds its newest run).
    pub async fn view(&self, job: Job) -> Result<JobView, SchedulerError> {
        let last_run = self
            .inner
            .store
            .jobs()
            .runs(&job.id, 1)
            .await?
            .into_iter()
            .next();
        Ok(JobView { job, last_run })
    }

    /// A job's runs, newest first (`limit` ≤ 0 means 50).
    pub async fn runs(&self, id: &str, limit: i64) -> Result<Vec<JobRun>, SchedulerError> {
        self.inner.store.jobs().get(id).await?;
        Ok(self.inner.store.jobs().runs(id, limit).await?)
    }
}

// Pausing, previews and the digest footer.
impl Scheduler {
    /// Check `expr` in `timezone` (default: scheduler.timezone) at the clock's now, exactly as
    /// [`Scheduler::add`] would, and list its next firings.
    pub fn preview(&self, expr: &str, timezone: Option<&str>) -> SchedulePreview {
        let settings = &self.inner.settings;
        let zone = timezone
            .map(str::trim)
            .filter(|z| !z.is_empty())
            .unwrap_or(&settings.timezone);
        let invalid = |e: String, zone: &str| SchedulePreview {
            valid: false,
            error: Some(e),
            description: String::new(),
            timezone: zone.to_string(),
            next: Vec::new(),
        };
        let now = self.inner.clock.now();
        let (schedule, first) =
            match ZonedSchedule::validate(expr, zone, now, settings.min_interval_s) {
                Ok(v) => v,
                // The zone's canonical name when only the schedule is wrong.
                Err(e) => {
                    let zone = super::parse_timezone(zone).map_or(zone, |tz| tz.name());
                    return invalid(e.to_string(), zone);
                }
            };
        let next = schedule
            .firings(first, PREVIEW_FIRINGS)
            .into_iter()
            .map(|t| schedule.local(t).to_rfc3339())
            .collect();
        SchedulePreview {
            valid: true,
            error: None,
            description: words::describe(expr, &schedule),
            timezone: schedule.zone().to_string(),
            next,
        }
    }

    /// Stop a job firing until it is resumed; its runs and settings stay.
    pub async fn pause(&self, id: &str) -> Result<Job, SchedulerError> {
        self.pause_for(id, PauseReason::Person).await
    }

    /// [`Scheduler::pause`], saying why (shown on the job).
    pub async fn pause_for(&self, id: &str, reason: PauseReason) -> Result<Job, SchedulerError> {
        let job = self.inner.store.jobs().get(id).await?;
        self.inner
            .store
            .jobs()
            .set_enabled(id, Some(reason), job.next_run_at)
            .await?;
        tracing::info!(job = %id, reason = %reason, "job paused");
        self.wake();
        Ok(self.inner.store.jobs().get(id).await?)
    }

    /// Let a paused job fire again, from its next due time after now: the due times that
    /// passed while it was paused are neither run nor recorded missed (pausing said so). A
    /// one-shot whose time passed while paused has no next time.
    pub async fn resume(&self, id: &str) -> Result<Job, SchedulerError> {
        let job = self.inner.store.jobs().get(id).await?;
        let next = self.resumed_next_run(&job);
        self.inner.store.jobs().set_enabled(id, None, next).await?;
        tracing::info!(job = %id, next_run_at = ?next, "job resumed");
        self.wake();
        Ok(self.inner.store.jobs().get(id).await?)
    }

    /// The next due time of `job` if it were resumed now (see [`next_after_pause`]). Written by
    /// [`Scheduler::resume`], and by whoever resumes a job in a transaction of its own (a
    /// reply by email); either then calls [`Scheduler::wake`].
    pub fn resumed_next_run(&self, job: &Job) -> Option<DateTime<Utc>> {
        next_after_pause(job, self.inner.clock.now())
    }

    /// The footer of a run's answer (see [`words::digest_footer`]), with the job's next run as
    /// stored now (the firing has already moved it on).
    pub(crate) async fn digest_footer(&self, job: &Job, task_id: &str) -> String {
        use words::NextRun;
        let next = match self.inner.store.jobs().get(&job.id).await {
            Ok(j) if !j.enabled => NextRun::Paused,
            Ok(Job {
                next_run_at: Some(t),
                ..
            }) => NextRun::At(words::in_zone(t, &job.timezone)),
            _ => NextRun::Never,
        };
        let url = self.inner.public_url.as_str();
        words::digest_footer(&job.name, &job.id, task_id, next, url)
    }
}

/// When a paused job resumed at `now` fires next: its stored due time if still ahead, else the
/// next one after now (anchored at the last due time, so an interval keeps its phase); `None`
/// for a one-shot whose time passed. For whoever resumes a job without a `Scheduler` at hand
/// (an eval in another process): the daemon's timer reads the stored time within 30 s.
pub fn next_after_pause(job: &Job, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    match job.next_run_at {
        Some(t) if t > now => Some(t),
        stored => ZonedSchedule::parse(
            &job.schedule,
            &job.timezone,
            stored.unwrap_or(job.created_at),
        )
        .ok()
        .and_then(|s| s.next_due(now)),
    }
}

/// A job's next `n` firings from its stored next due time, in UTC; none while it is paused
/// or when its schedule no longer parses.
pub fn upcoming(job: &Job, n: usize) -> Vec<DateTime<Utc>> {
    let (Some(first), true) = (job.next_run_at, job.enabled) else {
        return Vec::new();
    };
    ZonedSchedule::parse(&job.schedule, &job.timezone, first)
        .map(|s| s.firings(first, n))
        .unwrap_or_default()
}

/// A stored job's schedule in words with its zone, e.g. "every day at 08:00 (Europe/Berlin)".
pub fn describe_job(job: &Job) -> String {
    match ZonedSchedule::parse(&job.schedule, &job.timezone, job.created_at) {
        Ok(s) => format!("{} ({})", words::describe(&job.schedule, &s), s.zone()),
        Err(_) => format!("'{}' ({})", job.schedule, job.timezone),
    }
}

fn check_precheck(p: &Value) -> Result<(), SchedulerError> {
    let ok = p
        .get("tool")
        .and_then(Value::as_str)
        .is_some_and(|t| !t.trim().is_empty())
        && p.get("arguments").is_none_or(Value::is_object);
    if ok {
        Ok(())
    } else {
        Err(SchedulerError::Invalid(
            "precheck must be {\"tool\": NAME, \"arguments\": {...}}".into(),
        ))
    }
}

/// A job's task, trimmed: something to do, and not longer than any task may be.
fn task_text(task: &str) -> Result<&str, SchedulerError> {
    let task = task.trim();
    if task.is_empty() {
        return Err(SchedulerError::Invalid(
            "the task is empty; say what the job should do at each firing".into(),
        ));
    }
    let chars = task.chars().count();
    if chars > MAX_TASK_CHARS {
        return Err(SchedulerError::TaskTooLong {
            chars,
            max: MAX_TASK_CHARS,
        });
    }
    Ok(task)
}

/// A job without a name is named after the start of its task.
fn default_name(task: &str) -> String {
    const MAX: usize = 48;
    hermes_store::util::text::one_line(task.lines().next().unwrap_or(task), MAX)
}

/// A job's `pre_approved` globs, trimmed, without empty entries or repeats.
fn check_globs(globs: &[String]) -> Result<Vec<String>, SchedulerError> {
    let mut out: Vec<String> = Vec::new();
    for g in globs {
        let g = g.trim();
        if g.is_empty() {
            return Err(SchedulerError::Invalid(
                "pre_approved has an empty entry; give tool names or globs like 'mail_*'".into(),
            ));
        }
        if !out.iter().any(|o| o == g) {
            out.push(g.to_string());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_names_are_short() {
        assert_eq!(default_name("Summarise the news"), "Summarise the news");
        let long = "x".repeat(100);
        assert_eq!(default_name(&long).chars().count(), 48);
        assert_eq!(default_name("first line\nsecond"), "first line");
    }

    #[test]
    fn precheck_shape() {
        let ok = |v| check_precheck(&v).is_ok();
        assert!(ok(
            serde_json::json!({"tool": "watch_page", "arguments": {"url": "x"}})
        ));
        assert!(ok(serde_json::json!({"tool": "watch_page"})));
        assert!(!ok(serde_json::json!({"arguments": {}})));
        assert!(!ok(serde_json::json!({"tool": "t", "arguments": 3})));
    }
}
