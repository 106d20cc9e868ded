//! Schedule text → fire times. Pure: no clock, no store, no I/O — "now" is always an argument.
//!
//! Forms (case-insensitive):
//! - standard 5-field cron, `minute hour day-of-month month day-of-week` (`0 8 * * *`,
//!   `30 7 * * MON-FRI`, `0 9 1 JAN *`) and the aliases `@hourly`, `@daily`, `@midnight`,
//!   `@weekly`, `@monthly`, `@yearly`, `@annually`. Evaluated in the job's zone with croner +
//!   chrono-tz. 6- and 7-field patterns (seconds, years) are refused: a 5-field pattern read as
//!   6 fields would silently mean something else.
//! - an interval: `every 30m`, `every 2h`, `every 1d`, `every 90 minutes`, `every 1h 30m`,
//!   `every day`. Occurrences are `anchor + k·period`, k ≥ 1; the scheduler anchors at the job's
//!   creation and then at each due time, never at the moment a run happened, so it cannot drift.
//!   An interval is elapsed time: `every 1d` keeps its UTC instant across DST, so its local
//!   time moves by an hour; a job meant for a local time of day should use cron.
//! - a one-shot: `in 30m`, `in 2 hours`, or an ISO 8601 / RFC 3339 time — with an offset
//!   (`2026-05-01T09:00:00+02:00`, `…Z`) or as local wall time in the job's zone
//!   (`2026-05-01T09:00`, `2026-05-01 09:00:00`).
//!
//! DST: a pattern that names its hours is a list of times of day, matched on the wall clock:
//! a time that falls in a spring-forward gap fires once, at the first valid instant after the
//! gap (several in one gap, once), and a time repeated by a fall-back fires once, at the
//! earlier instant. A pattern of every hour (`15 * * * *`, `0 */2 * * *`) is a rhythm of
//! elapsed hours, left to croner: it skips a gap and fires in both passes of a repeated hour.
//! The tests pin it down. A local one-shot inside a gap is refused.

