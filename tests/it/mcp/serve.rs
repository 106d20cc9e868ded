//! `hermes-agent mcp` as MCP clients meet it: the official Python client (tests/it/mcp/client.py)
//! through a running daemon and on the data dir, and raw JSON-RPC lines to check that stdout
//! carries nothing else.

use super::{Deps, NO_MODEL, PATIENCE, common, deps};
use hermes_config::{Config, Sources};
use hermes_engine::agent::JobExecution;
use hermes_engine::llm::scripted::ScriptedModel;
use hermes_store::TaskState;
use hermes_surfaces::app::App;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A settings file for `hermes-agent mcp` (every profile on `model_url`, the API on port 0)
/// and a data dir, in `dir`.
fn mcp_site(dir: &Path, model_url: &str) -> Sources {
    let yaml = format!(
        "model:\n  profiles:\n    fast: {{base_url: \"{model_url}\", model: scripted, timeout_s: 30}}\n    \
         pro: {{base_url: \"{model_url}\", model: scripted-pro, timeout_s: 30}}\n\
         tools:\n  manifests_dir: /nonexistent-hermes-mcp-test-tools\n\
         context:\n  summary_enabled: false\n\
         server:\n  port: 0\n"
    );
    let config = dir.join("settings.yaml");
    std::fs::write(&config, yaml).expect("write settings");
    Sources {
        config_flag: Some(config),
        data_dir_flag: Some(dir.join("data")),
    }
}

/// Run tests/it/mcp/client.py (the official Python client) against `hermes-agent mcp` on `site`;
/// what it saw.
async fn drive_with_python(d: &Deps, dir: &Path, site: &Sources) -> Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/mcp/client.py");
    let path = |p: &Option<PathBuf>| p.as_ref().expect("set").to_string_lossy().into_owned();
    let run = tokio::process::Command::new(&d.python)
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_hermes-agent"))
        .arg(path(&site.config_flag))
        .arg(path(&site.data_dir_flag))
        .arg(dir.join("xdg-config"))
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the Python client finished within 2 minutes")
        .expect("the venv's python runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "client.py failed:\n{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}\n{stderr}"))
}

/// What the Python client must have seen, whichever backend answered.
fn check_session(seen: &Value, origin: &str) {
    assert_eq!(seen["server"], "hermes-agent");
    assert_eq!(seen["tools"], json!(hermes_surfaces::mcp::TOOL_NAMES));
    for (name, schema) in seen["schemas"].as_object().expect("schemas") {
        assert!(
            hermes_engine::tools::schema::is_grammar_friendly(schema),
            "{name}: {schema}"
        );
    }
    assert_eq!(seen["remembered"]["merged"], false);
    assert_eq!(seen["recalled"], json!(["The cat is called Miso"]));
    assert_eq!(seen["run"]["state"], "succeeded", "{}", seen["run"]);
    assert_eq!(seen["run"]["answer"], "answer to: say hello over MCP");
    assert_eq!(seen["task_origin"], origin);
    assert_eq!(seen["bad"]["is_error"], true);
    let bad = seen["bad"]["text"].as_str().unwrap_or_default();
    assert!(bad.contains("/query") && bad.contains("extra"), "{bad}");
}

