//! Usage: model calls, tokens and model time over the last N days — per day, per profile and
//! per job — for `GET /v1/usage`, the dashboard's `/usage` and `hermes-agent usage`.
//!
//! Owns: the window ([`UsageWindow`]: the last N calendar days in a zone, today included) and
//! the sums, read from the model rows of `task_steps` (each model call, a failed one too, is
//! one row: `name` the profile that answered, `request_tokens` the prompt, `result_tokens` the
//! completion, `duration_ms` the time it took) joined to their task (for its job, or its
//! origin when it has none) and job (for its name). Sub-agents' calls count for their parent's
//! job: a sub-agent's task carries the job id of the task that started it.
//! Must not: write anything, or keep figures of its own: every figure is summed from the trace
//! when asked (migration 0011's index keeps that a read of the window's rows alone). Read as
//! `store.tasks().usage(&window)`: the trace it sums is the tasks' aggregate.

use super::aggregates::Tasks;
use super::sql::Builder;
use super::{Origin, Result, query_as};
use chrono::{DateTime, Days, NaiveDate, NaiveTime, TimeDelta, TimeZone as _, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

/// The longest window asked for: a year, leap day included.
pub const MAX_USAGE_DAYS: u32 = 366;
/// The window when none is asked for.
pub const DEFAULT_USAGE_DAYS: u32 = 30;

/// What a set of model calls cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    /// Model calls, failed ones included (they cost time, and no tokens).
    pub calls: i64,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    /// Prompt and completion tokens together.
    pub total_tokens: i64,
    /// The calls' time, summed (calls made at once each count their own).
    pub model_ms: i64,
}

impl Figures {
    fn new(calls: i64, prompt: Option<i64>, completion: Option<i64>, ms: Option<i64>) -> Figures {
        // SUM over no rows is NULL; a group always has rows, but the type says it may not.
        let (prompt, completion) = (prompt.unwrap_or(0), completion.unwrap_or(0));
        Figures {
            calls,
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: prompt.saturating_add(completion),
            model_ms: ms.unwrap_or(0),
        }
    }

    fn add(&mut self, other: &Figures) {
        self.calls += other.calls;
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.total_tokens += other.total_tokens;
        self.model_ms += other.model_ms;
    }

    /// Dearest first: most tokens, then most calls, then most time.
    fn dearest_first(&self, other: &Figures) -> std::cmp::Ordering {
        (other.total_tokens, other.calls, other.model_ms).cmp(&(
            self.total_tokens,
            self.calls,
            self.model_ms,
        ))
    }
}

/// One calendar day of the window, in its zone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DayUsage {
    pub day: NaiveDate,
    #[serde(flatten)]
    pub figures: Figures,
}

/// The calls one profile answered (a fallback's calls count for the fallback).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileUsage {
    pub profile: String,
    #[serde(flatten)]
    pub figures: Figures,
}

/// The calls of one job's tasks; or, with no `job_id`, of the tasks no job started, one row
/// per origin (`cli`, `api`, `web`, …; `agent` for sub-agents of such tasks).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobUsage {
    pub job_id: Option<String>,
    /// `None` for a job deleted since (its tasks keep its id) and for tasks of no job.
    pub job_name: Option<String>,
    /// Who started the tasks, for tasks of no job; `None` for a job's.
    pub origin: Option<Origin>,
    #[serde(flatten)]
    pub figures: Figures,
}

/// Usage over a window: the serialised shape is `GET /v1/usage`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// The window's length in days, today included.
    pub days: u32,
    /// The zone whose calendar days `by_day` counts.
    pub timezone: String,
    /// The window: from the start of its first day to the end of today.
    pub since: DateTime<Utc>,
    pub until: DateTime<Utc>,
    /// Every call of the window: the sum of `by_day` (and of `by_profile`, and of `by_job`).
    pub totals: Figures,
    /// Every day of the window, oldest first, days without calls included.
    pub by_day: Vec<DayUsage>,
    /// Dearest first.
    pub by_profile: Vec<ProfileUsage>,
    /// Dearest first.
    pub by_job: Vec<JobUsage>,
}

