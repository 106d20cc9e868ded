//! Approvals across processes: the daemon restarted while a call waits (the request stays open,
//! the task goes on once approved), and the CLI — `approvals list|approve|deny` and `run`
//! waiting on its own held call.

use super::results_seen;
use crate::common::text;
use crate::daemon::Site;
use crate::process::PATIENCE;
use hermes_engine::llm::scripted::{Reply, ScriptedModel};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

const BIN: &str = env!("CARGO_BIN_EXE_hermes-agent");

/// A model that calls `mark` once, then answers.
fn mark_model(req: &Value) -> Reply {
    match results_seen(req) {
        0 => Reply::tool_calls(&[("mark", json!({"to": "bob"}))]),
        _ => Reply::text("marked"),
    }
}

/// A site whose `mark` manifest tool (approval: required) appends its argument to a file.
fn site(model_url: &str) -> (Site, PathBuf) {
    let site = Site::new(model_url, &[], &[]);
    let tools = site.dir.path().join("tools");
    std::fs::create_dir_all(&tools).unwrap();
    let marks = site.dir.path().join("marks.txt");
    // The one file outside its work dir the confined tool may write (tools.sandbox: enforce).
    std::fs::write(&marks, "").unwrap();
    let manifest = format!(
        "name: mark\ndescription: Mark someone.\n\
         parameters: {{type: object, properties: {{to: {{type: string}}}}, required: [to]}}\n\
         command: {{argv: [\"/bin/sh\", \"-c\", \"echo \\\"$0\\\" >> {}\", \"{{{{to}}}}\"]}}\n\
         approval: required\n\
         sandbox: {{write: [\"{}\"]}}\n",
        marks.display(),
        marks.display()
    );
    std::fs::write(tools.join("mark.yaml"), manifest).unwrap();
    let settings = std::fs::read_to_string(site.config()).unwrap();
    let settings = settings
        .replace(
            "  manifests_dir: /nonexistent-hermes-daemon-test-tools\n",
            &format!("  manifests_dir: {}\n", tools.display()),
        )
        .replace("agent:\n  workers: 4\n", "agent:\n  workers: 1\n");
    std::fs::write(site.config(), settings).unwrap();
    (site, marks)
}

/// Append top-level sections to `site`'s settings.
fn add_settings(site: &Site, yaml: &str) {
    let settings = std::fs::read_to_string(site.config()).unwrap();
    std::fs::write(site.config(), format!("{settings}{yaml}")).unwrap();
}

