//! The daemon as its users meet it: the real `hermes-agent serve` binary started as a process,
//! talking to a scripted OpenAI-compatible model on loopback, driven over its HTTP API, by the
//! CLI, and by signals — what needs a process: signals, restarts, the data-dir lock, the CLI
//! finding a running daemon. The API's requests and answers are tested in-process (tests/api.rs).
//!
//! Each daemon binds `server.port: 0` and the test reads the port it got from
//! `DATA_DIR/daemon.addr`, so tests run in parallel without racing for ports; every child
//! process is killed when its guard drops, so a failing test leaves nothing running.

use crate::common;

use crate::common::{echo_model, error_of, task_text, text};
use crate::process::{BIN, Daemon, PATIENCE, base_command, clean_command, wait_for_addr};
use hermes_engine::llm::scripted::{Reply, ScriptedModel};
use hermes_surfaces::daemon::{addr_path, read_addr};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod beside;
mod database_file;
mod limits;
mod metrics;

/// A temporary home for one daemon: its settings file, data dir and log.
pub(crate) struct Site {
    pub(crate) dir: tempfile::TempDir,
}

impl Site {
    /// Settings pointing every profile at `model_url`; `agent` and `server` are extra lines for
    /// those sections (indented by two spaces).
    pub(crate) fn new(model_url: &str, agent: &[&str], server: &[&str]) -> Site {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut yaml = format!(
            "model:\n  profiles:\n    fast: {{base_url: \"{model_url}\", model: scripted, timeout_s: 60}}\n    \
             pro: {{base_url: \"{model_url}\", model: scripted-pro, timeout_s: 60}}\n\
             tools:\n  manifests_dir: /nonexistent-hermes-daemon-test-tools\n\
             context:\n  summary_enabled: false\n\
             scheduler:\n  timezone: UTC\n\
             server:\n  port: 0\n"
        );
        for l in server {
            yaml.push_str(&format!("  {l}\n"));
        }
        yaml.push_str("agent:\n  workers: 4\n");
        for l in agent {
            yaml.push_str(&format!("  {l}\n"));
        }
        std::fs::write(dir.path().join("settings.yaml"), yaml).expect("write settings");
        Site { dir }
    }

    pub(crate) fn config(&self) -> PathBuf {
        self.dir.path().join("settings.yaml")
    }

    pub(crate) fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// A CLI command against this site's config and data dir.
    pub(crate) fn cli(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut cmd = base_command(self.dir.path(), env);
        cmd.arg("--config")
            .arg(self.config())
            .arg("--data-dir")
            .arg(self.data())
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd.output().expect("the binary runs")
    }

    /// `serve` on this site's config and data dir, logging to `log_dir/daemon.log`.
    pub(crate) fn spawn(&self, env: &[(&str, &str)], log_dir: &Path) -> Daemon {
        let mut cmd = base_command(log_dir, env);
        cmd.arg("--config")
            .arg(self.config())
            .arg("--data-dir")
            .arg(self.data())
            .arg("serve");
        Daemon::spawn(cmd, log_dir, &self.data())
    }

