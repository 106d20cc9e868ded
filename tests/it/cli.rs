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

/// `hermes-agent … | head -1`: the reader gone, the command ends quietly, never with a panic.
#[test]
fn output_into_a_closed_pipe_ends_the_command_quietly() {
    let dir = tempfile::tempdir().unwrap();
    for args in [&["config", "check"][..], &["jobs", "list", "--json"]] {
        let (reader, writer) = std::io::pipe().expect("a pipe");
        drop(reader);
        let out = Command::new(env!("CARGO_BIN_EXE_hermes-agent"))
            .args(args)
            .env("HERMES_DATA_DIR", dir.path())
            .env_remove("HERMES_CONFIG")
            .env("XDG_CONFIG_HOME", dir.path().join("xdg-config"))
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .expect("the binary runs");
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{args:?}: {:?} {stderr}", out.status);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    // A full disk is an error, said as one.
    if let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") {
        let out = Command::new(env!("CARGO_BIN_EXE_hermes-agent"))
            .args(["config", "check"])
            .env_remove("HERMES_CONFIG")
            .env("XDG_CONFIG_HOME", dir.path().join("xdg-config"))
            .stdout(full)
            .output()
            .expect("the binary runs");
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("cannot write the output"), "{stderr}");
    }
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
    assert!(
        text(&out.stdout).contains("\nsandbox: enforce (commands and MCP servers confined)"),
        "{}",
        text(&out.stdout)
    );
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
        (
            "memory:\n  embeddings:\n    base_url: localhost:11434\n    model: nomic-embed-text\n",
            ":3: memory.embeddings.base_url:",
            "not an http(s) URL",
        ),
        (
            "memory:\n  embeddings:\n    base_url: http://127.0.0.1:11434/v1\n    model: \"\"\n",
            ":4: memory.embeddings.model:",
            "must name the embedding model",
        ),
        (
            "memory:\n  embeddings:\n    base_url: http://127.0.0.1:11434/v1\n    model: m\n    min_similarity: 2\n",
            ":5: memory.embeddings.min_similarity:",
            "cosine",
        ),
        (
            "memory:\n  embeddings:\n    base_url: http://127.0.0.1:11434/v1\n    modell: m\n",
            ":4: memory.embeddings.modell:",
            "unknown field",
        ),
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
    use hermes_store::*;
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let id = rt.block_on(async {
        let store = Store::open(dir.path()).await.unwrap();
        let t = store
            .tasks()
            .create(&NewTask {
                task: "look up the price, then notify me".into(),
                origin: Origin::Cli,
                profile: "fast".into(),
                ..Default::default()
            })
            .await
            .unwrap();
        store.tasks().start(&t.id).await.unwrap();
        store
            .tasks()
            .add_step(
                &t.id,
                &NewStep {
                    result_tokens: 12,
                    arguments: Some(r#"{"url":"https://shop.example/p"}"#.into()),
                    output: Some("price: 12 EUR".into()),
                    duration_ms: 87,
                    ..NewStep::new(1, StepKind::Tool, "web_fetch")
                },
            )
            .await
            .unwrap();
        store
            .tasks()
            .finish(
                &t.id,
                &TaskOutcome::answered("It costs 12 EUR.").counted(0, 300, 20),
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
fn usage_sums_the_model_calls_of_the_data_dir() {
    use hermes_store::*;
    let dir = tempfile::tempdir().unwrap();
    let out = hermes(dir.path(), &["usage"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("No model calls yet in the last 30 days"),
        "{}",
        text(&out.stdout)
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = Store::open(dir.path()).await.unwrap();
        let t = store
            .tasks()
            .create(&NewTask {
                task: "water the plants".into(),
                origin: Origin::Cli,
                profile: "fast".into(),
                ..Default::default()
            })
            .await
            .unwrap();
        for (kind, prompt, completion, ms) in [
            (StepKind::Model, 1200, 80, 1500),
            (StepKind::Tool, 0, 500, 20),
            (StepKind::Model, 1400, 30, 900),
        ] {
            let step = NewStep {
                request_tokens: prompt,
                result_tokens: completion,
                duration_ms: ms,
                ..NewStep::new(1, kind, "fast")
            };
            store.tasks().add_step(&t.id, &step).await.unwrap();
        }
        store.close().await;
    });
    let out = hermes(dir.path(), &["usage", "--days", "7", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["days"], 7, "{v}");
    assert_eq!(
        v["totals"],
        serde_json::json!({"calls": 2, "prompt_tokens": 2600, "completion_tokens": 110,
                           "total_tokens": 2710, "model_ms": 2400}),
        "the tool row is no model call: {v}"
    );
    assert_eq!(v["by_job"][0]["origin"], "cli", "{v}");
    let out = hermes(dir.path(), &["usage"]);
    let shown = text(&out.stdout);
    assert!(
        shown.contains("2,710 tokens (2,600 prompt, 110 completion), 2 model calls, 2.4 s"),
        "{shown}"
    );
    assert!(shown.contains("no job (by hand, cli)"), "{shown}");
    let out = hermes(dir.path(), &["usage", "--days", "0"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--days"),
        "{}",
        text(&out.stderr)
    );
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
    assert!(!text(&out.stderr).contains("WARN"), "{}", text(&out.stderr));

    // Valid, but its program is not installed: said before the first call fails.
    std::fs::write(
        tools.join("gone.yaml"),
        "name: gone\ndescription: d\nparameters: {type: object}\ncommand: {argv: [hermes-no-such-program]}\n",
    )
    .unwrap();
    let out = hermes(
        dir.path(),
        &["--config", config.to_str().unwrap(), "config", "check"],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("`hermes-no-such-program` is not found on PATH")
            && stderr.contains("gone.yaml"),
        "{stderr}"
    );
    // And doctor's verdict on the tools is a warning naming it, not ok.
    let out = hermes(
        dir.path(),
        &["--config", config.to_str().unwrap(), "doctor"],
    );
    let stdout = text(&out.stdout);
    let tools = stdout
        .lines()
        .find(|l| l.contains("] tools:"))
        .unwrap_or_default();
    assert!(
        tools.starts_with("[warn]") && tools.contains("not installed: gone"),
        "{stdout}"
    );
}

/// What a hostile model, server, MCP server or fact could carry to a terminal: a window title
/// (OSC 0 … BEL), a screen clear (CSI 2J), a hyperlink to a local file (OSC 8 … ST), a
/// right-to-left override, an 8-bit CSI (C1) and a carriage return that overwrites the line.
const EVIL: &str = "A\u{1b}]0;pwned\u{7}B\u{1b}[2JC\u{1b}]8;;file:///etc/passwd\u{1b}\\link\u{1b}]8;;\u{1b}\\D\u{202e}E\u{9b}31mF\rG";

/// No byte that a terminal would act on: ESC, BEL, CR, a C1 control (UTF-8 `C2 80`–`C2 9F`) or
/// a bidi override or isolate (U+202A–U+202E, U+2066–U+2069).
fn assert_inert(what: &str, out: &[u8]) {
    let shown = text(out);
    for (i, b) in out.iter().enumerate() {
        assert!(
            !matches!(b, 0x1b | 0x07 | 0x0d),
            "{what}: raw control byte {b:#04x} at {i}: {shown:?}"
        );
    }
    for w in out.windows(3) {
        let bidi = w[0] == 0xe2
            && ((w[1] == 0x80 && (0xaa..=0xae).contains(&w[2]))
                || (w[1] == 0x81 && (0xa6..=0xa9).contains(&w[2])));
        assert!(!bidi, "{what}: raw bidi control {w:02x?}: {shown:?}");
    }
    for w in out.windows(2) {
        assert!(
            !(w[0] == 0xc2 && (0x80..=0x9f).contains(&w[1])),
            "{what}: raw C1 control {w:02x?}: {shown:?}"
        );
    }
}

/// The sequences are still there to read, escaped.
fn assert_escaped(what: &str, out: &[u8]) {
    let shown = text(out);
    for escaped in [r"\x1b]0;pwned\x07", r"\x1b[2J", r"\u{202e}", r"\u{9b}31m"] {
        assert!(shown.contains(escaped), "{what}: no {escaped} in {shown:?}");
    }
}

/// A settings file for `dir` whose `fast` profile talks to `fast_url` and `pro` to `pro_url`.
fn hostile_site(dir: &Path, fast_url: &str, pro_url: &str, extra: &str) -> std::path::PathBuf {
    let file = dir.join("settings.yaml");
    let yaml = format!(
        "model:\n  profiles:\n    fast: {{base_url: \"{fast_url}\", model: scripted, timeout_s: 20}}\n    \
         pro: {{base_url: \"{pro_url}\", model: scripted-pro, timeout_s: 20}}\n\
         tools:\n  manifests_dir: /nonexistent-hermes-cli-test-tools\n\
         context:\n  summary_enabled: false\n\
         scheduler:\n  timezone: UTC\n\
         server:\n  port: 0\n{extra}"
    );
    std::fs::write(&file, yaml).unwrap();
    file
}

fn hermes_with(dir: &Path, config: &Path, args: &[&str]) -> Output {
    let mut all = vec!["--config", config.to_str().unwrap()];
    all.extend_from_slice(args);
    hermes(dir, &all)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_sequences_in_answers_errors_and_tasks_reach_the_terminal_escaped() {
    use hermes_engine::llm::scripted::{Reply, ScriptedModel};
    let answering = ScriptedModel::start_with(|_| Reply::text(EVIL)).await;
    // A 500 first: its retry is logged (a log line quoting the body), then a 400 fails the task.
    let failing = |status| Reply::Status {
        status,
        headers: vec![],
        body: serde_json::json!({"error": {"message": EVIL}}).to_string(),
    };
    let refusing = ScriptedModel::start(vec![failing(500), failing(400)]).await;
    let dir = tempfile::tempdir().unwrap();
    let config = hostile_site(dir.path(), &answering.base_url(), &refusing.base_url(), "");
    let task = format!("say {EVIL}");

    let out = hermes_with(dir.path(), &config, &["run", &task]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_inert("run stdout", &out.stdout);
    assert_escaped("run stdout", &out.stdout);
    assert_inert("run timeline", &out.stderr);
    assert_escaped("run timeline", &out.stderr);
    // --json stays JSON, its escaping is JSON's: the answer reads back exactly.
    let out = hermes_with(dir.path(), &config, &["run", &task, "--json"]);
    let record: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(record["answer"], EVIL);

    let out = hermes_with(dir.path(), &config, &["run", &task, "--profile", "pro"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("retrying"),
        "{}",
        text(&out.stderr)
    );
    assert_inert("run failure", &out.stderr);
    assert_escaped("run failure", &out.stderr);

    let out = hermes_with(dir.path(), &config, &["tasks", "list"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_inert("tasks list", &out.stdout);
    let listed = text(&out.stdout);
    let ids: Vec<&str> = listed
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(ids.len(), 3, "{listed}");
    for id in ids {
        let out = hermes_with(dir.path(), &config, &["tasks", "show", id]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_inert("tasks show", &out.stdout);
        assert_escaped("tasks show", &out.stdout);
        let out = hermes_with(dir.path(), &config, &["tasks", "watch", id]);
        assert_inert("tasks watch stdout", &out.stdout);
        assert_inert("tasks watch stderr", &out.stderr);
        assert_escaped("tasks watch", &[out.stdout, out.stderr].concat());
    }
    answering.stop().await;
    refusing.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_sequences_in_facts_and_jobs_reach_the_terminal_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let config = hostile_site(
        dir.path(),
        "http://127.0.0.1:9/v1",
        "http://127.0.0.1:9/v1",
        "",
    );
    let fact = format!("the tea shop sells {EVIL}");
    let out = hermes_with(dir.path(), &config, &["memory", "add", &fact]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = hermes_with(dir.path(), &config, &["memory", "search", "tea shop"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_inert("memory search", &out.stdout);
    assert_escaped("memory search", &out.stdout);
    let out = hermes_with(
        dir.path(),
        &config,
        &["memory", "search", "tea shop", "--json"],
    );
    let found: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(found["facts"][0]["text"], fact.as_str());

    let out = hermes_with(
        dir.path(),
        &config,
        &[
            "jobs",
            "add",
            &fact,
            "--name",
            EVIL,
            "--schedule",
            "every 2h",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("the job has no --notify channel"),
        "a job that sends nowhere says so: {}",
        text(&out.stderr)
    );
    let out = hermes_with(dir.path(), &config, &["jobs", "list"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_inert("jobs list", &out.stdout);
    let out = hermes_with(dir.path(), &config, &["memory", "forget", EVIL]);
    assert_eq!(out.status.code(), Some(1));
    assert_inert("an error naming what was asked", &out.stderr);
}

/// A model server whose `/models` lists ids carrying control sequences.
async fn hostile_models_server() -> String {
    let app = axum::Router::new().route(
        "/v1/models",
        axum::routing::get(|| async {
            axum::Json(serde_json::json!({"data": [{"id": EVIL}, {"id": "other"}]}))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}/v1")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_escapes_model_ids_answers_and_mcp_servers_last_words() {
    use hermes_engine::llm::scripted::{Reply, ScriptedModel};
    let answering = ScriptedModel::start_with(|_| Reply::text(EVIL)).await;
    let listing = hostile_models_server().await;
    let dir = tempfile::tempdir().unwrap();
    // printf's octal escapes: the settings file itself may not hold control characters.
    let printf: String = EVIL
        .bytes()
        .map(|b| match b {
            b'\\' => r"\\".to_string(),
            b' '..=b'~' => char::from(b).to_string(),
            _ => format!("\\{b:03o}"),
        })
        .collect();
    let mcp = format!(
        "mcp:\n  servers:\n    loud:\n      command: [sh, -c, {}]\n",
        serde_json::to_string(&format!("printf '{printf}\\n' >&2; exit 3")).unwrap()
    );
    let config = hostile_site(dir.path(), &answering.base_url(), &listing, &mcp);
    let out = hermes_with(dir.path(), &config, &["doctor"]);
    let stdout = format!("{}\nstderr: {}", text(&out.stdout), text(&out.stderr));
    assert_inert("doctor", &out.stdout);
    assert_inert("doctor stderr", &out.stderr);
    // The probe's quote of the answer, the listed model id, the MCP server's stderr.
    assert!(stdout.contains("did not call the offered tool"), "{stdout}");
    assert!(
        stdout.contains("does not list model scripted-pro"),
        "{stdout}"
    );
    assert!(stdout.contains("mcp server loud"), "{stdout}");
    // The probe quotes the answer on one line, its control characters dropped.
    assert!(stdout.contains("(it said: A ]0;pwned B [2JC"), "{stdout}");
    assert_eq!(stdout.matches(r"\x1b]0;pwned\x07").count(), 2, "{stdout}");
    answering.stop().await;
}

#[test]
fn config_check_escapes_what_it_quotes_from_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.yaml");
    // EVIL in YAML's own escapes (the file itself may not hold control characters).
    let key = r#""A\e]0;pwned\aB\e[2JC\u202eD\x9b31mE\rF""#;
    std::fs::write(&file, format!("agent:\n  {key}: 1\n")).unwrap();
    let out = hermes(
        dir.path(),
        &["--config", file.to_str().unwrap(), "config", "check"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert_inert("config check", &out.stderr);
    assert!(
        text(&out.stderr).contains(r"\x1b[2J"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn without_a_model_the_error_names_the_settings_file_and_the_local_model_script_whole() {
    let dir = tempfile::tempdir().unwrap();
    // Port 9 (discard) on loopback: nothing listens, the connection is refused at once.
    let config = hostile_site(
        dir.path(),
        "http://127.0.0.1:9/v1",
        "http://127.0.0.1:9/v1",
        "",
    );
    let out = hermes_with(
        dir.path(),
        &config,
        &["run", "What is the capital of France?"],
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    let failed = stderr
        .lines()
        .find(|l| l.contains(" failed (model): "))
        .unwrap_or_else(|| panic!("no failure line: {stderr}"));
    let error = failed.split_once(" failed (model): ").unwrap().1;
    assert!(
        error.contains(&config.display().to_string()),
        "names the file: {error}"
    );
    assert!(error.contains("model.profiles.fast.base_url"), "{error}");
    assert!(error.contains("scripts/local-model.sh"), "{error}");
    // The timeline's line for the model call carries the same words, whole.
    let step = stderr
        .lines()
        .find(|l| l.starts_with("[ 1] model fast"))
        .unwrap_or_else(|| panic!("no step line: {stderr}"));
    assert!(step.ends_with(error), "step: {step}\nerror: {error}");
    // The advice comes with the call's end, not with each attempt retried before it.
    assert_eq!(stderr.matches("retrying").count(), 3, "{stderr}");
    assert_eq!(
        stderr.matches("scripts/local-model.sh").count(),
        2,
        "{stderr}"
    );
    let id = stderr
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap();
    let out = hermes_with(dir.path(), &config, &["tasks", "show", id]);
    let shown = text(&out.stdout);
    assert!(
        shown
            .lines()
            .any(|l| l.starts_with("[ 1] model fast") && l.ends_with(error)),
        "{shown}"
    );
}
