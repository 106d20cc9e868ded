//! The CLI as a user meets it: the real binary, run as a process.

use crate::common::text;
use std::path::Path;
use std::process::{Command, Output};

fn hermes(data_dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hermes-agent"))
        .args(args)
        .env("HERMES_DATA_DIR", data_dir)
        .env_remove("HERMES_CONFIG")
        // An empty XDG config home: no stray user config can leak into the test.
        .env("XDG_CONFIG_HOME", data_dir.join("xdg-config"))
        .env("RUST_LOG", "warn")
        .output()
        .expect("the binary runs")
}

#[test]
fn version_and_help() {
    let dir = tempfile::tempdir().unwrap();
    let out = hermes(dir.path(), &["--version"]);
    assert!(out.status.success());
    assert!(text(&out.stdout).contains(env!("CARGO_PKG_VERSION")));
    let out = hermes(dir.path(), &["--help"]);
    let help = text(&out.stdout);
    for cmd in [
        "serve", "run", "tasks", "jobs", "memory", "config", "service", "doctor",
    ] {
        assert!(help.contains(cmd), "help lacks {cmd}: {help}");
    }
}

#[test]
fn config_check_on_defaults_says_where_it_looked() {
    let dir = tempfile::tempdir().unwrap();
    let out = hermes(dir.path(), &["config", "check"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("built-in defaults"), "{stdout}");
    assert!(stdout.contains("xdg-config"), "{stdout}");
    assert!(stdout.contains("http://127.0.0.1:11434/v1"), "{stdout}");
}

#[test]
fn config_check_on_the_shipped_settings_is_valid() {
    let dir = tempfile::tempdir().unwrap();
    let shipped = concat!(env!("CARGO_MANIFEST_DIR"), "/settings.yaml");
    let out = hermes(dir.path(), &["--config", shipped, "config", "check"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("valid"));
}

#[test]
fn config_check_points_at_the_broken_line() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "agent:\n  workers: 2\n  max_stepz: 3\n",
            ":3: agent.max_stepz:",
            "unknown field",
        ),
        (
            "agent:\n  workers: 0\n",
            ":2: agent.workers:",
            "greater than 0",
        ),
        (
            "tools:\n  timeout_s: -1\n",
            ":2: tools.timeout_s:",
            "whole number",
        ),
        (
            "model:\n  default_profile: turbo\n",
            ":2: model.default_profile:",
            "turbo",
        ),
        (
            "server:\n  token: ${NO_SUCH_VAR_FOR_HERMES}\n",
            ":2:",
            "NO_SUCH_VAR_FOR_HERMES",
        ),
        ("server: [oops\n", "bad.yaml:", ""),
    ];
    for (yaml, location, words) in cases {
        let file = dir.path().join("bad.yaml");
        std::fs::write(&file, yaml).unwrap();
        let out = hermes(
            dir.path(),
            &["--config", file.to_str().unwrap(), "config", "check"],
        );
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{yaml}: {stderr}");
        assert!(
            stderr.contains(&format!("bad.yaml{location}")) || stderr.contains(location),
            "{yaml}: {stderr}"
        );
        assert!(stderr.contains(words), "{yaml}: {stderr}");
    }
}

#[test]
fn config_check_accepts_port_0_as_any_free_port() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("any-port.yaml");
    std::fs::write(&file, "server:\n  port: 0\n").unwrap();
    let out = hermes(
        dir.path(),
        &["--config", file.to_str().unwrap(), "config", "check"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("server: 127.0.0.1:0"));
}

#[test]
fn a_named_config_file_that_does_not_exist_is_an_error_not_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let out = hermes(
        dir.path(),
        &["--config", "/nonexistent/h.yaml", "config", "check"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("/nonexistent/h.yaml"));
}

#[test]
fn tasks_list_and_show_over_an_empty_store() {
    let dir = tempfile::tempdir().unwrap();
    let out = hermes(dir.path(), &["tasks", "list"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("no tasks yet"));
    let out = hermes(dir.path(), &["tasks", "list", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v, serde_json::json!({"tasks": []}));
    let out = hermes(dir.path(), &["tasks", "show", "abc123"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("no task 'abc123'"));
}

#[test]
fn tasks_show_renders_a_stored_trace_as_a_timeline_and_json() {
    use hermes_agent::store::*;
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let id = rt.block_on(async {
        let store = Store::open(dir.path()).await.unwrap();
        let t = store
            .create_task(&NewTask {
                task: "look up the price, then notify me".into(),
                origin: Origin::Cli,
                profile: "fast".into(),
                ..Default::default()
            })
            .await
            .unwrap();
        store.start_task(&t.id).await.unwrap();
        store
            .add_step(
                &t.id,
                &NewStep {
                    step: 1,
                    kind: StepKind::Tool,
                    name: "web_fetch".into(),
                    request_tokens: 0,
                    result_tokens: 12,
                    arguments: Some(r#"{"url":"https://shop.example/p"}"#.into()),
                    output: Some("price: 12 EUR".into()),
                    error: None,
                    duration_ms: 87,
                },
            )
            .await
            .unwrap();
        store
            .finish_task(
                &t.id,
                &TaskOutcome {
                    state: TaskState::Succeeded,
                    answer: Some("It costs 12 EUR.".into()),
                    error: None,
                    reason: None,
                    parse_failures: 0,
                    prompt_tokens: 300,
                    completion_tokens: 20,
                },
            )
            .await
            .unwrap();
        store.close().await;
        t.id
    });
    let out = hermes(dir.path(), &["tasks", "show", &id[..8]]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(shown.contains("[succeeded]"), "{shown}");
    assert!(shown.contains("tool web_fetch"), "{shown}");
    assert!(shown.contains("87 ms"), "{shown}");
    assert!(shown.contains("It costs 12 EUR."), "{shown}");
    let out = hermes(dir.path(), &["tasks", "show", &id, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["id"], id.as_str());
    assert_eq!(v["state"], "succeeded");
    assert_eq!(v["steps"][0]["name"], "web_fetch");
    let out = hermes(dir.path(), &["tasks", "list", "--state", "succeeded"]);
    assert!(text(&out.stdout).contains(&id));
}

#[test]
fn config_check_loads_the_manifests_it_names() {
    let dir = tempfile::tempdir().unwrap();
    let tools = dir.path().join("tools");
    std::fs::create_dir_all(&tools).unwrap();
    std::fs::write(
        tools.join("broken.yaml"),
        "name: broken\ndescription: d\nparameters: {type: object}\ncommand: {argv: []}\n",
    )
    .unwrap();
    let config = dir.path().join("settings.yaml");
    std::fs::write(&config, "tools:\n  manifests_dir: tools\n").unwrap();
    let out = hermes(
        dir.path(),
        &["--config", config.to_str().unwrap(), "config", "check"],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("broken.yaml:4: command.argv:"), "{stderr}");

    std::fs::write(
        tools.join("broken.yaml"),
        "name: fine\ndescription: d\nparameters: {type: object}\ncommand: {argv: [echo]}\n",
    )
    .unwrap();
    let out = hermes(
        dir.path(),
        &["--config", config.to_str().unwrap(), "config", "check"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("fine"), "{}", text(&out.stdout));
}
