//! Footprint of the real daemon: the release binary `hermes-agent serve`, started by the bench
//! on a loopback port with a scripted model. RSS (VmRSS of /proc/PID/status) idle after start,
//! along 10,000 tasks submitted over the HTTP API, along an hour-equivalent of job firings, and
//! idle again; start-up time to a ready `/healthz` on an empty and on a 100k-task data dir; the
//! peak RSS of a one-shot `hermes-agent run` (its own `VmHWM`, read under ptrace as it exits);
//! the binary's size. Idle figures are split into anonymous memory (heap, stacks) and
//! file-backed pages (mostly the binary's own code and read-only data, mapped as it runs).
//!
//! What the store's smaller pool costs: write and read throughput through `Store` with the
//! daemon's 4 connections and with the 8 it had before.
//!
//! `-- footprint quick` measures only the binary, the start-ups on an empty data dir, the idle
//! daemon, the one-shot run and the pool (≈ 30 s instead of ≈ 4 min).

use crate::common::{self, figure, percentile};
use anyhow::{Context, Result, bail};
use futures::StreamExt;
use hermes_engine::llm::scripted::{Reply, ScriptedModel};
use hermes_store::{NewStep, NewTask, StepKind, Store, StoreOptions, TaskOutcome, TaskState};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TASKS: usize = 10_000;
const SAMPLE_EVERY: usize = 1_000;
const IN_FLIGHT: usize = 16;
/// 60 jobs firing every second for 60 s: 3,600 firings, as many as 60 per-minute jobs make
/// in an hour.
const JOBS: usize = 60;
const JOB_SECONDS: u64 = 60;

/// `HERMES_BENCH_JOB_SECONDS` runs the firings longer, to tell a cache filling up from a leak.
fn job_seconds() -> u64 {
    std::env::var("HERMES_BENCH_JOB_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(JOB_SECONDS)
}
const HISTORY_TASKS: usize = 100_000;
const STARTS: usize = 5;
/// One-shot runs measured (after one warm-up run on the same data dir).
const ONE_SHOTS: usize = 5;
/// Statements per pool-throughput measurement.
const POOL_STATEMENTS: usize = 20_000;

pub fn binary() -> PathBuf {
    std::env::var_os("HERMES_BENCH_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/hermes-agent")
        })
}