use chrono::{DateTime, Datelike, Duration, LocalResult, NaiveDateTime, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::CronParser;

mod zoned;
pub use zoned::ZonedSchedule;

/// Wall-clock matches tried before giving up on finding one after a given instant: every
/// minute of a repeated hour, and then some.
const WALL_CLOCK_TRIES: usize = 1441;
/// The longest a spring-forward gap lasts, in minutes (Lord Howe's is 30, most are 60).
const GAP_MINUTES: i64 = 180;

/// Whether the pattern names its hours (not `*`, not a step): its times are times of day, each
/// run once, rather than a rhythm of elapsed hours.
fn named_hours(cron: &Cron) -> bool {
    let hours = &cron.pattern.hours;
    !hours.from_wildcard && hours.step == 1
}

/// For a pattern of times of day: the first instant after `after` of the next local time it
/// names, each local time run once — one in a spring-forward gap at the first instant after
/// the gap (several in one gap, once), one a fall-back repeats in its first pass only.
/// croner keeps a single fixed time so, not a list (`0,30 2 * * *`).
fn next_on_the_wall_clock(cron: &Cron, tz: Tz, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
    // The pattern is matched on the wall clock: its local time, read as if it were UTC,
    // where no clock ever changes.
    let mut wall = Utc.from_utc_datetime(&after.with_timezone(&tz).naive_local());
    for _ in 0..WALL_CLOCK_TRIES {
        let next = cron.find_next_occurrence(&wall, false).ok()?;
        let at = match tz.from_local_datetime(&next.naive_utc()) {
            LocalResult::Single(t) | LocalResult::Ambiguous(t, _) => t,
            LocalResult::None => after_the_gap(tz, next.naive_utc())?,
        }
        .with_timezone(&Utc);
        if at > after {
            return Some(at);
        }
        wall = next;
    }
    None
}

/// The first instant after the spring-forward gap that `local` falls in.
fn after_the_gap(tz: Tz, local: NaiveDateTime) -> Option<DateTime<Tz>> {
    (1..=GAP_MINUTES).find_map(
        |m| match tz.from_local_datetime(&(local + Duration::minutes(m))) {
            LocalResult::Single(t) | LocalResult::Ambiguous(t, _) => Some(t),
            LocalResult::None => None,
        },
    )
}

/// The forms, for error messages.
fn forms() -> String {
    format!(
        "use 5-field cron ('0 8 * * *' = 08:00 daily), an interval ('every 30m', 'every 2h', \
         'every 1d'), or a one-shot ('in 30m', '{}')",
        example_time()
    )
}

/// A one-shot time to show as an example: 09:00 on next year's first of May, so that one
/// copied from a hint (by a person, or by the model from the tool's description) is never
/// refused for being past.
pub fn example_time() -> String {
    format!("{}-05-01T09:00", Utc::now().year() + 1)
}

/// Cron aliases accepted besides 5-field patterns.
const ALIASES: &[(&str, &str)] = &[
    ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"),
    ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * SUN"),
    ("@daily", "0 0 * * *"),
    ("@midnight", "0 0 * * *"),
    ("@hourly", "0 * * * *"),
];

/// How many firings of a cron pattern are examined to find its shortest gap.
const GAP_SAMPLE: usize = 1500;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("the schedule is empty; {}", forms())]
    Empty,
    #[error(
        "'{schedule}' has {fields} fields; use standard 5-field cron (minute hour day-of-month month day-of-week, e.g. '0 8 * * *'): seconds and years are not supported"
    )]
    CronFieldCount { schedule: String, fields: usize },
    #[error(
        "invalid cron expression '{schedule}': {message}; the 5 fields are minute (0-59), hour (0-23), day of month (1-31), month (1-12 or JAN-DEC) and day of week (0-7 or SUN-SAT), e.g. '0 8 * * *' or '*/15 * * * MON-FRI'"
    )]
    Cron { schedule: String, message: String },
    #[error("unknown cron alias '{0}'; use @hourly, @daily, @weekly, @monthly or @yearly")]
    Alias(String),
    #[error(
        "invalid duration in '{schedule}': {message}; write e.g. 'every 30m', 'every 2h', 'every 1d', 'every 90 minutes' or 'in 45m'"
    )]
    Duration { schedule: String, message: String },
    #[error(
        "invalid time '{schedule}': {message}; write an ISO 8601 time such as '{at}' (local to the job's zone) or '{at}:00+02:00'",
        at = example_time()
    )]
    Time { schedule: String, message: String },
    #[error(
        "'{schedule}' does not exist in {zone} (the clocks skip it for daylight saving time); pick a time outside the gap"
    )]
    NonexistentLocalTime { schedule: String, zone: String },
    #[error("'{schedule}' is not a schedule; {}", forms())]
    Unrecognised { schedule: String },
    #[error(
        "unknown time zone '{0}'; use an IANA name such as Europe/Berlin, America/New_York or UTC"
    )]
    UnknownZone(String),
    #[error("'{schedule}' never fires (no date matches it); check the day and month fields")]
    NeverFires { schedule: String },
    #[error("'{schedule}' is in the past ({at}); give a future time or use 'in 30m'")]
    InPast { schedule: String, at: DateTime<Utc> },
    #[error(
        "'{schedule}' fires every {every_s} s, more often than the minimum of {min_s} s (scheduler.min_interval_s); choose a longer interval"
    )]
    TooFrequent {
        schedule: String,
        every_s: i64,
        min_s: u64,
    },
}

/// A parsed schedule. Intervals carry their anchor (see the module doc).
#[derive(Debug, Clone)]
pub enum Schedule {
    Cron(Box<Cron>),
    Every {
        period: Duration,
        anchor: DateTime<Utc>,
    },
    At(DateTime<Utc>),
}

/// An IANA zone name → zone.
pub(crate) fn parse_timezone(name: &str) -> Result<Tz, ScheduleError> {
    name.trim()
        .parse::<Tz>()
        .map_err(|_| ScheduleError::UnknownZone(name.to_string()))
}

