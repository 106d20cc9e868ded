//! A scripted OpenAI-compatible model server, for tests and benchmarks.
//!
//! This is a real HTTP server (axum on `127.0.0.1:0`) that answers `POST /v1/chat/completions`
//! from a script, so the whole gateway — HTTP, retries, parsing — runs against it exactly as it
//! would against Ollama or vLLM. It records every request body and `Authorization` header so a
//! test can check what was sent. Beside chat it answers what real servers tell about their
//! model — the replies' `model` and `system_fingerprint`, `GET /v1/models`, llama.cpp's
//! `/props`, Ollama's `/api/tags` — each changeable while it runs, so a test can swap the model
//! behind the name. Replies either replay a list in order or are computed from each
//! request by a handler (for concurrent tests and benchmarks).
//! Owns: its listener, its replies and its records. Must not: be used by the daemon itself, or
//! depend on any other part of the crate except [`estimate_tokens`](super::estimate_tokens) and
//! the [`Loopback`] it is served by.
//!
//! ```no_run
//! # async fn demo() {
//! use hermes_engine::llm::scripted::{Reply, ScriptedModel};
//! let model = ScriptedModel::start(vec![Reply::text("hello")]).await;
//! // point a profile's base_url at model.base_url(), call the gateway, then:
//! assert!(model.request_count() <= 1);
//! model.stop().await;
//! # }
//! ```

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::estimate_tokens;
use crate::loopback::Loopback;

/// Large enough for any prompt a benchmark builds.
const BODY_LIMIT: usize = 64 * 1024 * 1024;

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// HTTP 200 with this JSON body. If it has a `usage` object without `prompt_tokens`, the
    /// server fills that in from the size of the request it received (and `total_tokens`).
    Body(Value),
    /// Any status, headers and raw body (errors, `Retry-After`, non-JSON garbage).
    Status {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    },
    /// Wait, then answer with the inner reply (timeouts, concurrency, benchmarks).
    Delay(Duration, Box<Reply>),
}

impl Reply {
    /// A plain assistant answer, with a usage block (completion counted from `content`, prompt
    /// counted from the request when it arrives).
    pub fn text(content: &str) -> Reply {
        Reply::Body(completion(
            json!({"role": "assistant", "content": content}),
            "stop",
            Some(estimate_tokens(content)),
        ))
    }

    /// Native `tool_calls` with arguments encoded as JSON strings, as OpenAI sends them; ids are
    /// `call_1`, `call_2`, … A usage block is included as for [`Reply::text`].
    pub fn tool_calls(calls: &[(&str, Value)]) -> Reply {
        let encoded: Vec<Value> = calls
            .iter()
            .enumerate()
            .map(|(i, (name, args))| {
                json!({"id": format!("call_{}", i + 1), "type": "function",
                       "function": {"name": name, "arguments": args.to_string()}})
            })
            .collect();
        let completion_tokens = encoded
            .iter()
            .map(|c| estimate_tokens(&c["function"].to_string()))
            .sum();
        Reply::Body(completion(
            json!({"role": "assistant", "content": null, "tool_calls": encoded}),
            "tool_calls",
            Some(completion_tokens),
        ))
    }

    /// The assistant `content` verbatim and no usage block: for calls written as text
    /// (fences, `<tool_call>` tags, bare JSON) and for servers that do not count tokens.
    pub fn content(raw: &str) -> Reply {
        Reply::Body(completion(
            json!({"role": "assistant", "content": raw}),
            "stop",
            None,
        ))
    }
}

fn completion(message: Value, finish_reason: &str, completion_tokens: Option<u32>) -> Value {
    let mut body = json!({
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": 0,
        "model": PLACEHOLDER_MODEL,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
    });
    if let Some(n) = completion_tokens {
        body["usage"] = json!({"completion_tokens": n});
    }
    body
}

type Handler = Box<dyn Fn(&Value) -> Reply + Send + Sync>;

/// Where replies come from.
enum Source {
    Script(Mutex<VecDeque<Reply>>),
    Handler(Handler),
}

/// What the server has received, in arrival order; one lock so both lists stay aligned.
#[derive(Default)]
struct Received {
    bodies: Vec<Value>,
    authorizations: Vec<Option<String>>,
}

/// What the server says about the model it serves, beside its replies; changed at will by a
/// test to play a model upgrade behind an unchanged name.
struct Served {
    /// The replies' `model` field (where the scripted body has the placeholder `scripted`).
    model: String,
    /// The replies' `system_fingerprint`, if any.
    fingerprint: Option<String>,
    /// `GET /v1/models` lists these; `None`: 404, as servers without the route.
    listed: Option<Vec<String>>,
    /// `GET /props` (llama.cpp) names this file; `None`: 404.
    model_file: Option<String>,
    /// `GET /api/tags` (Ollama) lists the model with this digest; `None`: 404.
    digest: Option<(String, String)>,
}

