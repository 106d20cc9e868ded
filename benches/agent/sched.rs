//! The scheduler's fire-time error with 1,000 jobs due at the same instant, and the SQLite
//! write throughput of trace rows (`store.tasks().add_step`), alone and from concurrent writers.

use crate::common::{self, StepScript, figure, percentile};
use anyhow::{Context, Result, bail};
use futures::future::join_all;
use hermes_engine::agent::JobExecution;
use hermes_engine::llm::scripted::ScriptedModel;
use hermes_engine::scheduler::JobRequest;
use hermes_store::{NewStep, NewTask, RunOutcome, StepKind, Store, StoreOptions, TaskFilter};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

const JOBS: usize = 1000;
/// The jobs are due this long after the bench starts adding them (adding must finish first).
const LEAD: Duration = Duration::from_secs(20);
const STEP_ROWS: usize = 20_000;

pub async fn run() -> Result<()> {
    println!("\n== sched: fire-time error, {JOBS} one-shot jobs due at the same instant");
    fire_error().await
}

pub async fn run_store() -> Result<()> {
    println!(
        "\n== store: SQLite write throughput of trace rows (store.tasks().add_step, ≈ 400-byte output)"
    );
    step_writes(StoreOptions::default(), "").await?;
    println!(
        "  the same INSERT through a pool of ONE connection (writers queue in the pool instead of \
         meeting SQLITE_BUSY and sleeping in SQLite's busy handler):"
    );
    let one = StoreOptions {
        max_connections: 1,
        ..StoreOptions::default()
    };
    step_writes(one, ", one connection").await
}

