//! Several daemons on one PostgreSQL database (`HERMES_BENCH_STORAGE_URL`, which must be set):
//! N complete daemons in this process (`daemon::run` each: its own data dir, workers,
//! scheduler, heartbeat and change feed), each measurement on a fresh database of that server.
//!
//! - tasks: C = 100 clients, each submitting through node `i % N` and waiting there (as
//!   `POST /v1/tasks` with `wait: true` does), tasks of 3 model calls × 50 ms; any node's
//!   workers take them;
//! - burst: J one-shot jobs due in the same second, on N nodes racing for them; each must fire
//!   once, with one run record. The fire-time error is `fired_at − scheduled_at`.
//!
//! All nodes share this machine's cores: the figures show the cost of sharing one database,
//! not what a machine per node would add.

use crate::common::{self, Echo, StepScript, figure, percentile};
use anyhow::{Context, Result, bail};
use futures::future::join_all;
use hermes_engine::agent::JobExecution;
use hermes_engine::agent::Submit;
use hermes_engine::llm::scripted::ScriptedModel;
use hermes_engine::scheduler::JobRequest;
use hermes_store::{Origin, TaskState};
use hermes_surfaces::app::App;
use sqlx::Connection;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

const STEPS: u32 = 3;
const MODEL_LATENCY: Duration = Duration::from_millis(50);
const CLIENTS: usize = 100;
const ROUNDS: usize = 3;

pub async fn run(jobs: &[usize]) -> Result<()> {
    let base = std::env::var("HERMES_BENCH_STORAGE_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .context("the nodes section needs HERMES_BENCH_STORAGE_URL=postgres://… (a server where it may create databases)")?;
    println!(
        "\n== nodes: N daemons on one PostgreSQL database, in one process on this machine; C = {CLIENTS}, tasks of {STEPS} model calls × {} ms",
        MODEL_LATENCY.as_millis()
    );
    println!(
        "  {:>5} {:>6} {:>9} {:>9} {:>9} {:>9} {:>7} {:>12}",
        "nodes", "tasks", "tasks/s", "p50 ms", "p99 ms", "max ms", "failed", "ran on nodes"
    );
    for n in 1..=3 {
        tasks_line(&base, n).await?;
    }
    let jobs = if jobs.is_empty() {
        &[1000, 10000][..]
    } else {
        jobs
    };
    for &j in jobs {
        burst_line(&base, 3, j).await?;
    }
    Ok(())
}

/// A fresh database on `base`'s server; its URL.
async fn fresh(base: &str) -> Result<String> {
    let mut url = url::Url::parse(base)?;
    let name = format!("hermes_bench_{}", uuid::Uuid::new_v4().simple());
    let mut admin = sqlx::PgConnection::connect(base).await?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut admin)
        .await?;
    url.set_path(&name);
    Ok(url.to_string())
}

struct Node {
    app: App,
    stop: oneshot::Sender<()>,
    running: tokio::task::JoinHandle<Result<(), hermes_surfaces::daemon::DaemonError>>,
    _dir: tempfile::TempDir,
}