    /// Start this site's daemon, the only one on its data dir.
    pub(crate) fn start(&self, env: &[(&str, &str)]) -> Daemon {
        // A daemon killed by SIGKILL leaves its address file behind; this start must wait for
        // the new daemon's, not read the dead one's.
        let _ = std::fs::remove_file(addr_path(&self.data()));
        self.spawn(env, self.dir.path())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_on_defaults_with_a_data_dir_and_a_port_and_restarts_fast() {
    let dir = tempfile::tempdir().unwrap();
    // Only the port: everything else is the embedded defaults. Found in the XDG config dir.
    let xdg_file = dir.path().join("xdg-config/hermes-agent/settings.yaml");
    std::fs::create_dir_all(xdg_file.parent().unwrap()).unwrap();
    std::fs::write(&xdg_file, "server:\n  port: 0\n").unwrap();
    let data = dir.path().join("data");
    let start = || {
        let mut cmd = base_command(dir.path(), &[]);
        cmd.arg("--data-dir").arg(&data).arg("serve");
        Daemon::spawn(cmd, dir.path(), &data)
    };

    let mut d = start();
    let first = d.ready().await;
    let log = d.log();
    assert!(log.contains(&xdg_file.display().to_string()), "{log}");
    assert!(log.contains(&data.display().to_string()), "{log}");
    let (status, health) = d.get("/healthz").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(health["status"], "ok");
    assert_eq!(health["memory"], true, "{health}");
    d.stop().await;

    // Again, on the now existing data dir.
    let mut d = start();
    let again = d.ready().await;
    eprintln!("start-up to ready: first {first:?}, on an existing data dir {again:?}");
    assert!(
        again < Duration::from_secs(2),
        "ready after {again:?} on an existing data dir"
    );
    // Ctrl-C stops it as cleanly as SIGTERM.
    d.signal("-INT");
    let status = d.exited(PATIENCE).await;
    assert_eq!(status.code(), Some(0), "{}", d.log());
    assert_eq!(d.log().matches("INFO stopped").count(), 2, "{}", d.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_pure_defaults_it_says_where_it_looked_and_a_busy_port_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    // Hold the default port so this daemon can never serve on it (another test's CLI might
    // otherwise take it for "the daemon"). If something else holds it, the outcome is the same.
    let _hold = std::net::TcpListener::bind("127.0.0.1:8765");
    let mut cmd = base_command(dir.path(), &[]);
    cmd.arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg("serve");
    let mut d = Daemon::spawn(cmd, dir.path(), &dir.path().join("data"));
    let status = d.exited(PATIENCE).await;
    let log = d.log();
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(log.contains("built-in defaults"), "{log}");
    assert!(
        log.contains("xdg-config/hermes-agent/settings.yaml"),
        "{log}"
    );
    assert!(log.contains("cannot listen on 127.0.0.1:8765"), "{log}");
    assert!(log.contains("server.port"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_over_http_submit_wait_list_and_cancel() {
    let model = ScriptedModel::start_with(echo_model).await;
    let site = Site::new(&model.base_url(), &[], &[]);
    let mut d = site.start(&[]);
    d.ready().await;

    // 202 with exactly the id and the state.
    let (status, v) = d
        .post("/v1/tasks", json!({"task": "what is 17 * 23?"}))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{v}");
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["id", "state"], "{v}");
    assert!(["pending", "running"].contains(&v["state"].as_str().unwrap()));
    let id = v["id"].as_str().unwrap().to_string();

    let t = d.finished(&id).await;
    for key in [
        "id",
        "state",
        "origin",
        "answer",
        "error",
        "created_at",
        "finished_at",
        "steps",
    ] {
        assert!(t.get(key).is_some(), "no {key} in {t}");
    }
    assert_eq!(t["id"], id.as_str());
    assert_eq!(t["state"], "succeeded", "{t}");
    assert_eq!(t["origin"], "api");
    assert_eq!(t["answer"], "answer to: what is 17 * 23?");
    assert!(t["error"].is_null());
    assert!(t["finished_at"].is_string());
    let steps = t["steps"].as_array().unwrap();
    assert!(!steps.is_empty(), "{t}");

    // wait: the finished task with its trace, in the same response.
    let (status, w) = d
        .post(
            "/v1/tasks",
            json!({"task": "name a colour", "wait": true, "profile": "pro"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{w}");
    assert_eq!(w["state"], "succeeded");
    assert_eq!(w["answer"], "answer to: name a colour");
    assert!(!w["steps"].as_array().unwrap().is_empty());
    let last = model.requests().last().cloned().unwrap();
    assert_eq!(last["model"], "scripted-pro", "the pro profile was used");

    // Lists are wrapped, filtered and limited.
    let (status, l) = d.get("/v1/tasks?state=succeeded&limit=5").await;
    assert_eq!(status, StatusCode::OK);
    let tasks = l["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 2, "{l}");
    assert!(tasks.iter().all(|t| t["state"] == "succeeded"));
    let (_, l) = d.get("/v1/tasks?state=succeeded&limit=1").await;
    assert_eq!(l["tasks"].as_array().unwrap().len(), 1);
    assert_eq!(l["tasks"][0]["id"], w["id"], "newest first");

    // Cancel a running slow task.
    let before = model.request_count();
    let slow = d.submit("a slow one").await;
    assert!(model.wait_for_requests(before + 1, PATIENCE).await);
    let (status, c) = d.post(&format!("/v1/tasks/{slow}/cancel"), json!({})).await;
    assert_eq!(status, StatusCode::OK, "{c}");
    assert_eq!(c["state"], "cancelled", "{c}");
    let t = d.finished(&slow).await;
    assert_eq!(t["state"], "cancelled");
    assert_eq!(t["reason"], "cancelled");
    // Cancelling a finished task is a conflict, whichever way it finished.
    for done in [&slow, &id] {
        let (status, e) = d.post(&format!("/v1/tasks/{done}/cancel"), json!({})).await;
        assert_eq!(status, StatusCode::CONFLICT, "{e}");
        assert_eq!(error_of(&e).0, "conflict");
    }

    // A log line per task start and end.
    let log = d.log();
    for task in [&id, &slow] {
        assert!(
            log.lines()
                .any(|l| l.contains("task started") && l.contains(task.as_str())),
            "{log}"
        );
        assert!(
            log.lines()
                .any(|l| l.contains("task finished") && l.contains(task.as_str())),
            "{log}"
        );
    }
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_concurrent_tasks_each_get_their_own_answer_on_four_workers() {
    let model = ScriptedModel::start_with(|req| {
        let task = task_text(req);
        Reply::Delay(
            Duration::from_millis(20),
            Box::new(Reply::text(&format!("done: {task}"))),
        )
    })
    .await;
    let site = Site::new(&model.base_url(), &[], &[]);
    let mut d = site.start(&[]);
    d.ready().await;

    let d = std::sync::Arc::new(d);
    let watching = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let watcher = {
        let (d, watching) = (d.clone(), watching.clone());
        tokio::spawn(async move {
            let mut max = 0;
            while watching.load(std::sync::atomic::Ordering::Relaxed) {
                let (_, h) = d.get("/healthz").await;
                max = max.max(h["running"].as_u64().unwrap_or(0));
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            max
        })
    };
    let started = Instant::now();
    let mut handles = Vec::new();
    for n in 0..100 {
        let d = d.clone();
        handles.push(tokio::spawn(async move {
            let task = format!("job number {n}: token-{n}-end");
            let (status, v) = d
                .post("/v1/tasks", json!({"task": task, "wait": true}))
                .await;
            (n, status, v)
        }));
    }
    let mut ids = std::collections::HashSet::new();
    for h in handles {
        let (n, status, v) = h.await.unwrap();
        assert_eq!(status, StatusCode::OK, "{v}");
        assert_eq!(v["state"], "succeeded", "{v}");
        assert_eq!(
            v["answer"],
            format!("done: job number {n}: token-{n}-end"),
            "task {n} got someone else's answer"
        );
        assert!(ids.insert(v["id"].as_str().unwrap().to_string()));
    }
    let took = started.elapsed();
    watching.store(false, std::sync::atomic::Ordering::Relaxed);
    let max_running = watcher.await.unwrap();
    eprintln!("100 tasks over HTTP in {took:?}; at most {max_running} running at once");
    assert!(max_running <= 4, "{max_running} tasks ran at once");
    assert!(max_running >= 2, "the pool never ran tasks side by side");
    // Each model request carried one task only: no shared message list.
    let reqs = model.requests();
    assert_eq!(reqs.len(), 100);
    for r in &reqs {
        assert_eq!(r.to_string().matches("token-").count(), 1, "{r}");
    }
    let (_, l) = d.get("/v1/tasks?state=succeeded&limit=1000").await;
    assert_eq!(l["tasks"].as_array().unwrap().len(), 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_passes_the_token_of_its_config_to_a_guarded_daemon() {
    let model = ScriptedModel::start_with(echo_model).await;
    let site = Site::new(&model.base_url(), &[], &["token: ${HERMES_TOKEN}"]);
    let token = "s3cret-token-for-tests";
    let mut d = site.start(&[("HERMES_TOKEN", token)]);
    d.ready().await;
    let (status, _) = d.get("/v1/tasks").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "the daemon is guarded");
    let d = d.with_token(token);
    d.submit("hello").await;

    // The CLI reads the same config (and env) and passes the token.
    let out = site.cli(&["tasks", "list", "--json"], &[("HERMES_TOKEN", token)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["tasks"].as_array().unwrap().len(), 1, "{v}");
    // A wrong one is refused, with what to do about it.
    let out = site.cli(&["tasks", "list"], &[("HERMES_TOKEN", "wrong-token")]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("server.token"), "{stderr}");
    assert_eq!(stderr.matches("error:").count(), 1, "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_public_bind_without_a_token_refuses_to_start() {
    let site = Site::new("http://127.0.0.1:9/v1", &[], &["host: 0.0.0.0"]);
    let mut d = site.start(&[]);
    let status = d.exited(PATIENCE).await;
    let log = d.log();
    assert_ne!(status.code(), Some(0), "{log}");
    assert!(status.code().is_some(), "it exits, not crashes: {status}");
    assert!(log.contains("server.token"), "{log}");
    assert!(log.contains("0.0.0.0"), "{log}");
    assert!(!log.contains("ready"), "{log}");
    assert!(
        !site.data().exists(),
        "it refused before touching the data dir"
    );
    // `config check` says so too, at the line.
    let out = site.cli(&["config", "check"], &[]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("server.host") && err.contains("server.token"),
        "{err}"
    );
    assert!(err.contains("settings.yaml:"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_finds_a_daemon_on_port_0_through_its_address_file() {
    let model = ScriptedModel::start_with(echo_model).await;
    let site = Site::new(&model.base_url(), &[], &[]);
    let mut d = site.start(&[]);
    d.ready().await;
    let addr = read_addr(&site.data()).unwrap().expect("an address file");
    assert_ne!(addr.port(), 0);
    assert!(
        d.log().contains(&format!("ready: API on http://{addr}")),
        "{}",
        d.log()
    );

    // doctor checks memory, tools and notify with the daemon up too, leaving its data dir.
    let out = site.cli(&["doctor"], &[]);
    let stdout = text(&out.stdout);
    for line in [
        "] memory: the daemon's index is open",
        "] tools: ",
        "] notify: ",
    ] {
        assert!(stdout.contains(line), "{line}: {stdout}");
    }

    // Tasks: the CLI shows what the API has.
    let task = d.submit("what do I like to drink?").await;
    d.finished(&task).await;
    let out = site.cli(&["tasks", "list", "--json"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let (_, api) = d.get("/v1/tasks?limit=20").await;
    assert_eq!(listed, api, "the CLI shows what the API has");
    let out = site.cli(&["tasks", "show", &task[..8], "--json"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["id"], task.as_str());
    assert_eq!(shown["answer"], "answer to: what do I like to drink?");

    // Jobs: added by the CLI on the daemon, fired there and followed to the end.
    let out = site.cli(
        &[
            "jobs",
            "add",
            "summarise the news",
            "--schedule",
            "every 2h",
            "--json",
        ],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let job: Value = serde_json::from_slice(&out.stdout).unwrap();
    let job_id = job["id"].as_str().unwrap().to_string();
    let (_, jobs) = d.get("/v1/jobs").await;
    assert_eq!(jobs["jobs"][0]["id"], job_id.as_str(), "{jobs}");
    assert_eq!(jobs["jobs"][0]["origin"], "cli", "made by the CLI: {jobs}");
    let out = site.cli(&["jobs", "run", &job_id], &[]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!("fired on the daemon at http://{addr}")),
        "{stderr}"
    );
    assert_eq!(text(&out.stdout).trim(), "answer to: summarise the news");
    // Paused by the CLI, on the daemon.
    let out = site.cli(&["jobs", "pause", &job_id], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), format!("job {job_id} paused"));
    let (_, one) = d.get(&format!("/v1/jobs/{job_id}")).await;
    assert_eq!(one["enabled"], false, "{one}");
    let out = site.cli(&["jobs", "pause", "nosuchjob"], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("nosuchjob"),
        "{}",
        text(&out.stderr)
    );
    d.stop().await;

    // Once it stopped, the same commands work on the data dir.
    let out = site.cli(&["jobs", "resume", &job_id], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with(&format!("job {job_id} resumed; next run ")),
        "{}",
        text(&out.stdout)
    );
    let out = site.cli(&["jobs", "list", "--json"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed["jobs"][0]["id"], job_id.as_str(), "{listed}");
    assert_eq!(listed["jobs"][0]["enabled"], true, "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_data_dir_is_never_worked_on_through_another_data_dirs_daemon() {
    let model = ScriptedModel::start_with(echo_model).await;
    let site = Site::new(&model.base_url(), &[], &[]);
    // A fixed port, as in most settings files: the daemon is found there without its file.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let yaml = std::fs::read_to_string(site.config()).unwrap();
    std::fs::write(
        site.config(),
        yaml.replace("port: 0", &format!("port: {port}")),
    )
    .unwrap();
    let mut d = site.start(&[]);
    d.ready().await;
    let task = d.submit("what do I like to drink?").await;
    d.finished(&task).await;

    // The same settings, another data dir (by the flag, or by HERMES_DATA_DIR): its own
    // (empty) history, not the daemon's.
    let other = site.dir.path().join("other-data");
    let other_text = other.display().to_string();
    let by_flag = ["--data-dir", other_text.as_str()];
    for (env, flag) in [(None, &by_flag[..]), (Some(other_text.as_str()), &[][..])] {
        let env: Vec<(&str, &str)> = env.map(|d| ("HERMES_DATA_DIR", d)).into_iter().collect();
        let out = base_command(site.dir.path(), &env)
            .arg("--config")
            .arg(site.config())
            .args(flag)
            .args(["tasks", "list", "--json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(listed["tasks"], json!([]), "{listed}");
    }

    // A data dir whose own daemon was killed, leaving its address file, while this daemon
    // took that port: the answer there is another node's, so not used.
    let stale = site.dir.path().join("stale-data");
    std::fs::create_dir_all(&stale).unwrap();
    std::fs::copy(addr_path(&site.data()), addr_path(&stale)).unwrap();
    std::fs::write(
        stale.join(hermes_engine::metrics::NODE_ID_FILE),
        "00000000-0000-4000-8000-000000000001\n",
    )
    .unwrap();
    let out = base_command(site.dir.path(), &[])
        .arg("--config")
        .arg(site.config())
        .arg("--data-dir")
        .arg(&stale)
        .args(["tasks", "list", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed["tasks"], json!([]), "{listed}");

    // Its own data dir still goes through it.
    let out = site.cli(&["tasks", "list", "--json"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed["tasks"][0]["id"], task.as_str(), "{listed}");
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_goes_through_the_daemon_and_to_the_data_dir_once_it_stopped() {
    let model = ScriptedModel::start_with(echo_model).await;
    let site = Site::new(&model.base_url(), &[], &[]);
    let mut d = site.start(&[]);
    d.ready().await;

    // Memory: the daemon holds the index, so only going through it can answer.
    let (status, added) = d
        .post(
            "/v1/memory",
            json!({"text": "用户喜欢喝乌龙茶", "tags": ["偏好"]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{added}");
    let fact = added["id"].as_str().unwrap().to_string();
    let out = site.cli(&["memory", "search", "乌龙茶", "--json"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let searched = text(&out.stdout);
    assert!(searched.contains(&fact), "{searched}");
    assert!(searched.contains("用户喜欢喝乌龙茶"), "{searched}");
    let out = site.cli(&["memory", "search", "乌龙茶"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("乌龙茶"),
        "{}",
        text(&out.stdout)
    );
    // A fact added by the CLI goes through the daemon too: the API finds it at once.
    let out = site.cli(&["memory", "add", "the user's cat is called Miso"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (_, found) = d.get("/v1/memory?q=cat%20Miso").await;
    assert_eq!(found["facts"].as_array().unwrap().len(), 1, "{found}");
    d.stop().await;

    // Without a daemon the data dir answers: the index is free again.
    let out = site.cli(&["memory", "search", "Miso", "--json"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("Miso"), "{}", text(&out.stdout));
    // An address file left by a daemon that could not remove it costs only the probe.
    std::fs::write(addr_path(&site.data()), "127.0.0.1:9\n").unwrap();
    let out = site.cli(&["memory", "search", "乌龙茶", "--json"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains(&fact), "{}", text(&out.stdout));
}

/// A client submitting `task` with `wait: true`, in the background: the status and the body
/// it got, or why it got none.
fn waiting_client(
    d: &crate::process::Daemon,
    task: &str,
) -> tokio::task::JoinHandle<Result<(StatusCode, Value), reqwest::Error>> {
    let http = d.http().clone();
    let url = format!("{}/v1/tasks", d.base());
    let body = json!({"task": task, "wait": true});
    tokio::spawn(async move {
        let r = http.post(url).json(&body).send().await?;
        Ok((r.status(), r.json::<Value>().await?))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_what_fits_in_the_grace_and_records_the_rest() {
    let model = ScriptedModel::start_with(echo_model).await;
    let site = Site::new(&model.base_url(), &["shutdown_grace_s: 1"], &[]);
    let mut d = site.start(&[]);
    d.ready().await;

    let slow = d.submit("a slow task").await;
    let quick = d.submit("a quick task").await;
    assert!(model.wait_for_requests(2, PATIENCE).await);
    // A client waiting on the slow task gets its outcome, not a reset connection.
    let waiter = waiting_client(&d, "another slow task");
    assert!(model.wait_for_requests(3, PATIENCE).await);
    let signalled = Instant::now();
    d.signal("-TERM");
    d.wait_log("shutting down").await;
    // No new work is taken once shutdown has begun.
    let refused = d
        .http()
        .post(format!("{}/v1/tasks", d.base()))
        .json(&json!({"task": "too late"}))
        .send()
        .await;
    // Refused at the door (the listener closed) or by the API (a kept-alive connection).
    match refused {
        Err(_) => {}
        Ok(r) => assert_eq!(r.status(), 503, "accepted during shutdown"),
    }
    let status = d.exited(PATIENCE).await;
    let took = signalled.elapsed();
    assert_eq!(status.code(), Some(0), "{}", d.log());
    assert!(took < Duration::from_secs(10), "shutdown took {took:?}");
    eprintln!("SIGTERM to exit: {took:?}");

    let (status, waited) = waiter
        .await
        .unwrap()
        .expect("the waiting client got an answer");
    assert_eq!(status, StatusCode::OK, "{waited}");
    assert_eq!(waited["state"], "failed", "{waited}");
    assert_eq!(waited["reason"], "shutdown");

    let show = |id: &str| {
        let out = site.cli(&["tasks", "show", id, "--json"], &[]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let t = show(&slow);
    assert_eq!(t["state"], "failed", "{t}");
    assert_eq!(t["reason"], "shutdown", "{t}");
    assert!(t["error"].as_str().unwrap().contains("stopped"), "{t}");
    let t = show(&quick);
    assert_eq!(t["state"], "succeeded", "{t}");
    assert_eq!(t["answer"], "answer to: a quick task");
    let out = site.cli(&["tasks", "list", "--json"], &[]);
    let all: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        !all.to_string().contains("too late"),
        "a task was stored during shutdown: {all}"
    );
    assert!(d.log().contains("grace period over"), "{}", d.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_answers_a_client_waiting_on_a_task_no_worker_took_and_it_runs_after_restart() {
    let model = ScriptedModel::start_with(echo_model).await;
    let site = Site::new(&model.base_url(), &["shutdown_grace_s: 1"], &[]);
    let yaml = std::fs::read_to_string(site.config()).unwrap();
    std::fs::write(site.config(), yaml.replace("workers: 4", "workers: 1")).unwrap();
    let mut d = site.start(&[]);
    d.ready().await;
    // The one worker is busy; the next task waits, pending, with a client waiting on it.
    d.submit("a slow task").await;
    assert!(model.wait_for_requests(1, PATIENCE).await);
    let waiter = waiting_client(&d, "a task behind it");
    d.until("the second task to be pending", || async {
        let (_, v) = d.get("/v1/tasks?state=pending").await;
        v["tasks"]
            .as_array()
            .is_some_and(|t| !t.is_empty())
            .then_some(())
    })
    .await;
    // A job fired now waits, pending, behind them too.
    let (status, job) = d
        .post(
            "/v1/jobs",
            json!({"task": "the digest", "schedule": "0 8 * * *"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    let job = job["id"].as_str().expect("a job id").to_string();
    let (status, fired) = d.post(&format!("/v1/jobs/{job}/run"), json!({})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{fired}");
    let job_task = fired["task_id"].as_str().expect("its task").to_string();
    let signalled = Instant::now();
    d.signal("-TERM");
    let (status, waited) = waiter
        .await
        .unwrap()
        .expect("the waiting client got an answer, not a dropped connection");
    assert_eq!(status, StatusCode::ACCEPTED, "{waited}");
    assert_eq!(waited["state"], "pending", "{waited}");
    let id = waited["id"].as_str().expect("its id").to_string();
    assert_eq!(d.exited(PATIENCE).await.code(), Some(0), "{}", d.log());
    // The grace (1 s) and the bounded steps after it; the firing left waiting holds none up.
    let took = signalled.elapsed();
    assert!(
        took < Duration::from_secs(8),
        "shutdown took {took:?}\n{}",
        d.log()
    );
    assert!(!d.log().contains("did not stop in time"), "{}", d.log());

    // Neither is lost: the next start runs both, and the job's run is delivered as fired.
    let mut d = site.start(&[]);
    d.ready().await;
    let done = d.finished(&id).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    let done = d.finished(&job_task).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    d.until("the job's run recorded", || async {
        let (_, v) = d.get(&format!("/v1/jobs/{job}/runs")).await;
        let run = v["runs"][0].clone();
        (run["task_id"] == job_task.as_str() && run["outcome"] == "fired").then_some(())
    })
    .await;
    let (_, j) = d.get(&format!("/v1/jobs/{job}")).await;
    assert!(j.get("running_task_id").is_some_and(Value::is_null), "{j}");
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_then_restart_keeps_what_was_committed_and_marks_the_cut_task() {
    let model = ScriptedModel::start_with(echo_model).await;
    let site = Site::new(&model.base_url(), &[], &[]);
    let mut d = site.start(&[]);
    d.ready().await;

    let (status, job) = d
        .post(
            "/v1/jobs",
            json!({"task": "check the weather", "schedule": "every 2h"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    let (status, fact) = d.post("/v1/memory", json!({"text": "用户住在杭州"})).await;
    assert_eq!(status, StatusCode::CREATED, "{fact}");
    let (status, done) = d
        .post("/v1/tasks", json!({"task": "say hi", "wait": true}))
        .await;
    assert_eq!(status, StatusCode::OK, "{done}");
    let before = model.request_count();
    let cut = d.submit("a slow task").await;
    assert!(model.wait_for_requests(before + 1, PATIENCE).await);

    d.signal("-KILL");
    let status = d.exited(PATIENCE).await;
    assert_eq!(status.code(), None, "killed by a signal");

    let mut d = site.start(&[]);
    d.ready().await;
    d.wait_log("marked failed (interrupted)").await;
    let t = d.finished(&cut).await;
    assert_eq!(t["state"], "failed", "{t}");
    assert_eq!(t["reason"], "interrupted", "{t}");
    let (_, t) = d
        .get(&format!("/v1/tasks/{}", done["id"].as_str().unwrap()))
        .await;
    assert_eq!(t["state"], "succeeded");
    assert_eq!(t["answer"], "answer to: say hi");
    let (_, jobs) = d.get("/v1/jobs").await;
    assert_eq!(jobs["jobs"][0]["id"], job["id"], "{jobs}");
    let (_, found) = d.get("/v1/memory?q=杭州").await;
    assert_eq!(found["facts"][0]["id"], fact["id"], "{found}");
    // The restarted daemon works normally.
    let (status, again) = d
        .post("/v1/tasks", json!({"task": "say hi again", "wait": true}))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(again["state"], "succeeded", "{again}");
    d.stop().await;
}

/// `systemd-analyze verify` on a unit, with `HOME` set so `%h` resolves into `home`. It runs in
/// system mode: a user manager is usually not reachable from a test (no XDG_RUNTIME_DIR).
fn verify_unit(unit: &Path, home: &Path) -> Output {
    Command::new("systemd-analyze")
        .arg("verify")
        .arg(unit)
        .env("HOME", home)
        .env("SYSTEMD_LOG_COLOR", "0")
        .output()
        .expect("systemd-analyze runs")
}

fn has_systemd_analyze() -> bool {
    Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn the_systemd_unit_installs_and_verifies() {
    let dir = tempfile::tempdir().unwrap();
    // A space in the path: ExecStart and ReadWritePaths must quote it.
    let home = dir.path().join("the home");
    let data = home.join("my data");
    let config = home.join("hermes settings.yaml");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(&config, "server:\n  port: 8799\n").unwrap();
    let out = Command::new(BIN)
        .current_dir(&home)
        .env("HOME", &home)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("HERMES_CONFIG")
        .env_remove("HERMES_DATA_DIR")
        .arg("--config")
        .arg(&config)
        .arg("--data-dir")
        .arg(&data)
        .args(["service", "install"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let unit_path = home.join(".config/systemd/user/hermes-agent.service");
    let said = text(&out.stdout);
    assert!(
        said.contains(&format!("wrote {}", unit_path.display())),
        "{said}"
    );
    // The service's /tmp is its own (PrivateTmp=yes): a data dir there is said to be unseen.
    assert_eq!(
        said.contains(&format!(
            "warning: {} is under a temporary directory",
            data.display()
        )),
        data.starts_with("/tmp") || data.starts_with("/var/tmp"),
        "{said}"
    );
    assert!(data.is_dir(), "the data dir exists for ReadWritePaths");
    let unit = std::fs::read_to_string(&unit_path).unwrap();
    let exec = unit
        .lines()
        .find(|l| l.starts_with("ExecStart="))
        .expect("ExecStart");
    assert!(
        exec.starts_with(&format!("ExecStart={BIN} "))
            || exec.starts_with(&format!("ExecStart=\"{BIN}\" ")),
        "{exec}"
    );
    assert!(
        exec.contains(&format!("--config \"{}\"", config.display())),
        "{exec}"
    );
    assert!(
        exec.ends_with(&format!("--data-dir \"{}\" serve", data.display())),
        "{exec}"
    );
    assert!(
        unit.contains(&format!("ReadWritePaths=\"{}\"", data.display())),
        "{unit}"
    );
    assert!(unit.contains("Restart=on-failure"));
    assert!(unit.contains("EnvironmentFile=-%h/.config/hermes-agent/env"));

    // A relative --data-dir becomes absolute: systemd needs absolute paths.
    let out = Command::new(BIN)
        .current_dir(&home)
        .env("HOME", &home)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("HERMES_CONFIG")
        .env_remove("HERMES_DATA_DIR")
        .args(["--data-dir", "rel-data", "service", "install"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains(&format!("replaced {}", unit_path.display())),
        "{}",
        text(&out.stdout)
    );
    let relative = std::fs::read_to_string(&unit_path).unwrap();
    let rw = relative
        .lines()
        .find(|l| l.starts_with("ReadWritePaths="))
        .unwrap();
    assert!(
        rw.contains(&home.join("rel-data").display().to_string()),
        "{rw}"
    );
    assert!(!rw.starts_with("ReadWritePaths=rel-data"), "{rw}");

    if !has_systemd_analyze() {
        eprintln!("note: systemd-analyze is not installed; unit verification skipped");
        return;
    }
    // The first install again (the one with spaces), verified as written.
    std::fs::write(&unit_path, &unit).unwrap();
    let out = verify_unit(&unit_path, &home);
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "rendered unit:\n{unit}\n{}",
        text(&out.stderr)
    );

    // The shipped template, with `%h/.cargo/bin/hermes-agent` made to exist.
    let bin_dir = home.join(".cargo/bin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    std::os::unix::fs::symlink(BIN, bin_dir.join("hermes-agent")).unwrap();
    std::fs::create_dir_all(home.join(".local/share/hermes-agent")).unwrap();
    let template = Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd/hermes-agent.service");
    let out = verify_unit(&template, &home);
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_daemon_on_the_same_data_dir_refuses_to_start() {
    let model = ScriptedModel::start_with(echo_model).await;
    let site = Site::new(&model.base_url(), &[], &[]);
    let mut first = site.start(&[]);
    first.ready().await;
    let slow = first.submit("a slow task").await;
    assert!(model.wait_for_requests(1, PATIENCE).await);

    // Same data dir (and any free port): it would take the first one's running task for a
    // crash. Its own log, so what it says is not mixed with the first one's.
    let first_addr = read_addr(&site.data()).unwrap();
    let other_dir = tempfile::tempdir().unwrap();
    let mut second = site.spawn(&[], other_dir.path());
    let status = second.exited(PATIENCE).await;
    let log = second.log();
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(log.contains("already"), "{log}");
    assert!(log.contains(&site.data().display().to_string()), "{log}");
    assert_eq!(
        read_addr(&site.data()).unwrap(),
        first_addr,
        "the refused daemon left the first one's address alone"
    );

    let (_, t) = first.get(&format!("/v1/tasks/{slow}")).await;
    assert_eq!(t["state"], "running", "{t}");
    let (status, _) = first
        .post(&format!("/v1/tasks/{slow}/cancel"), json!({}))
        .await;
    assert_eq!(status, StatusCode::OK);
    first.stop().await;
    // Once the first has stopped, the data dir is free again.
    let mut again = site.start(&[]);
    again.ready().await;
    again.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_writes_the_bound_address_and_removes_it_at_a_clean_exit() {
    let model = ScriptedModel::start_with(echo_model).await;
    let t = common::app(common::settings(&model.base_url()), vec![]).await;
    let data = t.dir.path().to_path_buf();
    assert!(!addr_path(&data).exists());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let bound = listener.local_addr().expect("its address");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let daemon = tokio::spawn(hermes_surfaces::daemon::run(
        t.app.clone(),
        listener,
        async move {
            let _ = stopped.await;
        },
    ));

    let addr = wait_for_addr(&data).await;
    assert_eq!(addr, bound, "the file names the port actually bound");
    let health: Value = reqwest::get(format!("http://{addr}/healthz"))
        .await
        .expect("the API answers at that address")
        .json()
        .await
        .expect("JSON");
    assert_eq!(health["status"], "ok", "{health}");

    stop.send(()).expect("the daemon listens for its shutdown");
    tokio::time::timeout(PATIENCE, daemon)
        .await
        .expect("the daemon stops in time")
        .expect("the daemon task joins")
        .expect("a clean exit");
    assert!(
        !addr_path(&data).exists(),
        "the address file is gone after a clean exit"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_watch_follows_a_task_live_on_the_daemon_and_replays_it_locally() {
    let model = ScriptedModel::start_with(echo_model).await;
    let site = Site::new(&model.base_url(), &[], &[]);
    let mut d = site.start(&[]);
    d.ready().await;
    // "quick": the model takes 300 ms, so the watch starts while the task runs.
    let task = d.submit("a quick question").await;
    let out = site.cli(&["tasks", "watch", &task[..8]], &[]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(stdout.contains("model fast"), "the step line: {stdout}");
    assert!(stdout.contains("answer to: a quick question"), "{stdout}");
    d.stop().await;
    // With no daemon: the finished task is shown from the data dir the same way.
    let out = site.cli(&["tasks", "watch", &task], &[]);
    let again = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(again, stdout);
    let out = site.cli(&["tasks", "watch", "ffffffffffffffff"], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("not found"),
        "{}",
        text(&out.stderr)
    );
}

/// Through the daemon, as without it: what the daemon's API returns (an answer, a fact) reaches
/// the terminal with its control sequences written out, never raw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_the_daemon_control_sequences_reach_the_terminal_escaped() {
    const EVIL: &str = "A\u{1b}]0;pwned\u{7}B\u{1b}[2JC\u{202e}D\u{9b}E\rF";
    let raw = |out: &[u8]| {
        out.iter().any(|b| matches!(b, 0x1b | 0x07 | 0x0d))
            || out.windows(3).any(|w| w == [0xe2, 0x80, 0xae])
            || out.windows(2).any(|w| w == [0xc2, 0x9b])
    };
    let model = ScriptedModel::start_with(|_| Reply::text(EVIL)).await;
    let site = Site::new(&model.base_url(), &[], &[]);
    let mut d = site.start(&[]);
    d.ready().await;
    let task = d.submit("say it").await;
    d.finished(&task).await;
    let out = site.cli(&["memory", "add", &format!("tea {EVIL}")], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for args in [
        vec!["tasks", "watch", task.as_str()],
        vec!["tasks", "show", task.as_str()],
        vec!["tasks", "list"],
        vec!["memory", "search", "tea"],
    ] {
        let out = site.cli(&args, &[]);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        assert!(!raw(&out.stdout), "{args:?}: {:?}", text(&out.stdout));
        assert!(!raw(&out.stderr), "{args:?}: {:?}", text(&out.stderr));
        if args[0] != "tasks" || args[1] != "list" {
            assert!(
                text(&out.stdout).contains(r"\x1b]0;pwned\x07B\x1b[2JC\u{202e}D\u{9b}E\x0dF"),
                "{args:?}: {}",
                text(&out.stdout)
            );
        }
    }
    d.stop().await;
}

/// A job that sends to a channel, or uses a model profile, the settings no longer have is
/// named at start, not found out at its first run; running it now says why it cannot start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_sending_to_a_channel_no_longer_configured_is_named_at_start() {
    let site = Site::new("http://127.0.0.1:9/v1", &[], &[]);
    let yaml = std::fs::read_to_string(site.config()).unwrap();
    let with_hook =
        format!("{yaml}notify:\n  webhooks:\n    plain: {{url: \"http://127.0.0.1:9/hook\"}}\n");
    std::fs::write(site.config(), with_hook).unwrap();
    let out = site.cli(
        &[
            "jobs",
            "add",
            "ping",
            "--schedule",
            "0 8 * * *",
            "--notify",
            "plain",
        ],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = site.cli(
        &[
            "jobs",
            "add",
            "pro digest",
            "--schedule",
            "0 9 * * *",
            "--profile",
            "pro",
        ],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let pro_job = text(&out.stdout)
        .split_whitespace()
        .find(|w| w.starts_with("j_"))
        .map(str::to_string)
        .unwrap_or_else(|| panic!("no job id: {}", text(&out.stdout)));
    let without_pro: String = yaml
        .lines()
        .filter(|l| !l.trim_start().starts_with("pro:"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(site.config(), without_pro).unwrap();
    let mut d = site.start(&[]);
    d.ready().await;
    let log = d.log();
    assert!(
        log.contains("the job sends to plain, which the settings do not configure")
            && log.contains("remove the job and add it again"),
        "{log}"
    );
    assert!(
        log.contains("the job uses model profile pro, which the settings do not define"),
        "{log}"
    );
    let (status, v) = d.post(&format!("/v1/jobs/{pro_job}/run"), json!({})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{v}");
    assert_eq!(v["error"]["code"], "not_started", "{v}");
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("unknown model profile 'pro'"), "{v}");
    d.stop().await;
}