impl Default for Served {
    fn default() -> Served {
        Served {
            model: PLACEHOLDER_MODEL.into(),
            fingerprint: None,
            listed: None,
            model_file: Some("/models/scripted.gguf".into()),
            digest: None,
        }
    }
}

/// The `model` of every scripted body, replaced by [`Served::model`] when it is sent.
const PLACEHOLDER_MODEL: &str = "scripted";

struct Shared {
    source: Source,
    served: Mutex<Served>,
    /// Keep each request for [`ScriptedModel::requests`]; off for load benchmarks, where the
    /// copies would be the test harness's work counted against the agent.
    record: bool,
    received: Mutex<Received>,
    /// The number of requests received, so tests can wait for one without polling.
    count: watch::Sender<usize>,
}

impl Shared {
    fn received(&self) -> MutexGuard<'_, Received> {
        // A panic while holding the lock (a test's handler) leaves plain data behind; keep it.
        hermes_store::util::lock(&self.received)
    }
}

/// A running scripted model server. Dropping it shuts the server down; [`ScriptedModel::stop`]
/// does so and waits for it.
pub struct ScriptedModel {
    url: String,
    shared: Arc<Shared>,
    server: Loopback,
}

impl ScriptedModel {
    /// Starts a server that replays `script` in order; once it is used up every request gets
    /// `500 {"error":"script exhausted"}`.
    ///
    /// # Panics
    /// If no loopback port can be bound — nothing can be tested then.
    pub async fn start(script: Vec<Reply>) -> ScriptedModel {
        Self::launch(Source::Script(Mutex::new(script.into())), true).await
    }

    /// Starts a server whose reply is computed from each request body.
    ///
    /// # Panics
    /// If no loopback port can be bound.
    pub async fn start_with<F>(handler: F) -> ScriptedModel
    where
        F: Fn(&Value) -> Reply + Send + Sync + 'static,
    {
        Self::launch(Source::Handler(Box::new(handler)), true).await
    }

    /// As [`ScriptedModel::start_with`], keeping no copy of the requests (only their count):
    /// for benchmarks under load, as a real model server keeps none. [`Self::requests`] and
    /// [`Self::authorizations`] are then empty.
    ///
    /// # Panics
    /// If no loopback port can be bound.
    pub async fn start_unrecorded<F>(handler: F) -> ScriptedModel
    where
        F: Fn(&Value) -> Reply + Send + Sync + 'static,
    {
        Self::launch(Source::Handler(Box::new(handler)), false).await
    }