async fn start_nodes(model_url: &str, db: &str, n: usize, workers: u32) -> Result<Vec<Node>> {
    let mut nodes = Vec::new();
    for _ in 0..n {
        let dir = tempfile::tempdir()?;
        let mut s = common::settings(model_url);
        s.storage.url = db.to_string();
        s.agent.workers = workers;
        s.scheduler.max_jobs = 20_000;
        let app = common::build_app(
            s,
            dir.path(),
            JobExecution::Pool,
            vec![Echo::new("noop", 0)],
        )
        .await?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let (stop, stopped) = oneshot::channel::<()>();
        let running = tokio::spawn(hermes_surfaces::daemon::run(app.clone(), listener, async {
            let _ = stopped.await;
        }));
        nodes.push(Node {
            app,
            stop,
            running,
            _dir: dir,
        });
    }
    // Up once every node has joined and started its services.
    let deadline = Instant::now() + Duration::from_secs(30);
    while nodes[0].app.store.nodes().list().await?.len() < n {
        if Instant::now() > deadline {
            bail!("the {n} nodes did not all join within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    Ok(nodes)
}

async fn stop_nodes(nodes: Vec<Node>) {
    for node in nodes {
        let _ = node.stop.send(());
        let _ = tokio::time::timeout(Duration::from_secs(60), node.running).await;
    }
}

async fn tasks_line(base: &str, n: usize) -> Result<()> {
    let script = StepScript {
        steps: STEPS,
        delay: MODEL_LATENCY,
        tool: "noop".into(),
    };
    let model = ScriptedModel::start_unrecorded(move |req| script.reply(req)).await;
    let db = fresh(base).await?;
    let nodes = start_nodes(&model.base_url(), &db, n, CLIENTS as u32).await?;
    let started = Instant::now();
    let clients = (0..CLIENTS).map(|i| {
        let agent = nodes[i % n].app.agent.clone();
        async move {
            let (mut lat, mut failed) = (Vec::new(), 0usize);
            for r in 0..ROUNDS {
                let nonce = format!("n{n}-{i}-{r}");
                let rx = agent.subscribe();
                let t0 = Instant::now();
                let submitted = agent
                    .submit(Submit {
                        task: format!(
                            "Benchmark task nonce={nonce}: call noop twice, then answer."
                        ),
                        origin: Origin::Api,
                        ..Default::default()
                    })
                    .await;
                let done = match submitted {
                    Ok(t) => agent.wait(&t.id, rx, Duration::from_secs(300)).await.ok(),
                    Err(_) => None,
                };
                match done {
                    Some(t)
                        if t.state == TaskState::Succeeded
                            && t.answer.as_deref() == Some(&format!("done {nonce}")) =>
                    {
                        lat.push(t0.elapsed().as_secs_f64() * 1e3)
                    }
                    _ => failed += 1,
                }
            }
            (lat, failed)
        }
    });
    let results = join_all(clients).await;
    let elapsed = started.elapsed().as_secs_f64();
    let mut lat: Vec<f64> = results.iter().flat_map(|(l, _)| l.clone()).collect();
    lat.sort_by(f64::total_cmp);
    let failed: usize = results.iter().map(|(_, f)| f).sum();
    let mut conn = sqlx::PgConnection::connect(&db).await?;
    let (ran_on,): (i64,) =
        sqlx::query_as("SELECT COUNT(DISTINCT node_id) FROM tasks WHERE node_id IS NOT NULL")
            .fetch_one(&mut conn)
            .await?;
    println!(
        "  {:>5} {:>6} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>7} {:>12}",
        n,
        CLIENTS * ROUNDS,
        lat.len() as f64 / elapsed,
        percentile(&lat, 50.0),
        percentile(&lat, 99.0),
        percentile(&lat, 100.0),
        failed,
        ran_on
    );
    stop_nodes(nodes).await;
    model.stop().await;
    if failed > 0 {
        bail!("{failed} task(s) failed or crossed talk on {n} nodes");
    }
    Ok(())
}

async fn burst_line(base: &str, n: usize, jobs: usize) -> Result<()> {
    let script = StepScript {
        steps: 1,
        delay: Duration::ZERO,
        tool: "noop".into(),
    };
    let model = ScriptedModel::start_unrecorded(move |req| script.reply(req)).await;
    let db = fresh(base).await?;
    let nodes = start_nodes(&model.base_url(), &db, n, 16).await?;
    // Added through every node in turn; whole seconds, so the schedule is the time stored.
    let lead = Duration::from_secs(15 + jobs as u64 / 150);
    let due = (chrono::Utc::now() + chrono::Duration::from_std(lead)?)
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let t_add = Instant::now();
    let adds = (0..n).map(|k| {
        let scheduler = nodes[k].app.scheduler.clone();
        let due = due.clone();
        async move {
            for i in (k..jobs).step_by(n) {
                let req = JobRequest {
                    task: format!("Benchmark job nonce=j{i}: answer."),
                    schedule: due.clone(),
                    ..Default::default()
                };
                scheduler.add(req, Origin::Api).await?;
            }
            anyhow::Ok(())
        }
    });
    for r in join_all(adds).await {
        r?;
    }
    if t_add.elapsed() > lead {
        bail!("adding {jobs} jobs took longer than the lead of {lead:?}");
    }
    let mut conn = sqlx::PgConnection::connect(&db).await?;
    let deadline = Instant::now() + lead + Duration::from_secs(300);
    loop {
        let (fired,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM job_runs")
            .fetch_one(&mut conn)
            .await?;
        let (open,): (i64,) =
            sqlx::query_as("SELECT COUNT(*) FROM tasks WHERE state IN ('pending', 'running')")
                .fetch_one(&mut conn)
                .await?;
        if fired as usize >= jobs && open == 0 {
            break;
        }
        if Instant::now() > deadline {
            bail!("{fired} of {jobs} jobs fired, {open} tasks open, 5 minutes after the due time");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let errors: Vec<(f64,)> = sqlx::query_as(
        "SELECT extract(epoch FROM fired_at - scheduled_at)::float8 * 1000 FROM job_runs \
         ORDER BY 1",
    )
    .fetch_all(&mut conn)
    .await?;
    let errors: Vec<f64> = errors.into_iter().map(|(e,)| e).collect();
    let (runs, once, by_nodes, fired): (i64, i64, i64, i64) = sqlx::query_as(
        "SELECT COUNT(*), COUNT(DISTINCT (job_id, scheduled_at)), COUNT(DISTINCT node_id), \
         COUNT(*) FILTER (WHERE outcome = 'fired') FROM job_runs",
    )
    .fetch_one(&mut conn)
    .await?;
    let (last,): (f64,) = sqlx::query_as(
        "SELECT extract(epoch FROM MAX(finished_at) - $1::timestamptz)::float8 FROM tasks",
    )
    .bind(&due)
    .fetch_one(&mut conn)
    .await?;
    figure(
        &format!("burst of {jobs} jobs on {n} nodes: runs / once each / fired"),
        format!("{runs} / {once} / {fired} (claimed by {by_nodes} node(s))"),
    );
    figure(
        &format!("burst of {jobs} jobs on {n} nodes: fire-time error"),
        format!(
            "p50 {:.0} ms   p99 {:.0} ms   max {:.0} ms; every task finished by due + {last:.1} s",
            percentile(&errors, 50.0),
            percentile(&errors, 99.0),
            percentile(&errors, 100.0)
        ),
    );
    stop_nodes(nodes).await;
    model.stop().await;
    if runs as usize != jobs || once as usize != jobs || fired as usize != jobs {
        bail!("{jobs} jobs: {runs} runs, {once} distinct, {fired} fired");
    }
    Ok(())
}
