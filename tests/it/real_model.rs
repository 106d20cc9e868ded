//! The daemon against a real model server — by default SmolLM2-135M served by llama-cpp-python
//! (`scripts/local-model.sh`), or any OpenAI-compatible server at `HERMES_REAL_MODEL_URL`.
//!
//! Ignored unless asked for, and then failing (never passing) when no server is named:
//!
//! ```sh
//! scripts/local-model.sh --isolated -- cargo test --test it real_model:: -- --ignored --nocapture
//! ```
//!
//! (`--isolated`: the server and the tests in a network namespace with only loopback, so a model
//! that invents a public URL reaches nothing.) `HERMES_REAL_MODEL_NAME` names the model
//! (default `smollm2`), `HERMES_REAL_MODEL_TOOL_MODE` the profiles' `tool_mode` (default: the
//! daemon's).
//!
//! Each test runs fixed tasks through the real daemon code — an [`App`] on a temporary data
//! dir, the default settings but for the profiles, a manifests dir holding only `disk_usage`
//! and `tools.web_fetch.allow_private` — with a recording proxy on loopback between the
//! daemon and the server. A tiny model answers badly; nothing here checks an answer. What is
//! checked is what a model cannot break: every request is accepted and the server survives each
//! task, the tools reach the model, the loop guard bounds the task, no task outlives its limit,
//! and a failure always has a reason. Each task's trace is printed (`--nocapture`).

use crate::common;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{Html, IntoResponse, Response};
use hermes_config::{Config, Settings, ToolMode};
use hermes_engine::agent::JobExecution;
use hermes_store::{StepKind, TaskRecord, TaskState};
use hermes_surfaces::app::{App, BuildOptions};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const NEEDS: &str = "needs HERMES_REAL_MODEL_URL (scripts/local-model.sh)";

/// How long a live server may take to answer again after a task: it finishes a request the
/// daemon abandoned first, and llama-cpp-python's native tool path generates without a limit.
const ALIVE_WAIT: Duration = Duration::from_secs(900);

/// One local server answers one request at a time: the tests take turns.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The server named by the environment: its base URL and model name. No server, no pass.
fn real_model() -> (String, String) {
    let url = std::env::var("HERMES_REAL_MODEL_URL").unwrap_or_default();
    assert!(!url.trim().is_empty(), "{NEEDS}");
    let name = std::env::var("HERMES_REAL_MODEL_NAME")
        .ok()
        .filter(|n| !n.trim().is_empty())
        .unwrap_or_else(|| "smollm2".into());
    (url.trim().trim_end_matches('/').to_string(), name)
}

fn tool_mode() -> Option<ToolMode> {
    let mode = std::env::var("HERMES_REAL_MODEL_TOOL_MODE").ok()?;
    Some(match mode.trim() {
        "auto" => ToolMode::Auto,
        "native" => ToolMode::Native,
        "text" => ToolMode::Text,
        other => panic!("HERMES_REAL_MODEL_TOOL_MODE is '{other}': expected auto, native or text"),
    })
}

// ------------------------------------------------------------------ the recording proxy

/// The status of a request the daemon stopped waiting for.
const ABANDONED: u16 = 0;

/// One request the daemon made, as the server saw it, and the server's answer.
#[derive(Debug, Clone)]
struct Exchange {
    path: String,
    request: Value,
    status: u16,
    response: Value,
    /// The answer's body when it is not JSON.
    raw: String,
    ms: u128,
}

impl Exchange {
    fn prompt_tokens(&self) -> Option<u64> {
        self.response
            .pointer("/usage/prompt_tokens")
            .and_then(Value::as_u64)
    }

