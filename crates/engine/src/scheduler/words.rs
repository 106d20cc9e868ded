//! Schedules and runs in words, for people: "every day at 08:00", "on weekdays at 07:30",
//! "every 2 hours", and the Markdown footer of a digest (the job, its next run, links to its
//! pages on the dashboard).
//!
//! Owns: the wording only. Pure: no clock, no store — the parsing and the fire times are
//! `schedule`'s, and a pattern this cannot put in words is shown as it was written.

use super::schedule::{Schedule, ZonedSchedule};
use chrono::{DateTime, Utc};
use chrono_tz::Tz;

const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// A schedule in words; `schedule` must already parse (this does not validate).
pub fn describe(text: &str, parsed: &ZonedSchedule) -> String {
    match parsed.schedule() {
        Schedule::Every { period, .. } => format!("every {}", duration(period.num_seconds())),
        Schedule::At(at) => format!(
            "once, on {}",
            parsed.local(*at).format("%Y-%m-%d at %H:%M %Z")
        ),
        Schedule::Cron(_) => {
            let expanded = alias(text.trim()).unwrap_or(text.trim());
            cron(expanded).unwrap_or_else(|| format!("cron '{}'", text.trim()))
        }
    }
}

fn alias(text: &str) -> Option<&'static str> {
    Some(match text.to_ascii_lowercase().as_str() {
        "@yearly" | "@annually" => "0 0 1 1 *",
        "@monthly" => "0 0 1 * *",
        "@weekly" => "0 0 * * 0",
        "@daily" | "@midnight" => "0 0 * * *",
        "@hourly" => "0 * * * *",
        _ => return None,
    })
}

/// `3 h 5 min` style, in whole units: "2 hours", "1 day", "1 hour 30 minutes".
fn duration(secs: i64) -> String {
    let units = [
        (604_800, "week"),
        (86_400, "day"),
        (3600, "hour"),
        (60, "minute"),
        (1, "second"),
    ];
    let mut rest = secs.max(0);
    let mut parts = Vec::new();
    for (size, name) in units {
        let n = rest / size;
        if n > 0 {
            parts.push(if n == 1 {
                format!("1 {name}")
            } else {
                format!("{n} {name}s")
            });
            rest %= size;
        }
    }
    if parts.is_empty() {
        "0 seconds".into()
    } else {
        parts.join(" ")
    }
}

/// The common 5-field shapes in words; `None` for anything else.
fn cron(pattern: &str) -> Option<String> {
    let f: Vec<&str> = pattern.split_whitespace().collect();
    let [minute, hour, dom, month, dow] = f.as_slice() else {
        return None;
    };
    let time = time_part(minute, hour)?;
    let days = day_part(dom, month, dow)?;
    Some(match (days.as_str(), time.starts_with("every")) {
        ("every day", true) => time,
        (_, true) => format!("{time}, {days}"),
        _ => format!("{days} {time}"),
    })
}

fn number(field: &str, max: u32) -> Option<u32> {
    field.parse().ok().filter(|n| *n <= max)
}

fn time_part(minute: &str, hour: &str) -> Option<String> {
    let step = |f: &str| f.strip_prefix("*/").and_then(|n| n.parse::<u32>().ok());
    if let (Some(m), Some(hours)) = (number(minute, 59), list(hour, 23)) {
        let times: Vec<String> = hours.iter().map(|h| format!("{h:02}:{m:02}")).collect();
        return Some(format!("at {}", and_list(&times)));
    }
    Some(match (minute, hour) {
        ("*", "*") => "every minute".into(),
        (m, "*") if step(m) == Some(1) => "every minute".into(),
        (m, "*") if step(m).is_some() => format!("every {} minutes", step(m)?),
        (m, "*") => format!("every hour at minute {}", number(m, 59)?),
        (m, h) if step(h) == Some(1) => format!("every hour at minute {}", number(m, 59)?),
        (m, h) if step(h).is_some() => {
            format!("every {} hours at minute {}", step(h)?, number(m, 59)?)
        }
        _ => return None,
    })
}

fn day_part(dom: &str, month: &str, dow: &str) -> Option<String> {
    let months = match month {
        "*" => None,
        m => {
            let names: Vec<String> = list(m, 12)?
                .iter()
                .map(|n| {
                    MONTHS
                        .get(n.checked_sub(1)? as usize)
                        .map(|s| s.to_string())
                })
                .collect::<Option<_>>()?;
            Some(and_list(&names))
        }
    };
    Some(match (dom, dow, months) {
        ("*", "*", None) => "every day".to_string(),
        ("*", "*", Some(m)) => format!("every day in {m}"),
        ("*", d, None) => weekdays(d)?,
        ("*", d, Some(m)) => format!("{} in {m}", weekdays(d)?),
        (d, "*", m) => {
            let names: Vec<String> = list(d, 31)?.iter().map(|n| ordinal(*n)).collect();
            let of = m.unwrap_or_else(|| "every month".into());
            format!("on the {} of {of}", and_list(&names))
        }
        _ => return None,
    })
}