impl Schedule {
    /// Parse `text`. `anchor` starts intervals and relative one-shots (`in 30m` = anchor + 30m);
    /// `tz` gives local wall times (cron, ISO times without an offset) their meaning.
    pub fn parse(text: &str, tz: Tz, anchor: DateTime<Utc>) -> Result<Schedule, ScheduleError> {
        let s = text.trim();
        if s.is_empty() {
            return Err(ScheduleError::Empty);
        }
        let lower = s.to_ascii_lowercase();
        if let Some(rest) = lower.strip_prefix("every")
            && rest.starts_with(char::is_whitespace)
        {
            let period = parse_duration(rest, true).map_err(|message| ScheduleError::Duration {
                schedule: s.to_string(),
                message,
            })?;
            return Ok(Schedule::Every { period, anchor });
        }
        if let Some(rest) = lower.strip_prefix("in ") {
            let d = parse_duration(rest, false).map_err(|message| ScheduleError::Duration {
                schedule: s.to_string(),
                message,
            })?;
            return Ok(Schedule::At(anchor + d));
        }
        if looks_like_date(s) {
            return parse_time(s, tz).map(Schedule::At);
        }
        if lower.starts_with('@') {
            let pattern = ALIASES
                .iter()
                .find(|(alias, _)| *alias == lower)
                .map(|(_, p)| *p)
                .ok_or_else(|| ScheduleError::Alias(s.to_string()))?;
            return parse_cron(pattern, s);
        }
        let fields = s.split_whitespace().count();
        match fields {
            5 => parse_cron(s, s),
            6 | 7 => Err(ScheduleError::CronFieldCount {
                schedule: s.to_string(),
                fields,
            }),
            _ => Err(ScheduleError::Unrecognised {
                schedule: s.to_string(),
            }),
        }
    }

    /// A one-shot fires once and then has no next time.
    pub(crate) fn is_one_shot(&self) -> bool {
        matches!(self, Schedule::At(_))
    }

    /// The first fire time strictly after `after`, or None (a one-shot already past, or a
    /// cron pattern with no further match).
    pub(crate) fn next_after(&self, tz: Tz, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Schedule::Cron(cron) => {
                // croner works in whole seconds; flooring keeps "strictly after" exact.
                let from = after.with_nanosecond(0).unwrap_or(after);
                if named_hours(cron) {
                    return next_on_the_wall_clock(cron, tz, from);
                }
                cron.find_next_occurrence(&from.with_timezone(&tz), false)
                    .ok()
                    .map(|t| t.with_timezone(&Utc))
            }
            Schedule::Every { period, anchor } => {
                if after < *anchor {
                    return Some(*anchor + *period);
                }
                let elapsed = (after - *anchor).num_milliseconds();
                let step = period.num_milliseconds().max(1);
                let k = elapsed / step + 1;
                Some(*anchor + Duration::milliseconds(step * k))
            }
            Schedule::At(at) => (*at > after).then_some(*at),
        }
    }

    /// The shortest gap between two consecutive firings from `from` on (None for a one-shot).
    /// For cron this samples the next firings, enough to see any pattern's shortest gap
    /// within a day or a month; it stops early once a gap below `stop_below` is seen.
    pub(crate) fn shortest_gap(
        &self,
        tz: Tz,
        from: DateTime<Utc>,
        stop_below: Duration,
    ) -> Option<Duration> {
        match self {
            Schedule::Every { period, .. } => Some(*period),
            Schedule::At(_) => None,
            Schedule::Cron(_) => {
                let mut prev = self.next_after(tz, from)?;
                let mut best: Option<Duration> = None;
                for _ in 0..GAP_SAMPLE {
                    let Some(next) = self.next_after(tz, prev) else {
                        break;
                    };
                    let gap = next - prev;
                    best = Some(best.map_or(gap, |b| b.min(gap)));
                    if gap < stop_below {
                        break;
                    }
                    prev = next;
                }
                best
            }
        }
    }

    /// Every due time in `[first, until]`, given that `first` is a due time: `(count, last)`.
    /// Counting stops at `cap` (the count is then a lower bound) so a long outage of a
    /// per-minute job stays cheap.
    pub(crate) fn due_times(
        &self,
        tz: Tz,
        first: DateTime<Utc>,
        until: DateTime<Utc>,
        cap: u64,
    ) -> (u64, DateTime<Utc>) {
        if first > until {
            return (0, first);
        }
        if self.is_one_shot() {
            return (1, first);
        }
        if let Schedule::Every { period, .. } = self {
            let step = period.num_milliseconds().max(1);
            let k = (until - first).num_milliseconds() / step;
            return ((k + 1) as u64, first + Duration::milliseconds(step * k));
        }
        let mut count = 1;
        let mut last = first;
        while count < cap {
            match self.next_after(tz, last) {
                Some(t) if t <= until => {
                    count += 1;
                    last = t;
                }
                _ => return (count, last),
            }
        }
        // Capped: the last due time is still the latest one at or before `until`.
        let latest = self.latest_at_or_before(tz, last, until);
        (count, latest)
    }

    /// The due time just before `t` (None for a one-shot), used to name the last missed run.
    pub(crate) fn previous_before(&self, tz: Tz, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Schedule::Every { period, .. } => Some(t - *period),
            Schedule::At(_) => None,
            Schedule::Cron(cron) => {
                let floor = t.with_nanosecond(0).unwrap_or(t);
                cron.find_previous_occurrence(&floor.with_timezone(&tz), false)
                    .ok()
                    .map(|p| p.with_timezone(&Utc))
            }
        }
    }

    fn latest_at_or_before(
        &self,
        tz: Tz,
        known: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> DateTime<Utc> {
        if let Schedule::Cron(cron) = self {
            let floor = until.with_nanosecond(0).unwrap_or(until);
            if let Ok(t) = cron.find_previous_occurrence(&floor.with_timezone(&tz), true) {
                let t = t.with_timezone(&Utc);
                if t >= known {
                    return t;
                }
            }
        }
        known
    }
}

