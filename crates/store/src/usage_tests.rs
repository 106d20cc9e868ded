//! Tests of `usage.rs`: the window's days in a zone (summer time, a missing midnight), the
//! sums on both engines, and the plan that keeps them to the index.

use super::*;
use crate::{NewStep, NewTask, StepKind, Store, query};

fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, 0)
        .single()
        .expect("a valid time")
}

fn date(y: i32, mo: u32, d: u32) -> NaiveDate {
    NaiveDate::from_ymd_opt(y, mo, d).expect("a valid date")
}

const NEW_YORK: Tz = chrono_tz::America::New_York;

#[test]
fn a_window_is_the_last_days_of_its_zone_each_from_midnight_to_midnight() {
    // Noon in New York on 2026-03-10; its clocks went forward at 02:00 on 03-08.
    let w = UsageWindow::last_days(3, NEW_YORK, utc(2026, 3, 10, 16, 0));
    let dates: Vec<_> = w.days.iter().map(|d| d.date).collect();
    assert_eq!(
        dates,
        [date(2026, 3, 8), date(2026, 3, 9), date(2026, 3, 10)]
    );
    // The day of the change starts at EST midnight and ends at EDT midnight: 23 hours.
    assert_eq!(w.since(), utc(2026, 3, 8, 5, 0));
    assert_eq!(w.days[0].end, utc(2026, 3, 9, 4, 0));
    assert_eq!(w.days[1].start, w.days[0].end, "no gap between days");
    assert_eq!(w.until(), utc(2026, 3, 11, 4, 0));
    // 01:30 UTC on 03-11 is still 03-10 in New York: the same window.
    let late = UsageWindow::last_days(3, NEW_YORK, utc(2026, 3, 11, 1, 30));
    assert_eq!(late.days, w.days);
    // Out of range is held to the range.
    assert_eq!(UsageWindow::last_days(0, Tz::UTC, Utc::now()).days.len(), 1);
    assert_eq!(
        UsageWindow::last_days(10_000, Tz::UTC, Utc::now())
            .days
            .len(),
        MAX_USAGE_DAYS as usize
    );
}

#[test]
fn a_day_whose_midnight_does_not_exist_starts_at_its_first_hour() {
    // Havana moved its clocks from 00:00 to 01:00 on 2026-03-08.
    let havana = chrono_tz::America::Havana;
    let start = start_of_day(date(2026, 3, 8), havana);
    assert_eq!(
        start.with_timezone(&havana).format("%H:%M").to_string(),
        "01:00"
    );
    assert_eq!(start, utc(2026, 3, 8, 5, 0));
}

async fn task(store: &Store, origin: Origin, job: Option<&str>, parent: Option<&str>) -> String {
    let new = NewTask {
        task: "t".into(),
        origin,
        profile: "fast".into(),
        parent_id: parent.map(str::to_string),
        job_id: job.map(str::to_string),
        ..Default::default()
    };
    store.tasks().create(&new).await.expect("task").id
}

/// A trace row of `kind` answered by `profile`, recorded at `at`.
async fn step(
    store: &Store,
    task: &str,
    kind: StepKind,
    profile: &str,
    (prompt, completion, ms): (i64, i64, i64),
    at: DateTime<Utc>,
) {
    let new = NewStep {
        request_tokens: prompt,
        result_tokens: completion,
        duration_ms: ms,
        ..NewStep::new(1, kind, profile)
    };
    let seq = store.tasks().add_step(task, &new).await.expect("step");
    // The store stamps a row with the time it is written; these are back-dated by hand.
    query("UPDATE task_steps SET created_at = ? WHERE task_id = ? AND seq = ?")
        .bind(at)
        .bind(task)
        .bind(seq)
        .execute(store)
        .await
        .expect("back-dated");
}

fn figures(calls: i64, prompt: i64, completion: i64, ms: i64) -> Figures {
    Figures {
        calls,
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: prompt + completion,
        model_ms: ms,
    }
}