/// A tool row like the ones a busy agent writes (≈ 400 bytes of output).
fn bench_row(output: &str) -> NewStep {
    NewStep {
        result_tokens: 100,
        arguments: Some(r#"{"nonce":"x","step":1}"#.into()),
        output: Some(output.to_string()),
        ..NewStep::new(1, StepKind::Tool, "noop")
    }
}

async fn fire_error() -> Result<()> {
    let script = StepScript {
        steps: 1,
        delay: Duration::ZERO,
        tool: "noop".into(),
    };
    let model = ScriptedModel::start_with(move |req| script.reply(req)).await;
    let dir = tempfile::tempdir()?;
    let mut s = common::settings(&model.base_url());
    s.scheduler.max_jobs = JOBS as u32 + 10;
    let workers = s.agent.workers as usize;
    let app = common::build_app(s, dir.path(), JobExecution::Pool, vec![]).await?;
    let tracker = TaskTracker::new();
    let stop = CancellationToken::new();
    app.agent.spawn_workers(workers, &tracker, stop.clone());
    app.scheduler.start(&tracker, stop.clone()).await?;

    // Whole seconds, so the time written in the schedule is exactly the one stored.
    let due = chrono::Utc::now() + chrono::Duration::from_std(LEAD)?;
    let due = due
        .with_timezone(&chrono::Utc)
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let t_add = Instant::now();
    let mut ids = Vec::with_capacity(JOBS);
    for i in 0..JOBS {
        let job = app
            .scheduler
            .add(
                JobRequest {
                    task: format!("Benchmark job nonce=j{i}: answer."),
                    schedule: due.clone(),
                    ..Default::default()
                },
                hermes_store::Origin::Api,
            )
            .await
            .with_context(|| format!("adding job {i}"))?;
        ids.push(job.id);
    }
    let add_s = t_add.elapsed().as_secs_f64();
    if add_s > LEAD.as_secs_f64() - 2.0 {
        bail!(
            "adding {JOBS} jobs took {add_s:.1} s, longer than the lead of {LEAD:?}: the jobs were due before all existed"
        );
    }

    // Wait for every job to have recorded its firing (bounded).
    let deadline = Instant::now() + LEAD + Duration::from_secs(120);
    let mut errors_ms = Vec::with_capacity(JOBS);
    let mut outcomes = std::collections::BTreeMap::<String, usize>::new();
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let mut all = true;
        errors_ms.clear();
        outcomes.clear();
        for id in &ids {
            let runs = app.store.jobs().runs(id, 5).await?;
            match runs.first() {
                Some(r) => {
                    *outcomes.entry(format!("{:?}", r.outcome)).or_default() += 1;
                    if r.outcome == RunOutcome::Fired {
                        errors_ms.push(
                            (r.fired_at - r.scheduled_at)
                                .num_microseconds()
                                .unwrap_or(0) as f64
                                / 1e3,
                        );
                    }
                }
                None => all = false,
            }
        }
        if all {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "not every job fired within 2 minutes of its due time ({} recorded)",
                errors_ms.len()
            );
        }
    }
    // Then let their tasks finish, so the figure below is the whole burst.
    let t_done = Instant::now();
    loop {
        let counts = app.store.tasks().counts().await?;
        let open: i64 = counts
            .iter()
            .filter(|(s, _)| !s.is_finished())
            .map(|(_, n)| n)
            .sum();
        if open == 0 {
            break;
        }
        if t_done.elapsed() > Duration::from_secs(120) {
            bail!("{open} job tasks still unfinished 2 minutes after the burst");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let due_at = chrono::DateTime::parse_from_rfc3339(&due)?.with_timezone(&chrono::Utc);
    let last_finish = app
        .store
        .tasks()
        .list(&TaskFilter {
            limit: JOBS as i64 + 10,
            ..Default::default()
        })
        .await?
        .iter()
        .filter_map(|t| t.finished_at)
        .max()
        .context("no finished job tasks")?;
    let burst_s = (last_finish - due_at).num_milliseconds() as f64 / 1e3;
    figure(
        "adding the jobs (Scheduler::add, loop running)",
        format!("{:.2} s ({:.0} jobs/s)", add_s, JOBS as f64 / add_s),
    );
    figure(
        "fire-time error (fired_at − scheduled_at)",
        format!(
            "p50 {:.0} ms   p99 {:.0} ms   max {:.0} ms",
            percentile(&errors_ms, 50.0),
            percentile(&errors_ms, 99.0),
            percentile(&errors_ms, 100.0)
        ),
    );
    figure("run outcomes", format!("{outcomes:?}"));
    figure(
        "every job task finished (1 model call each) by",
        format!("due + {burst_s:.1} s (agent.workers = {workers})"),
    );
    stop.cancel();
    tracker.close();
    let _ = tokio::time::timeout(Duration::from_secs(30), tracker.wait()).await;
    model.stop().await;
    if outcomes.get("Fired").copied().unwrap_or(0) != JOBS {
        bail!("not every job fired: {outcomes:?}");
    }
    Ok(())
}

/// `store.tasks().add_step` from 1, 8 and 64 concurrent writers through a store opened with `opts`.
async fn step_writes(opts: StoreOptions, label: &str) -> Result<()> {
    let output = common::filler(400);
    for writers in [1usize, 8, 64] {
        let dir = tempfile::tempdir()?;
        let store = Store::open_with(dir.path(), opts).await?;
        let mut tasks = Vec::with_capacity(writers);
        for _ in 0..writers {
            tasks.push(
                store
                    .tasks()
                    .create(&NewTask {
                        task: "benchmark".into(),
                        origin: hermes_store::Origin::Cli,
                        profile: "fast".into(),
                        ..Default::default()
                    })
                    .await?
                    .id,
            );
        }
        let per = STEP_ROWS / writers;
        let t0 = Instant::now();
        let results = join_all(tasks.iter().map(|id| {
            let store = store.clone();
            let row = bench_row(&output);
            async move {
                for _ in 0..per {
                    store.tasks().add_step(id, &row).await?;
                }
                anyhow::Ok(())
            }
        }))
        .await;
        let secs = t0.elapsed().as_secs_f64();
        for r in results {
            r?;
        }
        let rows = per * writers;
        figure(
            &format!("{writers:>2} concurrent writer(s), {rows} rows{label}"),
            format!("{:.0} rows/s", rows as f64 / secs),
        );
        store.close().await;
    }
    Ok(())
}