/// Parse and check a new job's schedule at `now`: its first fire time, or why it cannot be
/// used (in the past, never fires, more often than `min_interval_s`).
pub(super) fn validate(
    text: &str,
    tz: Tz,
    now: DateTime<Utc>,
    min_interval_s: u64,
) -> Result<(Schedule, DateTime<Utc>), ScheduleError> {
    let schedule = Schedule::parse(text, tz, now)?;
    let s = text.trim().to_string();
    let first = match schedule.next_after(tz, now) {
        Some(t) => t,
        None => {
            return Err(match schedule {
                Schedule::At(at) => ScheduleError::InPast { schedule: s, at },
                _ => ScheduleError::NeverFires { schedule: s },
            });
        }
    };
    let min = Duration::seconds(i64::try_from(min_interval_s).unwrap_or(i64::MAX / 1000));
    if let Some(gap) = schedule.shortest_gap(tz, now, min)
        && gap < min
    {
        return Err(ScheduleError::TooFrequent {
            schedule: s,
            every_s: gap.num_seconds(),
            min_s: min_interval_s,
        });
    }
    Ok((schedule, first))
}

fn parse_cron(pattern: &str, original: &str) -> Result<Schedule, ScheduleError> {
    CronParser::new()
        .parse(pattern)
        .map(|c| Schedule::Cron(Box::new(c)))
        .map_err(|e| ScheduleError::Cron {
            schedule: original.to_string(),
            // croner says "Number out of bounds" without which: name the field when it is that.
            message: out_of_range(pattern).unwrap_or_else(|| e.to_string()),
        })
}

/// The five fields' names and ranges.
const CRON_FIELDS: [(&str, u32, u32); 5] = [
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day of month", 1, 31),
    ("month", 1, 12),
    ("day of week", 0, 7),
];

/// The first number of a 5-field pattern outside its field's range, said in words.
fn out_of_range(pattern: &str) -> Option<String> {
    let fields: Vec<&str> = pattern.split_whitespace().collect();
    if fields.len() != CRON_FIELDS.len() {
        return None;
    }
    for (field, (name, lo, hi)) in fields.iter().zip(CRON_FIELDS) {
        for part in field.split(',') {
            let range = part.split('/').next().unwrap_or(part);
            for value in range.split('-').filter_map(|v| v.parse::<u32>().ok()) {
                if value < lo || value > hi {
                    return Some(format!(
                        "{value} is out of range for the {name} field ({lo}-{hi})"
                    ));
                }
            }
        }
    }
    None
}