    fn system(&self) -> &str {
        self.request
            .pointer("/messages/0/content")
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// A turn of the agent loop (not a summary call): the agent's own system prompt.
    fn is_agent_turn(&self) -> bool {
        self.path.ends_with("/chat/completions")
            && self.system().starts_with("You are hermes-agent")
    }

    fn offers_tools(&self) -> bool {
        self.request
            .get("tools")
            .and_then(Value::as_array)
            .is_some_and(|t| !t.is_empty())
    }
}

#[derive(Clone)]
struct ProxyState {
    upstream: String,
    client: reqwest::Client,
    log: Arc<Mutex<Vec<Exchange>>>,
}

/// A pass-through proxy on 127.0.0.1:0 in front of the model server, recording every exchange.
struct Proxy {
    /// The base URL to give the daemon: the proxy's address with the server's path (`/v1`).
    base_url: String,
    log: Arc<Mutex<Vec<Exchange>>>,
}

impl Proxy {
    async fn start(real_url: &str) -> Proxy {
        let parsed = reqwest::Url::parse(real_url).expect("HERMES_REAL_MODEL_URL is a URL");
        let origin = parsed.origin().ascii_serialization();
        let state = ProxyState {
            upstream: origin,
            client: reqwest::Client::new(),
            log: Arc::default(),
        };
        let log = state.log.clone();
        let app = axum::Router::new().fallback(forward).with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let addr = listener.local_addr().expect("local addr");
        tokio::spawn(async move { axum::serve(listener, app).await });
        Proxy {
            base_url: format!("http://{addr}{}", parsed.path().trim_end_matches('/')),
            log,
        }
    }

    fn len(&self) -> usize {
        self.log.lock().unwrap().len()
    }

    fn since(&self, from: usize) -> Vec<Exchange> {
        self.log.lock().unwrap()[from..].to_vec()
    }
}

async fn forward(
    State(s): State<ProxyState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    let mut req = s.client.request(method, format!("{}{path}", s.upstream));
    if let Some(ct) = headers.get(axum::http::header::CONTENT_TYPE) {
        req = req.header(reqwest::header::CONTENT_TYPE, ct.as_bytes());
    }
    // Written down before it is sent: a request the daemon gives up on (its timeout drops
    // this handler) stays in the log with status 0.
    let index = {
        let mut log = s.log.lock().unwrap();
        log.push(Exchange {
            path: uri.path().to_string(),
            request: serde_json::from_slice(&body).unwrap_or(Value::Null),
            status: ABANDONED,
            response: Value::Null,
            raw: String::new(),
            ms: 0,
        });
        log.len() - 1
    };
    let started = Instant::now();
    let (status, answer) = match req.body(body.clone()).send().await {
        Ok(r) => {
            let status = r.status().as_u16();
            (status, r.bytes().await.unwrap_or_default())
        }
        Err(e) => (
            502,
            Bytes::from(format!("proxy: the model server failed: {e}")),
        ),
    };
    let raw = String::from_utf8_lossy(&answer).into_owned();
    {
        let mut log = s.log.lock().unwrap();
        let e = &mut log[index];
        e.status = status;
        e.response = serde_json::from_str(&raw).unwrap_or(Value::Null);
        e.raw = raw;
        e.ms = started.elapsed().as_millis();
    }
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        answer,
    )
        .into_response()
}

// ------------------------------------------------------------------ a page on loopback

const PAGE_TITLE: &str = "Harbour opening hours";

