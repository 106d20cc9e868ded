//! A schedule together with the zone it is read in: parsed once, then asked for fire times.
//! Every site that turns a job's stored text and zone name into times goes through this type,
//! so a zone is never parsed apart from its schedule, nor a schedule evaluated in the wrong zone.

use super::{Schedule, ScheduleError, parse_timezone};
use chrono::{DateTime, Utc};
use chrono_tz::Tz;

/// A parsed schedule and its zone. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ZonedSchedule {
    schedule: Schedule,
    tz: Tz,
}

impl ZonedSchedule {
    /// Parse `text` in the IANA zone `zone`; `anchor` starts intervals and relative one-shots
    /// (see [`Schedule::parse`]).
    pub fn parse(text: &str, zone: &str, anchor: DateTime<Utc>) -> Result<Self, ScheduleError> {
        let tz = parse_timezone(zone)?;
        Ok(ZonedSchedule {
            schedule: Schedule::parse(text, tz, anchor)?,
            tz,
        })
    }

    /// Parse and check a new job's schedule at `now`: the schedule and its first fire time, or
    /// why it cannot be used (in the past, never fires, more often than `min_interval_s`).
    pub(crate) fn validate(
        text: &str,
        zone: &str,
        now: DateTime<Utc>,
        min_interval_s: u64,
    ) -> Result<(Self, DateTime<Utc>), ScheduleError> {
        let tz = parse_timezone(zone)?;
        let (schedule, first) = super::validate(text, tz, now, min_interval_s)?;
        Ok((ZonedSchedule { schedule, tz }, first))
    }

    pub fn tz(&self) -> Tz {
        self.tz
    }

    /// The zone's canonical IANA name (what a job stores).
    pub fn zone(&self) -> &'static str {
        self.tz.name()
    }

    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    pub(crate) fn is_one_shot(&self) -> bool {
        self.schedule.is_one_shot()
    }

    /// The first fire time strictly after `after`.
    pub(crate) fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.schedule.next_after(self.tz, after)
    }

    /// What `next_run_at` becomes when a due time is claimed at `now`: the next fire time
    /// after now, none for a one-shot (it fires once).
    pub(crate) fn next_due(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        if self.is_one_shot() {
            None
        } else {
            self.next_after(now)
        }
    }

    /// See [`Schedule::due_times`].
    pub(crate) fn due_times(
        &self,
        first: DateTime<Utc>,
        until: DateTime<Utc>,
        cap: u64,
    ) -> (u64, DateTime<Utc>) {
        self.schedule.due_times(self.tz, first, until, cap)
    }

    /// See [`Schedule::previous_before`].
    pub(crate) fn previous_before(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.schedule.previous_before(self.tz, t)
    }

    /// `first` and the firings after it, `n` in all (only `first` for a one-shot).
    pub fn firings(&self, first: DateTime<Utc>, n: usize) -> Vec<DateTime<Utc>> {
        std::iter::successors(Some(first), |t| self.next_after(*t))
            .take(n)
            .collect()
    }

    /// `t` on this schedule's wall clock.
    pub fn local(&self, t: DateTime<Utc>) -> DateTime<Tz> {
        t.with_timezone(&self.tz)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Duration, TimeZone};

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().expect("a time")
    }

    #[test]
    fn cron_is_read_in_its_zone() {
        let z = ZonedSchedule::parse("0 8 * * *", "Europe/Berlin", at("2026-03-01T00:00:00Z"))
            .expect("parses");
        // 08:00 in Berlin is 07:00 UTC in winter and 06:00 UTC after the spring change.
        assert_eq!(
            z.next_after(at("2026-03-01T00:00:00Z")),
            Some(at("2026-03-01T07:00:00Z"))
        );
        assert_eq!(
            z.next_after(at("2026-04-01T00:00:00Z")),
            Some(at("2026-04-01T06:00:00Z"))
        );
        assert_eq!(z.zone(), "Europe/Berlin");
    }

    #[test]
    fn one_shots_have_no_next_due_and_one_firing() {
        let now = at("2026-03-01T00:00:00Z");
        let z = ZonedSchedule::parse("in 30m", "UTC", now).expect("parses");
        assert!(z.is_one_shot());
        assert_eq!(z.next_due(now + Duration::hours(1)), None);
        let at = now + Duration::minutes(30);
        assert_eq!(z.firings(at, 5), vec![at]);
        let every = ZonedSchedule::parse("every 1h", "UTC", now).expect("parses");
        assert_eq!(every.next_due(now), Some(now + Duration::hours(1)));
        assert_eq!(every.firings(now, 3).len(), 3);
    }

    #[test]
    fn a_bad_zone_or_schedule_is_one_error() {
        let now = Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 0).unwrap();
        assert!(matches!(
            ZonedSchedule::parse("0 8 * * *", "Mars/Olympus", now),
            Err(ScheduleError::UnknownZone(_))
        ));
        assert!(matches!(
            ZonedSchedule::validate("every 1s", "UTC", now, 60),
            Err(ScheduleError::TooFrequent { .. })
        ));
    }
}
