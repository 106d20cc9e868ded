//! Shared pieces of the benchmarks: settings and apps on temporary data dirs, the scripted
//! model's step logic, a no-op tool that times itself, percentiles, and process figures (RSS,
//! CPU time) read from /proc and getrusage.

use anyhow::{Context, Result};
use futures::future::BoxFuture;
use hermes_config::{Config, Settings};
use hermes_engine::agent::JobExecution;
use hermes_engine::llm::scripted::Reply;
use hermes_engine::tools::{Tool, ToolContext, ToolError, ToolInfo};
use hermes_store::util::Backoff;
use hermes_store::util::RetryPolicy;
use hermes_surfaces::app::{App, BuildOptions};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Settings whose every profile talks to `model_url`; no manifests, rule-based summaries (a
/// summary would be one more scripted model call per compaction), UTC.
pub fn settings(model_url: &str) -> Settings {
    let mut s = Settings::default();
    for p in s.model.profiles.values_mut() {
        p.base_url = model_url.to_string();
        p.timeout_s = 120;
    }
    s.tools.manifests_dir = "/nonexistent-hermes-bench-tools".into();
    s.context.summary_enabled = false;
    s.scheduler.timezone = "UTC".into();
    s.agent.task_timeout_s = 600;
    // The store the figures are taken on: SQLite in the bench's temp dir, or the PostgreSQL
    // database this names (`storage.url`).
    s.storage.url = std::env::var("HERMES_BENCH_STORAGE_URL").unwrap_or_default();
    s
}

pub async fn build_app(
    settings: Settings,
    dir: &Path,
    mode: JobExecution,
    extra_tools: Vec<Arc<dyn Tool>>,
) -> Result<App> {
    let config = Config::from_settings(settings, dir.to_path_buf());
    App::build_with(
        config,
        mode,
        BuildOptions {
            // A failed call must show up as a failed task, not be hidden by slow retries.
            model_retry: Some(RetryPolicy {
                max_retries: 0,
                backoff: Backoff::new(Duration::from_millis(5), Duration::from_millis(5)),
            }),
            extra_tools,
            ..Default::default()
        },
    )
    .await
    .context("building the app")
}

/// How the scripted model plays a task: `steps` model calls per task — `steps - 1` rounds of
/// calling `tool`, then a final answer — each reply after `delay`.
///
/// The step number travels in the tool call's arguments (`{"nonce", "step"}`), so the script
/// finds it even when the window has dropped older rounds. The task text carries
/// `nonce=XYZ`; every tool result the model sees must echo that nonce, and the answer is
/// `done XYZ` — or `CROSSTALK` if a result of another task leaked in. Requests without tools
/// (summaries, a peer's auxiliary calls) get a short text.
#[derive(Debug, Clone)]
pub struct StepScript {
    pub steps: u32,
    pub delay: Duration,
    pub tool: String,
}

impl StepScript {
    pub fn reply(&self, req: &Value) -> Reply {
        let r = self.decide(req);
        if self.delay.is_zero() {
            r
        } else {
            Reply::Delay(self.delay, Box::new(r))
        }
    }

    fn decide(&self, req: &Value) -> Reply {
        let empty = Vec::new();
        let messages = req["messages"].as_array().unwrap_or(&empty);
        let offered = req["tools"].as_array().is_some_and(|t| !t.is_empty());
        if !offered {
            return Reply::text("progress noted");
        }
        let goal = messages
            .iter()
            .find(|m| m["role"] == "user")
            .and_then(|m| m["content"].as_str())
            .unwrap_or("");
        let nonce = nonce_of(goal);
        let done = messages
            .iter()
            .filter(|m| m["role"] == "assistant")
            .filter_map(|m| m["tool_calls"].as_array())
            .flatten()
            .filter_map(|c| {
                let args = &c["function"]["arguments"];
                let args: Value = match args {
                    Value::String(s) => serde_json::from_str(s).ok()?,
                    other => other.clone(),
                };
                args["step"].as_u64()
            })
            .max()
            .unwrap_or(0);
        if done + 1 < u64::from(self.steps) {
            return Reply::tool_calls(&[(&self.tool, json!({"nonce": nonce, "step": done + 1}))]);
        }
        let clean = messages
            .iter()
            .filter(|m| m["role"] == "tool")
            .all(|m| m["content"].as_str().is_some_and(|c| c.contains(nonce)));
        if clean {
            Reply::text(&format!("done {nonce}"))
        } else {
            Reply::text("CROSSTALK")
        }
    }
}

/// The `nonce=...` word of a task text.
pub fn nonce_of(text: &str) -> &str {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix("nonce="))
        .map(|n| n.trim_end_matches(|c: char| !(c.is_ascii_alphanumeric() || c == '-')))
        .unwrap_or("")
}

