//! The HTTP API in-process: `server::router` driven with `tower::ServiceExt::oneshot` on an
//! [`App`](hermes_surfaces::app::App) over a temporary data dir, talking to a scripted model on
//! loopback. Everything about the API's requests and answers that needs no process is here;
//! tests/daemon.rs keeps what does (signals, restarts, the data-dir lock, the CLI).

use crate::common;

use crate::common::{TestApp, echo_model, error_of};
use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use hermes_engine::llm::scripted::ScriptedModel;
use hermes_surfaces::http::{ApiState, BODY_LIMIT, router};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;

mod pages;
mod throttle;
mod usage;
mod wire;

/// Upper bound for a task to finish on the scripted model.
const PATIENCE: Duration = Duration::from_secs(20);

/// The API of one app: its router, and what it must outlive.
struct Api {
    router: Router,
    t: TestApp,
    _model: ScriptedModel,
}

/// An app on a fresh data dir and the API over it; `token` empty means no authentication.
async fn api(token: &str) -> Api {
    let model = ScriptedModel::start_with(echo_model).await;
    let t = common::app(common::settings(&model.base_url()), vec![]).await;
    let state = ApiState {
        token: Arc::from(token),
        ..ApiState::new(&t.app)
    };
    Api {
        router: router(state),
        t,
        _model: model,
    }
}

/// What came back: the status, the content type and the JSON body (`null` when empty).
struct Answer {
    status: StatusCode,
    content_type: String,
    body: Value,
}

impl Api {
    async fn send(&self, req: Request<Body>) -> Answer {
        let what = format!("{} {}", req.method(), req.uri());
        let resp = self
            .router
            .clone()
            .oneshot(req)
            .await
            .expect("the router answers");
        let status = resp.status();
        let content_type = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .expect("a body");
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                panic!(
                    "{what}: not JSON ({e}): {}",
                    String::from_utf8_lossy(&bytes)
                )
            })
        };
        Answer {
            status,
            content_type,
            body,
        }
    }

    /// A request with an optional JSON body and bearer token.
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        token: Option<&str>,
    ) -> Answer {
        let mut req = Request::builder().method(method).uri(path);
        if let Some(t) = token {
            req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let req = match body {
            Some(b) => req
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(b.to_string())),
            None => req.body(Body::empty()),
        };
        self.send(req.expect("a request")).await
    }

    async fn get(&self, path: &str) -> Answer {
        self.call(Method::GET, path, None, None).await
    }

    async fn post(&self, path: &str, body: Value) -> Answer {
        self.call(Method::POST, path, Some(body), None).await
    }
}

/// One bad request and the error it must get.
struct Bad {
    method: Method,
    path: &'static str,
    content_type: Option<&'static str>,
    body: String,
    status: StatusCode,
    code: &'static str,
    /// A fragment the message must contain (case-insensitive).
    words: &'static str,
}

