//! The daemon beside other processes of its data dir: a `run` (or `mcp`, `eval`) that claimed
//! its own task is running it; a daemon starting then must leave that task alone, and end only
//! those whose process is gone. And a `run` interrupted (Ctrl-C, SIGTERM, SIGHUP): its task
//! ends cancelled, at once.

use crate::approvals::process::run_until;
use crate::approvals::results_seen;
use crate::common::text;
use crate::daemon::Site;
use hermes_engine::llm::scripted::{Reply, ScriptedModel};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// A model that calls `gate` once, then answers "done".
fn gate_model(req: &Value) -> Reply {
    match results_seen(req) {
        0 => Reply::tool_calls(&[("gate", json!({}))]),
        _ => Reply::text("done"),
    }
}

/// A site whose `gate` tool returns once its gate file is not empty; the gate file.
fn site(model_url: &str) -> (Site, PathBuf) {
    let site = Site::new(model_url, &[], &[]);
    let tools = site.dir.path().join("tools");
    std::fs::create_dir_all(&tools).unwrap();
    let gate = site.dir.path().join("gate");
    std::fs::write(&gate, "").unwrap();
    let manifest = format!(
        "name: gate\ndescription: Wait for the gate.\nparameters: {{type: object}}\n\
         command: {{argv: [\"/bin/sh\", \"-c\", \"while [ ! -s {} ]; do sleep 0.05; done; echo open\"]}}\n\
         sandbox: {{read: [\"{}\"]}}\n",
        gate.display(),
        gate.display()
    );
    std::fs::write(tools.join("gate.yaml"), manifest).unwrap();
    let settings = std::fs::read_to_string(site.config()).unwrap().replace(
        "  manifests_dir: /nonexistent-hermes-daemon-test-tools\n",
        &format!("  manifests_dir: {}\n", tools.display()),
    );
    std::fs::write(site.config(), settings).unwrap();
    (site, gate)
}

/// The id `run` printed as its first line (`task ID (PROFILE profile)`).
fn task_id(seen: &[String]) -> String {
    seen.iter()
        .find_map(|l| l.strip_prefix("task "))
        .and_then(|rest| rest.split_whitespace().next())
        .expect("run names its task")
        .to_string()
}

fn open(gate: &Path) {
    std::fs::write(gate, "open").unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_starting_leaves_a_live_runs_task_alone_and_ends_a_dead_ones() {
    let model = ScriptedModel::start_with(gate_model).await;
    let (site, gate) = site(&model.base_url());

    // A `run` that died mid-task: the next daemon ends its task as interrupted.
    let (mut dead, _, seen) = run_until(&site, &["wait at the gate"], "→ tools");
    let dead_task = task_id(&seen);
    dead.kill().expect("kill run");
    dead.wait().expect("run reaped");
    // A `run` alive at the gate while the daemon starts beside it.
    let (live, _, seen) = run_until(&site, &["wait at the gate too"], "→ tools");
    let live_task = task_id(&seen);

    let mut daemon = site.start(&[]);
    daemon.ready().await;
    let t = daemon.task(&dead_task).await;
    assert_eq!(
        (t["state"].as_str(), t["reason"].as_str()),
        (Some("failed"), Some("interrupted")),
        "{t}"
    );
    let t = daemon.task(&live_task).await;
    assert_eq!(t["state"], "running", "a live run's task was ended: {t}");

    open(&gate);
    let out = live.wait_with_output().expect("run ends");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "done");
    let t = daemon.finished(&live_task).await;
    assert_eq!(
        (t["state"].as_str(), t["answer"].as_str()),
        (Some("succeeded"), Some("done")),
        "{t}"
    );

    // A `run` killed while the daemon is up: its sweep ends the task, not the next start.
    std::fs::write(&gate, "").unwrap();
    let (mut killed, _, seen) = run_until(&site, &["wait at the gate again"], "→ tools");
    let killed_task = task_id(&seen);
    killed.kill().expect("kill run");
    killed.wait().expect("run reaped");
    let t = daemon.finished(&killed_task).await;
    assert_eq!(
        (t["state"].as_str(), t["reason"].as_str()),
        (Some("failed"), Some("interrupted")),
        "{t}"
    );
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_sigterm_or_a_closed_terminal_cancels_a_runs_task_at_once() {
    let model = ScriptedModel::start_with(gate_model).await;
    let (site, _gate) = site(&model.base_url());
    for signal in ["-INT", "-TERM", "-HUP"] {
        let (child, _, seen) = run_until(&site, &["wait at the gate"], "→ tools");
        let task = task_id(&seen);
        let interrupted = std::time::Instant::now();
        let kill = std::process::Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(kill.success());
        let out = child.wait_with_output().expect("run ends");
        // The task's own loop hears the cancel at once; before, `run` waited out the
        // cancel's 5 s bound without polling the task it was cancelling (Ctrl-C), or died
        // leaving the task `running` (SIGTERM, SIGHUP).
        assert!(
            interrupted.elapsed() < std::time::Duration::from_secs(3),
            "{signal}: {:?}",
            interrupted.elapsed()
        );
        assert!(!out.status.success(), "{signal}");
        let show = site.cli(&["tasks", "show", &task, "--json"], &[]);
        let v: Value = serde_json::from_slice(&show.stdout).expect("json");
        assert_eq!(v["state"], "cancelled", "{signal}: {v}");
    }
}
