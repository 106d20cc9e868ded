//! MCP in both directions, against real third-party programs (no mocks): the Python
//! `mcp-server-time`, the npm `@modelcontextprotocol/server-everything` (stdio and streamable
//! HTTP), and the official Python client driving `hermes-agent mcp`.
//!
//! They are installed under `target/test-deps` by `scripts/ci/mcp-deps.sh`, which the first test
//! here to need them runs (`crate::deps`); when that fails, every test here fails and says what
//! to run. Every wait is on a condition with a bound, never a sleep.

use crate::common;
use crate::deps::Mcp as Deps;

/// Servers that try to grow the daemon, flood it, or start slowly.
mod hostile;
/// server-everything over streamable HTTP.
mod http;
/// `hermes-agent mcp` driven by MCP clients.
mod serve;

use hermes_config::{McpServer, McpSettings, Settings};
use hermes_engine::llm::ToolCall;
use hermes_engine::llm::scripted::{Reply, ScriptedModel};
use hermes_engine::tools::{ToolContext, ToolError, ToolOutcome};
use hermes_store::{StepKind, TaskState};
use hermes_surfaces::app::App;
use hermes_surfaces::mcp::{ServerState, ServerStatus};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// Bound for a server to start (a Python or Node process: about a second here) or restart.
const PATIENCE: Duration = Duration::from_secs(30);
/// A model URL for tests that never call the model.
const NO_MODEL: &str = "http://127.0.0.1:9/v1";

/// The MCP programs, installed on first use (scripts/ci/mcp-deps.sh, under target/test-deps).
fn deps() -> Deps {
    crate::deps::mcp().clone()
}

/// `GET /healthz` of the API over `app`, in process.
async fn healthz(app: &App) -> Value {
    serde_json::from_str(&get_text(app, "/healthz").await).expect("JSON")
}

/// `GET path` of the API and dashboard over `app`, in process (no token: loopback's).
async fn get_text(app: &App, path: &str) -> String {
    use tower::ServiceExt;
    let router = hermes_surfaces::http::router(hermes_surfaces::http::ApiState::new(app));
    let req = axum::http::Request::get(path)
        .body(axum::body::Body::empty())
        .expect("a request");
    let resp = router.oneshot(req).await.expect("answered");
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .expect("a body");
    String::from_utf8_lossy(&bytes).into_owned()
}

fn stdio(command: &[&str]) -> McpServer {
    McpServer {
        command: command.iter().map(|s| s.to_string()).collect(),
        // The servers run confined (tools.sandbox: enforce); node resolves its modules up the
        // whole install tree, so the tree is declared, as a person would for an npm install.
        sandbox: hermes_engine::tools::sandbox::Widening {
            read: vec![deps_dir()],
            ..Default::default()
        },
        ..Default::default()
    }
}

fn deps_dir() -> String {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/test-deps")
        .to_string_lossy()
        .into_owned()
}

fn time_server(d: &Deps) -> McpServer {
    let time = d.time.to_string_lossy();
    stdio(&[&time, "--local-timezone", "UTC"])
}

fn everything_stdio(d: &Deps) -> McpServer {
    stdio(&["node", &d.everything.to_string_lossy(), "stdio"])
}

fn settings_with(model: &str, servers: Vec<(&str, McpServer)>) -> Settings {
    let mut s = common::settings(model);
    for (name, server) in servers {
        s.mcp.servers.insert(name.into(), server);
    }
    s
}

/// Start the app's MCP servers and wait until each of `names` runs; the statuses.
async fn running(app: &App, names: &[&str]) -> Vec<ServerStatus> {
    app.mcp.start();
    let all_running = |all: &[ServerStatus]| {
        names.iter().all(|n| {
            all.iter()
                .any(|s| s.name == *n && s.state == ServerState::Running)
        })
    };
    let ok = app.mcp.wait_until(PATIENCE, all_running).await;
    assert!(ok, "not all of {names:?} running: {:#?}", app.mcp.status());
    app.mcp.status()
}

fn status_of(app: &App, name: &str) -> ServerStatus {
    app.mcp
        .status()
        .into_iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no server {name}"))
}

async fn call(app: &App, tool: &str, arguments: Value) -> ToolOutcome {
    let call = ToolCall {
        id: "c1".into(),
        name: tool.into(),
        arguments,
    };
    app.agent
        .registry()
        .execute(&call, &ToolContext::default(), None)
        .await
}

