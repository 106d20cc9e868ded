//! MCP servers that try to grow the daemon, flood it or catch it starting, all played by
//! tests/it/mcp/hostile_server.py (raw JSON-RPC, the standard library only). Memory bounds are
//! checked by what the registry and the model request hold (tool count, description and schema
//! sizes, the offered set's size, a working-memory row), not by RSS.

use super::{PATIENCE, call, common, deps, running, settings_with, status_of, stdio};
use hermes_config::McpServer;
use hermes_engine::agent::{RunOptions, Submit};
use hermes_engine::llm::ToolCall;
use hermes_engine::llm::scripted::{Reply, ScriptedModel};
use hermes_engine::tools::{ToolContext, ToolError};
use hermes_store::{NewTask, Origin, TaskState};
use hermes_surfaces::mcp::ServerState;
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

const NO_MODEL: &str = super::NO_MODEL;

fn hostile(mode: &str, gate: Option<&Path>) -> McpServer {
    let python = deps().python.to_string_lossy().into_owned();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/it/mcp/hostile_server.py"
    );
    let gate = gate.map(|g| g.to_string_lossy().into_owned());
    let mut command = vec![python.as_str(), script, mode];
    command.extend(gate.as_deref());
    McpServer {
        timeout_s: 60,
        ..stdio(&command)
    }
}

/// Create a task and run it in this process, as a worker would; the stored record.
async fn run_task(app: &hermes_surfaces::app::App, text: &str) -> hermes_store::TaskRecord {
    let submit = Submit::new(text, Origin::Api, None);
    let task = app.agent.create(submit).await.expect("task created");
    app.agent
        .execute(&task.id, RunOptions::default())
        .await
        .expect("task ran");
    app.store
        .tasks()
        .record(&task.id)
        .await
        .expect("store readable")
        .expect("task stored")
}

/// The number of `tools/list` requests the server got so far.
async fn lists(app: &hermes_surfaces::app::App) -> u64 {
    let stats = call(app, "hostile__stats", json!({})).await;
    assert_eq!(stats.error, None, "{stats:?}");
    let body = stats
        .content
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_default();
    let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {}", stats.content));
    v["lists"].as_u64().expect("a count")
}

#[tokio::test]
async fn a_server_that_pages_forever_with_huge_tools_is_held_to_the_bounds() {
    let mut s = settings_with(NO_MODEL, vec![("hostile", hostile("endless", None))]);
    s.mcp.max_list_pages = 4;
    let t = common::app(s, vec![]).await;
    let status = running(&t.app, &["hostile"]).await;

    // 4 pages of 100 read (not 25 or more), the first 128 kept, less the one whose schema is
    // too large.
    assert_eq!(status[0].tools.len(), 127);
    assert_eq!(lists(&t.app).await, 4);
    let offered = t.app.agent.registry().offered(None);
    let theirs: Vec<_> = offered
        .iter()
        .filter(|s| s.name.starts_with("hostile__"))
        .collect();
    assert_eq!(theirs.len(), 127);
    // The 20 KB schema was refused; every description is marked as the server's and cut.
    assert!(!theirs.iter().any(|s| s.name == "hostile__big_schema"));
    for spec in &theirs {
        assert!(
            spec.description.starts_with("[from MCP server `hostile`] "),
            "{}",
            spec.description
        );
        assert!(
            spec.description.len() <= 1024 + 64,
            "{}",
            spec.description.len()
        );
        assert!(spec.parameters.to_string().len() <= 16 * 1024);
    }
    // What a task would send: 127 small tools, not 400 × 8 KB (3.2 MB).
    assert!(
        offered.json().len() < 256 * 1024,
        "{} bytes of tools",
        offered.json().len()
    );
    t.app.mcp.stop().await;
}

#[tokio::test]
async fn a_result_over_the_line_limit_is_too_large_at_once_and_a_big_one_is_kept_bounded() {
    let t = common::app(
        settings_with(NO_MODEL, vec![("hostile", hostile("single", None))]),
        vec![],
    )
    .await;
    running(&t.app, &["hostile"]).await;

    // 20 MB is over the transport's 16 MiB: told as too large, naming the server, long before
    // the call's 60 s timeout.
    let started = Instant::now();
    let over = call(&t.app, "hostile__huge", json!({"bytes": 20_000_000})).await;
    match &over.error {
        Some(ToolError::Failed(text)) => {
            assert!(
                text.contains("too large") && text.contains("'hostile'"),
                "{text}"
            )
        }
        other => panic!("expected a failure saying too large, got {other:?}"),
    }
    assert_eq!(over.attempts, 1);
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );

    // 12 MB fits the transport: the model sees the capped cut, working memory at most
    // memory.working_max_bytes of it, and the note says the rest is gone.
    let task = t
        .app
        .store
        .tasks()
        .create(&NewTask {
            task: "read a lot".into(),
            origin: Origin::Cli,
            profile: "fast".into(),
            ..NewTask::default()
        })
        .await
        .expect("a task row");
    let ctx = ToolContext {
        task_id: task.id,
        ..ToolContext::default()
    };
    let huge = ToolCall {
        id: "c2".into(),
        name: "hostile__huge".into(),
        arguments: json!({"bytes": 12_000_000}),
    };
    let big = t.app.agent.registry().execute(&huge, &ctx, None).await;
    assert_eq!(big.error, None, "{big:?}");
    // tools.result_max_tokens (800), with the wrapper's few.
    assert!(big.result_tokens <= 800 + 20, "{}", big.result_tokens);
    let key = big.working_key.expect("the result went to working memory");
    let kept = t
        .app
        .store
        .working()
        .read(&key, 0, 1)
        .await
        .expect("the row is there");
    assert_eq!(kept.total_chars, 1024 * 1024);
    assert!(
        big.content.contains("the first 1048576 characters"),
        "{}",
        big.content
    );

    // The server still answers after both.
    assert!(lists(&t.app).await >= 1);
    t.app.mcp.stop().await;
}

