//! The time zone by default: with `scheduler.timezone` unset, jobs, the task's time line and
//! `doctor` use the machine's own zone. The binary runs as a process with its own `TZ`, so the
//! test process's environment is never changed.

use crate::common::text;
use hermes_engine::llm::scripted::{Reply, ScriptedModel};
use serde_json::Value;
use std::path::Path;

const BIN: &str = env!("CARGO_BIN_EXE_hermes-agent");

/// A config file in `dir` with the model at `model_url`, the port free, and `extra` appended.
fn config(dir: &Path, model_url: &str, extra: &str) -> std::path::PathBuf {
    let path = dir.join("settings.yaml");
    let text = format!(
        "model:\n  profiles:\n    fast: {{base_url: \"{model_url}\", timeout_s: 5}}\n    pro: {{base_url: \"{model_url}\"}}\ncontext:\n  summary_enabled: false\nserver:\n  port: 0\n{extra}"
    );
    std::fs::write(&path, text).expect("config written");
    path
}

/// The binary with `config`, a data dir under `dir`, and `TZ` set to `tz`.
fn hermes(dir: &Path, config: &Path, tz: &str) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.arg("--config")
        .arg(config)
        .arg("--data-dir")
        .arg(dir.join("data"))
        .env("TZ", tz)
        .env("RUST_LOG", "warn")
        .env("XDG_CONFIG_HOME", dir.join("xdg-config"));
    cmd
}

#[tokio::test]
async fn doctor_shows_the_zone_and_where_it_came_from() {
    let dir = tempfile::tempdir().expect("temp dir");
    let unset = config(dir.path(), "http://127.0.0.1:9/v1", "");
    let out = hermes(dir.path(), &unset, "Asia/Tokyo")
        .arg("doctor")
        .output()
        .await
        .expect("doctor runs");
    let stdout = text(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.contains("time zone:"))
        .unwrap_or_else(|| panic!("no time zone line: {stdout}"));
    assert!(
        line.starts_with("[ok") && line.contains("Asia/Tokyo (the machine's zone, from TZ)"),
        "{line}"
    );

    let set = config(
        dir.path(),
        "http://127.0.0.1:9/v1",
        "scheduler:\n  timezone: Europe/Berlin\n",
    );
    let out = hermes(dir.path(), &set, "Asia/Tokyo")
        .arg("doctor")
        .output()
        .await
        .expect("doctor runs");
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("time zone: Europe/Berlin (scheduler.timezone)"),
        "{stdout}"
    );
}

#[tokio::test]
async fn a_task_is_told_the_time_in_the_machines_zone_and_jobs_fire_in_it() {
    let model = ScriptedModel::start_with(|_| Reply::text("noted")).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let cfg = config(dir.path(), &model.base_url(), "");
    let out = hermes(dir.path(), &cfg, "Asia/Tokyo")
        .args(["run", "What time is it?"])
        .output()
        .await
        .expect("run runs");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let first = &model.requests()[0];
    let user = first["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default();
    let now = user.lines().next().unwrap_or_default();
    assert!(now.starts_with("Now: ") && now.contains(" JST ("), "{now}");

    // A job that names no zone runs in the machine's.
    let out = hermes(dir.path(), &cfg, "America/New_York")
        .args([
            "jobs",
            "add",
            "the digest",
            "--schedule",
            "0 8 * * *",
            "--json",
        ])
        .output()
        .await
        .expect("jobs add runs");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let job: Value = serde_json::from_slice(&out.stdout).expect("a job as JSON");
    assert_eq!(job["timezone"], "America/New_York", "{job}");

    // A job's task is told the time in the job's zone, the one its schedule and its notice's
    // date are in, not the machine's.
    let out = hermes(dir.path(), &cfg, "Asia/Tokyo")
        .args(["jobs", "run", job["id"].as_str().expect("an id")])
        .output()
        .await
        .expect("jobs run runs");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let requests = model.requests();
    let user = requests
        .last()
        .and_then(|r| r["messages"].as_array().cloned())
        .into_iter()
        .flatten()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str().map(str::to_string))
        .unwrap_or_default();
    let now = user.lines().next().unwrap_or_default();
    assert!(
        now.starts_with("Now: ") && (now.contains(" EST (") || now.contains(" EDT (")),
        "{now}"
    );
}
