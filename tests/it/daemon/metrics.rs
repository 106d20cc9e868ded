//! `GET /metrics` as an operator meets it: a real Prometheus (Debian's, installed on first
//! use by tests/it/deps.rs) scrapes a daemon process on loopback with its bearer token, and
//! answers PromQL about the task and the tool call the daemon just ran. The token rule
//! (`server.metrics_public`) is checked in-process on the router.

use super::{Daemon, PATIENCE, Site};
use crate::common;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use hermes_engine::llm::scripted::{Reply, ScriptedModel};
use hermes_surfaces::http::{ApiState, router};
use serde_json::{Value, json};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tower::ServiceExt;

const TOKEN: &str = "metrics-test-token";

/// A Prometheus server in a temp dir, scraping one target every second; killed on drop.
struct Prometheus {
    child: Child,
    base: String,
    log: std::path::PathBuf,
    http: reqwest::Client,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Start Prometheus scraping `target` (`host:port`) with `token` as its bearer token.
    async fn scraping(target: &str, token: &str) -> Prometheus {
        let program = crate::deps::prometheus().await;
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: hermes\n    scrape_interval: 1s\n    \
                 scrape_timeout: 1s\n    metrics_path: /metrics\n    \
                 authorization:\n      credentials: {token}\n    \
                 static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .expect("write prometheus.yml");
        let port = free_port();
        let log = dir.path().join("prometheus.log");
        let out = std::fs::File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file handle");
        let child = Command::new(program)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .expect("prometheus starts");
        let p = Prometheus {
            child,
            base: format!("http://127.0.0.1:{port}"),
            log,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(5))
                .build()
                .expect("http client"),
            _dir: dir,
        };
        p.ready().await;
        p
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Poll `/-/ready` until Prometheus answers 200 (bounded).
    async fn ready(&self) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Ok(r) = self.http.get(format!("{}/-/ready", self.base)).send().await
                && r.status() == reqwest::StatusCode::OK
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "Prometheus was not ready within {PATIENCE:?}:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The result vector of an instant PromQL query.
    async fn query(&self, promql: &str) -> Vec<Value> {
        let url = url::Url::parse_with_params(
            &format!("{}/api/v1/query", self.base),
            [("query", promql)],
        )
        .expect("a query URL");
        let r = self.http.get(url).send().await.expect("Prometheus answers");
        let v: Value = r.json().await.expect("a JSON answer");
        assert_eq!(v["status"], "success", "{promql}: {v}");
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    /// Poll `promql` until it returns exactly one series whose value is `want` (bounded); that
    /// series.
    async fn wait_for(&self, promql: &str, want: &str) -> Value {
        let deadline = Instant::now() + PATIENCE;
        let mut last = Vec::new();
        while Instant::now() < deadline {
            last = self.query(promql).await;
            if let [one] = last.as_slice()
                && one["value"][1] == want
            {
                return one.clone();
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!(
            "{promql} never gave one series of {want} within {PATIENCE:?}; last: {last:?}\n\
             targets: {}\nlog:\n{}",
            self.targets().await,
            self.log()
        )
    }

    /// The scrape targets' health, for a failure's message.
    async fn targets(&self) -> String {
        match self
            .http
            .get(format!("{}/api/v1/targets", self.base))
            .send()
            .await
        {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(e) => e.to_string(),
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port free a moment ago (Prometheus takes its address as a flag, not port 0).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// A model that first calls `read_working_memory`, then answers once the tool's result is in.
fn one_tool_then_answer(req: &Value) -> Reply {
    let messages = req["messages"].as_array().cloned().unwrap_or_default();
    if messages.iter().any(|m| m["role"] == "tool") {
        Reply::text("looked it up")
    } else {
        Reply::tool_calls(&[("read_working_memory", json!({"key": "no-such-key"}))])
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_scrapes_the_daemon_with_its_token_and_answers_promql() {
    let model = ScriptedModel::start_with(one_tool_then_answer).await;
    let site = Site::new(&model.base_url(), &[], &[&format!("token: {TOKEN}")]);
    let mut d: Daemon = site.start(&[]).with_token(TOKEN);
    d.ready().await;
    let id = d.submit("look up the key").await;
    let task = d.finished(&id).await;
    assert_eq!(task["state"], "succeeded", "{task}");

    let target = d.base().trim_start_matches("http://").to_string();
    let prom = Prometheus::scraping(&target, TOKEN).await;
    prom.wait_for("up{job=\"hermes\"}", "1").await;
    prom.wait_for(
        "hermes_tasks{job=\"hermes\",state=\"succeeded\",origin=\"api\"}",
        "1",
    )
    .await;
    // The model asked for a key that is not there: the tool ran and said so.
    let calls = prom
        .wait_for(
            "sum by (tool) (hermes_tool_calls_total{job=\"hermes\",tool=\"read_working_memory\"})",
            "1",
        )
        .await;
    assert_eq!(calls["metric"]["tool"], "read_working_memory", "{calls}");
    prom.wait_for(
        "hermes_task_duration_seconds_count{job=\"hermes\",state=\"succeeded\",origin=\"api\"}",
        "1",
    )
    .await;
    prom.wait_for(
        "sum(hermes_model_call_duration_seconds_count{job=\"hermes\",outcome=\"ok\"})",
        "2",
    )
    .await;
    prom.wait_for("sum(hermes_tokens_in_total{job=\"hermes\"}) > bool 0", "1")
        .await;
    // The node is named by the id kept in its data dir.
    let node = prom.wait_for("hermes_node_info{job=\"hermes\"}", "1").await;
    let kept = std::fs::read_to_string(site.data().join("node-id")).expect("the node id file");
    assert_eq!(node["metric"]["node_id"], kept.trim(), "{node}");
}

/// `GET path` on the router of an app whose settings went through `adjust`, with `token`
/// as the bearer token when given: the status and the body.
async fn get(
    adjust: impl FnOnce(&mut hermes_config::Settings),
    path: &str,
    token: Option<&str>,
) -> (StatusCode, String, String) {
    let model = ScriptedModel::start_with(common::echo_model).await;
    let mut settings = common::settings(&model.base_url());
    settings.server.token = TOKEN.into();
    adjust(&mut settings);
    let t = common::app(settings, vec![]).await;
    let app = router(ApiState::new(&t.app));
    let mut req = Request::get(path);
    if let Some(token) = token {
        req = req.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let resp = app
        .oneshot(req.body(Body::empty()).expect("a request"))
        .await
        .expect("the router answers");
    let status = resp.status();
    let kind = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .expect("a body");
    (status, kind, common::text(&body))
}

#[tokio::test]
async fn metrics_need_the_token_unless_metrics_public_is_set() {
    let guarded = |_: &mut hermes_config::Settings| {};
    let (status, _, body) = get(guarded, "/metrics", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert!(!body.contains("hermes_"), "{body}");
    let (status, _, _) = get(guarded, "/metrics", Some("a wrong token")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, kind, body) = get(guarded, "/metrics", Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(kind, "text/plain; version=0.0.4; charset=utf-8");
    assert!(body.contains("# TYPE hermes_node_info gauge"), "{body}");

    let public = |s: &mut hermes_config::Settings| s.server.metrics_public = true;
    let (status, _, body) = get(public, "/metrics", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("hermes_node_info{node_id=\""), "{body}");
    // Only the metrics are opened: the API keeps its token.
    let (status, _, body) = get(public, "/v1/tasks", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
}

#[tokio::test]
async fn tool_names_a_model_invents_are_counted_as_one_unknown_series() {
    use hermes_engine::llm::ToolCall;
    use hermes_engine::metrics::Reading;
    use hermes_engine::tools::ToolContext;
    let model = ScriptedModel::start_with(common::echo_model).await;
    let t = common::app(common::settings(&model.base_url()), vec![]).await;
    let registry = t.app.agent.registry();
    let ctx = ToolContext::default();
    for i in 0..50 {
        let invented = ToolCall {
            id: format!("call_{i}"),
            name: format!("made_up_tool_{i}"),
            arguments: json!({}),
        };
        registry.execute(&invented, &ctx, None).await;
    }
    let real = ToolCall {
        id: "call_real".into(),
        name: "read_working_memory".into(),
        arguments: json!({"key": "absent"}),
    };
    let outcome = registry.execute(&real, &ctx, None).await;
    let kind = outcome.error.as_ref().map_or("ok", |e| e.kind());

    let text = t.app.metrics.render(&Reading::default());
    let series: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("hermes_tool_calls_total{"))
        .collect();
    assert_eq!(
        series.len(),
        2,
        "one series for the invented names, one for the real tool:\n{text}"
    );
    assert!(
        series.contains(&"hermes_tool_calls_total{tool=\"unknown\",outcome=\"unknown\"} 50"),
        "{text}"
    );
    let real_series =
        format!("hermes_tool_calls_total{{tool=\"read_working_memory\",outcome=\"{kind}\"}} 1");
    assert!(series.contains(&real_series.as_str()), "{text}");
    assert!(!text.contains("made_up_tool"), "{text}");
}
