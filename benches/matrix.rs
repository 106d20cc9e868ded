//! The Matrix channel's latency and footprint, against a real Synapse on loopback: `cargo bench
//! --bench matrix`. Prints (BENCHMARKS.md §18):
//! - message sent → task started, p50 / p99 over 50 encrypted messages (the person's send call
//!   returning, to the task's `started_at`);
//! - answer queued → visible to the person (the notice's `created_at` to the person's client
//!   holding the decrypted event);
//! - the daemon's resident memory with the channel connected and idle, against the same daemon
//!   without `channels.matrix`;
//! - with the `telegram` feature too: the daemon's resident memory with both chat channels
//!   connected and idle (Telegram polling the tests' Bot API stand-in).
//!
//! The person is the tests' second matrix-sdk client (`tests/it/matrix/person.rs`), the server
//! the tests' Synapse (`tests/it/matrix/server.rs`); the daemon is this build's binary with a
//! scripted model that answers at once.

#![allow(
    dead_code,
    reason = "the tests' fixtures have more than the benchmark uses"
)]

#[cfg(feature = "telegram")]
#[path = "../tests/it/telegram/html.rs"]
mod html;
#[path = "../tests/it/matrix/person.rs"]
mod person;
#[path = "../tests/it/matrix/server.rs"]
mod server;
#[cfg(feature = "telegram")]
#[path = "../tests/it/telegram/standin.rs"]
mod standin;

/// What `server.rs` needs of the tests' installer: Synapse's programs, installed by
/// `scripts/ci/synapse-deps.sh` when missing.
mod deps {
    use std::path::{Path, PathBuf};
    use std::sync::OnceLock;

    #[derive(Clone)]
    pub struct Synapse {
        pub python: PathBuf,
        pub register: PathBuf,
    }

    pub fn synapse() -> &'static Synapse {
        static S: OnceLock<Synapse> = OnceLock::new();
        S.get_or_init(|| {
            let root = Path::new(env!("CARGO_MANIFEST_DIR"));
            let ok = std::process::Command::new("bash")
                .arg(root.join("scripts/ci/synapse-deps.sh"))
                .status()
                .is_ok_and(|s| s.success());
            assert!(
                ok,
                "scripts/ci/synapse-deps.sh failed: Synapse is needed for this benchmark"
            );
            let venv = root.join("target/test-deps/synapse-venv/bin");
            Synapse {
                python: venv.join("python"),
                register: venv.join("register_new_matrix_user"),
            }
        })
    }
}

