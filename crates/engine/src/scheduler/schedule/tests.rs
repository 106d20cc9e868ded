use super::*;

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn tz(name: &str) -> Tz {
    parse_timezone(name).unwrap()
}

/// Fire times in the window `"from..to"` (UTC: a date, `YYYY-MM-DDTHH:MM` or RFC 3339) for
/// `text` in zone `zone`, walking next_after; as UTC `YYYY-MM-DDTHH:MM`.
fn fires(text: &str, zone: &str, window: &str) -> Vec<String> {
    let at = |t: &str| match t.len() {
        10 => utc(&format!("{t}T00:00:00Z")),
        16 => utc(&format!("{t}:00Z")),
        _ => utc(t),
    };
    let (from, to) = window.split_once("..").unwrap();
    let (z, mut t, to) = (tz(zone), at(from), at(to));
    let s = Schedule::parse(text, z, t).unwrap();
    let mut out = vec![];
    while let Some(n) = s.next_after(z, t).filter(|n| *n < to) {
        out.push(n.format("%Y-%m-%dT%H:%M").to_string());
        t = n;
    }
    out
}

#[test]
fn five_field_cron_fires_in_the_zone() {
    // 08:00 in Shanghai (UTC+8) is 00:00 UTC.
    assert_eq!(
        fires("0 8 * * *", "Asia/Shanghai", "2026-05-01..2026-05-03"),
        ["2026-05-02T00:00"]
    );
    // 2026-05-01 is a Friday; then Monday 4th.
    assert_eq!(
        fires("30 7 * * MON-FRI", "UTC", "2026-05-01..2026-05-05"),
        ["2026-05-01T07:30", "2026-05-04T07:30"]
    );
    assert_eq!(
        fires("0 9 1 jan *", "UTC", "2026-01-01..2028-01-01"),
        ["2026-01-01T09:00", "2027-01-01T09:00"]
    );
}

#[test]
fn aliases() {
    assert_eq!(
        fires("@daily", "Europe/Berlin", "2026-06-01..2026-06-03"),
        ["2026-06-01T22:00", "2026-06-02T22:00"]
    );
    assert_eq!(
        fires(
            "@HOURLY",
            "UTC",
            "2026-06-01T00:30:00Z..2026-06-01T03:00:00Z"
        )
        .len(),
        2
    );
    let e = Schedule::parse("@reboot", tz("UTC"), utc("2026-06-01T00:00:00Z")).unwrap_err();
    assert!(matches!(e, ScheduleError::Alias(_)), "{e}");
}

#[test]
fn six_and_seven_fields_are_refused_with_a_hint() {
    for s in ["0 0 8 * * *", "0 0 8 * * * 2026"] {
        let e = Schedule::parse(s, tz("UTC"), utc("2026-06-01T00:00:00Z")).unwrap_err();
        assert!(matches!(e, ScheduleError::CronFieldCount { .. }));
        assert!(e.to_string().contains("5-field"), "{e}");
    }
}