fn offered(app: &App) -> Vec<String> {
    app.agent
        .registry()
        .offered(None)
        .iter()
        .map(|s| s.name.clone())
        .collect()
}

#[tokio::test]
async fn the_agent_calls_an_mcp_tool_end_to_end() {
    let d = deps();
    let model = ScriptedModel::start(vec![
        Reply::tool_calls(&[(
            "time__get_current_time",
            json!({"timezone": "Europe/Berlin"}),
        )]),
        Reply::text("It is evening in Berlin."),
    ])
    .await;
    let s = settings_with(&model.base_url(), vec![("time", time_server(&d))]);
    let t = common::app(s, vec![]).await;
    let status = running(&t.app, &["time"]).await;
    assert_eq!(
        status[0].tools,
        ["time__convert_time", "time__get_current_time"]
    );
    assert!(status[0].pid.is_some());

    let record = common::run_task(&t, "What time is it in Berlin?").await;
    assert_eq!(record.task.state, TaskState::Succeeded, "{record:#?}");
    let step = record
        .steps
        .iter()
        .find(|s| s.row.kind == StepKind::Tool)
        .expect("a tool step");
    assert_eq!(step.row.name, "time__get_current_time");
    assert_eq!(step.row.error, None);
    let output = step.row.output.as_deref().unwrap_or_default();
    assert!(
        output.contains("Europe/Berlin") && output.contains("datetime"),
        "{output}"
    );
    // The model was offered the tool with the server's schema, made grammar-friendly.
    let first = &model.requests()[0];
    let tool = first["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["function"]["name"] == "time__get_current_time")
        .expect("the MCP tool offered to the model");
    assert_eq!(
        tool["function"]["parameters"]["required"],
        json!(["timezone"])
    );
    t.app.mcp.stop().await;
    assert!(!offered(&t.app).iter().any(|n| n.starts_with("time__")));
}

#[tokio::test]
async fn bad_arguments_are_refused_before_the_server_and_its_own_errors_are_failures() {
    let d = deps();
    let s = settings_with(
        NO_MODEL,
        vec![("time", time_server(&d)), ("every", everything_stdio(&d))],
    );
    let t = common::app(s, vec![]).await;
    running(&t.app, &["time", "every"]).await;

    // Refused by the registry's validation: the servers never saw these calls.
    let missing = call(&t.app, "time__get_current_time", json!({})).await;
    assert!(
        matches!(missing.error, Some(ToolError::InvalidArguments(_))),
        "{missing:?}"
    );
    assert_eq!(missing.attempts, 0);
    assert!(missing.content.contains("timezone"), "{}", missing.content);
    let wrong_type = call(&t.app, "every__get-sum", json!({"a": "one", "b": 2})).await;
    assert!(matches!(
        wrong_type.error,
        Some(ToolError::InvalidArguments(_))
    ));
    assert_eq!(wrong_type.attempts, 0);

    // Valid calls reach the servers; the tool's own error (`isError`) is a failure with its
    // text, tried once.
    let sum = call(&t.app, "every__get-sum", json!({"a": 2, "b": 3})).await;
    assert_eq!(sum.error, None, "{sum:?}");
    assert!(sum.content.contains('5'), "{}", sum.content);
    let mars = call(
        &t.app,
        "time__get_current_time",
        json!({"timezone": "Mars/Olympus"}),
    )
    .await;
    match &mars.error {
        Some(ToolError::Failed(text)) => assert!(text.contains("Mars/Olympus"), "{text}"),
        other => panic!("expected a tool failure, got {other:?}"),
    }
    assert_eq!(mars.attempts, 1);
    t.app.mcp.stop().await;
}

#[tokio::test]
async fn a_slow_tool_hits_the_servers_timeout_and_the_server_keeps_working() {
    let d = deps();
    let mut every = everything_stdio(&d);
    every.timeout_s = 1;
    let t = common::app(settings_with(NO_MODEL, vec![("every", every)]), vec![]).await;
    running(&t.app, &["every"]).await;

    let started = Instant::now();
    let slow = call(
        &t.app,
        "every__trigger-long-running-operation",
        json!({"duration": 30, "steps": 1}),
    )
    .await;
    assert_eq!(slow.error, Some(ToolError::Timeout(Duration::from_secs(1))));
    assert_eq!(slow.attempts, 1, "a timeout is not retried");
    assert!(started.elapsed() < Duration::from_secs(10));

    let echo = call(&t.app, "every__echo", json!({"message": "still here"})).await;
    assert_eq!(echo.error, None, "{echo:?}");
    assert!(echo.content.contains("still here"));
    t.app.mcp.stop().await;
}

#[tokio::test]
async fn a_server_that_dies_is_started_again() {
    let d = deps();
    let t = common::app(
        settings_with(NO_MODEL, vec![("time", time_server(&d))]),
        vec![],
    )
    .await;
    let before = running(&t.app, &["time"]).await[0].clone();
    let pid = before.pid.expect("a stdio server has a pid");

    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let restarted = t
        .app
        .mcp
        .wait_until(PATIENCE, |all| {
            all[0].restarts == 1 && all[0].state == ServerState::Running
        })
        .await;
    let after = status_of(&t.app, "time");
    assert!(restarted, "not restarted: {after:#?}");
    assert_ne!(after.pid, Some(pid));
    assert_eq!(after.tools, before.tools);

    let utc = call(&t.app, "time__get_current_time", json!({"timezone": "UTC"})).await;
    assert_eq!(utc.error, None, "{utc:?}");
    t.app.mcp.stop().await;
}

#[tokio::test]
async fn the_allowlist_glob_decides_which_mcp_tools_are_offered() {
    let d = deps();
    let mut s = settings_with(
        NO_MODEL,
        vec![("time", time_server(&d)), ("every", everything_stdio(&d))],
    );
    s.tools.allowlist = vec!["time__get_*".into(), "every__echo".into()];
    let t = common::app(s, vec![]).await;
    running(&t.app, &["time", "every"]).await;

    assert_eq!(offered(&t.app), ["every__echo", "time__get_current_time"]);
    let refused = call(&t.app, "time__convert_time", json!({})).await;
    assert_eq!(
        refused.error,
        Some(ToolError::NotAllowed("time__convert_time".into()))
    );
    let echo = call(&t.app, "every__echo", json!({"message": "hi"})).await;
    assert_eq!(echo.error, None, "{echo:?}");
    t.app.mcp.stop().await;
}

#[tokio::test]
async fn servers_that_cannot_start_are_reported_and_the_rest_work() {
    let d = deps();
    let python = d.python.to_string_lossy().into_owned();
    let dies = stdio(&[
        &python,
        "-c",
        "import sys; print('no API key given', file=sys.stderr); sys.exit(3)",
    ]);
    let s = settings_with(
        NO_MODEL,
        vec![
            ("missing", stdio(&["hermes-no-such-program"])),
            (
                "missing_path",
                stdio(&["/nonexistent/hermes-no-such-program"]),
            ),
            ("dies", dies),
            (
                "unreachable",
                McpServer {
                    url: "http://127.0.0.1:9/mcp?key=s3cret".into(),
                    ..Default::default()
                },
            ),
            ("time", time_server(&d)),
        ],
    );
    let t = common::app(s, vec![]).await;
    running(&t.app, &["time"]).await;
    let settled = t
        .app
        .mcp
        .wait_until(PATIENCE, |all| {
            all.iter()
                .filter(|s| s.name != "time")
                .all(|s| matches!(s.state, ServerState::Failed(_)))
        })
        .await;
    assert!(settled, "{:#?}", t.app.mcp.status());

    let missing = status_of(&t.app, "missing").state.to_string();
    assert!(
        missing.contains("`hermes-no-such-program` not found on PATH")
            && missing.contains("mcp.servers.missing.command"),
        "{missing}"
    );
    // A path is not looked for on PATH.
    let missing = status_of(&t.app, "missing_path").state.to_string();
    assert!(
        missing.contains("`/nonexistent/hermes-no-such-program` does not exist")
            && !missing.contains("PATH"),
        "{missing}"
    );
    let dies = status_of(&t.app, "dies").state.to_string();
    assert!(dies.contains("it said: no API key given"), "{dies}");
    // A monitor is told, by name only (a reason can name a command or a URL).
    let health = healthz(&t.app).await;
    assert_eq!(health["status"], "degraded", "{health}");
    assert_eq!(health["mcp"]["running"], 1, "{health}");
    assert_eq!(
        health["mcp"]["failed"],
        json!(["dies", "missing", "missing_path", "unreachable"]),
        "{health}"
    );
    assert!(!health.to_string().contains("s3cret"), "{health}");
    // The dashboard's overview says the same as /healthz, not a fixed "ok".
    let overview = get_text(&t.app, "/").await;
    assert!(
        overview.contains("degraded") && overview.contains("Not well: MCP servers"),
        "{overview}"
    );
    assert!(status_of(&t.app, "dies").tools.is_empty());
    let unreachable = status_of(&t.app, "unreachable").state.to_string();
    assert!(
        unreachable.contains("mcp.servers.unreachable") && !unreachable.contains("s3cret"),
        "{unreachable}"
    );

    let utc = call(&t.app, "time__get_current_time", json!({"timezone": "UTC"})).await;
    assert_eq!(utc.error, None, "{utc:?}");
    assert!(!offered(&t.app).iter().any(|n| n.starts_with("dies__")));
    t.app.mcp.stop().await;
}

#[tokio::test]
async fn a_changed_tool_list_reaches_the_registry() {
    let d = deps();
    let python = d.python.to_string_lossy().into_owned();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/it/mcp/changing_server.py"
    );
    let s = settings_with(NO_MODEL, vec![("changing", stdio(&[&python, script]))]);
    let t = common::app(s, vec![]).await;
    assert_eq!(
        running(&t.app, &["changing"]).await[0].tools,
        ["changing__grow"]
    );

    // `grow` adds a tool on the server, which then sends `notifications/tools/list_changed`.
    let grown = call(&t.app, "changing__grow", json!({"name": "sprout"})).await;
    assert_eq!(grown.error, None, "{grown:?}");
    let listed = t
        .app
        .mcp
        .wait_until(PATIENCE, |all| all[0].tools.len() == 2)
        .await;
    assert!(listed, "{:#?}", t.app.mcp.status());
    assert_eq!(
        status_of(&t.app, "changing").tools,
        ["changing__grow", "changing__sprout"]
    );
    let sprout = call(&t.app, "changing__sprout", json!({})).await;
    assert_eq!(sprout.error, None, "{sprout:?}");
    assert!(
        sprout.content.contains("added at run time"),
        "{}",
        sprout.content
    );
    t.app.mcp.stop().await;
}