/// `YYYY-MM-DD…`: the start of an ISO date (no cron field looks like that).
fn looks_like_date(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 10
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[5..7].iter().all(u8::is_ascii_digit)
        && b[7] == b'-'
}

fn parse_time(s: &str, tz: Tz) -> Result<DateTime<Utc>, ScheduleError> {
    let err = |message: &str| ScheduleError::Time {
        schedule: s.to_string(),
        message: message.to_string(),
    };
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(t.with_timezone(&Utc));
    }
    // ISO 8601's "Z" for UTC, where RFC 3339 (which needs seconds) did not take it.
    let offset = match s.strip_suffix(['Z', 'z']) {
        Some(utc) => format!("{utc}+00:00"),
        None => s.to_string(),
    };
    for f in [
        "%Y-%m-%dT%H:%M%:z",
        "%Y-%m-%d %H:%M%:z",
        "%Y-%m-%d %H:%M:%S%:z",
    ] {
        if let Ok(t) = DateTime::parse_from_str(&offset, f) {
            return Ok(t.with_timezone(&Utc));
        }
    }
    let naive = [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%d %H:%M",
    ]
    .iter()
    .find_map(|f| NaiveDateTime::parse_from_str(s, f).ok());
    let Some(naive) = naive else {
        if s.len() == 10 {
            return Err(err("a date alone is ambiguous; add the time of day"));
        }
        return Err(err("not a valid date and time"));
    };
    match tz.from_local_datetime(&naive) {
        LocalResult::Single(t) => Ok(t.with_timezone(&Utc)),
        // A repeated wall time (fall-back) means its first occurrence.
        LocalResult::Ambiguous(earlier, _) => Ok(earlier.with_timezone(&Utc)),
        LocalResult::None => Err(ScheduleError::NonexistentLocalTime {
            schedule: s.to_string(),
            zone: tz.name().to_string(),
        }),
    }
}

/// `30m`, `2h`, `1d`, `90 minutes`, `1h 30m`; with `unit_alone`, also `day`, `hour`.
fn parse_duration(text: &str, unit_alone: bool) -> Result<Duration, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("no duration given".into());
    }
    if unit_alone && t.chars().all(|c| c.is_ascii_alphabetic()) {
        return unit_seconds(t).map(Duration::seconds);
    }
    let mut total: i64 = 0;
    let mut rest = t;
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return Err(format!("expected a number at '{rest}'"));
        }
        let n: i64 = rest[..digits]
            .parse()
            .map_err(|_| format!("'{}' is too large", &rest[..digits]))?;
        rest = rest[digits..].trim_start();
        let letters = rest.len()
            - rest
                .trim_start_matches(|c: char| c.is_ascii_alphabetic())
                .len();
        if letters == 0 {
            if rest.starts_with(['.', ',']) {
                return Err("whole numbers only: write 1.5h as 1h30m or 90m".into());
            }
            return Err(format!("'{n}' needs a unit (s, m, h, d or w)"));
        }
        let unit = unit_seconds(&rest[..letters])?;
        total = n
            .checked_mul(unit)
            .and_then(|v| total.checked_add(v))
            .filter(|v| *v <= 366 * 86_400 * 10)
            .ok_or_else(|| "the duration is too long".to_string())?;
        rest = rest[letters..].trim_start_matches([' ', ',']);
    }
    if total == 0 {
        return Err("the duration must be longer than zero".into());
    }
    Ok(Duration::seconds(total))
}

fn unit_seconds(unit: &str) -> Result<i64, String> {
    Ok(match unit {
        "s" | "sec" | "secs" | "second" | "seconds" => 1,
        "m" | "min" | "mins" | "minute" | "minutes" => 60,
        "h" | "hr" | "hrs" | "hour" | "hours" => 3600,
        "d" | "day" | "days" => 86_400,
        "w" | "wk" | "week" | "weeks" => 7 * 86_400,
        other => return Err(format!("unknown unit '{other}' (use s, m, h, d or w)")),
    })
}

#[cfg(test)]
mod tests;