use hermes_engine::llm::scripted::{Reply, ScriptedModel};
use matrix_sdk::ruma::UserId;
use person::Person;
use serde_json::Value;
use server::Synapse;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_hermes-agent");
const TELEGRAM_TOKEN: &str = "123456789:BENCH-token_abcdefghijklmnopqrstuvwxyz";
const MESSAGES: usize = 50;
const PATIENCE: Duration = Duration::from_secs(60);

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
/// with Matrix for the channel to be connected.
async fn daemon(model: &str, channels: &str, password: &str) -> Daemon {
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
        .env("MATRIX_PASSWORD", password)
        .env("TELEGRAM_BOT_TOKEN", TELEGRAM_TOKEN)
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
    let http = reqwest::Client::new();
    let deadline = Instant::now() + PATIENCE;
    loop {
        assert!(Instant::now() < deadline, "the daemon did not come up");
        if let Ok(Some(addr)) = hermes_surfaces::daemon::read_addr(&data) {
            let base = format!("http://{addr}");
            if let Ok(r) = http.get(format!("{base}/healthz")).send().await
                && let Ok(h) = r.json::<Value>().await
                && (!channels.contains("matrix:") || h["matrix"]["state"] == "ok")
                && (!channels.contains("telegram:") || h["telegram"]["state"] == "ok")
            {
                d.base = base;
                return d;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn get(base: &str, path: &str) -> Value {
    reqwest::get(format!("{base}{path}"))
        .await
        .expect("the daemon answers")
        .json()
        .await
        .unwrap_or(Value::Null)
}

fn time_of(v: &Value) -> Option<chrono::DateTime<chrono::Utc>> {
    v.as_str()?.parse().ok()
}

#[tokio::main]
async fn main() {
    let model = ScriptedModel::start_with(|_| Reply::text("ok")).await;
    let synapse = Synapse::new().await;
    let agent = synapse.register("hermes", "agent-pw").await;
    let me_id = synapse.register("me", "me-pw").await;
    let me = Person::login(&synapse, &me_id, "me-pw").await;
    let agent_id = <&UserId>::try_from(agent.as_str()).expect("the agent's id");
    let room = me.create_dm(agent_id).await;

    let plain = daemon(&model.base_url(), "", "").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss_plain = rss_mib(plain.child.id());
    drop(plain);

    // The default limit (20 tasks an hour per sender) refuses the 21st message, as it should.
    let channels = format!(
        "channels:\n  matrix:\n    homeserver: \"{}\"\n    user: \"{agent}\"\n    \
         password: ${{MATRIX_PASSWORD}}\n    allow_from: [\"{me_id}\"]\n    \
         max_tasks_per_hour: 1000\n",
        synapse.url()
    );
    let d = daemon(&model.base_url(), &channels, "agent-pw").await;
    me.wait_for_join(PATIENCE, &room, agent_id).await;
    let mut started = Vec::new();
    let mut visible = Vec::new();
    for i in 0..MESSAGES {
        let sent_at = chrono::Utc::now();
        let event = me.send_text(&room, &format!("bench message {i}")).await;
        let answer = me
            .wait_for(PATIENCE, |m| m.thread_root.as_ref() == Some(&event))
            .await;
        let seen_at = chrono::Utc::now();
        let inbox = get(&d.base, "/v1/inbox?channel=matrix&limit=5").await;
        let row = inbox["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|m| m["message_id"] == event.as_str())
            .cloned()
            .unwrap_or_default();
        let task = get(
            &d.base,
            &format!("/v1/tasks/{}", row["task_id"].as_str().unwrap_or("")),
        )
        .await;
        if let Some(t) = time_of(&task["started_at"]) {
            started.push((t - sent_at).num_microseconds().unwrap_or(0) as f64 / 1000.0);
        }
        let notices = get(&d.base, "/v1/deliveries?limit=5").await;
        if let Some(n) = notices["deliveries"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|n| n["task_id"] == task["id"])
            && let Some(q) = time_of(&n["created_at"])
        {
            visible.push((seen_at - q).num_microseconds().unwrap_or(0) as f64 / 1000.0);
        }
        let _ = answer;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss_matrix = rss_mib(d.child.id());
    started.sort_by(f64::total_cmp);
    visible.sort_by(f64::total_cmp);
    println!("matrix: {MESSAGES} encrypted messages, one at a time, Synapse on loopback");
    println!(
        "  message sent -> task started: p50 {:.1} ms, p99 {:.1} ms (n = {})",
        quantile(&started, 0.5),
        quantile(&started, 0.99),
        started.len()
    );
    println!(
        "  answer queued -> visible to the person: p50 {:.1} ms, p99 {:.1} ms (n = {})",
        quantile(&visible, 0.5),
        quantile(&visible, 0.99),
        visible.len()
    );
    println!(
        "  daemon RSS idle: {rss_plain:.1} MiB without channels.matrix, {rss_matrix:.1} MiB with it connected (after {MESSAGES} messages)"
    );
    drop(d);
    #[cfg(feature = "telegram")]
    {
        let api = standin::BotApi::start(TELEGRAM_TOKEN).await;
        let both = format!(
            "{channels}  telegram:\n    bot_token: ${{TELEGRAM_BOT_TOKEN}}\n    allow_from: [111]\n    \
             api_url: \"{}\"\n",
            api.url()
        );
        let d = daemon(&model.base_url(), &both, "agent-pw").await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        println!(
            "  daemon RSS idle with both chat channels connected (Matrix, Telegram polling the stand-in): {:.1} MiB",
            rss_mib(d.child.id())
        );
    }
}