on_both_engines!(
    Memory,
    tokio::test,
    async fn usage_is_summed_per_local_day_per_profile_and_per_job(store: Store) {
        use StepKind::{Model, Tool};
        let job = crate::testing::digest_job(&store, "America/New_York").await;
        // A job's run, and a sub-agent it started (its calls are the job's too).
        let run = task(&store, Origin::Job, Some(&job.id), None).await;
        let sub = task(&store, Origin::Agent, Some(&job.id), Some(&run)).await;
        // A task by hand.
        let by_hand = task(&store, Origin::Cli, None, None).await;
        // A job deleted since: its task keeps the id.
        let orphan = task(&store, Origin::Job, Some("gone0123"), None).await;
        // March 2026, at a day, hour and minute in UTC.
        let mar = |d, h, mi| utc(2026, 3, d, h, mi);
        let steps = [
            (&run, Model, "fast", (1000, 100, 2000), mar(10, 14, 0)),
            // 23:30 on 03-08 in New York, though 03-09 in UTC.
            (&run, Model, "fast", (500, 50, 1000), mar(9, 3, 30)),
            (&run, Tool, "web_fetch", (0, 999, 40), mar(10, 14, 1)),
            (&sub, Model, "pro", (300, 30, 500), mar(10, 15, 0)),
            // One call, and one that failed (time, no tokens).
            (&by_hand, Model, "pro", (4000, 400, 3000), mar(5, 12, 0)),
            (&by_hand, Model, "pro", (0, 0, 700), mar(5, 12, 1)),
            // 00:30 on the window's first day counts; 23:30 the evening before does not.
            (&orphan, Model, "fast", (10, 1, 5), mar(4, 5, 30)),
            (&orphan, Model, "fast", (7777, 7, 7), mar(4, 4, 30)),
        ];
        for (task, kind, profile, figures, at) in steps {
            step(&store, task, kind, profile, figures, at).await;
        }

        let window = UsageWindow::last_days(7, NEW_YORK, utc(2026, 3, 10, 16, 0));
        let u = store.tasks().usage(&window).await.expect("usage");
        assert_eq!((u.days, u.timezone.as_str()), (7, "America/New_York"));
        assert_eq!(
            (u.since, u.until),
            (utc(2026, 3, 4, 5, 0), utc(2026, 3, 11, 4, 0))
        );
        assert_eq!(u.totals, figures(6, 5810, 581, 7205));
        let days: Vec<_> = u.by_day.iter().map(|d| (d.day, d.figures)).collect();
        let zero = Figures::default();
        assert_eq!(
            days,
            [
                (date(2026, 3, 4), figures(1, 10, 1, 5)),
                (date(2026, 3, 5), figures(2, 4000, 400, 3700)),
                (date(2026, 3, 6), zero),
                (date(2026, 3, 7), zero),
                (date(2026, 3, 8), figures(1, 500, 50, 1000)),
                (date(2026, 3, 9), zero),
                (date(2026, 3, 10), figures(2, 1300, 130, 2500)),
            ]
        );
        let profiles: Vec<_> = u
            .by_profile
            .iter()
            .map(|p| (p.profile.as_str(), p.figures))
            .collect();
        assert_eq!(
            profiles,
            [
                ("pro", figures(3, 4300, 430, 4200)),
                ("fast", figures(3, 1510, 151, 3005))
            ]
        );
        let jobs: Vec<_> = u
            .by_job
            .iter()
            .map(|j| {
                (
                    j.job_id.as_deref(),
                    j.job_name.as_deref(),
                    j.origin,
                    j.figures,
                )
            })
            .collect();
        assert_eq!(
            jobs,
            [
                (None, None, Some(Origin::Cli), figures(2, 4000, 400, 3700)),
                (
                    Some(job.id.as_str()),
                    Some("digest"),
                    None,
                    figures(3, 1800, 180, 3500)
                ),
                (Some("gone0123"), None, None, figures(1, 10, 1, 5)),
            ]
        );

        // A window with no calls: every day, all zero, and empty lists.
        let before = UsageWindow::last_days(2, NEW_YORK, utc(2025, 1, 1, 12, 0));
        let empty = store.tasks().usage(&before).await.expect("usage");
        assert_eq!(empty.totals, zero);
        assert_eq!(empty.by_day.len(), 2);
        assert!(empty.by_day.iter().all(|d| d.figures == zero));
        assert!(empty.by_profile.is_empty() && empty.by_job.is_empty());
    }
);

/// Over a year of history the sums must not read every trace row ever written (model answers
/// and tool outputs sit in the same table): each of the three statements reads the window's
/// model rows from migration 0011's index.
#[tokio::test]
async fn the_sums_read_the_index_and_never_scan_the_trace() {
    let store = Store::open_in_memory().await.expect("store");
    let window = UsageWindow::last_days(30, Tz::UTC, Utc::now());
    type Plan = (i64, i64, i64, String);
    let details = |rows: Vec<Plan>| rows.into_iter().map(|r| r.3).collect::<Vec<_>>().join("; ");
    let daily: Vec<Plan> = store
        .all(by_day_after("EXPLAIN QUERY PLAN ", &window).build_query_as())
        .await
        .expect("plan");
    let mut plans = vec![("by day", details(daily))];
    for (what, sql) in [("by profile", BY_PROFILE), ("by job", BY_JOB)] {
        let rows: Vec<Plan> = store
            .all(
                query_as(format!("EXPLAIN QUERY PLAN {sql}"))
                    .bind(window.since())
                    .bind(window.until()),
            )
            .await
            .expect("plan");
        plans.push((what, details(rows)));
    }
    for (what, plan) in plans {
        assert!(
            plan.contains("USING COVERING INDEX task_steps_model_usage"),
            "{what}: {plan}"
        );
        assert!(
            !plan.contains("SCAN s") && !plan.contains("SCAN task_steps"),
            "{what}: {plan}"
        );
    }
}