/// The last N calendar days in a zone, today included: each day from its local midnight to
/// the next, so a day of a change to or from summer time is 23 or 25 hours long.
#[derive(Debug, Clone)]
pub struct UsageWindow {
    zone: Tz,
    days: Vec<Day>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Day {
    date: NaiveDate,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
}

impl UsageWindow {
    /// The `days` days up to and including the day `now` falls on in `zone`; `days` is held
    /// to `1..=MAX_USAGE_DAYS` (callers refuse other values before; this only keeps the one
    /// statement per reading bounded).
    pub fn last_days(days: u32, zone: Tz, now: DateTime<Utc>) -> UsageWindow {
        let n = days.clamp(1, MAX_USAGE_DAYS);
        let today = now.with_timezone(&zone).date_naive();
        let first = today
            .checked_sub_days(Days::new(u64::from(n - 1)))
            .unwrap_or(today);
        let days = first
            .iter_days()
            .take(n as usize)
            .map(|date| Day {
                date,
                start: start_of_day(date, zone),
                end: date
                    .succ_opt()
                    .map_or(DateTime::<Utc>::MAX_UTC, |next| start_of_day(next, zone)),
            })
            .collect();
        UsageWindow { zone, days }
    }

    fn since(&self) -> DateTime<Utc> {
        self.days
            .first()
            .map_or(DateTime::<Utc>::MIN_UTC, |d| d.start)
    }

