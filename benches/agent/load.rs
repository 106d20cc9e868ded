//! Throughput and latency under load: C clients each submit a 3-call task to the worker pool
//! (`agent.workers` = C) and wait for it, against a model that takes 50 ms per call. Every task
//! must succeed with its own answer: the scripted model checks that each tool result it is
//! shown carries the task's own nonce, and the bench checks the answer names it.
//!
//! Three ways of running and waiting, because they differ by orders of magnitude at high C:
//! - `wait`: the worker pool, and `Agent::wait` per client, as `POST /v1/tasks` with
//!   `wait: true` and the scheduler's pool runner do;
//! - `collector`: the worker pool, and one collector on `Agent::subscribe` that hands each finish
//!   to its client (what `Agent::wait` would cost if it did not re-read the store on every other
//!   task's finish);
//! - `direct`: no pool; each client runs its own task (`Agent::create_claimed` +
//!   `Agent::run_claimed`, as `hermes-agent run` does) — the engine's capacity without the
//!   pool's claiming.

use crate::common::{self, Echo, StepScript, figure, percentile};
use anyhow::{Result, bail};
use futures::future::join_all;
use hermes_engine::agent::JobExecution;
use hermes_engine::agent::{Agent, RunOptions, Submit};
use hermes_engine::llm::scripted::ScriptedModel;
use hermes_store::{Task, TaskState};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{broadcast, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

const STEPS: u32 = 3;
const MODEL_LATENCY: Duration = Duration::from_millis(50);

/// Tasks each client runs one after another, so small levels give enough samples.
fn rounds(concurrency: usize) -> usize {
    match concurrency {
        1 => 20,
        10 => 10,
        100 => 3,
        _ => 1,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    AgentWait,
    Collector,
    /// No pool: each client runs its own task (`Agent::create_claimed` + `Agent::run_claimed`).
    Direct,
}

pub async fn run(levels: &[usize], modes: &[Waiting]) -> Result<()> {
    println!(
        "\n== load: C concurrent clients, tasks of {STEPS} model calls, model latency {} ms, agent.workers = C",
        MODEL_LATENCY.as_millis()
    );
    let ideal = MODEL_LATENCY.as_secs_f64() * 1e3 * f64::from(STEPS);
    println!(
        "  {:>10} {:>5} {:>6} {:>9} {:>9} {:>9} {:>9} {:>10} {:>7}",
        "waiting", "C", "tasks", "tasks/s", "p50 ms", "p99 ms", "max ms", "p50/ideal", "failed"
    );
    let mut failures = 0;
    for &mode in modes {
        for &c in levels {
            failures += level_line(c, mode, ideal).await?;
        }
    }
    figure("ideal task latency (3 × 50 ms)", format!("{ideal:.0} ms"));
    if failures > 0 {
        bail!("{failures} task(s) failed or crossed talk under load");
    }
    Ok(())
}

async fn level_line(c: usize, mode: Waiting, ideal: f64) -> Result<usize> {
    {
        let r = level(c, mode).await?;
        let p50 = percentile(&r.latencies_ms, 50.0);
        println!(
            "  {:>10} {:>5} {:>6} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>10.2} {:>7}",
            match mode {
                Waiting::AgentWait => "Agent::wait",
                Waiting::Collector => "collector",
                Waiting::Direct => "direct",
            },
            c,
            r.latencies_ms.len() + r.failed.len(),
            r.latencies_ms.len() as f64 / r.elapsed.as_secs_f64(),
            p50,
            percentile(&r.latencies_ms, 99.0),
            percentile(&r.latencies_ms, 100.0),
            p50 / ideal,
            r.failed.len()
        );
        for f in r.failed.iter().take(5) {
            println!("        failed: {f}");
        }
        Ok(r.failed.len())
    }
}

struct LevelResult {
    latencies_ms: Vec<f64>,
    failed: Vec<String>,
    elapsed: Duration,
}

/// Finished tasks not yet claimed by their client, or clients waiting for theirs.
enum Slot {
    Done,
    Waiting(oneshot::Sender<()>),
}

type Slots = Arc<Mutex<HashMap<String, Slot>>>;

/// The collector: one subscriber that hands every finish to the client waiting for it.
fn collect(agent: Agent, slots: Slots) -> tokio::task::JoinHandle<()> {
    let mut rx = agent.subscribe();
    tokio::spawn(async move {
        loop {
            match rx.recv().await {
                Ok(ev) => {
                    let mut m = slots.lock().unwrap_or_else(|p| p.into_inner());
                    match m.remove(&ev.id) {
                        Some(Slot::Waiting(tx)) => {
                            let _ = tx.send(());
                        }
                        _ => {
                            m.insert(ev.id, Slot::Done);
                        }
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    // Missed some: wake every waiter; each re-checks the store.
                    let mut m = slots.lock().unwrap_or_else(|p| p.into_inner());
                    for (_, slot) in m.drain() {
                        if let Slot::Waiting(tx) = slot {
                            let _ = tx.send(());
                        }
                    }
                }
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    })
}

async fn wait_collected(agent: &Agent, slots: &Slots, id: &str) -> Result<Task> {
    loop {
        let rx = {
            let mut m = slots.lock().unwrap_or_else(|p| p.into_inner());
            match m.remove(id) {
                Some(Slot::Done) => None,
                _ => {
                    let (tx, rx) = oneshot::channel();
                    m.insert(id.to_string(), Slot::Waiting(tx));
                    Some(rx)
                }
            }
        };
        if let Some(rx) = rx {
            tokio::time::timeout(Duration::from_secs(300), rx).await??;
        }
        let t = agent.store().tasks().get(id).await?;
        if t.state.is_finished() {
            return Ok(t);
        }
    }
}

async fn level(c: usize, mode: Waiting) -> Result<LevelResult> {
    let script = StepScript {
        steps: STEPS,
        delay: MODEL_LATENCY,
        tool: "noop".into(),
    };
    let model = ScriptedModel::start_unrecorded(move |req| script.reply(req)).await;
    let dir = tempfile::tempdir()?;
    let mut settings = common::settings(&model.base_url());
    settings.agent.workers = c as u32;
    let app = common::build_app(
        settings,
        dir.path(),
        JobExecution::Pool,
        vec![Echo::new("noop", 0)],
    )
    .await?;
    let tracker = TaskTracker::new();
    let stop = CancellationToken::new();
    if mode != Waiting::Direct {
        app.agent.spawn_workers(c, &tracker, stop.clone());
    }

    let slots: Slots = Arc::default();
    let collector = collect(app.agent.clone(), slots.clone());
    let started = Instant::now();
    let clients = (0..c).map(|i| {
        let agent = app.agent.clone();
        let slots = slots.clone();
        async move {
            let mut lat = Vec::new();
            let mut failed = Vec::new();
            for r in 0..rounds(c) {
                let nonce = format!("c{c}-{i}-{r}");
                let rx = agent.subscribe();
                let t0 = Instant::now();
                let outcome = async {
                    if mode == Waiting::Direct {
                        let task = agent
                            .create_claimed(Submit {
                                task: format!(
                                    "Benchmark task nonce={nonce}: call noop twice, then answer."
                                ),
                                origin: hermes_store::Origin::Api,
                                ..Default::default()
                            })
                            .await?;
                        return anyhow::Ok(agent.run_claimed(task, RunOptions::default()).await?);
                    }
                    let task = agent
                        .submit(Submit {
                            task: format!(
                                "Benchmark task nonce={nonce}: call noop twice, then answer."
                            ),
                            origin: hermes_store::Origin::Api,
                            ..Default::default()
                        })
                        .await?;
                    match mode {
                        Waiting::AgentWait => {
                            anyhow::Ok(agent.wait(&task.id, rx, Duration::from_secs(300)).await?)
                        }
                        Waiting::Collector | Waiting::Direct => {
                            drop(rx);
                            wait_collected(&agent, &slots, &task.id).await
                        }
                    }
                }
                .await;
                match outcome {
                    Ok(t)
                        if t.state == TaskState::Succeeded
                            && t.answer.as_deref() == Some(&format!("done {nonce}")) =>
                    {
                        lat.push(t0.elapsed().as_secs_f64() * 1e3)
                    }
                    Ok(t) => failed.push(format!(
                        "{nonce}: {} answer {:?} error {:?}",
                        t.state, t.answer, t.error
                    )),
                    Err(e) => failed.push(format!("{nonce}: {e}")),
                }
            }
            (lat, failed)
        }
    });
    let results = join_all(clients).await;
    let elapsed = started.elapsed();
    collector.abort();
    stop.cancel();
    tracker.close();
    if tokio::time::timeout(Duration::from_secs(30), tracker.wait())
        .await
        .is_err()
    {
        bail!("workers did not stop within 30 s after the load run");
    }
    model.stop().await;
    let mut latencies_ms = Vec::new();
    let mut failed = Vec::new();
    for (l, f) in results {
        latencies_ms.extend(l);
        failed.extend(f);
    }
    Ok(LevelResult {
        latencies_ms,
        failed,
        elapsed,
    })
}