#[tokio::test]
async fn hermes_mcp_works_through_a_running_daemon() {
    let d = deps();
    let model = ScriptedModel::start_with(common::echo_model).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let site = mcp_site(dir.path(), &model.base_url());
    let config = Config::load(&site).expect("the site's settings load");
    let data = config.data_dir.clone();
    let app = App::build(config, JobExecution::Pool)
        .await
        .expect("app builds");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let daemon = tokio::spawn(hermes_surfaces::daemon::run(app, listener, async move {
        let _ = stopped.await;
    }));
    // The CLI finds a daemon on port 0 through the address file it writes first thing.
    let deadline = Instant::now() + PATIENCE;
    while hermes_surfaces::daemon::read_addr(&data)
        .ok()
        .flatten()
        .is_none()
    {
        assert!(
            Instant::now() < deadline,
            "the daemon wrote no address file"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let seen = drive_with_python(&d, dir.path(), &site).await;
    // Through the daemon as on the data dir, a task it starts is recorded as `mcp`.
    check_session(&seen, "mcp");

    let _ = stop.send(());
    let ended = tokio::time::timeout(PATIENCE, daemon).await;
    assert!(matches!(ended, Ok(Ok(Ok(())))), "{ended:?}");
}

#[tokio::test]
async fn hermes_mcp_works_on_the_data_dir_without_a_daemon() {
    let d = deps();
    let model = ScriptedModel::start_with(common::echo_model).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let site = mcp_site(dir.path(), &model.base_url());
    let seen = drive_with_python(&d, dir.path(), &site).await;
    check_session(&seen, "mcp");
    // Everything it did is in the data dir, for the CLI and the next daemon.
    let config = Config::load(&site).expect("the site's settings load");
    let store = hermes_store::Store::open(&config.data_dir)
        .await
        .expect("store opens");
    let id = seen["run"]["task_id"].as_str().expect("a task id");
    let task = store.tasks().get(id).await.expect("the task is stored");
    assert_eq!(task.state, TaskState::Succeeded);
}

#[test]
fn hermes_mcp_writes_nothing_but_mcp_to_stdout() {
    use std::io::{BufRead, Write};
    let dir = tempfile::tempdir().expect("temp dir");
    let site = mcp_site(dir.path(), NO_MODEL);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_hermes-agent"))
        .arg("--config")
        .arg(site.config_flag.as_ref().expect("set"))
        .arg("--data-dir")
        .arg(site.data_dir_flag.as_ref().expect("set"))
        .arg("mcp")
        .env("XDG_CONFIG_HOME", dir.path().join("xdg-config"))
        // As much logging as there is: all of it must go to stderr.
        .env("RUST_LOG", "debug")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the binary runs");
    let mut stdin = child.stdin.take().expect("stdin");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let mut send = |v: Value| writeln!(&mut stdin, "{v}").expect("write to stdin");
    let answer = || rx.recv_timeout(PATIENCE).expect("an answer on stdout");
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}}),
    );
    let mut lines = vec![answer()];
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    lines.push(answer());
    send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                "params": {"name": "remember", "arguments": {"text": "stdout stays clean"}}}));
    lines.push(answer());
    drop(stdin);
    let status = child.wait().expect("it exits when stdin closes");
    assert!(status.success(), "{status}");
    lines.extend(rx.try_iter());
    for (i, line) in lines.iter().enumerate() {
        let msg: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        assert_eq!(msg["jsonrpc"], "2.0", "{line}");
        assert_eq!(msg["id"], json!(i + 1), "{line}");
    }
    let listed: Value = serde_json::from_str(&lines[1]).expect("JSON");
    assert_eq!(listed["result"]["tools"].as_array().map(Vec::len), Some(9));
    assert!(lines[2].contains("\"isError\":false"), "{}", lines[2]);
}

/// `hermes-agent mcp` on a fresh data dir, with its stdin, and its stdout lines as they come.
fn raw_mcp(
    dir: &Path,
) -> (
    std::process::Child,
    std::process::ChildStdin,
    std::sync::mpsc::Receiver<String>,
) {
    use std::io::BufRead;
    let site = mcp_site(dir, NO_MODEL);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_hermes-agent"))
        .arg("--config")
        .arg(site.config_flag.as_ref().expect("set"))
        .arg("--data-dir")
        .arg(site.data_dir_flag.as_ref().expect("set"))
        .arg("mcp")
        .env("XDG_CONFIG_HOME", dir.join("xdg-config"))
        // Its own log filter, as a person running it gets (CI sets RUST_LOG).
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(dir.join("stderr")).expect("stderr file"))
        .spawn()
        .expect("the binary runs");
    let stdin = child.stdin.take().expect("stdin");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    (child, stdin, rx)
}