    async fn launch(source: Source, record: bool) -> ScriptedModel {
        let shared = Arc::new(Shared {
            source,
            served: Mutex::default(),
            record,
            received: Mutex::new(Received::default()),
            count: watch::channel(0).0,
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/v1/models", get(models))
            .route("/props", get(props))
            .route("/api/tags", get(tags))
            .layer(DefaultBodyLimit::max(BODY_LIMIT))
            .with_state(shared.clone());
        let server = Loopback::serve(app, "scripted model")
            .unwrap_or_else(|e| panic!("scripted model server: cannot listen on loopback: {e}"));
        ScriptedModel {
            url: format!("http://{}/v1", server.addr()),
            shared,
            server,
        }
    }

    /// `http://127.0.0.1:PORT/v1`, ready for a profile's `base_url`.
    pub fn base_url(&self) -> String {
        self.url.clone()
    }

    /// Every request body received, in order (a body that was not JSON is kept as a string).
    pub fn requests(&self) -> Vec<Value> {
        self.shared.received().bodies.clone()
    }

    /// The `Authorization` header of every request, in the same order as [`Self::requests`].
    pub fn authorizations(&self) -> Vec<Option<String>> {
        self.shared.received().authorizations.clone()
    }

    /// From now on the replies report `model` as the model that answered.
    pub fn report_model(&self, model: &str) {
        hermes_store::util::lock(&self.shared.served).model = model.to_string();
    }

    /// From now on the replies carry this `system_fingerprint` (or none).
    pub fn report_fingerprint(&self, fingerprint: Option<&str>) {
        hermes_store::util::lock(&self.shared.served).fingerprint = fingerprint.map(str::to_string);
    }

    /// `GET /v1/models` lists these ids from now on (`None`: the route answers 404, as at
    /// the start).
    pub fn list_models(&self, ids: Option<&[&str]>) {
        hermes_store::util::lock(&self.shared.served).listed =
            ids.map(|ids| ids.iter().map(|s| s.to_string()).collect());
    }

    /// `GET /props` names this model file, as llama.cpp's server does (`None`: 404, as
    /// llama-cpp-python and hosted APIs). At the start: `/models/scripted.gguf`.
    pub fn serve_model_file(&self, path: Option<&str>) {
        hermes_store::util::lock(&self.shared.served).model_file = path.map(str::to_string);
    }

    /// `GET /api/tags` lists `name` with `digest`, as Ollama does (`None`: 404, as at the start).
    pub fn serve_digest(&self, tag: Option<(&str, &str)>) {
        hermes_store::util::lock(&self.shared.served).digest =
            tag.map(|(n, d)| (n.to_string(), d.to_string()));
    }

    pub fn request_count(&self) -> usize {
        *self.shared.count.borrow()
    }

    /// Waits until at least `n` requests have arrived; false if `timeout` passed first.
    pub async fn wait_for_requests(&self, n: usize, timeout: Duration) -> bool {
        let mut rx = self.shared.count.subscribe();
        matches!(
            tokio::time::timeout(timeout, rx.wait_for(|count| *count >= n)).await,
            Ok(Ok(_))
        )
    }

    /// Stops accepting, lets in-flight replies finish (up to a few seconds), then returns.
    pub async fn stop(self) {
        self.server.stop().await;
    }
}

async fn chat(State(shared): State<Arc<Shared>>, headers: HeaderMap, raw: Bytes) -> Response {
    let text = String::from_utf8_lossy(&raw);
    let parsed: Result<Value, _> = serde_json::from_slice(&raw);
    if shared.record {
        let mut received = shared.received();
        received.bodies.push(match &parsed {
            Ok(v) => v.clone(),
            Err(_) => Value::String(text.to_string()),
        });
        received.authorizations.push(
            headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
        );
    }
    shared.count.send_modify(|n| *n += 1);
    let request = match parsed {
        Ok(v) => v,
        Err(e) => {
            return (
                StatusCode::BAD_REQUEST,
                axum::Json(json!({"error": {"message": format!("request body is not JSON: {e}")}})),
            )
                .into_response();
        }
    };
    let mut reply = match &shared.source {
        Source::Handler(handler) => handler(&request),
        Source::Script(queue) => {
            let next = hermes_store::util::lock(queue).pop_front();
            match next {
                Some(reply) => reply,
                None => Reply::Status {
                    status: 500,
                    headers: Vec::new(),
                    body: json!({"error": "script exhausted"}).to_string(),
                },
            }
        }
    };
    loop {
        match reply {
            Reply::Delay(wait, inner) => {
                tokio::time::sleep(wait).await;
                reply = *inner;
            }
            Reply::Body(mut body) => {
                fill_prompt_tokens(&mut body, &text);
                fill_served(&mut body, &hermes_store::util::lock(&shared.served));
                return axum::Json(body).into_response();
            }
            Reply::Status {
                status,
                headers,
                body,
            } => return raw_response(status, &headers, body),
        }
    }
}

fn fill_served(body: &mut Value, served: &Served) {
    if body.get("model").and_then(Value::as_str) == Some(PLACEHOLDER_MODEL) {
        body["model"] = json!(served.model);
        if let Some(fp) = &served.fingerprint {
            body["system_fingerprint"] = json!(fp);
        }
    }
}

async fn models(State(shared): State<Arc<Shared>>) -> Response {
    let listed = hermes_store::util::lock(&shared.served).listed.clone();
    match listed {
        Some(ids) => {
            let data: Vec<Value> = ids
                .iter()
                .map(|id| json!({"id": id, "object": "model", "owned_by": "scripted"}))
                .collect();
            axum::Json(json!({"object": "list", "data": data})).into_response()
        }
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn props(State(shared): State<Arc<Shared>>) -> Response {
    let file = hermes_store::util::lock(&shared.served).model_file.clone();
    match file {
        Some(path) => {
            axum::Json(json!({"model_path": path, "chat_template": "", "total_slots": 1}))
                .into_response()
        }
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn tags(State(shared): State<Arc<Shared>>) -> Response {
    let digest = hermes_store::util::lock(&shared.served).digest.clone();
    match digest {
        Some((name, digest)) => {
            axum::Json(json!({"models": [{"name": name, "model": name, "digest": digest}]}))
                .into_response()
        }
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

fn fill_prompt_tokens(body: &mut Value, request_text: &str) {
    let Some(usage) = body.get_mut("usage").and_then(Value::as_object_mut) else {
        return;
    };
    if usage.contains_key("prompt_tokens") {
        return;
    }
    let prompt = u64::from(estimate_tokens(request_text));
    let completion = usage
        .get("completion_tokens")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    usage.insert("prompt_tokens".into(), json!(prompt));
    usage.insert("total_tokens".into(), json!(prompt + completion));
}

fn raw_response(status: u16, headers: &[(String, String)], body: String) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let content_type = if serde_json::from_str::<Value>(&body).is_ok() {
        "application/json"
    } else {
        "text/plain; charset=utf-8"
    };
    let mut response = (status, body).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    for (name, value) in headers {
        // A script with an unusable header name or value is a test bug; skipping it makes the
        // test fail on the missing header rather than crash the server.
        if let (Ok(n), Ok(v)) = (
            HeaderName::try_from(name.as_str()),
            HeaderValue::try_from(value.as_str()),
        ) {
            response.headers_mut().insert(n, v);
        }
    }
    response
}