pub async fn run(quick: bool) -> Result<()> {
    println!("\n== footprint: the release daemon (`hermes-agent serve`)");
    let bin = binary();
    if !bin.exists() {
        bail!(
            "{} is missing: build it first with `cargo build --release` (or point HERMES_BENCH_BIN at a release binary)",
            bin.display()
        );
    }
    size(&bin)?;
    pool_cost().await?;
    // Two model calls per task: `recall` (a real built-in: a tantivy search), then the answer.
    let model = ScriptedModel::start_with(|req: &Value| {
        let asked = req["messages"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"));
        if asked || req["tools"].as_array().is_none_or(|t| t.is_empty()) {
            Reply::text("done")
        } else {
            Reply::tool_calls(&[("recall", json!({"query": "benchmark preferences"}))])
        }
    })
    .await;
    let client = reqwest::Client::new();
    let root = tempfile::tempdir()?;
    let cfg = write_config(root.path(), &model.base_url())?;
    let mib = |kib: u64| format!("{:.1}", kib as f64 / 1024.0);

    // One-shot `run`: the task's two model calls (recall, then the answer) in a process of
    // its own; its peak RSS as the kernel counts it.
    let runs_dir = root.path().join("oneshot");
    let mut peaks = Vec::new();
    let mut walls = Vec::new();
    for i in 0..=ONE_SHOTS {
        let (peak_kib, wall) = one_shot(&bin, &cfg, &runs_dir)?;
        if i > 0 {
            peaks.push(peak_kib as f64);
            walls.push(wall.as_secs_f64() * 1e3);
        }
    }
    figure(
        "one-shot `run` peak RSS (its VmHWM at exit)",
        format!(
            "median {} MiB (min {}, max {}; {ONE_SHOTS} runs after a warm-up)",
            mib(percentile(&peaks, 50.0) as u64),
            mib(percentile(&peaks, 0.0) as u64),
            mib(percentile(&peaks, 100.0) as u64)
        ),
    );
    figure(
        "  its wall time, spawn to exit",
        format!("median {:.0} ms", percentile(&walls, 50.0)),
    );

    // Start-up on an empty data dir (fresh each time: schema and index are created).
    let mut empty = Vec::new();
    for i in 0..STARTS {
        let d = Daemon::spawn(
            &bin,
            &cfg,
            &root.path().join(format!("empty{i}")),
            root.path(),
        )?;
        let (d, ready) = d.ready(&client).await?;
        empty.push(ready.as_secs_f64() * 1e3);
        d.stop().await?;
    }

    // The soak: one daemon, 10,000 tasks, then job firings.
    let data = root.path().join("soak");
    let d = Daemon::spawn(&bin, &cfg, &data, root.path())?;
    let (d, _) = d.ready(&client).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle_start = d.rss()?;
    let parts = memory_parts(d.pid())?;
    figure("idle after start", format!("{} MiB", mib(idle_start)));
    figure(
        "  anonymous + file-backed; threads",
        format!(
            "{} + {} MiB; {} threads",
            mib(parts.anon_kib),
            mib(parts.file_kib),
            parts.threads
        ),
    );
    if quick {
        d.stop().await?;
        figure("start-up to /healthz ready, empty data dir", starts(&empty));
        model.stop().await;
        return Ok(());
    }
    let mut task_series = Vec::new();
    let t0 = Instant::now();
    for batch in 0..TASKS / SAMPLE_EVERY {
        let failures = futures::stream::iter(0..SAMPLE_EVERY)
            .map(|i| {
                let client = client.clone();
                let url = d.url("/v1/tasks");
                async move {
                    let r = client
                        .post(url)
                        .json(&json!({"task": format!("Soak task {}: recall, then answer.", batch * SAMPLE_EVERY + i)}))
                        .send()
                        .await;
                    match r {
                        Ok(r) if r.status().as_u16() == 202 => 0,
                        _ => 1,
                    }
                }
            })
            .buffer_unordered(IN_FLIGHT)
            .fold(0usize, |a, b| async move { a + b })
            .await;
        if failures > 0 {
            bail!("{failures} task submissions were refused");
        }
        d.drain(&client).await?;
        task_series.push(d.rss()?);
    }
    let tasks_s = t0.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle_after_tasks = d.rss()?;

    // Job firings: 60 jobs, every second, for a minute.
    let mut job_ids = Vec::new();
    for i in 0..JOBS {
        let r = client
            .post(d.url("/v1/jobs"))
            .json(&json!({"task": format!("Soak job {i}: recall, then answer."), "schedule": "every 1s", "timezone": "UTC"}))
            .send()
            .await?;
        let status = r.status();
        let body: Value = r.json().await.unwrap_or(Value::Null);
        if status.as_u16() != 201 {
            bail!("creating a job: {status} {body}");
        }
        job_ids.push(body["id"].as_str().unwrap_or_default().to_string());
    }
    let mut job_series = Vec::new();
    for _ in 0..job_seconds() / 10 {
        tokio::time::sleep(Duration::from_secs(10)).await;
        job_series.push(d.rss()?);
    }
    let mut runs = std::collections::BTreeMap::<String, usize>::new();
    for id in &job_ids {
        let r = client
            .delete(d.url(&format!("/v1/jobs/{id}")))
            .send()
            .await?;
        if !r.status().is_success() {
            bail!("deleting job {id}: {}", r.status());
        }
    }
    d.drain(&client).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle_after_jobs = d.rss()?;
    d.stop().await?;
    // Count what happened, from the data dir.
    let store = Store::open(&data).await?;
    let counts = store.tasks().counts().await?;
    store.close().await;
    for (state, n) in &counts {
        runs.insert(state.to_string(), *n as usize);
    }
    let succeeded = runs.get("succeeded").copied().unwrap_or(0);
    let firings = succeeded.saturating_sub(TASKS);

    let series: Vec<String> = task_series.iter().map(|k| mib(*k)).collect();
    figure(
        &format!("after each {SAMPLE_EVERY} of {TASKS} API tasks (MiB)"),
        series.join(" "),
    );
    figure(
        "  tasks/s through the API (2 model calls + recall each)",
        format!("{:.0}", TASKS as f64 / tasks_s),
    );
    figure(
        "idle after the tasks",
        format!("{} MiB", mib(idle_after_tasks)),
    );
    let series: Vec<String> = job_series.iter().map(|k| mib(*k)).collect();
    figure(
        &format!("every 10 s of {JOBS} jobs firing every 1 s (MiB)"),
        series.join(" "),
    );
    figure(
        "  job firings run to success",
        format!(
            "{firings} (≈ {JOBS} per-minute jobs for {} min)",
            job_seconds()
        ),
    );
    figure(
        "idle after the jobs",
        format!("{} MiB", mib(idle_after_jobs)),
    );
    figure("task states in the data dir", format!("{runs:?}"));
    let growth = |a: u64, b: u64| (b as f64 - a as f64) / 1024.0;
    figure(
        "growth from 2,000 to 10,000 tasks",
        format!(
            "{:+.1} MiB",
            growth(task_series[1], task_series[task_series.len() - 1])
        ),
    );
    figure(
        "growth over the firings (first to last sample)",
        format!(
            "{:+.1} MiB",
            growth(job_series[0], job_series[job_series.len() - 1])
        ),
    );
    if runs.get("failed").copied().unwrap_or(0) > 0 {
        bail!("some soak tasks failed: {runs:?}");
    }

    // Start-up on a data dir with 100,000 finished tasks.
    let history = root.path().join("history");
    let t_fill = Instant::now();
    fill_history(&history).await?;
    let fill_s = t_fill.elapsed().as_secs_f64();
    let mut full = Vec::new();
    let mut full_rss = 0;
    for _ in 0..STARTS {
        let d = Daemon::spawn(&bin, &cfg, &history, root.path())?;
        let (d, ready) = d.ready(&client).await?;
        full.push(ready.as_secs_f64() * 1e3);
        full_rss = d.rss()?;
        d.stop().await?;
    }
    figure("start-up to /healthz ready, empty data dir", starts(&empty));
    figure(
        "start-up to /healthz ready, 100k-task data dir",
        starts(&full),
    );
    figure(
        "  RSS when ready on the 100k-task data dir",
        format!("{} MiB", mib(full_rss)),
    );
    figure(
        "  (filling 100k finished tasks via the Store API took)",
        format!("{fill_s:.1} s"),
    );
    model.stop().await;
    Ok(())
}

/// Store throughput with the daemon's pool and with the former 8 connections: `add_step` writes
/// (≈ 400-byte rows, as §5 of BENCHMARKS.md) and `store.tasks().get` reads, by 1, 8 and 64 callers.
async fn pool_cost() -> Result<()> {
    let output = common::filler(400);
    let row = NewStep {
        result_tokens: 100,
        arguments: Some(r#"{"nonce":"x","step":1}"#.into()),
        output: Some(output),
        ..NewStep::new(1, StepKind::Tool, "noop")
    };
    let daemon = StoreOptions::default().max_connections;
    for connections in [daemon, 8] {
        let mut line = Vec::new();
        for (reads, callers) in [
            (false, 1usize),
            (false, 8),
            (false, 64),
            (true, 8),
            (true, 64),
        ] {
            let dir = tempfile::tempdir()?;
            let store = Store::open_with(
                dir.path(),
                StoreOptions {
                    max_connections: connections,
                    ..StoreOptions::default()
                },
            )
            .await?;
            let mut ids = Vec::with_capacity(callers);
            for _ in 0..callers {
                let t = store
                    .tasks()
                    .create(&NewTask {
                        task: "benchmark".into(),
                        origin: hermes_store::Origin::Cli,
                        profile: "fast".into(),
                        ..Default::default()
                    })
                    .await?;
                ids.push(t.id);
            }
            let per = POOL_STATEMENTS / callers;
            let t0 = Instant::now();
            let results = futures::future::join_all(ids.iter().map(|id| {
                let store = store.clone();
                let row = row.clone();
                async move {
                    for _ in 0..per {
                        if reads {
                            store.tasks().get(id).await?;
                        } else {
                            store.tasks().add_step(id, &row).await?;
                        }
                    }
                    anyhow::Ok(())
                }
            }))
            .await;
            let secs = t0.elapsed().as_secs_f64();
            for r in results {
                r?;
            }
            store.close().await;
            line.push(format!(
                "{} {callers}: {:.0}/s",
                if reads { "reads" } else { "writes" },
                (per * callers) as f64 / secs
            ));
        }
        figure(
            &format!(
                "store, {connections} connections{}",
                if connections == daemon {
                    " (the daemon's)"
                } else {
                    ""
                }
            ),
            line.join(", "),
        );
    }
    Ok(())
}

/// Start-up times in ms: the median and the range.
fn starts(v: &[f64]) -> String {
    format!(
        "median {:.0} ms (min {:.0}, max {:.0}; {STARTS} starts)",
        percentile(v, 50.0),
        percentile(v, 0.0),
        percentile(v, 100.0)
    )
}

/// Runs `hermes-agent run` once; returns its peak RSS in KiB and its wall time.
fn one_shot(bin: &Path, cfg: &Path, data_dir: &Path) -> Result<(u64, Duration)> {
    // The answer goes to a file: the child is stopped as it exits (see `traced_peak_rss`), still
    // holding its stdout, so a pipe read to its end would wait for it for ever.
    let out_path = data_dir.with_extension("stdout");
    let out_file = std::fs::File::create(&out_path)
        .with_context(|| format!("creating {}", out_path.display()))?;
    let mut cmd = Command::new(bin);
    cmd.arg("--config")
        .arg(cfg)
        .arg("--data-dir")
        .arg(data_dir)
        .arg("run")
        .arg("What is 17 * 23? Recall first, then answer.")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(out_file)
        .stderr(Stdio::null());
    let t0 = Instant::now();
    let (status, peak_kib) = traced_peak_rss(cmd)?;
    let wall = t0.elapsed();
    let out = std::fs::read_to_string(&out_path)?;
    if !status.success() || out.trim() != "done" {
        bail!("`hermes-agent run` exited {status} with {out:?}");
    }
    Ok((peak_kib, wall))
}

fn size(bin: &Path) -> Result<()> {
    let len = std::fs::metadata(bin)?.len();
    figure(
        "release binary size",
        format!("{:.1} MiB ({})", len as f64 / 1048576.0, bin.display()),
    );
    let tmp = tempfile::tempdir()?;
    let stripped = tmp.path().join("hermes-agent.stripped");
    let ok = Command::new("strip")
        .arg("-o")
        .arg(&stripped)
        .arg(bin)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if ok {
        let s = std::fs::metadata(&stripped)?.len();
        figure(
            "  stripped (strip -o copy)",
            format!("{:.1} MiB", s as f64 / 1048576.0),
        );
    }
    Ok(())
}

fn write_config(dir: &Path, model_url: &str) -> Result<PathBuf> {
    let port = common::free_port()?;
    let text = format!(
        "# written by benches/agent/footprint.rs
model:
  profiles:
    fast: {{base_url: \"{model_url}\", model: scripted, timeout_s: 60}}
    pro: {{base_url: \"{model_url}\", model: scripted, timeout_s: 60}}
tools:
  manifests_dir: /nonexistent-hermes-bench-tools
scheduler:
  timezone: UTC
  min_interval_s: 1
  max_jobs: 1000
server:
  port: {port}
"
    );
    let path = dir.join("settings.yaml");
    std::fs::write(&path, text)?;
    Ok(path)
}

async fn fill_history(dir: &Path) -> Result<()> {
    let store = Store::open(dir).await?;
    let output = common::filler(300);
    let chunks = 4;
    let per = HISTORY_TASKS / chunks;
    let results = futures::future::join_all((0..chunks).map(|c| {
        let store = store.clone();
        let output = output.clone();
        async move {
            for i in 0..per {
                let t = store
                    .tasks()
                    .create(&NewTask {
                        task: format!("History task {c}-{i}: summarise the morning news."),
                        origin: hermes_store::Origin::Api,
                        profile: "fast".into(),
                        ..Default::default()
                    })
                    .await?;
                store
                    .tasks()
                    .finish(
                        &t.id,
                        &TaskOutcome {
                            state: TaskState::Succeeded,
                            answer: Some(output.clone()),
                            error: None,
                            reason: None,
                            parse_failures: 0,
                            prompt_tokens: 700,
                            completion_tokens: 80,
                        },
                    )
                    .await?;
            }
            anyhow::Ok(())
        }
    }))
    .await;
    for r in results {
        r?;
    }
    store.close().await;
    Ok(())
}

/// A daemon process started by the bench; killed if dropped while running.
pub(crate) struct Daemon {
    child: Child,
    port: u16,
    spawned: Instant,
    log: PathBuf,
}

impl Daemon {
    pub(crate) fn spawn(bin: &Path, cfg: &Path, data_dir: &Path, logs: &Path) -> Result<Daemon> {
        let text = std::fs::read_to_string(cfg)?;
        let port: u16 = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("port:"))
            .and_then(|p| p.trim().parse().ok())
            .context("no server port in the bench config")?;
        let log = logs.join(format!(
            "daemon-{}.log",
            data_dir.file_name().and_then(|n| n.to_str()).unwrap_or("x")
        ));
        let stderr = std::fs::File::create(&log)?;
        let spawned = Instant::now();
        let child = Command::new(bin)
            .arg("--config")
            .arg(cfg)
            .arg("--data-dir")
            .arg(data_dir)
            .arg("serve")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        Ok(Daemon {
            child,
            port,
            spawned,
            log,
        })
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn rss(&self) -> Result<u64> {
        common::rss_kib(self.pid())
    }

    /// Waits for `/healthz` to answer 200; returns the time since spawn.
    pub(crate) async fn ready(mut self, client: &reqwest::Client) -> Result<(Daemon, Duration)> {
        let url = self.url("/healthz");
        loop {
            if let Ok(r) = client.get(&url).send().await
                && r.status().is_success()
            {
                let took = self.spawned.elapsed();
                return Ok((self, took));
            }
            if let Some(status) = self.child.try_wait()? {
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                bail!("the daemon exited ({status}) before it was ready:\n{log}");
            }
            if self.spawned.elapsed() > Duration::from_secs(60) {
                bail!(
                    "the daemon was not ready within 60 s; log: {}",
                    self.log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Waits until no task is pending or running.
    async fn drain(&self, client: &reqwest::Client) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let h: Value = client
                .get(self.url("/healthz"))
                .send()
                .await?
                .json()
                .await?;
            if h["pending"] == 0 && h["running"] == 0 {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("tasks still open after 5 minutes: {h}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGTERM, then wait (bounded) for a clean exit.
    pub(crate) async fn stop(mut self) -> Result<()> {
        self.term_handled().await?;
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.pid().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(40);
        loop {
            if let Some(status) = self.child.try_wait()? {
                if !status.success() {
                    bail!(
                        "the daemon exited with {status}; log: {}",
                        self.log.display()
                    );
                }
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("the daemon did not stop within 40 s of SIGTERM");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Daemon {
    /// Waits until the daemon catches SIGTERM. It starts answering `/healthz` a moment before
    /// it installs its handler (`daemon::run` polls the shutdown future after starting the
    /// API), and a SIGTERM in between ends it by the default action, uncleanly: seen here under
    /// load, a stop straight after start-up.
    async fn term_handled(&self) -> Result<()> {
        const SIGTERM_BIT: u64 = 1 << (15 - 1);
        let path = format!("/proc/{}/status", self.pid());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let status =
                std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
            let caught = status
                .lines()
                .find_map(|l| l.strip_prefix("SigCgt:"))
                .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
                .with_context(|| format!("no SigCgt line in {path}"))?;
            if caught & SIGTERM_BIT != 0 {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("the daemon did not install its SIGTERM handler within 10 s of start");
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A process's resident memory by kind (KiB, from /proc/PID/status) and its thread count.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MemoryParts {
    /// Heap, stacks and other private memory.
    pub(crate) anon_kib: u64,
    /// Pages of mapped files: the binary's code and read-only data, shared libraries.
    pub(crate) file_kib: u64,
    pub(crate) threads: u64,
}

pub(crate) fn memory_parts(pid: u32) -> Result<MemoryParts> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|n| n.parse::<u64>().ok())
            .with_context(|| format!("no {name} line in /proc/{pid}/status"))
    };
    Ok(MemoryParts {
        anon_kib: field("RssAnon:")?,
        file_kib: field("RssFile:")?,
        threads: field("Threads:")?,
    })
}

/// Runs `cmd` to its end under ptrace and returns its exit status and the peak RSS of the
/// program itself, in KiB: `VmHWM` of its own memory, read when it stops on its way out.
///
/// Not `ru_maxrss` from `wait4`: the kernel records there, at `exec`, the peak of the memory
/// the child had before it, which is this bench's own (a spawned child shares or copies it), so
/// a program smaller than the bench would measure as large as the bench.
fn traced_peak_rss(mut cmd: Command) -> Result<(std::process::ExitStatus, u64)> {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    // ptrace is variadic: every argument is passed at its full width, the address as a pointer.
    const NO_ADDR: *mut libc::c_void = std::ptr::null_mut();
    // SAFETY: between fork and exec only an async-signal-safe system call is made.
    unsafe {
        cmd.pre_exec(|| {
            if libc::ptrace(libc::PTRACE_TRACEME, 0, NO_ADDR, 0 as libc::c_long) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().context("starting the traced child")?;
    let pid = child.id() as libc::pid_t;
    let wait = || -> Result<libc::c_int> {
        let mut status: libc::c_int = 0;
        loop {
            // SAFETY: a plain system call on our own child, with a valid out-pointer.
            if unsafe { libc::waitpid(pid, &mut status, libc::__WALL) } == pid {
                return Ok(status);
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e).context("waitpid");
            }
        }
    };
    // The first stop is the exec's: from there on, stop again as it exits.
    let first = wait()?;
    if !libc::WIFSTOPPED(first) {
        bail!("the traced child ended before its program started (wait status {first})");
    }
    // SAFETY: ptrace requests on our own stopped tracee.
    unsafe {
        libc::ptrace(
            libc::PTRACE_SETOPTIONS,
            pid,
            NO_ADDR,
            libc::PTRACE_O_TRACEEXIT as libc::c_long,
        );
        libc::ptrace(libc::PTRACE_CONT, pid, NO_ADDR, 0 as libc::c_long);
    }
    let mut peak = None;
    let status = loop {
        let status = wait()?;
        if !libc::WIFSTOPPED(status) {
            break status;
        }
        let mut signal = libc::WSTOPSIG(status);
        if status >> 8 == (libc::SIGTRAP | (libc::PTRACE_EVENT_EXIT << 8)) {
            let text = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
            peak = text
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
            signal = 0;
        }
        // Any other stop is a signal on its way to the program: hand it on.
        // SAFETY: as above.
        unsafe { libc::ptrace(libc::PTRACE_CONT, pid, NO_ADDR, signal as libc::c_long) };
    };
    let peak = peak.context("the child ended without the exit stop that reads its VmHWM")?;
    Ok((std::process::ExitStatus::from_raw(status), peak))
}