#[tokio::test]
async fn probe_says_whether_a_server_works_and_leaves_nothing_running() {
    let d = deps();
    let env: std::collections::HashMap<String, String> = std::env::vars().collect();
    let limits = McpSettings::default();
    let names = hermes_surfaces::mcp::probe("time", &time_server(&d), &limits, &env)
        .await
        .expect("the time server works");
    assert_eq!(names, ["time__convert_time", "time__get_current_time"]);
    let missing =
        hermes_surfaces::mcp::probe("gone", &stdio(&["hermes-no-such-program"]), &limits, &env)
            .await
            .expect_err("no such program");
    assert!(
        matches!(&missing, hermes_surfaces::mcp::McpError::NotFound { program, .. } if program == "hermes-no-such-program"),
        "{missing}"
    );
}

#[test]
fn doctor_lists_each_mcp_server_with_its_state_and_tools() {
    let d = deps();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("settings.yaml");
    std::fs::write(
        &config,
        format!(
            "model:\n  profiles:\n    fast: {{base_url: \"{NO_MODEL}\"}}\n    pro: {{base_url: \"{NO_MODEL}\"}}\nserver:\n  port: 0\nmcp:\n  servers:\n    time:\n      command: [\"{}\", --local-timezone, UTC]\n    broken:\n      command: [/nonexistent/mcp-server]\n",
            d.time.display()
        ),
    )
    .expect("config");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hermes-agent"))
        .args(["--config", &config.to_string_lossy(), "--data-dir"])
        .arg(dir.path().join("data"))
        .arg("doctor")
        .output()
        .expect("doctor runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let time = stdout
        .lines()
        .find(|l| l.contains("mcp server time"))
        .unwrap_or_else(|| panic!("no line for the time server: {stdout}"));
    assert!(time.starts_with("[ok"), "{time}");
    assert!(time.contains("time__get_current_time"), "{time}");
    let broken = stdout
        .lines()
        .find(|l| l.contains("mcp server broken"))
        .unwrap_or_else(|| panic!("no line for the broken server: {stdout}"));
    assert!(broken.starts_with("[FAIL]"), "{broken}");
    assert!(broken.contains("/nonexistent/mcp-server"), "{broken}");
}