fn marks(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_call_survives_a_daemon_restart_and_runs_once_when_approved() {
    let model = ScriptedModel::start_with(mark_model).await;
    let (site, mark_file) = site(&model.base_url());
    let mut daemon = site.start(&[]);
    daemon.ready().await;
    let id = daemon.submit("mark bob").await;

    // It waits: running, not stuck, and the request is open.
    let open = open_requests(&daemon, 1).await;
    assert_eq!(open.len(), 1);
    assert_eq!(open[0]["task_id"], id.as_str());
    assert_eq!(open[0]["tool"], "mark");
    assert_eq!(open[0]["arguments"], json!({"to": "bob"}));
    assert_eq!(open[0]["state"], "open");
    let approval = open[0]["id"].as_str().unwrap().to_string();
    let (_, task) = daemon.get(&format!("/v1/tasks/{id}")).await;
    assert_eq!(task["state"], "running");
    assert_eq!(task["waiting"], true);
    let (status, health) = daemon.get("/healthz").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(health["status"], "ok", "{health}");
    assert!(marks(&mark_file).is_empty());

    // Killed outright, then started again: the request and the task are still there.
    daemon.signal("-KILL");
    daemon.exited(PATIENCE).await;
    let mut daemon = site.start(&[]);
    daemon.ready().await;
    let (_, task) = daemon.get(&format!("/v1/tasks/{id}")).await;
    assert_eq!(task["state"], "running", "{task}");
    assert_eq!(task["waiting"], true);

    // `tasks list --state running` marks it.
    let out = site.cli(&["tasks", "list", "--state", "running"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("running (waiting for approval)"),
        "{}",
        text(&out.stdout)
    );

    // Listed and approved by the CLI, through the daemon.
    let out = site.cli(&["approvals", "list"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains(&approval),
        "{}",
        text(&out.stdout)
    );
    let out = site.cli(&["approvals", "approve", &approval], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let done = daemon.finished(&id).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(marks(&mark_file), vec!["bob".to_string()]);
    let (status, again) = daemon
        .post(
            &format!("/v1/approvals/{approval}/deny"),
            json!({"reason": "late"}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{again}");
    // The CLI answered through the daemon's API, and is named as the one who answered.
    let (_, approved) = daemon.get("/v1/approvals?state=approved").await;
    assert_eq!(approved["approvals"][0]["decided_by"], "cli");
    daemon.stop().await;
}

/// A request that expired while the daemon was stopped: the CLI on the data dir lists it as
/// expired (no sweeper has run), refuses to approve it with a message saying so, and the tool
/// does not run when the daemon starts again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_expired_while_the_daemon_was_stopped_cannot_be_approved_from_the_cli() {
    let model = ScriptedModel::start_with(mark_model).await;
    let (site, mark_file) = site(&model.base_url());
    // Long enough for the daemon to stop before it expires, short enough not to wait long.
    let settings = std::fs::read_to_string(site.config()).unwrap();
    let settings = settings.replacen("tools:\n", "tools:\n  approval_expire_s: 3\n", 1);
    std::fs::write(site.config(), settings).unwrap();
    let mut daemon = site.start(&[]);
    daemon.ready().await;
    let id = daemon.submit("mark bob").await;
    let open = open_requests(&daemon, 1).await;
    let approval = open[0]["id"].as_str().unwrap().to_string();
    let expires: chrono::DateTime<chrono::Utc> = open[0]["expires_at"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .expect("an expiry");
    daemon.stop().await;

    // Its time passes while nothing sweeps.
    let wait = (expires - chrono::Utc::now()).to_std().unwrap_or_default();
    assert!(wait < PATIENCE, "expires in {wait:?}");
    tokio::time::sleep(wait + std::time::Duration::from_millis(100)).await;

    let out = site.cli(&["approvals", "list", "--state", "open", "--json"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["approvals"], json!([]), "listed open past its time: {v}");
    let out = site.cli(&["approvals", "list", "--state", "expired", "--json"], &[]);
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["approvals"][0]["id"], approval.as_str(), "{v}");
    assert_eq!(v["approvals"][0]["state"], "expired", "{v}");

    let out = site.cli(&["approvals", "approve", &approval], &[]);
    let err = text(&out.stderr);
    assert!(!out.status.success(), "an expired request was approved");
    assert!(
        err.contains(&format!("approval '{approval}' expired at"))
            && err.contains("can no longer be answered"),
        "{err}"
    );
    // Refused again the same way once recorded expired.
    let out = site.cli(&["approvals", "approve", &approval], &[]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("can no longer be answered"));

    // The next start: the task is told the request expired and ends without the tool.
    let mut daemon = site.start(&[]);
    daemon.ready().await;
    let done = daemon.finished(&id).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert!(marks(&mark_file).is_empty(), "the expired call ran");
    let (_, v) = daemon.get("/v1/approvals?state=expired").await;
    assert_eq!(v["approvals"][0]["id"], approval.as_str(), "{v}");
    assert_eq!(v["approvals"][0]["decided_by"], "expiry", "{v}");
    // Through the daemon's API too: refused with the same words.
    let out = site.cli(&["approvals", "approve", &approval], &[]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("can no longer be answered"),
        "{}",
        text(&out.stderr)
    );
    daemon.stop().await;
}

/// The open requests, once there are `n` and their tasks wait (a request is recorded a moment
/// before its task's hold), bounded by [`PATIENCE`].
async fn open_requests(daemon: &crate::process::Daemon, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let (_, v) = daemon.get("/v1/approvals?state=open").await;
        if let Some(list) = v["approvals"].as_array().filter(|l| l.len() >= n) {
            let mut all_held = true;
            for a in list {
                let (_, task) = daemon
                    .get(&format!(
                        "/v1/tasks/{}",
                        a["task_id"].as_str().unwrap_or("")
                    ))
                    .await;
                all_held &= task["waiting"] == true;
            }
            if all_held {
                return list.clone();
            }
        }
        assert!(Instant::now() < deadline, "not {n} held requests: {v}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Fire `job` now; the id of the request its task then waits on.
async fn fire_held(daemon: &crate::process::Daemon, job: &str) -> String {
    let (status, fired) = daemon.post(&format!("/v1/jobs/{job}/run"), json!({})).await;
    assert!(status.is_success(), "{status}: {fired}");
    open_requests(daemon, 1).await[0]["id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// What the webhook received, once it is at least `n` bodies (bounded by [`PATIENCE`]).
async fn deliveries(received: &std::sync::Mutex<Vec<Value>>, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let got = received.lock().unwrap().clone();
        if got.len() >= n {
            return got;
        }
        assert!(Instant::now() < deadline, "{} of {n} deliveries", got.len());
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_firing_held_across_a_restart_is_delivered_and_recorded_once_approved() {
    let model = ScriptedModel::start_with(mark_model).await;
    let (hook, received) = crate::common::webhook_receiver().await;
    let (site, mark_file) = site(&model.base_url());
    add_settings(
        &site,
        &format!("notify:\n  webhooks:\n    hook: {{url: \"{hook}\"}}\n"),
    );
    let mut daemon = site.start(&[]);
    daemon.ready().await;
    let (status, job) = daemon
        .post(
            "/v1/jobs",
            json!({"name": "marker", "task": "mark bob", "schedule": "every 2h", "notify": ["hook"]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    let job_id = job["id"].as_str().unwrap().to_string();
    let approval = fire_held(&daemon, &job_id).await;

    // The daemon dies while the firing waits for its person, and comes back.
    daemon.signal("-KILL");
    daemon.exited(PATIENCE).await;
    let mut daemon = site.start(&[]);
    daemon.ready().await;
    let (status, v) = daemon
        .post(&format!("/v1/approvals/{approval}/approve"), json!({}))
        .await;
    assert_eq!(status, StatusCode::OK, "{v}");

    // The answer reaches the job's channel, and the run is recorded as the firing it was.
    let delivered = deliveries(&received, 1).await;
    assert_eq!(delivered.len(), 1, "{delivered:?}");
    assert!(
        delivered[0].to_string().contains("marked"),
        "{}",
        delivered[0]
    );
    assert_eq!(marks(&mark_file), vec!["bob".to_string()]);
    // Its delivery says `sent` once the notice is recorded as sent (just after the hook got it).
    let runs = daemon
        .until("the run's delivery settled", || async {
            let (_, runs) = daemon.get(&format!("/v1/jobs/{job_id}/runs")).await;
            let runs = runs["runs"].as_array().cloned().unwrap_or_default();
            (runs.first().is_some_and(|r| r["delivery"] == "sent")).then_some(runs)
        })
        .await;
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["outcome"], "fired", "{runs:?}");
    // Its lock was freed: it can fire again (and asks again: a new firing, a new request).
    let second = fire_held(&daemon, &job_id).await;
    // A graceful stop does not wait out its grace on the person (the test's patience is
    // shorter than the 30 s grace), and the next start follows this firing too.
    daemon.stop().await;
    let mut daemon = site.start(&[]);
    daemon.ready().await;
    let (status, v) = daemon
        .post(&format!("/v1/approvals/{second}/approve"), json!({}))
        .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    deliveries(&received, 2).await;
    let (_, runs) = daemon.get(&format!("/v1/jobs/{job_id}/runs")).await;
    let outcomes: Vec<&Value> = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["outcome"])
        .collect();
    assert_eq!(outcomes, [&json!("fired"), &json!("fired")], "{runs}");
    assert_eq!(
        marks(&mark_file),
        vec!["bob".to_string(), "bob".to_string()]
    );
    daemon.stop().await;
}

/// `run` in its own process, its stderr read line by line until `needle`; the child and the
/// line.
pub(crate) fn run_until(
    site: &Site,
    args: &[&str],
    needle: &str,
) -> (std::process::Child, String, Vec<String>) {
    let mut child = Command::new(BIN)
        .current_dir(site.dir.path())
        .env_remove("HERMES_CONFIG")
        .env_remove("HERMES_DATA_DIR")
        .env("XDG_CONFIG_HOME", site.dir.path().join("xdg-config"))
        .arg("--config")
        .arg(site.config())
        .arg("--data-dir")
        .arg(site.data())
        .arg("run")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run starts");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let mut seen = Vec::new();
    loop {
        match lines.next() {
            Some(Ok(line)) => {
                if line.contains(needle) {
                    // Keep draining, so the child never blocks on a full pipe.
                    std::thread::spawn(move || for _ in lines {});
                    return (child, line, seen);
                }
                seen.push(line);
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("`run` ended without {needle:?}:\n{}", seen.join("\n"))
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_waits_for_an_answer_from_another_terminal_and_its_timeout_denies() {
    let model = ScriptedModel::start_with(mark_model).await;
    let (site, mark_file) = site(&model.base_url());

    let (child, line, _) = run_until(&site, &["mark bob"], "waiting for approval: ");
    let id = line
        .split("waiting for approval: ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("an id")
        .to_string();
    assert!(marks(&mark_file).is_empty());
    // No daemon: the other terminal answers on the data dir.
    let out = site.cli(&["approvals", "approve", &id], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = child.wait_with_output().expect("run ends");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "marked");
    assert_eq!(marks(&mark_file), vec!["bob".to_string()]);

    let (child, _, _) = run_until(
        &site,
        &["mark bob again", "--approval-timeout", "1"],
        "waiting for approval: ",
    );
    let out = child.wait_with_output().expect("run ends");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(marks(&mark_file).len(), 1, "the timed-out call ran");
    let out = site.cli(&["approvals", "list", "--state", "denied", "--json"], &[]);
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["approvals"][0]["reason"], "timeout", "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_run_died_while_it_waited_is_continued_by_the_daemon() {
    let model = ScriptedModel::start_with(mark_model).await;
    let (site, mark_file) = site(&model.base_url());
    // A short lease, so the test need not wait out the default 30 s.
    add_settings(&site, "storage:\n  node_lease_s: 2\n");
    let mut daemon = site.start(&[]);
    daemon.ready().await;

    // `run` holds its own task: the daemon leaves it alone while that process lives.
    let (mut child, _, _) = run_until(&site, &["mark bob"], "waiting for approval: ");
    let open = open_requests(&daemon, 1).await;
    let (approval, task) = (
        open[0]["id"].as_str().unwrap().to_string(),
        open[0]["task_id"].as_str().unwrap().to_string(),
    );
    // Killed outright, as a closed terminal or an OOM kill would.
    child.kill().expect("kill run");
    child.wait().expect("run reaped");
    let (status, v) = daemon
        .post(&format!("/v1/approvals/{approval}/approve"), json!({}))
        .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    // Past the lease, the daemon's workers continue the task: nothing waits for the dead.
    let done = daemon.finished(&task).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["answer"], "marked", "{done}");
    assert_eq!(marks(&mark_file), vec!["bob".to_string()]);
    daemon.stop().await;
}

/// `hermes-agent mcp` on `site`: one `run_task` call over raw JSON-RPC lines; its answer.
fn mcp_run_task(site: &Site, task: &str) -> Value {
    use std::io::Write;
    let mut child = Command::new(BIN)
        .current_dir(site.dir.path())
        .env_remove("HERMES_CONFIG")
        .env_remove("HERMES_DATA_DIR")
        .env("XDG_CONFIG_HOME", site.dir.path().join("xdg-config"))
        .arg("--config")
        .arg(site.config())
        .arg("--data-dir")
        .arg(site.data())
        .arg("mcp")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("mcp starts");
    let mut stdin = child.stdin.take().expect("stdin");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut send = |v: Value| writeln!(&mut stdin, "{v}").expect("write to stdin");
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}}),
    );
    rx.recv_timeout(PATIENCE).expect("initialized");
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "run_task", "arguments": {"task": task}}}));
    // At once: well before a person could answer (nobody does in this test).
    let answer = rx.recv_timeout(PATIENCE).expect("run_task answers");
    drop(stdin);
    let _ = child.wait();
    serde_json::from_str(&answer).expect("JSON-RPC")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_run_task_returns_at_once_waiting_and_the_tool_has_not_run() {
    let model = ScriptedModel::start_with(mark_model).await;
    let (site, mark_file) = site(&model.base_url());
    // On the data dir.
    let answer = mcp_run_task(&site, "mark bob");
    let body = answer.to_string();
    assert!(body.contains("waiting for approval"), "{body}");
    assert!(body.contains("\"isError\":false"), "{body}");
    assert!(marks(&mark_file).is_empty());
    // Through the daemon, which then holds two open requests and runs nothing.
    let mut daemon = site.start(&[]);
    daemon.ready().await;
    let body = mcp_run_task(&site, "mark bob too").to_string();
    assert!(body.contains("waiting for approval"), "{body}");
    let (_, open) = daemon.get("/v1/approvals?state=open").await;
    assert_eq!(
        open["approvals"].as_array().map(Vec::len),
        Some(2),
        "{open}"
    );
    assert!(marks(&mark_file).is_empty());
    daemon.stop().await;
}
