//! Shared set-up for the integration tests: settings pointing at a scripted model server on
//! loopback, and an [`App`] on a temporary data dir.

use hermes_config::{Config, Settings};
use hermes_engine::agent::JobExecution;
use hermes_engine::tools::Tool;
use hermes_store::Origin;
use hermes_store::util::Backoff;
use hermes_store::util::RetryPolicy;
use hermes_surfaces::app::{App, BuildOptions};
use std::sync::Arc;
use std::time::Duration;

/// Settings whose every profile talks to `model_url`, with fast retries and no manifests.
pub fn settings(model_url: &str) -> Settings {
    let mut s = Settings::default();
    for p in s.model.profiles.values_mut() {
        p.base_url = model_url.to_string();
        p.timeout_s = 5;
    }
    s.tools.manifests_dir = "/nonexistent-hermes-test-tools".into();
    s.tools.web_fetch.allow_private = true;
    // Tests script every model call; a summary call would consume a scripted reply.
    s.context.summary_enabled = false;
    s.scheduler.timezone = "UTC".into();
    s
}

pub fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        max_retries: 2,
        backoff: Backoff::new(Duration::from_millis(5), Duration::from_millis(20)).with_jitter(),
    }
}

pub struct TestApp {
    pub app: App,
    pub dir: tempfile::TempDir,
}

pub async fn app(settings: Settings, extra_tools: Vec<Arc<dyn Tool>>) -> TestApp {
    let dir = tempfile::tempdir().expect("temp dir");
    let app = app_in(settings, extra_tools, dir.path()).await;
    TestApp { app, dir }
}

pub async fn app_in(
    settings: Settings,
    extra_tools: Vec<Arc<dyn Tool>>,
    dir: &std::path::Path,
) -> App {
    let config = Config::from_settings(settings, dir.to_path_buf());
    App::build_with(
        config,
        JobExecution::Direct,
        BuildOptions {
            model_retry: Some(fast_retry()),
            tool_backoff: Some(Duration::from_millis(5)),
            extra_tools,
            ..Default::default()
        },
    )
    .await
    .expect("app builds")
}

/// A real webhook receiver on loopback: its URL, and every JSON body it got.
pub async fn webhook_receiver() -> (String, Arc<std::sync::Mutex<Vec<serde_json::Value>>>) {
    use axum::Json;
    let received: Arc<std::sync::Mutex<Vec<serde_json::Value>>> = Arc::default();
    let sink = received.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |Json(v): Json<serde_json::Value>| {
            let sink = sink.clone();
            async move {
                if let Ok(mut s) = sink.lock() {
                    s.push(v);
                }
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let url = format!("http://{}/hook", listener.local_addr().expect("local addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, received)
}

/// Create a task from the CLI and run it in this process; the stored record with its trace.
pub async fn run_task(t: &TestApp, text: &str) -> hermes_store::TaskRecord {
    let task = t
        .app
        .agent
        .create(hermes_engine::agent::Submit {
            task: text.into(),
            origin: Origin::Cli,
            ..Default::default()
        })
        .await
        .expect("task created");
    t.app
        .agent
        .execute(&task.id, hermes_engine::agent::RunOptions::default())
        .await
        .expect("task ran");
    t.app
        .store
        .tasks()
        .record(&task.id)
        .await
        .expect("store readable")
        .expect("task stored")
}

/// The last user message of a chat request: the task text.
pub fn task_text(req: &serde_json::Value) -> String {
    req["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .map(|text| match text.rsplit_once("Task: ") {
            // The task's message starts with the time and recalled facts.
            Some((_, task)) => task,
            None => text,
        })
        .unwrap_or_default()
        .to_string()
}

/// A model that echoes its task, waits long on tasks that say `slow`, a little on `quick`.
pub fn echo_model(req: &serde_json::Value) -> hermes_engine::llm::scripted::Reply {
    use hermes_engine::llm::scripted::Reply;
    let task = task_text(req);
    let answer = Reply::text(&format!("answer to: {task}"));
    if task.contains("slow") {
        Reply::Delay(Duration::from_secs(30), Box::new(answer))
    } else if task.contains("quick") {
        Reply::Delay(Duration::from_millis(300), Box::new(answer))
    } else {
        answer
    }
}

/// A process's output as text (lossy: a test's message must show whatever it printed).
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The `(code, message)` of an API error body `{"error": {"code", "message"}}`.
pub fn error_of(v: &serde_json::Value) -> (&str, &str) {
    let field = |name: &str| {
        v.pointer(&format!("/error/{name}"))
            .and_then(serde_json::Value::as_str)
            .unwrap_or_else(|| panic!("not an error body: {v}"))
    };
    (field("code"), field("message"))
}

/// Run the built-in suite's cases named `names` on `app` as `hermes-agent eval` would (CLI
/// trigger, through its scheduler); `retry`: the throwaway apps' model retries.
pub async fn run_evals(
    app: &App,
    profile: Option<&str>,
    names: &[&str],
    retry: Option<RetryPolicy>,
    on_result: &(dyn Fn(&hermes_store::EvalResult) + Send + Sync),
) -> hermes_surfaces::eval::EvalReport {
    use hermes_surfaces::eval;
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    eval::run(
        eval::EvalRequest {
            config: &app.config,
            store: &app.store,
            gateway: app.agent.gateway(),
            profile: profile.map(str::to_string),
            // These cases are the suite of the test's run: they verify as a whole suite does
            // (what `eval --case` narrows is the CLI's, tested there).
            cases: eval::choose(eval::load(None).expect("the built-in suite"), &names),
            narrowed: false,
            trigger: hermes_store::EvalTrigger::Cli,
            scheduler: Some(&app.scheduler),
            model_retry: retry,
        },
        on_result,
    )
    .await
    .expect("the eval run completes")
}

/// Set in a child process that runs one test alone ([`alone_in_child`]); its value names it.
const ALONE: &str = "HERMES_TEST_ALONE";

/// For a test that must see every tracing event of its own work (in the test binary's shared
/// process, tracing caches each callsite's interest across the subscribers of all tests running
/// at once, so a thread-local subscriber can miss events), or whose work would disturb the
/// others' (a storm of child processes, each holding the shared process's files between fork
/// and exec). Such a test runs itself again, alone, in a child process. True in that child (run the test's body); in the parent, runs the child
/// as `test` (its full path), with `env` added, and fails unless the child passed it.
pub fn alone_in_child(test: &str, env: &[(&str, &str)]) -> bool {
    if std::env::var(ALONE).is_ok_and(|t| t == test) {
        return true;
    }
    let exe = std::env::current_exe().expect("the test binary");
    let out = std::process::Command::new(exe)
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(ALONE, test)
        .envs(env.iter().copied())
        .output()
        .expect("the test binary runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    // The child ran the test, not nothing (a filter that matches no test also succeeds).
    assert!(text.contains("1 passed"), "{text}");
    false
}

/// Run `work` on a current-thread runtime (a test body run by [`alone_in_child`]).
pub fn block_on<F: std::future::Future>(work: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(work)
}

/// Write `file` until its file system is full (the kernel answers ENOSPC): a real full disk on a
/// small tmpfs, for the storage-fault tests of both engines.
pub fn fill_until_full(file: &std::path::Path) {
    use std::io::Write as _;
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .expect("filler file");
    let chunk = [0u8; 64 * 1024];
    loop {
        match out.write(&chunk) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(28) => break, // ENOSPC
            Err(e) => panic!("filling the tmpfs: {e}"),
        }
    }
}