#[test]
fn bad_cron_and_gibberish() {
    let now = utc("2026-06-01T00:00:00Z");
    let e = Schedule::parse("61 8 * * *", tz("UTC"), now).unwrap_err();
    assert!(matches!(e, ScheduleError::Cron { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("61 is out of range for the minute field (0-59)"),
        "{e}"
    );
    for (s, said) in [
        ("0 25 * * *", "25 is out of range for the hour field (0-23)"),
        (
            "0 8 32 * *",
            "32 is out of range for the day of month field (1-31)",
        ),
        (
            "0 8 * 1-13 *",
            "13 is out of range for the month field (1-12)",
        ),
        (
            "0 8 * * 1,8",
            "8 is out of range for the day of week field (0-7)",
        ),
    ] {
        let e = Schedule::parse(s, tz("UTC"), now).unwrap_err();
        assert!(e.to_string().contains(said), "{s}: {e}");
    }
    let e = Schedule::parse("every 1.5h", tz("UTC"), now).unwrap_err();
    assert!(e.to_string().contains("write 1.5h as 1h30m"), "{e}");
    let e = Schedule::parse("0 8 * * FOO", tz("UTC"), now).unwrap_err();
    assert!(matches!(e, ScheduleError::Cron { .. }), "{e}");
    let e = Schedule::parse("tomorrow", tz("UTC"), now).unwrap_err();
    assert!(matches!(e, ScheduleError::Unrecognised { .. }));
    assert!(e.to_string().contains("every 30m"));
    assert_eq!(
        Schedule::parse("  ", tz("UTC"), now).unwrap_err(),
        ScheduleError::Empty
    );
    let e = validate("0 0 30 2 *", tz("UTC"), now, 60).unwrap_err();
    assert!(matches!(e, ScheduleError::NeverFires { .. }), "{e}");
}

#[test]
fn intervals_are_anchored() {
    let anchor = utc("2026-06-01T10:00:07Z");
    let z = tz("UTC");
    for (text, secs) in [
        ("every 30m", 1800),
        ("every 2h", 7200),
        ("every 1d", 86_400),
        ("every 90 minutes", 5400),
        ("EVERY 1h 30m", 5400),
        ("every day", 86_400),
        ("every 2 weeks", 14 * 86_400),
    ] {
        let s = Schedule::parse(text, z, anchor).unwrap();
        assert_eq!(
            s.next_after(z, anchor),
            Some(anchor + Duration::seconds(secs)),
            "{text}"
        );
    }
    // Anchored: a late look still lands on the grid, never on "now + period".
    let s = Schedule::parse("every 30m", z, anchor).unwrap();
    let late = anchor + Duration::minutes(47);
    assert_eq!(s.next_after(z, late), Some(anchor + Duration::minutes(60)));
    let (n, last) = s.due_times(
        z,
        anchor + Duration::minutes(30),
        anchor + Duration::minutes(125),
        100,
    );
    assert_eq!((n, last), (4, anchor + Duration::minutes(120)));
}

#[test]
fn bad_durations() {
    let now = utc("2026-06-01T00:00:00Z");
    for s in [
        "every",
        "every 30",
        "every 30 parsecs",
        "in 0m",
        "every m30",
        "in",
    ] {
        let e = Schedule::parse(s, tz("UTC"), now);
        assert!(e.is_err(), "{s} parsed");
    }
    let e = Schedule::parse("every 30 parsecs", tz("UTC"), now).unwrap_err();
    assert!(e.to_string().contains("unknown unit 'parsecs'"), "{e}");
}

#[test]
fn one_shots() {
    let now = utc("2026-06-01T10:00:00Z");
    let z = tz("Europe/Berlin");
    let s = Schedule::parse("in 30m", z, now).unwrap();
    assert!(s.is_one_shot());
    assert_eq!(s.next_after(z, now), Some(utc("2026-06-01T10:30:00Z")));
    assert_eq!(s.next_after(z, utc("2026-06-01T10:30:00Z")), None);
    let s = Schedule::parse("in 2 hours", z, now).unwrap();
    assert_eq!(s.next_after(z, now), Some(utc("2026-06-01T12:00:00Z")));
    // Local wall time in the job's zone (CEST = UTC+2), or an explicit offset.
    for (text, at) in [
        ("2026-06-02T09:00", "2026-06-02T07:00:00Z"),
        ("2026-06-02 09:00:00", "2026-06-02T07:00:00Z"),
        ("2026-06-02T09:00:00", "2026-06-02T07:00:00Z"),
        ("2026-06-02T09:00:00+05:00", "2026-06-02T04:00:00Z"),
        ("2026-06-02T04:00:00Z", "2026-06-02T04:00:00Z"),
        ("2026-06-02T09:00+05:00", "2026-06-02T04:00:00Z"),
        ("2026-06-02T04:00Z", "2026-06-02T04:00:00Z"),
        ("2026-06-02 04:00Z", "2026-06-02T04:00:00Z"),
    ] {
        let s = Schedule::parse(text, z, now).unwrap();
        assert_eq!(s.next_after(z, now), Some(utc(at)), "{text}");
    }
}

#[test]
fn bad_times() {
    let now = utc("2026-06-01T10:00:00Z");
    let e = Schedule::parse("2026-06-02", tz("UTC"), now).unwrap_err();
    assert!(e.to_string().contains("add the time of day"), "{e}");
    let e = Schedule::parse("2026-13-02T09:00", tz("UTC"), now).unwrap_err();
    assert!(matches!(e, ScheduleError::Time { .. }));
    // 02:30 does not exist in New York on 2026-03-08.
    let e = Schedule::parse("2026-03-08T02:30", tz("America/New_York"), now).unwrap_err();
    assert!(
        matches!(e, ScheduleError::NonexistentLocalTime { .. }),
        "{e}"
    );
    let e = validate("2026-05-01T09:00:00Z", tz("UTC"), now, 60).unwrap_err();
    assert!(matches!(e, ScheduleError::InPast { .. }), "{e}");
}

#[test]
fn unknown_zone() {
    assert!(matches!(
        parse_timezone("Mars/Olympus"),
        Err(ScheduleError::UnknownZone(_))
    ));
    assert_eq!(
        parse_timezone("America/New_York").unwrap(),
        chrono_tz::America::New_York
    );
}

#[test]
fn minimum_interval() {
    let now = utc("2026-06-01T10:00:00Z");
    let z = tz("UTC");
    assert!(validate("* * * * *", z, now, 60).is_ok());
    let e = validate("*/5 * * * *", z, now, 600).unwrap_err();
    assert_eq!(
        e,
        ScheduleError::TooFrequent {
            schedule: "*/5 * * * *".into(),
            every_s: 300,
            min_s: 600
        }
    );
    // Uneven gaps: the shortest one counts.
    let e = validate("0,10 8 * * *", z, now, 3600).unwrap_err();
    assert!(
        matches!(e, ScheduleError::TooFrequent { every_s: 600, .. }),
        "{e}"
    );
    let e = validate("every 30s", z, now, 60).unwrap_err();
    assert!(matches!(e, ScheduleError::TooFrequent { every_s: 30, .. }));
    assert!(validate("every 1m", z, now, 60).is_ok());
    assert!(
        validate("in 10s", z, now, 60).is_ok(),
        "one-shots have no interval"
    );
}

/// Daily cron jobs across the 2026 clock changes: (schedule, zone, window, UTC firings).
#[rustfmt::skip]
const DST_CASES: &[(&str, &str, &str, &[&str])] = &[
    // Spring forward. New York, 2026-03-08: 02:00 EST jumps to 03:00 EDT; 02:30 does not
    // exist, so that day fires at 03:00 EDT, the first instant after the gap.
    ("30 2 * * *", "America/New_York", "2026-03-07..2026-03-10", &["2026-03-07T07:30", "2026-03-08T07:00", "2026-03-09T06:30"]),
    // Berlin, 2026-03-29: 02:00 CET jumps to 03:00 CEST (01:00 UTC).
    ("30 2 * * *", "Europe/Berlin", "2026-03-28..2026-03-31", &["2026-03-28T01:30", "2026-03-29T01:00", "2026-03-30T00:30"]),
    // Fall back: once, not twice. Berlin, 2026-10-25: 03:00 CEST falls back to 02:00 CET;
    // 02:30 happens twice, and only the first (CEST, 00:30 UTC) fires.
    ("30 2 * * *", "Europe/Berlin", "2026-10-24..2026-10-27", &["2026-10-24T00:30", "2026-10-25T00:30", "2026-10-26T01:30"]),
    // New York, 2026-11-01: 01:30 happens twice (only 01:30 EDT fires); 02:30 once.
    ("30 1 * * *", "America/New_York", "2026-10-31..2026-11-03", &["2026-10-31T05:30", "2026-11-01T05:30", "2026-11-02T06:30"]),
    ("30 2 * * *", "America/New_York", "2026-10-31T12:00..2026-11-02T12:00", &["2026-11-01T07:30", "2026-11-02T07:30"]),
    // Several times in the spring-forward gap: that day once, at the first instant after it.
    ("0,30 2 * * *", "Europe/Berlin", "2026-03-28..2026-03-31", &["2026-03-28T01:00", "2026-03-28T01:30", "2026-03-29T01:00", "2026-03-30T00:00", "2026-03-30T00:30"]),
    // Several times in the repeated hour: each once, in the first pass (not again in CET).
    ("0,30 2 * * *", "Europe/Berlin", "2026-10-24..2026-10-27", &["2026-10-24T00:30", "2026-10-25T00:00", "2026-10-25T00:30", "2026-10-26T01:00", "2026-10-26T01:30"]),
    // An hourly job is about elapsed hours: it fires in both passes.
    ("15 * * * *", "Europe/Berlin", "2026-10-25T00:00..2026-10-25T02:00", &["2026-10-25T00:15", "2026-10-25T01:15"]),
];

#[test]
fn clock_changes_fire_once_and_never_skip_a_day() {
    for (text, zone, window, want) in DST_CASES {
        assert_eq!(
            fires(text, zone, window),
            *want,
            "{text} in {zone}, {window}"
        );
    }
}

#[test]
fn due_times_counts_a_gap_in_service() {
    let z = tz("UTC");
    let s = Schedule::parse("0 * * * *", z, utc("2026-06-01T00:00:00Z")).unwrap();
    let (n, last) = s.due_times(
        z,
        utc("2026-06-01T01:00:00Z"),
        utc("2026-06-01T05:30:00Z"),
        1000,
    );
    assert_eq!((n, last), (5, utc("2026-06-01T05:00:00Z")));
    // Capped counting still finds the latest due time.
    let (n, last) = s.due_times(
        z,
        utc("2026-06-01T01:00:00Z"),
        utc("2026-06-01T05:30:00Z"),
        2,
    );
    assert_eq!((n, last), (2, utc("2026-06-01T05:00:00Z")));
}

/// The example every hint shows is one a person can copy: a time yet to come, in every zone.
#[test]
fn the_example_time_in_the_hints_is_accepted_today() {
    let now = Utc::now();
    let example = example_time();
    for zone in ["UTC", "Pacific/Kiritimati", "Pacific/Pago_Pago"] {
        assert!(
            validate(&example, tz(zone), now, 60).is_ok(),
            "{example} in {zone}"
        );
    }
    let e = Schedule::parse("2026-13-02T09:00", tz("UTC"), now).unwrap_err();
    assert!(e.to_string().contains(&example), "{e}");
    let e = Schedule::parse("whenever", tz("UTC"), now).unwrap_err();
    assert!(e.to_string().contains(&example), "{e}");
}