fn weekdays(dow: &str) -> Option<String> {
    let upper = dow.to_ascii_uppercase();
    if ["1-5", "MON-FRI"].contains(&upper.as_str()) {
        return Some("on weekdays".into());
    }
    if ["0,6", "6,0", "SAT,SUN", "SUN,SAT"].contains(&upper.as_str()) {
        return Some("on weekends".into());
    }
    let names: Vec<String> = upper
        .split(',')
        .map(|d| {
            let i = match d.parse::<usize>() {
                Ok(n) if n <= 7 => n % 7,
                Ok(_) => return None,
                Err(_) => DAYS
                    .iter()
                    .position(|name| name[..3].eq_ignore_ascii_case(d))?,
            };
            Some(DAYS[i].to_string())
        })
        .collect::<Option<_>>()?;
    match names.as_slice() {
        [one] => Some(format!("every {one}")),
        _ => Some(format!("on {}", and_list(&names))),
    }
}

/// `8` or `8,18` (numbers only, each at most `max`).
fn list(field: &str, max: u32) -> Option<Vec<u32>> {
    field.split(',').map(|n| number(n, max)).collect()
}

fn ordinal(n: u32) -> String {
    let suffix = match (n % 10, n % 100) {
        (1, 11) | (2, 12) | (3, 13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// "a", "a and b", "a, b and c".
fn and_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// What comes after a run, for its footer.
#[derive(Debug, Clone, Copy)]
pub(crate) enum NextRun {
    At(DateTime<Tz>),
    /// Paused: it runs again once resumed.
    Paused,
    /// A one-shot that has fired, or a schedule with no time left.
    Never,
}

/// The Markdown footer of a run's answer: the job by name, its next run in its zone, and
/// with `public_url` set, links to the run's task page and the job's page on the dashboard.
pub(crate) fn digest_footer(
    job_name: &str,
    job_id: &str,
    task_id: &str,
    next: NextRun,
    public_url: &str,
) -> String {
    let next = match next {
        NextRun::At(t) => format!("next run {}", t.format("%a %Y-%m-%d %H:%M %Z")),
        NextRun::Paused => "paused: no run until it is resumed".into(),
        NextRun::Never => "no further runs scheduled".into(),
    };
    let mut footer = format!("\n\n---\n\nJob **{}** · {next}", escape_markdown(job_name));
    let base = public_url.trim().trim_end_matches('/');
    if !base.is_empty() {
        footer.push_str(&format!(
            " · [this run]({base}/tasks/{task_id}) · [the job]({base}/jobs/{job_id})"
        ));
    }
    footer.push('\n');
    footer
}

/// The next run of a job in its zone, for the footer (UTC if the zone no longer parses).
pub(crate) fn in_zone(t: DateTime<Utc>, zone: &str) -> DateTime<Tz> {
    t.with_timezone(&zone.parse::<Tz>().unwrap_or(Tz::UTC))
}

/// A job name shown literally, whatever Markdown characters it holds.
fn escape_markdown(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\`*_[]()#<>!|~".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> String {
        let now = chrono::TimeZone::with_ymd_and_hms(&Utc, 2026, 3, 1, 12, 0, 0).unwrap();
        let parsed = ZonedSchedule::parse(text, "Europe/Berlin", now).expect("parses");
        describe(text, &parsed)
    }

    #[test]
    fn common_schedules_in_words() {
        let cases = [
            ("0 8 * * *", "every day at 08:00"),
            ("@daily", "every day at 00:00"),
            ("30 7 * * MON-FRI", "on weekdays at 07:30"),
            ("0 8,18 * * *", "every day at 08:00 and 18:00"),
            ("0 9 * * 1", "every Monday at 09:00"),
            (
                "0 9 * * mon,wed,fri",
                "on Monday, Wednesday and Friday at 09:00",
            ),
            ("0 9 1 * *", "on the 1st of every month at 09:00"),
            ("@yearly", "on the 1st of January at 00:00"),
            ("*/15 * * * *", "every 15 minutes"),
            ("* * * * *", "every minute"),
            ("*/1 * * * *", "every minute"),
            ("5 */1 * * *", "every hour at minute 5"),
            ("*/15 * * * 1-5", "every 15 minutes, on weekdays"),
            ("15 * * * *", "every hour at minute 15"),
            ("every 2h", "every 2 hours"),
            ("every 90 minutes", "every 1 hour 30 minutes"),
            ("2026-05-01T09:00", "once, on 2026-05-01 at 09:00 CEST"),
            ("0 9 1-7 * 1", "cron '0 9 1-7 * 1'"),
        ];
        for (text, want) in cases {
            assert_eq!(words(text), want, "{text}");
        }
    }

    #[test]
    fn footer_names_the_job_and_links_when_public() {
        let next = in_zone(
            chrono::TimeZone::with_ymd_and_hms(&Utc, 2026, 3, 2, 7, 0, 0).unwrap(),
            "Europe/Berlin",
        );
        let f = digest_footer(
            "News *digest*",
            "j_1",
            "t1",
            NextRun::At(next),
            "https://h.example/",
        );
        assert!(f.contains(r"Job **News \*digest\***"), "{f}");
        assert!(f.contains("next run Mon 2026-03-02 08:00 CET"), "{f}");
        assert!(f.contains("[this run](https://h.example/tasks/t1)"), "{f}");
        assert!(f.contains("[the job](https://h.example/jobs/j_1)"), "{f}");
        let f = digest_footer("n", "j", "t", NextRun::Never, "");
        assert!(f.contains("no further runs") && !f.contains("]("), "{f}");
        let f = digest_footer("n", "j", "t", NextRun::Paused, "");
        assert!(f.contains("paused: no run until it is resumed"), "{f}");
    }
}
