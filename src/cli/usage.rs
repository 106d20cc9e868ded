//! `usage [--days N] [--json]`: what the model cost over the last N days — totals, then the
//! days with calls, the profiles and the jobs, dearest first — from whichever backend answered
//! (the same figures as `GET /v1/usage` and the dashboard's `/usage`).
//!
//! Must not: reach the daemon or the data dir except through the [`Backend`] it is given, or
//! count anything itself.

use super::UsageArgs;
use super::render::print_json;
use super::table::{Table, cell};
use hermes_store::util::text::{duration_ms, grouped};
use hermes_store::{Figures, JobUsage, Usage};
use hermes_surfaces::client::Backend;
use std::process::ExitCode;

pub async fn usage(backend: &dyn Backend, args: UsageArgs) -> anyhow::Result<ExitCode> {
    let usage = backend.usage(args.days).await?;
    if args.json {
        print_json(&usage)?;
    } else {
        out!("{}", report(&usage));
    }
    Ok(ExitCode::SUCCESS)
}

/// The figures as tables: the days with calls (newest first), the profiles, the jobs.
pub(crate) fn report(u: &Usage) -> String {
    let (first, last) = match (u.by_day.first(), u.by_day.last()) {
        (Some(f), Some(l)) => (f.day.to_string(), l.day.to_string()),
        _ => (String::new(), String::new()),
    };
    let span = match u.days {
        1 => "day".to_string(),
        n => format!("{n} days"),
    };
    if u.totals.calls == 0 {
        return format!(
            "No model calls yet in the last {span} ({first} to {last}, {}).\n",
            u.timezone
        );
    }
    let t = &u.totals;
    let mut out = format!(
        "Last {span} ({first} to {last}, {}): {} tokens ({} prompt, {} completion), {} model \
         calls, {} of model time.\n",
        u.timezone,
        grouped(t.total_tokens),
        grouped(t.prompt_tokens),
        grouped(t.completion_tokens),
        grouped(t.calls),
        duration_ms(t.model_ms)
    );
    let days = u.by_day.iter().rev().filter(|d| d.figures.calls > 0);
    out.push('\n');
    out.push_str(&table("DAY", days.map(|d| (d.day.to_string(), &d.figures))));
    let profiles = u
        .by_profile
        .iter()
        .map(|p| (cell(&p.profile, 40), &p.figures));
    out.push('\n');
    out.push_str(&table("PROFILE", profiles));
    let jobs = u.by_job.iter().map(|j| (job_name(j), &j.figures));
    out.push('\n');
    out.push_str(&table("JOB", jobs));
    out
}

fn table<'a>(what: &str, rows: impl Iterator<Item = (String, &'a Figures)>) -> String {
    let mut t = Table::new(&[what, "CALLS", "PROMPT", "COMPLETION", "TOTAL", "MODEL TIME"]);
    for (name, f) in rows {
        t.row(vec![
            name,
            grouped(f.calls),
            grouped(f.prompt_tokens),
            grouped(f.completion_tokens),
            grouped(f.total_tokens),
            duration_ms(f.model_ms),
        ]);
    }
    t.render()
}

/// A job by name and id; one deleted since by its id; tasks of no job by who started them.
fn job_name(j: &JobUsage) -> String {
    match (&j.job_id, &j.job_name) {
        (Some(id), Some(name)) => format!("{} ({id})", cell(name, 40)),
        (Some(id), None) => format!("deleted job {id}"),
        (None, _) => match j.origin {
            Some(o) => format!("no job (by hand, {o})"),
            None => "no job (by hand)".into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{NaiveDate, TimeZone, Utc};
    use hermes_store::{DayUsage, Origin, ProfileUsage};

    fn figures(calls: i64, prompt: i64, completion: i64, ms: i64) -> Figures {
        Figures {
            calls,
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: prompt + completion,
            model_ms: ms,
        }
    }

    fn usage(days: &[(u32, Figures)]) -> Usage {
        let day = |d: u32| NaiveDate::from_ymd_opt(2026, 12, d).expect("a date");
        let mut totals = Figures::default();
        for (_, f) in days {
            totals.calls += f.calls;
            totals.prompt_tokens += f.prompt_tokens;
            totals.completion_tokens += f.completion_tokens;
            totals.total_tokens += f.total_tokens;
            totals.model_ms += f.model_ms;
        }
        Usage {
            days: days.len() as u32,
            timezone: "Europe/Berlin".into(),
            since: Utc.with_ymd_and_hms(2026, 11, 30, 23, 0, 0).unwrap(),
            until: Utc.with_ymd_and_hms(2026, 12, 2, 23, 0, 0).unwrap(),
            totals,
            by_day: days
                .iter()
                .map(|(d, f)| DayUsage {
                    day: day(*d),
                    figures: *f,
                })
                .collect(),
            by_profile: vec![],
            by_job: vec![],
        }
    }

    #[test]
    fn no_calls_says_so() {
        let u = usage(&[(1, Figures::default()), (2, Figures::default())]);
        assert_eq!(
            report(&u),
            "No model calls yet in the last 2 days (2026-12-01 to 2026-12-02, Europe/Berlin).\n"
        );
    }

    #[test]
    fn the_report_lists_days_with_calls_newest_first_then_profiles_and_jobs() {
        let mut u = usage(&[
            (1, figures(2, 1500, 20, 2500)),
            (2, Figures::default()),
            (3, figures(1, 100, 5, 400)),
        ]);
        u.by_profile = vec![ProfileUsage {
            profile: "fast".into(),
            figures: u.totals,
        }];
        u.by_job = vec![
            JobUsage {
                job_id: Some("j1".into()),
                job_name: Some("digest".into()),
                origin: None,
                figures: figures(2, 1500, 20, 2500),
            },
            JobUsage {
                job_id: None,
                job_name: None,
                origin: Some(Origin::Cli),
                figures: figures(1, 100, 5, 400),
            },
        ];
        let text = report(&u);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "Last 3 days (2026-12-01 to 2026-12-03, Europe/Berlin): 1,625 tokens (1,600 prompt, \
             25 completion), 3 model calls, 2.9 s of model time."
        );
        assert!(lines[3].starts_with("2026-12-03  1 "), "{text}");
        assert!(lines[4].starts_with("2026-12-01  2 "), "{text}");
        assert!(
            !text.contains("2026-12-02  "),
            "a day without calls: {text}"
        );
        assert!(text.contains("fast     3      1,600"), "{text}");
        assert!(text.contains("digest (j1)"), "{text}");
        assert!(text.contains("no job (by hand, cli)"), "{text}");
    }
}