fn bad(
    method: Method,
    path: &'static str,
    body: Option<(&'static str, String)>,
    status: StatusCode,
    code: &'static str,
    words: &'static str,
) -> Bad {
    let (content_type, body) = match body {
        Some((ct, b)) => (Some(ct), b),
        None => (None, String::new()),
    };
    Bad {
        method,
        path,
        content_type,
        body,
        status,
        code,
        words,
    }
}

fn json_body(v: Value) -> Option<(&'static str, String)> {
    Some(("application/json", v.to_string()))
}

// A table: one case per line reads better than rustfmt's one argument per line.
#[rustfmt::skip]
fn bad_inputs() -> Vec<Bad> {
    use Method as M;
    use StatusCode as S;
    let long = json!({"task": "字".repeat(20_001)}).to_string();
    assert!(
        long.len() < BODY_LIMIT,
        "under the body limit, over the text limit"
    );
    // The longest task written as escaped JSON (Python's default): over the text limit's
    // count, never over the body's.
    let escaped = format!("{{\"task\": \"{}\"}}", "\\ud83d\\ude00".repeat(20_001));
    assert!(escaped.len() < BODY_LIMIT, "{}", escaped.len());
    let big = json!({"task": "x".repeat(BODY_LIMIT + 1024)}).to_string();
    let t = "/v1/tasks";
    vec![
        bad(M::POST, t, Some(("application/json", "{\"task\": ".into())), S::BAD_REQUEST, "bad_json", ""),
        bad(M::POST, t, Some(("text/plain", "{\"task\": \"x\"}".into())), S::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type", "application/json"),
        bad(M::POST, t, json_body(json!({"task": "x", "priority": 1})), S::UNPROCESSABLE_ENTITY, "invalid_body", "priority"),
        bad(M::POST, t, json_body(json!({"task": 42})), S::UNPROCESSABLE_ENTITY, "invalid_body", "task"),
        bad(M::POST, t, json_body(json!([])), S::UNPROCESSABLE_ENTITY, "invalid_body", "expected a JSON object at line"),
        bad(M::POST, "/v1/jobs", json_body(json!("digest")), S::UNPROCESSABLE_ENTITY, "invalid_body", "expected a JSON object at line"),
        bad(M::POST, t, json_body(json!({"task": "   "})), S::BAD_REQUEST, "bad_request", "empty"),
        bad(M::POST, t, Some(("application/json", big)), S::PAYLOAD_TOO_LARGE, "too_large", "262144"),
        bad(M::POST, t, Some(("application/json", long)), S::PAYLOAD_TOO_LARGE, "too_large", "20000"),
        bad(M::POST, t, Some(("application/json", escaped)), S::PAYLOAD_TOO_LARGE, "too_large", "20000"),
        bad(M::POST, t, json_body(json!({"task": "x", "profile": "turbo"})), S::BAD_REQUEST, "bad_request", "turbo"),
        bad(M::GET, "/v1/tasks?state=done", None, S::BAD_REQUEST, "bad_request", "done"),
        bad(M::GET, "/v1/tasks?limit=many", None, S::BAD_REQUEST, "bad_request", "limit"),
        bad(M::GET, "/v1/tasks?limit=0", None, S::BAD_REQUEST, "bad_request", "limit"),
        bad(M::GET, "/v1/tasks/0123456789abcdef", None, S::NOT_FOUND, "not_found", "0123456789abcdef"),
        bad(M::POST, "/v1/tasks/0123456789abcdef/cancel", None, S::NOT_FOUND, "not_found", "0123456789abcdef"),
        bad(M::GET, "/v1/nothing-here", None, S::NOT_FOUND, "not_found", "endpoint"),
        bad(M::PUT, t, None, S::METHOD_NOT_ALLOWED, "method_not_allowed", "PUT"),
        bad(M::POST, "/v1/jobs", json_body(json!({"task": "digest", "schedule": "at teatime"})), S::BAD_REQUEST, "invalid_schedule", "at teatime"),
        bad(M::POST, "/v1/jobs", json_body(json!({"task": "digest", "schedule": "every 5s"})), S::BAD_REQUEST, "invalid_schedule", "60"),
        bad(M::DELETE, "/v1/jobs/nosuchjob", None, S::NOT_FOUND, "not_found", "nosuchjob"),
        bad(M::GET, "/v1/jobs/nosuchjob/runs", None, S::NOT_FOUND, "not_found", "nosuchjob"),
        bad(M::POST, "/v1/jobs/nosuchjob/run", None, S::NOT_FOUND, "not_found", "nosuchjob"),
        bad(M::POST, "/v1/memory", json_body(json!({"text": ""})), S::BAD_REQUEST, "bad_request", "empty"),
        bad(M::DELETE, "/v1/memory/nosuchfact", None, S::NOT_FOUND, "not_found", "nosuchfact"),
        bad(M::GET, "/v1/tasks/%FF", None, S::BAD_REQUEST, "bad_request", "path"),
        bad(M::POST, "/v1/jobs", json_body(json!({"task": "t", "schedule": "every 1h", "precheck": {"tool": "no_such_tool"}})), S::BAD_REQUEST, "invalid_request", "no_such_tool"),
        bad(M::POST, "/v1/jobs", json_body(json!({"task": "t", "schedule": "every 1h", "precheck": {"tool": "watch_page", "arguments": {"selector": ".price"}}})), S::BAD_REQUEST, "invalid_request", "url"),
        bad(M::DELETE, "/v1/jobs/%FF%FE", None, S::BAD_REQUEST, "bad_request", "path"),
        bad(M::GET, "/v1/tasks/0123456789abcdef/events", None, S::NOT_FOUND, "not_found", "0123456789abcdef"),
        bad(M::POST, "/v1/jobs/nosuchjob/pause", None, S::NOT_FOUND, "not_found", "nosuchjob"),
        bad(M::GET, "/v1/jobs/nosuchjob", None, S::NOT_FOUND, "not_found", "nosuchjob"),
        bad(M::POST, "/v1/jobs/nosuchjob/resume", None, S::NOT_FOUND, "not_found", "nosuchjob"),
        bad(M::GET, "/v1/deliveries?state=lost", None, S::BAD_REQUEST, "bad_request", "lost"),
        bad(M::GET, "/v1/deliveries?limit=0", None, S::BAD_REQUEST, "bad_request", "limit"),
        bad(M::POST, "/v1/deliveries/abc/retry", None, S::BAD_REQUEST, "bad_request", "whole numbers"),
        bad(M::POST, "/v1/deliveries/999/retry", None, S::NOT_FOUND, "not_found", "999"),
        bad(M::GET, "/v1/schedule?expr=x&bogus=1", None, S::BAD_REQUEST, "bad_request", "bogus"),
        bad(M::GET, "/v1/usage?days=0", None, S::BAD_REQUEST, "bad_request", "days"),
        bad(M::GET, "/v1/usage?days=30&bogus=1", None, S::BAD_REQUEST, "bad_request", "bogus"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_input_gets_a_clear_json_error() {
    let api = api("").await;
    for case in bad_inputs() {
        let what = format!("{} {} ({})", case.method, case.path, case.code);
        let mut req = Request::builder().method(case.method).uri(case.path);
        if let Some(ct) = case.content_type {
            req = req.header(header::CONTENT_TYPE, ct);
        }
        let req = req.body(Body::from(case.body)).expect("a request");
        let a = api.send(req).await;
        assert_eq!(a.status, case.status, "{what}: {}", a.body);
        assert!(
            a.content_type.starts_with("application/json"),
            "{what}: {}",
            a.content_type
        );
        let (code, message) = error_of(&a.body);
        assert_eq!(code, case.code, "{what}: {}", a.body);
        assert!(
            message.to_lowercase().contains(&case.words.to_lowercase()),
            "{what}: {message:?} lacks {:?}",
            case.words
        );
        assert!(
            !message.contains("panicked") && !message.contains("src/"),
            "{what}: {message}"
        );
    }
    // Nothing bad got stored.
    let a = api.get("/v1/tasks").await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(
        a.body["tasks"].as_array().expect("a list").len(),
        0,
        "{}",
        a.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_guards_every_endpoint_but_health() {
    let token = "s3cret-token-for-tests";
    let api = api(token).await;
    let endpoints: Vec<(Method, &str, Option<Value>)> = vec![
        (Method::POST, "/v1/tasks", Some(json!({"task": "hello"}))),
        (Method::GET, "/v1/tasks", None),
        (Method::GET, "/v1/tasks/abc", None),
        (Method::POST, "/v1/tasks/abc/cancel", Some(json!({}))),
        (Method::GET, "/v1/jobs", None),
        (
            Method::POST,
            "/v1/jobs",
            Some(json!({"task": "t", "schedule": "every 2h"})),
        ),
        (Method::DELETE, "/v1/jobs/abc", None),
        (Method::POST, "/v1/jobs/abc/run", Some(json!({}))),
        (Method::GET, "/v1/jobs/abc/runs", None),
        (Method::GET, "/v1/memory?q=tea", None),
        (
            Method::POST,
            "/v1/memory",
            Some(json!({"text": "likes tea"})),
        ),
        (Method::DELETE, "/v1/memory/abc", None),
        (Method::GET, "/v1/tasks/abc/events", None),
        (Method::GET, "/v1/schedule?expr=0%208%20*%20*%20*", None),
        (Method::POST, "/v1/jobs/abc/pause", Some(json!({}))),
        (Method::POST, "/v1/jobs/abc/resume", Some(json!({}))),
        (Method::GET, "/v1/deliveries?state=failed", None),
        (Method::POST, "/v1/deliveries/1/retry", Some(json!({}))),
        (Method::GET, "/v1/inbox?state=ignored", None),
        (Method::GET, "/v1/usage?days=7", None),
    ];
    for (method, path, body) in &endpoints {
        for auth in [None, Some("wrong-token"), Some("s3cret-token-for-test")] {
            let a = api.call(method.clone(), path, body.clone(), auth).await;
            assert_eq!(a.status, StatusCode::UNAUTHORIZED, "{method} {path}");
            let (code, message) = error_of(&a.body);
            assert_eq!(code, "unauthorized");
            assert!(message.contains("Bearer"), "{message}");
        }
    }
    let a = api.get("/healthz").await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    // What confinement this kernel gives the tools is said, not assumed.
    assert_eq!(a.body["sandbox"]["mode"], "enforce", "{}", a.body);
    assert!(a.body["sandbox"]["missing"].is_array(), "{}", a.body);

    for (method, path, body) in endpoints {
        let a = api.call(method.clone(), path, body, Some(token)).await;
        assert_ne!(
            a.status,
            StatusCode::UNAUTHORIZED,
            "{method} {path}: {}",
            a.body
        );
        assert!(
            a.status.is_success() || a.status == StatusCode::NOT_FOUND,
            "{method} {path}: {} {}",
            a.status,
            a.body
        );
    }
    // The scheme name is case-insensitive (RFC 9110 §11.1).
    let req = Request::get("/v1/tasks")
        .header(header::AUTHORIZATION, format!("bearer {token}"))
        .body(Body::empty())
        .expect("a request");
    assert_eq!(api.send(req).await.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_create_list_run_and_delete() {
    let api = api("").await;
    let a = api
        .post(
            "/v1/jobs",
            json!({"task": "summarise the news", "schedule": "0 8 * * *", "name": "digest"}),
        )
        .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
    let job = a.body;
    let id = job["id"].as_str().expect("an id").to_string();
    assert_eq!(job["name"], "digest");
    assert_eq!(job["schedule"], "0 8 * * *");
    assert_eq!(job["timezone"], "UTC");
    assert_eq!(job["origin"], "api");
    let next = job["next_run_at"].as_str().expect("next_run_at");
    assert!(next.contains("08:00:00"), "{next}");
    assert!(job["last_run"].is_null(), "{job}");

    let a = api.get("/v1/jobs").await;
    assert_eq!(a.status, StatusCode::OK);
    let jobs = a.body["jobs"].as_array().expect("a list");
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0]["id"], id.as_str());

    let a = api.post(&format!("/v1/jobs/{id}/run"), json!({})).await;
    assert_eq!(a.status, StatusCode::ACCEPTED, "{}", a.body);
    let task_id = a.body["task_id"].as_str().expect("a task id").to_string();
    // The firing ends once its task has finished and its run row is written.
    tokio::time::timeout(PATIENCE, api.t.app.scheduler.wait_idle())
        .await
        .expect("the firing ends in time");
    let t = api.get(&format!("/v1/tasks/{task_id}")).await.body;
    assert_eq!(t["state"], "succeeded", "{t}");
    assert_eq!(t["origin"], "job");
    assert_eq!(t["answer"], "answer to: summarise the news");

    let a = api.get(&format!("/v1/jobs/{id}/runs")).await;
    assert_eq!(a.status, StatusCode::OK);
    let runs = a.body["runs"].as_array().expect("a list");
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["outcome"], "fired");
    assert_eq!(runs[0]["task_id"], task_id.as_str());
    assert!(runs[0]["fired_at"].is_string());
    let list = api.get("/v1/jobs").await.body;
    assert_eq!(list["jobs"][0]["last_run"]["outcome"], "fired", "{list}");

    let path = format!("/v1/jobs/{id}");
    let a = api.call(Method::DELETE, &path, None, None).await;
    assert_eq!(a.status, StatusCode::NO_CONTENT);
    assert!(a.body.is_null());
    let list = api.get("/v1/jobs").await.body;
    assert_eq!(list["jobs"].as_array().expect("a list").len(), 0);
    let a = api.call(Method::DELETE, &path, None, None).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_add_search_and_forget() {
    let api = api("").await;
    let a = api
        .post(
            "/v1/memory",
            json!({"text": "用户喜欢喝乌龙茶", "tags": ["偏好"]}),
        )
        .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
    assert_eq!(a.body["merged"], false, "{}", a.body);
    let fact = a.body["id"].as_str().expect("an id").to_string();
    let a = api
        .post("/v1/memory", json!({"text": "用户喜欢喝乌龙茶。"}))
        .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
    assert_eq!(a.body["merged"], true, "the same fact again: {}", a.body);
    assert_eq!(a.body["id"], fact.as_str());

    let a = api.get("/v1/memory?q=%E4%B9%8C%E9%BE%99%E8%8C%B6").await;
    assert_eq!(a.status, StatusCode::OK);
    let facts = a.body["facts"].as_array().expect("a list");
    assert_eq!(facts.len(), 1, "{}", a.body);
    assert_eq!(facts[0]["id"], fact.as_str());
    assert_eq!(facts[0]["text"], "用户喜欢喝乌龙茶");
    assert_eq!(facts[0]["tags"], json!(["偏好"]));
    assert!(facts[0]["score"].as_f64().expect("a score") > 0.0);
    assert!(facts[0]["created_at"].is_string());

    let path = format!("/v1/memory/{fact}");
    let a = api.call(Method::DELETE, &path, None, None).await;
    assert_eq!(a.status, StatusCode::NO_CONTENT);
    let a = api.get("/v1/memory?q=%E4%B9%8C%E9%BE%99%E8%8C%B6").await;
    assert_eq!(
        a.body["facts"].as_array().expect("a list").len(),
        0,
        "{}",
        a.body
    );
}

/// A browser page on a rebinding domain reaches the loopback daemon with its own name in
/// `Host`; only loopback names, IP literals (which no DNS answer can rebind) and
/// `server.allowed_hosts` get through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_host_header_is_refused_everywhere() {
    let model = ScriptedModel::start_with(echo_model).await;
    let mut s = common::settings(&model.base_url());
    s.server.allowed_hosts = vec!["hermes.example.org".into()];
    let t = common::app(s, vec![]).await;
    let api = router(ApiState::new(&t.app));
    let with_host = |method: Method, path: &str, host: &str| {
        Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, host)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(json!({"task": "hi"}).to_string()))
            .expect("a request")
    };
    for host in [
        "rebind.attacker.example",
        "rebind.attacker.example:8765",
        "127.0.0.1.nip.io",
        "localhost.attacker.example",
        "hermes.example.org.evil",
    ] {
        for (method, path) in [
            (Method::GET, "/healthz"),
            (Method::GET, "/v1/memory?q=x"),
            (Method::POST, "/v1/tasks"),
            (Method::GET, "/no-such-page"),
        ] {
            let resp = api
                .clone()
                .oneshot(with_host(method.clone(), path, host))
                .await
                .expect("answered");
            assert_eq!(
                resp.status(),
                StatusCode::MISDIRECTED_REQUEST,
                "{host} {path}"
            );
            let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
                .await
                .expect("body");
            let v: Value = serde_json::from_slice(&bytes).expect("JSON");
            assert_eq!(v["error"]["code"], "misdirected_host", "{v}");
            assert!(
                v["error"]["message"]
                    .as_str()
                    .unwrap_or("")
                    .contains("server.allowed_hosts"),
                "{v}"
            );
        }
    }
    for host in [
        "localhost",
        "localhost:8765",
        "127.0.0.1:8765",
        "[::1]:8765",
        "192.168.1.20:8765",
        "hermes.example.org",
        "HERMES.example.org:443",
    ] {
        let resp = api
            .clone()
            .oneshot(with_host(Method::GET, "/healthz", host))
            .await
            .expect("answered");
        assert_eq!(resp.status(), StatusCode::OK, "{host}");
    }
    // Nothing was created by the refused requests.
    assert!(
        t.app
            .store
            .tasks()
            .list(&Default::default())
            .await
            .expect("list")
            .is_empty()
    );
}

/// Raw HTTP over a real socket: what hyper itself would answer before any handler runs.
async fn raw(addr: std::net::SocketAddr, request: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    // A refused head closes the connection before all of it is read: a write error is fine.
    let _ = s.write_all(request).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(PATIENCE, s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_url_gets_a_json_error_on_a_real_socket() {
    let a = api("").await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let state = ApiState::new(&a.t.app);
    let limits = hermes_surfaces::http::Limits::for_process(&a.t.app.config.settings.server);
    tokio::spawn(hermes_surfaces::http::serve(
        listener,
        state,
        limits,
        std::future::pending(),
    ));

    let huge = format!(
        "GET /v1/tasks/{} HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n",
        "a".repeat(100_000)
    );
    let answer = raw(addr, huge.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 414"), "{answer}");
    assert!(answer.contains("application/json"), "{answer}");
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or("");
    let v: Value = serde_json::from_str(body).expect("a JSON body");
    assert_eq!(v["error"]["code"], "too_long");

    // A long body is not a long head: a 60 KB one-line task still goes through, and the
    // request after it on the same connection too.
    let task = json!({"task": "x".repeat(15_000)}).to_string();
    let two = format!(
        "POST /v1/tasks HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{task}GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n",
        task.len()
    );
    let answer = raw(addr, two.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 202"), "{answer}");
    assert_eq!(answer.matches("HTTP/1.1 ").count(), 2, "{answer}");
    assert!(answer.contains("\"status\""), "{answer}");
}

/// An API over a store opened with `opts` (a size cap standing in for a full disk, or
/// read-only), the facts index off.
async fn api_over(opts: hermes_store::StoreOptions) -> (Router, TestApp, ScriptedModel) {
    let model = ScriptedModel::start_with(echo_model).await;
    let dir = tempfile::tempdir().expect("temp dir");
    // Created first at full size, so the schema exists before the cap or the read-only mode.
    hermes_store::Store::open(dir.path())
        .await
        .expect("fresh store")
        .close()
        .await;
    let config = hermes_config::Config::from_settings(
        common::settings(&model.base_url()),
        dir.path().to_path_buf(),
    );
    let app = hermes_surfaces::app::App::build_with(
        config,
        hermes_engine::agent::JobExecution::Direct,
        hermes_surfaces::app::BuildOptions {
            store: opts,
            ..Default::default()
        },
    )
    .await
    .expect("app");
    let router = router(ApiState::new(&app));
    (router, TestApp { app, dir }, model)
}

async fn json_of(router: &Router, req: Request<Body>) -> (StatusCode, Value) {
    let resp = router.clone().oneshot(req).await.expect("answered");
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .expect("body");
    (status, serde_json::from_slice(&bytes).expect("JSON"))
}

fn post_task(text: &str) -> Request<Body> {
    Request::post("/v1/tasks")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(json!({ "task": text }).to_string()))
        .expect("request")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_is_a_503_naming_the_cause_and_health_says_degraded() {
    use hermes_store::StoreOptions;
    let (router, _t, _model) = api_over(StoreOptions {
        max_pages: Some(60),
        ..StoreOptions::default()
    })
    .await;
    let big = "x".repeat(15_000);
    let mut full = None;
    for _ in 0..200 {
        let (status, v) = json_of(&router, post_task(&big)).await;
        if status != StatusCode::ACCEPTED {
            full = Some((status, v));
            break;
        }
    }
    let (status, v) = full.expect("the capped database fills up");
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    assert_eq!(v["error"]["code"], "storage_unavailable", "{v}");
    let message = v["error"]["message"].as_str().unwrap_or("");
    assert!(
        message.contains("disk full") && message.contains("hermes.db"),
        "{message}"
    );
    let (status, health) = json_of(
        &router,
        Request::get("/healthz").body(Body::empty()).expect("req"),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(health["status"], "degraded", "{health}");
    assert!(
        health["storage"]
            .as_str()
            .unwrap_or("")
            .contains("disk full"),
        "{health}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_database_is_a_503_naming_the_file() {
    use hermes_store::StoreOptions;
    let (router, t, _model) = api_over(StoreOptions {
        read_only: true,
        ..StoreOptions::default()
    })
    .await;
    let (status, v) = json_of(&router, post_task("hello")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    assert_eq!(v["error"]["code"], "storage_unavailable", "{v}");
    let message = v["error"]["message"].as_str().unwrap_or("");
    let db = t.dir.path().join("hermes.db");
    assert!(
        message.contains("read-only") && message.contains(&db.display().to_string()),
        "{message}"
    );
    let (_, health) = json_of(
        &router,
        Request::get("/healthz").body(Body::empty()).expect("req"),
    )
    .await;
    assert_eq!(health["status"], "degraded", "{health}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_refuses_to_start_on_a_database_it_cannot_write() {
    use hermes_store::StoreOptions;
    let (_router, t, _model) = api_over(StoreOptions {
        read_only: true,
        ..StoreOptions::default()
    })
    .await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let err = tokio::time::timeout(
        PATIENCE,
        hermes_surfaces::daemon::run(t.app.clone(), listener, std::future::pending()),
    )
    .await
    .expect("it returns at once")
    .expect_err("it refuses to start");
    let text = err.to_string();
    let db = t.dir.path().join("hermes.db");
    assert!(
        text.contains(&db.display().to_string()) && text.contains("read-only"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fact_saved_while_the_index_is_gone_is_found_and_the_index_heals() {
    let a = api("").await;
    let index = a.t.dir.path().join("memory-index");
    std::fs::remove_dir_all(&index).expect("remove the index while running");
    let added = a
        .post(
            "/v1/memory",
            json!({"text": "The user's bike is a green Brompton"}),
        )
        .await;
    assert_eq!(
        added.status,
        StatusCode::CREATED,
        "the fact is saved: {}",
        added.body
    );
    // Found at once (from the database while the index is away), and the index comes back.
    let found = a.get("/v1/memory?q=Brompton").await;
    assert_eq!(found.status, StatusCode::OK, "{}", found.body);
    assert_eq!(
        found.body["facts"].as_array().map(Vec::len),
        Some(1),
        "{}",
        found.body
    );
    let healed = tokio::time::timeout(PATIENCE, async {
        loop {
            let h = a.get("/healthz").await;
            if h.body["memory_index"] == "ok" {
                return h.body;
            }
            assert_ne!(
                h.body["status"], "ok",
                "unhealthy index but status ok: {}",
                h.body
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the index is rebuilt in the background");
    assert_eq!(healed["status"], "ok", "{healed}");
    assert!(index.join("meta.json").exists());
    let found = a.get("/v1/memory?q=green").await;
    assert_eq!(
        found.body["facts"][0]["text"],
        "The user's bike is a green Brompton"
    );
}
// ---- the dashboard's endpoints: the event stream, the schedule preview, pause/resume, the
// ---- outbox, sessions and CSRF, the security headers of pages.

/// One server-sent event: its name, its data and its id.
#[derive(Debug)]
struct Sse {
    event: String,
    data: Value,
    id: Option<String>,
}

/// Read a `text/event-stream` body until it ends, each event within [`PATIENCE`]; `on_event`
/// sees each as it arrives.
async fn read_events(resp: axum::response::Response, mut on_event: impl FnMut(&Sse)) -> Vec<Sse> {
    use futures::StreamExt;
    let mut body = resp.into_body().into_data_stream();
    let mut buf = String::new();
    let mut events = Vec::new();
    while let Some(chunk) = tokio::time::timeout(PATIENCE, body.next())
        .await
        .expect("the stream moves on in time")
    {
        buf.push_str(std::str::from_utf8(&chunk.expect("a chunk")).expect("UTF-8"));
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let (mut event, mut data, mut id) = (String::new(), String::new(), None);
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event: ") {
                    event = v.to_string();
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data.push_str(v);
                } else if let Some(v) = line.strip_prefix("id: ") {
                    id = Some(v.to_string());
                }
            }
            if event.is_empty() {
                continue; // a keep-alive comment
            }
            let data = serde_json::from_str(&data).unwrap_or(Value::String(data));
            let e = Sse { event, data, id };
            on_event(&e);
            events.push(e);
        }
    }
    events
}

fn get_req(path: &str) -> Request<Body> {
    Request::get(path).body(Body::empty()).expect("a request")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_sends_steps_live_then_the_state_and_replays_for_late_subscribers() {
    use hermes_engine::llm::scripted::Reply;
    // A tool call, then the answer after a pause: the first steps are out before the end.
    let model = ScriptedModel::start(vec![
        Reply::tool_calls(&[("recall", json!({"query": "tea"}))]),
        Reply::Delay(
            Duration::from_millis(800),
            Box::new(Reply::text("all done")),
        ),
    ])
    .await;
    let t = common::app(common::settings(&model.base_url()), vec![]).await;
    let router = router(ApiState::new(&t.app));
    let task = t
        .app
        .agent
        .create(hermes_engine::agent::Submit {
            task: "look it up".into(),
            ..Default::default()
        })
        .await
        .expect("task created");
    let resp = router
        .clone()
        .oneshot(get_req(&format!("/v1/tasks/{}/events", task.id)))
        .await
        .expect("answered");
    assert_eq!(resp.status(), StatusCode::OK);
    let ct = resp.headers()[header::CONTENT_TYPE].to_str().unwrap_or("");
    assert!(ct.starts_with("text/event-stream"), "{ct}");
    let agent = t.app.agent.clone();
    let id = task.id.clone();
    tokio::spawn(async move { agent.execute(&id, Default::default()).await });
    let store = t.app.store.clone();
    let mut first_step_while_running = None;
    let events = read_events(resp, |e| {
        if e.event == "step" && first_step_while_running.is_none() {
            first_step_while_running = Some(e.data["seq"].clone());
        }
    })
    .await;
    let names: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(names, ["step", "step", "step", "state"], "{events:?}");
    assert_eq!(first_step_while_running, Some(json!(1)));
    assert_eq!(events[0].data["kind"], "model");
    assert_eq!(events[1].data["kind"], "tool");
    assert_eq!(events[1].data["name"], "recall");
    assert_eq!(events[0].id.as_deref(), Some("1"));
    let end = &events[3].data;
    assert_eq!(end["state"], "succeeded", "{end}");
    assert_eq!(end["answer"], "all done");
    assert!(end["reason"].is_null());
    // Each step is the same JSON as in GET /v1/tasks/{id}.
    let record = store
        .tasks()
        .record(&task.id)
        .await
        .expect("store")
        .expect("task");
    let steps = serde_json::to_value(&record.steps).expect("JSON");
    let streamed: Vec<Value> = events[..3].iter().map(|e| e.data.clone()).collect();
    assert_eq!(Value::Array(streamed), steps);

    // A late subscriber gets the whole replay, then the state.
    let late = router
        .clone()
        .oneshot(get_req(&format!("/v1/tasks/{}/events", task.id)))
        .await
        .expect("answered");
    let replay = read_events(late, |_| {}).await;
    assert_eq!(replay.len(), 4, "{replay:?}");
    assert_eq!(replay[3].event, "state");
    // A reconnect with Last-Event-ID gets only what it lacks.
    let mut again = get_req(&format!("/v1/tasks/{}/events", task.id));
    again
        .headers_mut()
        .insert("last-event-id", header::HeaderValue::from_static("2"));
    let rest = read_events(router.oneshot(again).await.expect("answered"), |_| {}).await;
    let names: Vec<&str> = rest.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(names, ["step", "state"], "{rest:?}");
    assert_eq!(rest[0].data["seq"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_are_previewed_and_jobs_paused_and_resumed() {
    let api = api("").await;
    let a = api
        .get("/v1/schedule?expr=30%207%20*%20*%20MON-FRI&timezone=Europe/Berlin")
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    assert_eq!(a.body["valid"], true);
    assert_eq!(a.body["description"], "on weekdays at 07:30");
    assert_eq!(a.body["timezone"], "Europe/Berlin");
    let next = a.body["next"].as_array().expect("a list");
    assert_eq!(next.len(), 5);
    assert!(
        next.iter()
            .all(|t| t.as_str().is_some_and(|t| t.contains("T07:30:00+0"))),
        "{next:?}"
    );
    assert!(a.body.get("error").is_none());
    for (expr, words) in [
        ("at%20teatime", "at teatime"),
        ("every%205s", "60"),
        ("", "empty"),
    ] {
        let a = api.get(&format!("/v1/schedule?expr={expr}")).await;
        assert_eq!(a.status, StatusCode::OK);
        assert_eq!(a.body["valid"], false, "{}", a.body);
        let e = a.body["error"].as_str().expect("an error");
        assert!(e.contains(words), "{e}");
        assert_eq!(a.body["next"], json!([]));
    }
    let a = api
        .get("/v1/schedule?expr=@daily&timezone=Mars/Olympus")
        .await;
    assert_eq!(a.body["valid"], false);
    assert!(
        a.body["error"]
            .as_str()
            .unwrap_or("")
            .contains("Mars/Olympus")
    );

    let job = api
        .post("/v1/jobs", json!({"task": "t", "schedule": "every 2h"}))
        .await
        .body;
    let id = job["id"].as_str().expect("an id");
    let one = api.get(&format!("/v1/jobs/{id}")).await;
    assert_eq!(one.status, StatusCode::OK, "{}", one.body);
    assert_eq!(one.body, job, "one job as it was made");
    let a = api.post(&format!("/v1/jobs/{id}/pause"), json!({})).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    assert_eq!(a.body["enabled"], false);
    assert_eq!(a.body["id"], id);
    let a = api.post(&format!("/v1/jobs/{id}/resume"), json!({})).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    assert_eq!(a.body["enabled"], true);
    assert_eq!(
        a.body["next_run_at"], job["next_run_at"],
        "a future due time is kept"
    );

    // A job in its own zone: its page shows times there, and its footer says so.
    let zoned = api
        .post(
            "/v1/jobs",
            json!({"task": "t", "schedule": "0 8 * * *", "timezone": "America/New_York"}),
        )
        .await
        .body;
    let zoned = zoned["id"].as_str().expect("an id");
    let req = Request::get(format!("/jobs/{zoned}"))
        .body(Body::empty())
        .expect("a request");
    let resp = api.router.clone().oneshot(req).await.expect("answered");
    let page = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .expect("a body");
    let page = String::from_utf8_lossy(&page);
    assert!(
        page.contains("Times are in America/New_York (the job&#39;s zone).")
            || page.contains("Times are in America/New_York (the job's zone)."),
        "{page}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_are_listed_and_retried() {
    use hermes_store::NewNotice;
    let api = api("").await;
    let store = &api.t.app.store;
    let queue = |title: &str| NewNotice {
        channel: "ops".into(),
        title: title.into(),
        body: "b".into(),
        ..Default::default()
    };
    let failed = store
        .outbox()
        .enqueue(&queue("first"))
        .await
        .expect("queued");
    store
        .outbox()
        .mark_attempt_failed(failed, "HTTP 404 from the webhook", None)
        .await
        .expect("recorded");
    let sent = store
        .outbox()
        .enqueue(&queue("second"))
        .await
        .expect("queued");
    store.outbox().mark_sent(sent).await.expect("recorded");

    let all = api.get("/v1/deliveries").await.body;
    let ids: Vec<&Value> = all["deliveries"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|d| &d["id"])
        .collect();
    assert_eq!(ids, [&json!(sent), &json!(failed)], "newest first: {all}");
    let only = api.get("/v1/deliveries?state=failed&limit=5").await.body;
    let list = only["deliveries"].as_array().expect("a list");
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["last_error"], "HTTP 404 from the webhook");
    assert_eq!(list[0]["attempts"], 1);

    let a = api
        .post(&format!("/v1/deliveries/{failed}/retry"), json!({}))
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    assert_eq!(a.body["state"], "pending");
    assert_eq!(a.body["attempts"], 1, "earlier attempts stay counted");
    let a = api
        .post(&format!("/v1/deliveries/{sent}/retry"), json!({}))
        .await;
    assert_eq!(a.status, StatusCode::CONFLICT, "{}", a.body);
    assert!(error_of(&a.body).1.contains("already sent"));
    let a = api.post("/v1/deliveries/987654/retry", json!({})).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND, "{}", a.body);
    assert!(
        error_of(&a.body).1.contains("delivery '987654'"),
        "{}",
        a.body
    );
}

/// A response's header as text ("" when absent).
fn header_of(resp: &axum::response::Response, name: header::HeaderName) -> String {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

/// The CSRF token a page put in its forms.
fn csrf_in(html: &str) -> String {
    let at = html
        .find("name=\"csrf\" value=\"")
        .expect("a form with a CSRF field")
        + 19;
    html[at..].split('"').next().unwrap_or("").to_string()
}

async fn text_of(resp: axum::response::Response) -> String {
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .expect("a body");
    String::from_utf8_lossy(&bytes).into_owned()
}

fn form_post(path: &str, cookie: &str, body: String) -> Request<Body> {
    Request::post(path)
        .header(header::HOST, "127.0.0.1:8765")
        .header(header::COOKIE, cookie)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(body))
        .expect("a request")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_signs_in_with_the_token_and_guards_changes_with_csrf() {
    let token = "dashboard-token-for-tests";
    let api = api(token).await;
    let send = |req: Request<Body>| api.router.clone().oneshot(req);
    let page = |path: &str, cookie: &str| {
        Request::get(path)
            .header(header::ACCEPT, "text/html")
            .header(header::COOKIE, cookie)
            .body(Body::empty())
            .expect("a request")
    };
    // Signed out: pages redirect to the sign-in, which is itself a locked-down page.
    let r = send(page("/tasks?state=failed", ""))
        .await
        .expect("answered");
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        header_of(&r, header::LOCATION),
        "/login?next=%2Ftasks%3Fstate%3Dfailed"
    );
    // A link from another site (a digest in webmail) comes without the SameSite=Strict
    // cookie: the page loads itself again from this site, where the cookie is sent.
    let mut from_mail = page("/jobs/j_1", "");
    from_mail.headers_mut().insert(
        "sec-fetch-site",
        header::HeaderValue::from_static("cross-site"),
    );
    let r = send(from_mail).await.expect("answered");
    assert_eq!(r.status(), StatusCode::OK);
    let html = text_of(r).await;
    assert!(
        html.contains(r#"http-equiv="refresh" content="0;url=/jobs/j_1""#),
        "{html}"
    );
    let r = send(page("/login", "")).await.expect("answered");
    assert_eq!(r.status(), StatusCode::OK);
    let csp = header_of(&r, header::CONTENT_SECURITY_POLICY);
    assert!(
        csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    assert_eq!(header_of(&r, header::X_CONTENT_TYPE_OPTIONS), "nosniff");
    assert_eq!(header_of(&r, header::REFERRER_POLICY), "same-origin");
    let html = text_of(r).await;
    assert!(
        html.contains("<label for=\"token\">") && !html.contains("<script>"),
        "{html}"
    );
    assert!(!html.contains(token));

    // A wrong token is refused without a session; the right one sets the cookie.
    let r = send(form_post("/login", "", "token=guess&next=%2Ftasks".into()))
        .await
        .expect("answered");
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert!(header_of(&r, header::SET_COOKIE).is_empty());
    let r = send(form_post(
        "/login",
        "",
        format!("token={token}&next=%2F%2Fevil.example"),
    ))
    .await
    .expect("answered");
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        header_of(&r, header::LOCATION),
        "/",
        "never to another site"
    );
    let set = header_of(&r, header::SET_COOKIE);
    for part in ["hermes_session=", "HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set.contains(part), "{set}");
    }
    assert!(!set.contains("Secure"), "plain http: {set}");
    let cookie = set.split(';').next().unwrap_or("").to_string();

    // The session opens the pages and the API, reads freely, and changes only with its token.
    let r = send(page("/tasks", &cookie)).await.expect("answered");
    assert_eq!(r.status(), StatusCode::OK);
    let csrf = csrf_in(&text_of(r).await);
    let api_get = Request::get("/v1/tasks")
        .header(header::COOKIE, &cookie)
        .body(Body::empty());
    assert_eq!(
        send(api_get.expect("a request"))
            .await
            .expect("answered")
            .status(),
        StatusCode::OK
    );
    let api_post = |csrf: Option<&str>| {
        let mut r = Request::post("/v1/tasks")
            .header(header::COOKIE, &cookie)
            .header(header::CONTENT_TYPE, "application/json");
        if let Some(c) = csrf {
            r = r.header("x-csrf-token", c);
        }
        r.body(Body::from(json!({"task": "hello"}).to_string()))
            .expect("a request")
    };
    let a = api.send(api_post(None)).await;
    assert_eq!(
        (a.status, error_of(&a.body).0),
        (StatusCode::FORBIDDEN, "csrf")
    );
    let a = api.send(api_post(Some("not-the-token"))).await;
    assert_eq!(a.status, StatusCode::FORBIDDEN);
    let a = api.send(api_post(Some(&csrf))).await;
    assert_eq!(a.status, StatusCode::ACCEPTED, "{}", a.body);

    // A form: refused without the token or from another site, taken with both right.
    let r = send(form_post("/tasks", &cookie, "task=from+a+form".into()))
        .await
        .expect("answered");
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let mut cross = form_post("/tasks", &cookie, format!("csrf={csrf}&task=x"));
    cross.headers_mut().insert(
        header::ORIGIN,
        header::HeaderValue::from_static("https://evil.example"),
    );
    let a = api.send(cross).await;
    assert_eq!(
        (a.status, error_of(&a.body).0),
        (StatusCode::FORBIDDEN, "cross_origin")
    );
    let mut ours = form_post(
        "/tasks",
        &cookie,
        format!("csrf={csrf}&task=from+a+form&profile=fast"),
    );
    ours.headers_mut().insert(
        header::ORIGIN,
        header::HeaderValue::from_static("http://127.0.0.1:8765"),
    );
    let r = send(ours).await.expect("answered");
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let location = header_of(&r, header::LOCATION);
    let id = location.strip_prefix("/tasks/").expect("the task's page");
    let t = api.t.app.store.tasks().get(id).await.expect("stored");
    assert_eq!(
        (t.task.as_str(), t.origin),
        ("from a form", hermes_store::Origin::Web)
    );

    // Signing out ends the session at once.
    let r = send(form_post("/logout", &cookie, format!("csrf={csrf}")))
        .await
        .expect("answered");
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert!(header_of(&r, header::SET_COOKIE).contains("Max-Age=0"));
    let api_get = Request::get("/v1/tasks")
        .header(header::COOKIE, &cookie)
        .body(Body::empty());
    let r = send(api_get.expect("a request")).await.expect("answered");
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_is_html_under_a_strict_policy_and_cross_site_changes_are_refused() {
    let model = ScriptedModel::start_with(echo_model).await;
    let mut s = common::settings(&model.base_url());
    s.server.public_url = "https://hermes.example.org".into();
    let t = common::app(s, vec![]).await;
    let router = router(ApiState::new(&t.app));
    let job = t
        .app
        .scheduler
        .add(
            hermes_engine::scheduler::JobRequest {
                task: "digest".into(),
                schedule: "0 8 * * *".into(),
                ..Default::default()
            },
            hermes_store::Origin::Api,
        )
        .await
        .expect("a job");
    let task = common::run_task(&t, "hello").await.task;
    let mut cookie = String::new();
    for path in [
        "/".to_string(),
        "/tasks?q=hello&state=succeeded".into(),
        format!("/tasks/{}", task.id),
        "/jobs".into(),
        format!("/jobs/{}", job.id),
        "/deliveries?state=failed".into(),
        "/memory?q=tea".into(),
        "/usage?days=7".into(),
        "/settings".into(),
    ] {
        let req = Request::get(path.as_str())
            .header(header::ACCEPT, "text/html")
            .header(header::COOKIE, &cookie)
            .body(Body::empty())
            .expect("a request");
        let r = router.clone().oneshot(req).await.expect("answered");
        assert_eq!(r.status(), StatusCode::OK, "{path}");
        assert!(
            header_of(&r, header::CONTENT_TYPE).starts_with("text/html"),
            "{path}"
        );
        assert!(header_of(&r, header::CONTENT_SECURITY_POLICY).contains("default-src 'none'"));
        let set = header_of(&r, header::SET_COOKIE);
        if cookie.is_empty() {
            // No token: the first page gives the browser a session for its forms' CSRF tokens,
            // marked Secure since the dashboard is reached over https.
            assert!(
                set.contains("hermes_session=") && set.contains("Secure"),
                "{set}"
            );
            cookie = set.split(';').next().unwrap_or("").to_string();
        } else {
            assert!(set.is_empty(), "{path}: the session is kept: {set}");
        }
        let html = text_of(r).await;
        assert!(
            html.contains("<h1>") && !html.contains("<script>"),
            "{path}"
        );
    }
    let req = Request::get("/tasks/0123456789abcdef")
        .header(header::ACCEPT, "text/html")
        .body(Body::empty())
        .expect("a request");
    let r = router.clone().oneshot(req).await.expect("answered");
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert!(text_of(r).await.contains("no task 0123456789abcdef"));
    let asset = router
        .clone()
        .oneshot(get_req("/assets/app.js"))
        .await
        .expect("answered");
    assert_eq!(asset.status(), StatusCode::OK);
    assert!(header_of(&asset, header::CONTENT_TYPE).starts_with("text/javascript"));

    // With no token at all, a page elsewhere still cannot make the daemon act.
    let req = Request::post(format!("/v1/jobs/{}/run", job.id))
        .header(header::ORIGIN, "https://evil.example")
        .body(Body::empty())
        .expect("a request");
    let r = router.clone().oneshot(req).await.expect("answered");
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let req = Request::post(format!("/v1/jobs/{}/pause", job.id))
        .header("sec-fetch-site", "cross-site")
        .body(Body::empty())
        .expect("a request");
    assert_eq!(
        router.oneshot(req).await.expect("answered").status(),
        StatusCode::FORBIDDEN
    );
    assert!(t.app.store.jobs().get(&job.id).await.expect("job").enabled);
}

/// The CLI and `hermes-agent mcp` say on whose behalf they create, in `X-Hermes-Origin`; the
/// API records it (a task, a job, a fact), refuses any other claim, and says `api` without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_header_names_who_created_through_the_api() {
    let api = api("").await;
    let as_origin = |path: &str, body: Value, origin: &str| {
        Request::post(path)
            .header(header::CONTENT_TYPE, "application/json")
            .header("x-hermes-origin", origin)
            .body(Body::from(body.to_string()))
            .expect("a request")
    };
    let task = api
        .send(as_origin("/v1/tasks", json!({"task": "hi"}), "mcp"))
        .await;
    assert_eq!(task.status, StatusCode::ACCEPTED, "{}", task.body);
    let id = task.body["id"].as_str().expect("an id");
    let stored = api.t.app.store.tasks().get(id).await.expect("the task");
    assert_eq!(stored.origin, hermes_store::Origin::Mcp);
    let job = json!({"task": "t", "schedule": "every 2h"});
    let job = api.send(as_origin("/v1/jobs", job, "cli")).await;
    assert_eq!(job.status, StatusCode::CREATED, "{}", job.body);
    assert_eq!(job.body["origin"], "cli", "{}", job.body);
    let fact = api
        .send(as_origin(
            "/v1/memory",
            json!({"text": "I like oolong"}),
            "mcp",
        ))
        .await;
    assert_eq!(fact.status, StatusCode::CREATED, "{}", fact.body);
    let id = fact.body["id"].as_str().expect("an id").to_string();
    let stored = api.t.app.store.facts().get(&id).await.expect("the fact");
    assert_eq!(stored.source, "mcp");

    // Nothing else may be claimed: a job's origin decides what it may do.
    let model = api
        .send(as_origin(
            "/v1/jobs",
            json!({"task": "t", "schedule": "every 2h"}),
            "model",
        ))
        .await;
    assert_eq!(model.status, StatusCode::BAD_REQUEST, "{}", model.body);
    assert!(
        error_of(&model.body).1.contains("X-Hermes-Origin"),
        "{}",
        model.body
    );
    let plain = api.post("/v1/tasks", json!({"task": "hi"})).await;
    let id = plain.body["id"].as_str().expect("an id");
    let stored = api.t.app.store.tasks().get(id).await.expect("the task");
    assert_eq!(stored.origin, hermes_store::Origin::Api);
}