/// A small site on 127.0.0.1:0: its URL, and how many requests it served.
async fn site() -> (String, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let app = axum::Router::new().fallback(move || {
        counter.fetch_add(1, Ordering::SeqCst);
        async move {
            Html(format!(
                "<!doctype html><html><head><title>{PAGE_TITLE}</title></head><body>\
                 <h1>{PAGE_TITLE}</h1><p>The harbour office is open from 7:00 to 19:00, \
                 Monday to Saturday. On Sundays it is closed.</p></body></html>"
            ))
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let url = format!("http://{}/", listener.local_addr().expect("local addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, hits)
}

// ------------------------------------------------------------------ the daemon

struct RealApp {
    t: common::TestApp,
    proxy: Proxy,
    real_url: String,
    _manifests: tempfile::TempDir,
}

/// The real daemon on a temporary data dir: default settings, but the profiles point at the
/// server (through the proxy), the manifests are `disk_usage` only (the repository's `weather`
/// would reach the internet), and `web_fetch` may reach loopback.
async fn real_app() -> RealApp {
    let (real_url, model) = real_model();
    let proxy = Proxy::start(&real_url).await;
    let manifests = tempfile::tempdir().expect("temp dir");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tools/disk_usage.yaml"),
        manifests.path().join("disk_usage.yaml"),
    )
    .expect("copy the disk_usage manifest");

    let mut s = Settings::default();
    for p in s.model.profiles.values_mut() {
        p.base_url = proxy.base_url.clone();
        p.model = model.clone();
        // A model on the CPU: the first call of a task evaluates the whole fixed prompt.
        p.timeout_s = 180;
        if let Some(mode) = tool_mode() {
            p.tool_mode = mode;
        }
    }
    s.tools.manifests_dir = manifests.path().to_string_lossy().into_owned();
    s.tools.web_fetch.allow_private = true;
    s.scheduler.timezone = "UTC".into();

    let dir = tempfile::tempdir().expect("temp dir");
    let config = Config::from_settings(s, dir.path().to_path_buf());
    let app = App::build_with(config, JobExecution::Direct, BuildOptions::default())
        .await
        .expect("app builds");
    RealApp {
        t: common::TestApp { app, dir },
        proxy,
        real_url,
        _manifests: manifests,
    }
}

impl RealApp {
    fn settings(&self) -> &Settings {
        &self.t.app.config.settings
    }

    /// Run one task as `hermes-agent run` does, print its trace, check what a model cannot
    /// break, and return the record with the exchanges it caused.
    async fn task(&self, label: &str, text: &str) -> (TaskRecord, Vec<Exchange>) {
        let from = self.proxy.len();
        let started = Instant::now();
        let record = common::run_task(&self.t, text).await;
        let wall = started.elapsed();
        let exchanges = self.proxy.since(from);
        print_trace(label, &record, &exchanges, wall);
        self.check(label, &record, &exchanges, wall).await;
        (record, exchanges)
    }

    async fn check(&self, label: &str, r: &TaskRecord, exchanges: &[Exchange], wall: Duration) {
        let s = self.settings();
        let task = &r.task;

        // A task ends, and a failure says why.
        assert!(
            matches!(task.state, TaskState::Succeeded | TaskState::Failed),
            "{label}: the task ended {} ({:?})",
            task.state.as_str(),
            task.error
        );
        if task.state == TaskState::Failed {
            assert!(
                task.reason.is_some(),
                "{label}: failed without a reason: {:?}",
                task.error
            );
            assert!(
                task.error.as_deref().is_some_and(|e| !e.trim().is_empty()),
                "{label}: failed ({:?}) without an error text",
                task.reason
            );
        }

        // No task outlives its limit (a little slack for recording the end).
        let limit = Duration::from_secs(s.agent.task_timeout_s);
        assert!(
            wall <= limit + Duration::from_secs(5),
            "{label}: ran {wall:?}, past agent.task_timeout_s = {limit:?}"
        );
        if let (Some(a), Some(b)) = (task.started_at, task.finished_at) {
            let ran = (b - a).to_std().unwrap_or_default();
            assert!(
                ran <= limit + Duration::from_secs(5),
                "{label}: recorded {ran:?} of running, past {limit:?}"
            );
        }

        // The loop guard bounds the task.
        let model_calls = r
            .steps
            .iter()
            .filter(|s| s.row.kind == StepKind::Model)
            .count();
        assert!(
            model_calls <= s.agent.max_steps as usize,
            "{label}: {model_calls} model calls, more than agent.max_steps = {}",
            s.agent.max_steps
        );
        for ((name, args), n) in identical_calls_run(r) {
            assert!(
                n <= s.agent.max_identical_calls as usize,
                "{label}: {name}({args}) ran {n} times, more than agent.max_identical_calls = {}",
                s.agent.max_identical_calls
            );
        }

        // Every request was accepted, and the server is still there.
        for e in exchanges.iter().filter(|e| e.status != ABANDONED) {
            assert_eq!(
                e.status,
                200,
                "{label}: the server refused a request to {}: {}\nrequest: {}",
                e.path,
                cut(&e.raw, 2000),
                cut(&e.request.to_string(), 3000)
            );
        }
        self.assert_alive(label).await;

        // The tools reach the model.
        let turns: Vec<&Exchange> = exchanges.iter().filter(|e| e.is_agent_turn()).collect();
        assert!(
            !turns.is_empty(),
            "{label}: no agent turn reached the server"
        );
        match turns.iter().find(|e| e.status == 200) {
            Some(turn) => self.assert_tools_reach_the_model(label, turn).await,
            None => println!("  tools reach the model: not judged, no agent turn was answered"),
        }
    }

    /// The server still answers `GET /models`. A server that is gone refuses the connection at
    /// once; a live one may first finish what it was doing — a request the daemon gave up on
    /// (a timeout) runs on to its end in llama-cpp-python, which answers nothing meanwhile.
    async fn assert_alive(&self, label: &str) {
        let url = format!("{}/models", self.real_url);
        let started = Instant::now();
        let answer = reqwest::Client::new()
            .get(&url)
            .timeout(ALIVE_WAIT)
            .send()
            .await;
        let waited = started.elapsed();
        match answer {
            Ok(r) if r.status().is_success() => {
                if waited > Duration::from_secs(2) {
                    println!(
                        "  the server answered GET /models after {:.0} s (busy until then)",
                        waited.as_secs_f64()
                    );
                }
            }
            Ok(r) => panic!("{label}: after the task, GET {url} answered {}", r.status()),
            Err(e) if e.is_timeout() => {
                panic!("{label}: after the task, GET {url} got no answer within {ALIVE_WAIT:?}")
            }
            Err(e) => panic!("{label}: after the task, GET {url} failed: {e}"),
        }
    }

    /// With native tools, the server evaluates far more of the request with its `tools` than
    /// of the same request without them; in text mode the system prompt names every tool.
    async fn assert_tools_reach_the_model(&self, label: &str, turn: &Exchange) {
        let offered: Vec<String> = self
            .t
            .app
            .agent
            .registry()
            .offered(None)
            .iter()
            .map(|t| t.name.clone())
            .collect();
        if turn.offers_tools() {
            let with = turn.prompt_tokens().unwrap_or(0);
            let mut bare = turn.request.clone();
            if let Some(o) = bare.as_object_mut() {
                o.remove("tools");
                o.remove("tool_choice");
                o.insert("max_tokens".into(), 1.into());
            }
            let without = reqwest::Client::new()
                .post(format!("{}/chat/completions", self.real_url))
                .json(&bare)
                .timeout(Duration::from_secs(180))
                .send()
                .await
                .expect("the same request without tools")
                .json::<Value>()
                .await
                .expect("a JSON answer")
                .pointer("/usage/prompt_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            println!(
                "  tools reach the model: prompt_tokens {with} with `tools` ({} tools, tool_choice {}), {without} without",
                offered.len(),
                turn.request.get("tool_choice").unwrap_or(&Value::Null)
            );
            assert!(
                with >= 2 * without && with >= without + 300,
                "{label}: the server evaluated {with} prompt tokens for the request with {} tools \
                 and {without} without them: it does not show the tools to the model \
                 (tool_choice sent: {})",
                offered.len(),
                turn.request.get("tool_choice").unwrap_or(&Value::Null)
            );
        } else {
            let system = turn.system();
            let missing: Vec<&String> = offered
                .iter()
                .filter(|n| !system.contains(n.as_str()))
                .collect();
            println!(
                "  tools reach the model: no `tools` field; the system prompt ({} chars) names {} of {} tools",
                system.len(),
                offered.len() - missing.len(),
                offered.len()
            );
            assert!(
                missing.is_empty(),
                "{label}: no `tools` field and the system prompt does not describe {missing:?}"
            );
        }
    }
}

/// How often each (tool, arguments) was actually run in the task — calls the loop guard
/// refused did not run.
fn identical_calls_run(r: &TaskRecord) -> BTreeMap<(String, String), usize> {
    let mut runs = BTreeMap::new();
    for s in r.steps.iter().filter(|s| s.row.kind == StepKind::Tool) {
        if refused_by_loop_guard(s.row.error.as_deref()) {
            continue;
        }
        let args = s.row.arguments.clone().unwrap_or_default();
        *runs.entry((s.row.name.clone(), args)).or_insert(0) += 1;
    }
    runs
}

/// The loop guard records a call it did not run with its reason: "not run: this exact call …"
/// (refused), or the stop naming `agent.max_identical_calls`.
fn refused_by_loop_guard(error: Option<&str>) -> bool {
    error.is_some_and(|e| {
        e.contains("not run: this exact call") || e.contains("agent.max_identical_calls")
    })
}

fn cut(s: &str, n: usize) -> String {
    let one_line = s.replace('\n', " ⏎ ");
    match one_line.char_indices().nth(n) {
        Some((i, _)) => format!("{}…", &one_line[..i]),
        None => one_line,
    }
}

fn print_trace(label: &str, r: &TaskRecord, exchanges: &[Exchange], wall: Duration) {
    let t = &r.task;
    println!("\n=== {label}: {:?}", t.task);
    println!(
        "  {} {} in {:.1} s; {} model call(s), {} tool call(s); tokens {} in, {} out; parse failures {}",
        t.state.as_str(),
        t.reason
            .map(|r| format!("(reason {r})"))
            .unwrap_or_default(),
        wall.as_secs_f64(),
        r.steps
            .iter()
            .filter(|s| s.row.kind == StepKind::Model)
            .count(),
        r.steps
            .iter()
            .filter(|s| s.row.kind == StepKind::Tool)
            .count(),
        t.prompt_tokens,
        t.completion_tokens,
        t.parse_failures
    );
    for s in &r.steps {
        let mut line = format!(
            "  [{:>2}] {:<5} {:<16} {:>6} ms",
            s.row.step,
            format!("{:?}", s.row.kind).to_lowercase(),
            s.row.name,
            s.row.duration_ms
        );
        if s.row.kind == StepKind::Model {
            line.push_str(&format!(
                " {}→{} tok",
                s.row.request_tokens, s.row.result_tokens
            ));
        }
        if let Some(a) = &s.row.arguments {
            line.push_str(&format!(" args {}", cut(a, 160)));
        }
        if let Some(o) = &s.row.output {
            line.push_str(&format!(" → {}", cut(o, 160)));
        }
        if let Some(e) = &s.row.error {
            line.push_str(&format!(" ✗ {}", cut(e, 200)));
        }
        println!("{line}");
    }
    if let Some(a) = &t.answer {
        println!("  answer: {}", cut(a, 300));
    }
    if let Some(e) = &t.error {
        println!("  error: {}", cut(e, 300));
    }
    for e in exchanges {
        let status = match e.status {
            ABANDONED => "abandoned by the daemon".to_string(),
            n => format!("{n} {} ms", e.ms),
        };
        println!(
            "  server: {} {status}; {} message(s), tools {}, max_tokens {}, prompt_tokens {}",
            e.path,
            e.request["messages"].as_array().map_or(0, Vec::len),
            e.request["tools"].as_array().map_or(0, Vec::len),
            e.request["max_tokens"],
            e.prompt_tokens()
                .map_or_else(|| "-".to_string(), |n| n.to_string())
        );
    }
}

// ------------------------------------------------------------------ the fixed tasks

/// A tool the model picks gets its schema turned into a grammar by the server (llama.cpp's
/// JSON-Schema → GBNF); a schema the converter chokes on can take the server down. A tiny model
/// picks tools at random, so every offered tool is forced once (`tool_choice` naming it).
#[tokio::test]
#[ignore = "needs HERMES_REAL_MODEL_URL (scripts/local-model.sh)"]
async fn every_offered_schema_survives_the_servers_grammar() {
    let _turn = SERIAL.lock().await;
    let a = real_app().await;
    let (_, model) = real_model();
    let tools = a.t.app.agent.registry().offered(None);
    let wire: Vec<Value> = tools
        .iter()
        .map(|t| {
            serde_json::json!({"type": "function", "function": {
                "name": t.name, "description": t.description, "parameters": t.parameters}})
        })
        .collect();
    println!("\n=== each of {} offered tools forced once", tools.len());
    for t in &tools {
        let body = serde_json::json!({
            "model": model,
            "messages": [
                {"role": "system", "content": "You are hermes-agent."},
                {"role": "user", "content": format!("Call {} with sensible arguments.", t.name)},
            ],
            "tools": wire,
            "tool_choice": {"type": "function", "function": {"name": t.name}},
            "max_tokens": 48,
            "temperature": 0.2,
        });
        let started = Instant::now();
        let answer = reqwest::Client::new()
            .post(format!("{}/chat/completions", a.real_url))
            .json(&body)
            .timeout(Duration::from_secs(180))
            .send()
            .await;
        let (status, text) = match answer {
            Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
            Err(e) => (0, e.to_string()),
        };
        let args = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| {
                v.pointer("/choices/0/message/tool_calls/0/function/arguments")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
            .unwrap_or_default();
        println!(
            "  {:<20} {status} in {:>5} ms: {}",
            t.name,
            started.elapsed().as_millis(),
            cut(&args, 120)
        );
        a.assert_alive(&format!("forcing {}", t.name)).await;
        assert_eq!(
            status,
            200,
            "forcing {}: the server answered {}",
            t.name,
            cut(&text, 1000)
        );
    }
}

#[tokio::test]
#[ignore = "needs HERMES_REAL_MODEL_URL (scripts/local-model.sh)"]
async fn a_plain_question() {
    let _turn = SERIAL.lock().await;
    let a = real_app().await;
    a.task("plain answer", "What is the capital of France?")
        .await;
}

#[tokio::test]
#[ignore = "needs HERMES_REAL_MODEL_URL (scripts/local-model.sh)"]
async fn a_manifest_tool() {
    let _turn = SERIAL.lock().await;
    let a = real_app().await;
    let (r, _) = a
        .task(
            "manifest tool",
            "How full is the disk at / ? Use the disk_usage tool.",
        )
        .await;
    let used = r.steps.iter().any(|s| s.row.name == "disk_usage");
    println!("  disk_usage called: {used}");
}

#[tokio::test]
#[ignore = "needs HERMES_REAL_MODEL_URL (scripts/local-model.sh)"]
async fn remember_then_recall_in_a_later_task() {
    let _turn = SERIAL.lock().await;
    let a = real_app().await;
    a.task(
        "remember",
        "Remember this fact for later: my favourite tea is oolong.",
    )
    .await;
    let facts = a.t.app.store.facts().all().await.expect("facts readable");
    println!(
        "  facts stored: {:?}",
        facts.iter().map(|f| f.text.as_str()).collect::<Vec<_>>()
    );
    let (r, exchanges) = a.task("recall", "What is my favourite tea?").await;
    let shown = exchanges
        .iter()
        .find(|e| e.is_agent_turn())
        .and_then(|e| e.request["messages"].as_array().cloned())
        .is_some_and(|m| {
            m.iter().filter(|m| m["role"] == "user").any(|m| {
                m["content"]
                    .as_str()
                    .is_some_and(|c| c.contains("<memory>"))
            })
        });
    println!(
        "  the later task's first request carried a <memory> block: {shown}; answer mentions oolong: {}",
        r.task
            .answer
            .as_deref()
            .is_some_and(|a| a.to_lowercase().contains("oolong"))
    );
}

#[tokio::test]
#[ignore = "needs HERMES_REAL_MODEL_URL (scripts/local-model.sh)"]
async fn making_a_job() {
    let _turn = SERIAL.lock().await;
    let a = real_app().await;
    a.task(
        "schedule_task",
        "Every day at 08:00, remind me to water the plants. Create a scheduled job for it.",
    )
    .await;
    let jobs = a.t.app.scheduler.list().await.expect("jobs readable");
    println!(
        "  jobs made: {:?}",
        jobs.iter()
            .map(|j| format!("{} | {} | {}", j.schedule, j.timezone, j.task))
            .collect::<Vec<_>>()
    );
}

#[tokio::test]
#[ignore = "needs HERMES_REAL_MODEL_URL (scripts/local-model.sh)"]
async fn fetching_a_page_from_loopback() {
    let _turn = SERIAL.lock().await;
    let (url, hits) = site().await;
    let a = real_app().await;
    let (r, _) = a
        .task(
            "web_fetch",
            &format!("Fetch the page {url} and tell me when the harbour office is open."),
        )
        .await;
    println!(
        "  the site served {} request(s); answer mentions 7:00: {}",
        hits.load(Ordering::SeqCst),
        r.task.answer.as_deref().is_some_and(|a| a.contains("7:00"))
    );
}