/// The tool the scripted model calls: echoes its arguments (so the nonce reaches the model)
/// plus `pad` characters of filler, and records how long each call took, by nonce.
pub struct Echo {
    info: ToolInfo,
    pad: String,
    /// Per nonce, the duration of each call in order (one call per step).
    spent: Mutex<HashMap<String, Vec<Duration>>>,
}

impl Echo {
    pub fn new(name: &str, pad_chars: usize) -> Arc<Echo> {
        Arc::new(Echo {
            info: ToolInfo::new(
                name,
                "Benchmark tool: echoes its arguments.",
                json!({"type": "object", "properties": {
                    "nonce": {"type": "string"}, "step": {"type": "integer"}}}),
            ),
            pad: filler(pad_chars),
            spent: Mutex::new(HashMap::new()),
        })
    }

    /// The durations of this tool's calls for the task with `nonce`, in call order.
    pub fn spent_for(&self, nonce: &str) -> Vec<Duration> {
        self.spent
            .lock()
            .map(|m| m.get(nonce).cloned().unwrap_or_default())
            .unwrap_or_default()
    }
}

impl Tool for Echo {
    fn info(&self) -> &ToolInfo {
        &self.info
    }
    fn call<'a>(
        &'a self,
        args: Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>> {
        Box::pin(async move {
            let t0 = Instant::now();
            let nonce = args["nonce"].as_str().unwrap_or("").to_string();
            let out = if self.pad.is_empty() {
                json!({"echo": args})
            } else {
                json!({"echo": args, "report": self.pad})
            };
            let took = t0.elapsed();
            if let Ok(mut m) = self.spent.lock() {
                m.entry(nonce).or_default().push(took);
            }
            Ok(out)
        })
    }
}

/// Varied English-like text of `chars` characters (≈ chars/4 tokens by the crate's estimate).
pub fn filler(chars: usize) -> String {
    const WORDS: &[&str] = &[
        "revenue",
        "quarter",
        "growth",
        "the",
        "report",
        "shows",
        "steady",
        "demand",
        "in",
        "northern",
        "markets",
        "while",
        "costs",
        "rose",
        "slightly",
        "due",
        "to",
        "shipping",
        "delays",
        "and",
        "new",
        "hires",
        "across",
        "three",
        "regions",
        "of",
        "operations",
    ];
    let mut s = String::with_capacity(chars + 16);
    let mut i = 0usize;
    while s.len() < chars {
        s.push_str(WORDS[(i * 7 + i / 3) % WORDS.len()]);
        s.push(' ');
        i += 1;
    }
    s.truncate(chars);
    s
}

/// The p-th percentile (0–100) of `values` by nearest rank; 0 when empty.
pub fn percentile(values: &[f64], p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// Resident set size of a process in KiB (VmRSS of /proc/PID/status).
pub fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .context("no VmRSS line in /proc/PID/status")
}

/// User + system CPU time this process has used so far.
pub fn cpu_time() -> Duration {
    // getrusage is not wrapped by std; /proc/self/stat has utime+stime in clock ticks.
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return Duration::ZERO;
    };
    // The command name may contain spaces; fields after the closing parenthesis are fixed.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    // After ")": state is index 0, so utime (field 14) is 11 and stime (15) is 12.
    let total = ticks(11) + ticks(12);
    Duration::from_millis(total * 1000 / clock_ticks())
}

fn clock_ticks() -> u64 {
    static HZ: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *HZ.get_or_init(|| {
        // USER_HZ is 100 on every common Linux; `getconf CLK_TCK` confirms it.
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .filter(|&n: &u64| n > 0)
            .unwrap_or(100)
    })
}

/// A free loopback port (bound, read, released; the daemon binds it right after).
pub fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("binding 127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// One printed figure line, aligned.
pub fn figure(name: &str, value: impl std::fmt::Display) {
    println!("  {name:<58} {value}");
}
