//! The Telegram channel's latency and footprint, against the tests' Bot API stand-in on
//! loopback (no Telegram server can be reached from here): `cargo bench --bench telegram`.
//! Prints (BENCHMARKS.md §20):
//! - message said → task started, p50 / p99 over 50 private messages (the stand-in queuing the
//!   update, to the task's `started_at`): one long poll's wake-up, the record, a worker's claim;
//! - task finished → its answer accepted by the stand-in's `sendMessage` (the outbox, the
//!   rendering, the send), with the person writing one message a second;
//! - the daemon's resident memory with the channel polling and idle, against the same daemon
//!   without `channels.telegram`.
//!
//! The daemon is this build's binary with a scripted model that answers at once.

#![allow(
    dead_code,
    reason = "the tests' fixtures have more than the benchmark uses"
)]

#[path = "../tests/it/telegram/html.rs"]
mod html;
#[path = "../tests/it/telegram/standin.rs"]
mod standin;

use chrono::{DateTime, Utc};
use hermes_engine::llm::scripted::{Reply, ScriptedModel};
use serde_json::Value;
use standin::{BotApi, Person};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_hermes-agent");
const MESSAGES: usize = 50;
const PATIENCE: Duration = Duration::from_secs(60);
const TOKEN: &str = "123456789:BENCH-token_abcdefghijklmnopqrstuvwxyz";

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

struct Daemon {
    child: Child,
    base: String,
    _dir: tempfile::TempDir,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The daemon on a fresh data dir with `channels` (may be empty); waits for `/healthz`, and
/// with Telegram for the channel to poll.
async fn daemon(model: &str, channels: &str) -> Daemon {
    let dir = tempfile::tempdir().expect("temp dir");
    let yaml = format!(
        "model:\n  profiles:\n    fast: {{base_url: \"{model}\", model: scripted, timeout_s: 60}}\n\
         tools:\n  manifests_dir: /nonexistent-hermes-bench-tools\n\
         context:\n  summary_enabled: false\n\
         server:\n  port: 0\n{channels}"
    );
    std::fs::write(dir.path().join("settings.yaml"), yaml).expect("settings");
    let data = dir.path().join("data");
    let child = Command::new(BIN)
        .env("TELEGRAM_BOT_TOKEN", TOKEN)
        .env("RUST_LOG", "warn")
        .env("XDG_CONFIG_HOME", dir.path().join("xdg"))
        .arg("--config")
        .arg(dir.path().join("settings.yaml"))
        .arg("--data-dir")
        .arg(&data)
        .arg("serve")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the daemon starts");
    // Owned at once, so it is killed and reaped whichever way this ends.
    let mut d = Daemon {
        child,
        base: String::new(),
        _dir: dir,
    };
    let deadline = Instant::now() + PATIENCE;
    loop {
        assert!(Instant::now() < deadline, "the daemon did not come up");
        if let Ok(Some(addr)) = hermes_surfaces::daemon::read_addr(&data) {
            let base = format!("http://{addr}");
            let h = get(&base, "/healthz").await;
            if channels.is_empty() || h["telegram"]["state"] == "ok" {
                d.base = base;
                return d;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn get(base: &str, path: &str) -> Value {
    match reqwest::get(format!("{base}{path}")).await {
        Ok(r) => r.json().await.unwrap_or(Value::Null),
        Err(_) => Value::Null,
    }
}

fn time_of(v: &Value) -> Option<DateTime<Utc>> {
    v.as_str()?.parse().ok()
}

fn ms(d: chrono::TimeDelta) -> f64 {
    d.num_microseconds().unwrap_or(i64::MAX) as f64 / 1000.0
}

/// The task the message `event` became, once its worker started it.
async fn started(base: &str, event: &str) -> Value {
    let deadline = Instant::now() + PATIENCE;
    loop {
        assert!(
            Instant::now() < deadline,
            "message {event} never started a task"
        );
        let inbox = get(base, "/v1/inbox?channel=telegram&limit=5").await;
        let task = inbox["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|m| m["message_id"] == event)
            .and_then(|m| m["task_id"].as_str().map(str::to_string));
        if let Some(id) = task {
            let t = get(base, &format!("/v1/tasks/{id}")).await;
            if !t["started_at"].is_null() {
                return t;
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::main]
async fn main() {
    let model = ScriptedModel::start_with(|_| Reply::text("Done.")).await;
    let plain = daemon(&model.base_url(), "").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_plain = rss_mib(plain.child.id());
    drop(plain);

    let api = BotApi::start(TOKEN).await;
    let me = Person::new(111, "Me");
    let channels = format!(
        "channels:\n  telegram:\n    bot_token: ${{TELEGRAM_BOT_TOKEN}}\n    allow_from: [111]\n    \
         chats: {{me: 111}}\n    api_url: \"{}\"\n    max_tasks_per_hour: 1000\n",
        api.url()
    );
    let d = daemon(&model.base_url(), &channels).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_idle = rss_mib(d.child.id());

    let mut to_task = Vec::new();
    let mut to_sent = Vec::new();
    for i in 0..MESSAGES {
        // A person writing a message a second: the bot's pacing (one message a second per
        // chat) then never holds an answer back, and what is measured is the path itself.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let said = Utc::now();
        let id = api.say(&me, &format!("message {i}"));
        let task = started(&d.base, &format!("111:{id}")).await;
        if let Some(t) = time_of(&task["started_at"]) {
            to_task.push(ms(t - said));
        }
        let answer = api.wait_sent(|s| s.reply_to == Some(id), PATIENCE).await;
        // The stand-in's Instant, on the wall clock the daemon stamps tasks with.
        let accepted = Utc::now() - (Instant::now() - answer.at);
        let task = get(
            &d.base,
            &format!("/v1/tasks/{}", task["id"].as_str().unwrap_or("")),
        )
        .await;
        if let Some(done) = time_of(&task["finished_at"]) {
            to_sent.push(ms(accepted - done));
        }
    }
    to_task.sort_by(f64::total_cmp);
    to_sent.sort_by(f64::total_cmp);
    let rss_after = rss_mib(d.child.id());
    println!("telegram: {MESSAGES} private messages against the Bot API stand-in, one at a time");
    println!(
        "  message said → task started: p50 {:.1} ms, p99 {:.1} ms (min {:.1}, max {:.1})",
        quantile(&to_task, 0.5),
        quantile(&to_task, 0.99),
        quantile(&to_task, 0.0),
        quantile(&to_task, 1.0)
    );
    println!(
        "  task finished → answer accepted by sendMessage: p50 {:.1} ms, p99 {:.1} ms",
        quantile(&to_sent, 0.5),
        quantile(&to_sent, 0.99)
    );
    println!(
        "  daemon RSS: {rss_plain:.1} MiB without channels.telegram, {rss_idle:.1} MiB with it polling (idle), {rss_after:.1} MiB after {MESSAGES} messages"
    );
}