#[tokio::test]
async fn a_flood_of_list_changed_costs_one_re_list_a_second() {
    let t = common::app(
        settings_with(NO_MODEL, vec![("hostile", hostile("single", None))]),
        vec![],
    )
    .await;
    running(&t.app, &["hostile"]).await;
    let before = lists(&t.app).await;

    let started = Instant::now();
    let flood = call(&t.app, "hostile__flood", json!({"count": 400})).await;
    assert_eq!(flood.error, None, "{flood:?}");
    // The tool it adds after the flood is listed in the end.
    let listed = t
        .app
        .mcp
        .wait_until(PATIENCE, |all| {
            all[0].tools.iter().any(|n| n == "hostile__after_flood")
        })
        .await;
    assert!(listed, "{:#?}", t.app.mcp.status());
    let relists = lists(&t.app).await - before;
    let seconds = started.elapsed().as_secs() + 1;
    // One re-list per second at most (and the last notification's, after the tool was seen).
    assert!(
        relists <= seconds + 1,
        "{relists} re-lists in {seconds} s for 401 notifications"
    );
    t.app.mcp.stop().await;
}

#[tokio::test]
async fn a_task_that_starts_while_a_server_starts_waits_for_its_tools() {
    let model = ScriptedModel::start(vec![Reply::text("done")]).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let gate = dir.path().join("gate");
    let t = common::app(
        settings_with(
            &model.base_url(),
            vec![("hostile", hostile("gated", Some(&gate)))],
        ),
        vec![],
    )
    .await;
    let registry = t.app.agent.registry().clone();
    t.app.mcp.start();
    assert_eq!(registry.starting().names(), ["hostile"]);
    let doctor = hermes_surfaces::doctor::mcp_server(&status_of(&t.app, "hostile"));
    assert!(doctor.detail.starts_with("starting"), "{}", doctor.detail);

    // A task submitted now (as through the API, or a job's catch-up at start).
    let app = t.app.clone();
    let task = tokio::spawn(async move { run_task(&app, "What time is it?").await });
    // The task is under way (or, without the wait, already done) before the server is up;
    // then the server comes up.
    let deadline = Instant::now() + PATIENCE;
    while t.app.agent.running_count() == 0 && !task.is_finished() {
        assert!(Instant::now() < deadline, "the task never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    std::fs::write(&gate, "open").expect("open the gate");
    let record = tokio::time::timeout(PATIENCE, task)
        .await
        .expect("the task ends")
        .expect("the task ran");
    assert_eq!(record.task.state, TaskState::Succeeded, "{record:#?}");
    let first = &model.requests()[0];
    let names: Vec<&str> = first["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert!(names.contains(&"hostile__stats"), "first offer: {names:?}");
    assert!(registry.starting().names().is_empty());

    // A restart is no first start: nothing waits, and doctor says restarting.
    std::fs::remove_file(&gate).expect("close the gate");
    let pid = status_of(&t.app, "hostile").pid.expect("a pid");
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let restarting = t
        .app
        .mcp
        .wait_until(PATIENCE, |all| {
            matches!(all[0].state, ServerState::Restarting(_))
        })
        .await;
    assert!(restarting, "{:#?}", t.app.mcp.status());
    assert!(registry.starting().names().is_empty());
    // How it ended is said, as a failure's reason is.
    let how = status_of(&t.app, "hostile").state;
    assert!(
        how.reason().is_some_and(|r| r.contains("closed")),
        "{how:?}"
    );
    let doctor = hermes_surfaces::doctor::mcp_server(&status_of(&t.app, "hostile"));
    assert!(
        doctor.detail.starts_with("restarting ("),
        "{}",
        doctor.detail
    );
    // A model that calls the tool it was offered a step ago is told the server is away.
    let away = call(&t.app, "hostile__stats", json!({})).await;
    assert!(
        matches!(away.error, Some(ToolError::Unavailable { .. })),
        "{away:?}"
    );
    assert!(
        away.content.contains("'hostile' is restarting"),
        "{}",
        away.content
    );
    std::fs::write(&gate, "open").expect("open the gate again");
    running(&t.app, &["hostile"]).await;
    t.app.mcp.stop().await;
}