#[test]
fn hermes_mcp_answers_every_bad_line_and_stays_up() {
    use std::io::Write;
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut child, mut stdin, rx) = raw_mcp(dir.path());
    let mut send = |line: &[u8]| {
        stdin.write_all(line).expect("write to stdin");
        stdin.write_all(b"\n").expect("write to stdin");
        stdin.flush().expect("flush");
    };
    let answer = || -> Value {
        let line = rx.recv_timeout(PATIENCE).expect("an answer on stdout");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line}: {e}"))
    };
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}});
    send(init.to_string().as_bytes());
    assert_eq!(answer()["id"], 1);
    send(br#"{"jsonrpc": "2.0", "method": "notifications/initialized"}"#);

    // Not JSON, and JSON cut short: parse errors.
    send(b"this is not json");
    let not_json = answer();
    assert_eq!(not_json["error"]["code"], -32700, "{not_json}");
    send(br#"{"jsonrpc": "2.0", "id": 2, "method": "tools/list""#);
    assert_eq!(answer()["error"]["code"], -32700);

    // A 20 MB request: skipped as it arrives and answered, with its id.
    let huge = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "remember", "arguments": {"text": "x".repeat(20_000_000)}}});
    send(huge.to_string().as_bytes());
    let too_large = answer();
    assert_eq!(too_large["id"], 3, "{too_large}");
    assert_eq!(too_large["error"]["code"], -32600);
    let message = too_large["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("too large"), "{message}");

    // Params of the wrong types for a method it serves: invalid params, not "no such method".
    send(
        br#"{"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": 7, "arguments": "text"}}"#,
    );
    let wrong = answer();
    assert_eq!(wrong["id"], 4, "{wrong}");
    assert_eq!(wrong["error"]["code"], -32602, "{wrong}");
    // Params that are not even an object: the same, where rmcp cannot read the message at all.
    send(br#"{"jsonrpc": "2.0", "id": 6, "method": "tools/list", "params": 5}"#);
    let not_an_object = answer();
    assert_eq!(not_an_object["id"], 6, "{not_an_object}");
    assert_eq!(not_an_object["error"]["code"], -32602, "{not_an_object}");
    // A tool it does not have: an error for the client, and nothing on stderr about it.
    send(br#"{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "nope", "arguments": {}}}"#);
    let unknown = answer();
    assert_eq!(unknown["id"], 7, "{unknown}");
    assert!(unknown["error"]["code"].is_i64(), "{unknown}");

    // And the session still works.
    send(br#"{"jsonrpc": "2.0", "id": 5, "method": "tools/list"}"#);
    let listed = answer();
    assert_eq!(listed["id"], 5);
    assert_eq!(listed["result"]["tools"].as_array().map(Vec::len), Some(9));
    drop(stdin);
    let status = child.wait().expect("it exits when stdin closes");
    assert!(status.success(), "{status}");
    let stderr = std::fs::read_to_string(dir.path().join("stderr")).unwrap_or_default();
    assert!(!stderr.contains("ErrorData"), "{stderr}");
}

/// A burst of lines, answered by rmcp and refused by us in turn, then the end of stdin: every
/// request gets its answer. Ours were written inside `receive`, which rmcp may drop at any
/// await — and with it an answer half-sent or never sent.
#[test]
fn hermes_mcp_answers_every_line_of_a_burst() {
    use std::io::Write;
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut child, mut stdin, rx) = raw_mcp(dir.path());
    let mut burst = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}})
    .to_string();
    burst.push_str("\n{\"jsonrpc\": \"2.0\", \"method\": \"notifications/initialized\"}\n");
    const REQUESTS: i64 = 120;
    for id in 1..=REQUESTS {
        let line = match id % 3 {
            0 => json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}),
            1 => json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": "str"}),
            _ => json!({"jsonrpc": "2.0", "id": id, "method": "tools/list", "params": 5}),
        };
        burst.push_str(&line.to_string());
        burst.push('\n');
    }
    stdin.write_all(burst.as_bytes()).expect("write to stdin");
    drop(stdin);
    let mut answered = std::collections::BTreeSet::new();
    while let Ok(line) = rx.recv_timeout(PATIENCE) {
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line}: {e}"));
        if let Some(id) = v["id"].as_i64() {
            assert!(answered.insert(id), "answered twice: {id}");
        }
    }
    let status = child.wait().expect("it exits when stdin closes");
    assert!(status.success(), "{status}");
    let missing: Vec<i64> = (0..=REQUESTS).filter(|id| !answered.contains(id)).collect();
    assert!(missing.is_empty(), "never answered: {missing:?}");
}