    fn until(&self) -> DateTime<Utc> {
        self.days.last().map_or(DateTime::<Utc>::MIN_UTC, |d| d.end)
    }
}

/// The first instant of `date` in `zone`: its midnight, or — where the clocks skip midnight
/// that day (a change to summer time at 00:00, as some zones make) — the first local time
/// after it that exists.
fn start_of_day(date: NaiveDate, zone: Tz) -> DateTime<Utc> {
    let midnight = date.and_time(NaiveTime::MIN);
    // A gap lasts an hour or two; step through it a quarter of an hour at a time.
    for quarter in 0..4 * 24 {
        let local = midnight + TimeDelta::minutes(15 * quarter);
        if let Some(t) = zone.from_local_datetime(&local).earliest() {
            return t.with_timezone(&Utc);
        }
    }
    // No zone skips a whole day's hours; UTC's midnight at least keeps the days in order.
    Utc.from_utc_datetime(&midnight)
}

/// A row of sums under one key: the key, calls, prompt, completion, milliseconds.
type Grouped<K> = (K, i64, Option<i64>, Option<i64>, Option<i64>);
/// A row of [`BY_JOB`]: job id, job name, origin, then the sums.
type JobRow = (
    Option<String>,
    Option<String>,
    Option<Origin>,
    i64,
    Option<i64>,
    Option<i64>,
    Option<i64>,
);

/// The sums a statement selects after its grouping columns. `CAST(… AS BIGINT)`: PostgreSQL
/// sums BIGINTs as NUMERIC, which reads back as neither engine's integer.
macro_rules! sums {
    () => {
        "COUNT(*), CAST(SUM(s.request_tokens) AS BIGINT), CAST(SUM(s.result_tokens) AS BIGINT), \
         CAST(SUM(s.duration_ms) AS BIGINT)"
    };
}

/// Calls per profile in `[?1, ?2)`.
const BY_PROFILE: &str = concat!(
    "SELECT s.name, ",
    sums!(),
    " FROM task_steps s WHERE s.kind = 'model' AND s.created_at >= ?1 AND s.created_at < ?2 \
     GROUP BY s.name"
);

/// Calls per job in `[?1, ?2)`, the tasks of no job per origin.
const BY_JOB: &str = concat!(
    "SELECT t.job_id, j.name, CASE WHEN t.job_id IS NULL THEN t.origin END, ",
    sums!(),
    " FROM task_steps s JOIN tasks t ON t.id = s.task_id LEFT JOIN jobs j ON j.id = t.job_id \
     WHERE s.kind = 'model' AND s.created_at >= ?1 AND s.created_at < ?2 \
     GROUP BY t.job_id, j.name, CASE WHEN t.job_id IS NULL THEN t.origin END"
);

/// Calls per day of `window`, by the day's number in it: the days are a `VALUES` list of their
/// bounds, so one statement counts local days on both engines (neither knows the zone's rules).
fn by_day(window: &UsageWindow) -> Builder {
    by_day_after("", window)
}

/// [`by_day`] after `head` (the tests put `EXPLAIN QUERY PLAN` there).
fn by_day_after(head: &str, window: &UsageWindow) -> Builder {
    let mut b = Builder::new(head);
    b.push("WITH days (n, day_start, day_end) AS (");
    b.push_values(window.days.iter().enumerate(), |row, (n, day)| {
        row.push_bind(n as i64)
            .push_bind(day.start)
            .push_bind(day.end);
    });
    b.push(concat!(
        ") SELECT d.n, ",
        sums!(),
        " FROM days d JOIN task_steps s ON s.kind = 'model' \
         AND s.created_at >= d.day_start AND s.created_at < d.day_end GROUP BY d.n"
    ));
    b
}

impl Tasks<'_> {
    /// Usage over `window`. Three reads, not one snapshot: a call recorded between them shows
    /// in some lists and not yet in others (the totals are the days').
    pub async fn usage(self, window: &UsageWindow) -> Result<Usage> {
        let (since, until) = (window.since(), window.until());
        // A statement sized by the window: not kept prepared (see `Query::persistent`).
        let daily: Vec<Grouped<i64>> = self
            .store
            .all(by_day(window).build_query_as().persistent(false))
            .await?;
        let mut by_day: Vec<DayUsage> = window
            .days
            .iter()
            .map(|d| DayUsage {
                day: d.date,
                figures: Figures::default(),
            })
            .collect();
        for (n, calls, prompt, completion, ms) in daily {
            if let Some(day) = usize::try_from(n).ok().and_then(|n| by_day.get_mut(n)) {
                day.figures = Figures::new(calls, prompt, completion, ms);
            }
        }
        let mut totals = Figures::default();
        for d in &by_day {
            totals.add(&d.figures);
        }

        let profiles: Vec<Grouped<String>> = self
            .store
            .all(query_as(BY_PROFILE).bind(since).bind(until))
            .await?;
        let mut by_profile: Vec<ProfileUsage> = profiles
            .into_iter()
            .map(|(profile, c, p, r, ms)| ProfileUsage {
                profile,
                figures: Figures::new(c, p, r, ms),
            })
            .collect();
        by_profile.sort_by(|a, b| {
            a.figures
                .dearest_first(&b.figures)
                .then_with(|| a.profile.cmp(&b.profile))
        });

        let jobs: Vec<JobRow> = self
            .store
            .all(query_as(BY_JOB).bind(since).bind(until))
            .await?;
        let mut by_job: Vec<JobUsage> = jobs
            .into_iter()
            .map(|(job_id, job_name, origin, c, p, r, ms)| JobUsage {
                job_id,
                job_name,
                origin,
                figures: Figures::new(c, p, r, ms),
            })
            .collect();
        // Ties in a fixed order whatever the engine: by name, id, then origin.
        let key = |j: &JobUsage| {
            (
                j.job_name.clone(),
                j.job_id.clone(),
                j.origin.map(Origin::as_str),
            )
        };
        by_job.sort_by(|a, b| {
            a.figures
                .dearest_first(&b.figures)
                .then_with(|| key(a).cmp(&key(b)))
        });

        Ok(Usage {
            days: window.days.len() as u32,
            timezone: window.zone.name().to_string(),
            since,
            until,
            totals,
            by_day,
            by_profile,
            by_job,
        })
    }
}

#[cfg(test)]
#[path = "usage_tests.rs"]
mod tests;
