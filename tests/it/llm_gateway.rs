//! The gateway end to end against a real HTTP server (the scripted model on loopback): every
//! tool-call format, retries and their limits, usage, and that the API key goes only where it
//! belongs.

use hermes_store::util::RetryPolicy;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hermes_config::{ModelSettings, Profile};
use hermes_engine::llm::scripted::{Reply, ScriptedModel};
use hermes_engine::llm::{Gateway, LlmError, Message, ToolCall, ToolSpec, estimate_tokens};
use hermes_store::util::Backoff;
use serde_json::{Value, json};

const KEY: &str = "sk-test-7f3a9c2e5b1d";

fn settings(base_url: &str, api_key: &str, timeout_s: u64) -> ModelSettings {
    let mut s = ModelSettings::default();
    s.profiles.insert(
        "fast".into(),
        Profile {
            base_url: base_url.into(),
            api_key: api_key.into(),
            model: "test-model".into(),
            temperature: 0.1,
            max_tokens: 256,
            timeout_s,
            ..Profile::default()
        },
    );
    s
}

fn quick_retry(max_retries: u32) -> RetryPolicy {
    RetryPolicy {
        max_retries,
        backoff: Backoff::new(Duration::from_millis(1), Duration::from_millis(5)).with_jitter(),
    }
}

fn gateway_for(model: &ScriptedModel) -> Gateway {
    Gateway::new(&settings(&model.base_url(), "", 10))
        .unwrap()
        .with_retry(quick_retry(3))
}

fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "recall".into(),
            description: "Search long-term memory.".into(),
            parameters: json!({"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}),
        },
        ToolSpec {
            name: "remember".into(),
            description: "Store a fact.".into(),
            parameters: json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
        },
    ]
}

fn ask(text: &str) -> Vec<Message> {
    vec![Message::system("You are a test."), Message::user(text)]
}

async fn one_reply(reply: Reply) -> (hermes_engine::llm::ModelReply, ScriptedModel) {
    let model = ScriptedModel::start(vec![reply]).await;
    let gw = gateway_for(&model);
    let out = gw.chat("fast", &ask("hi"), &tools()).await.unwrap();
    (out, model)
}

#[tokio::test]
async fn native_calls_with_string_arguments_and_request_shape() {
    let (reply, model) = one_reply(Reply::tool_calls(&[
        ("recall", json!({"query": "tea"})),
        ("remember", json!({"text": "我喜欢乌龙茶"})),
    ]))
    .await;
    assert_eq!(reply.tool_calls.len(), 2);
    assert_eq!(reply.tool_calls[0].id, "call_1");
    assert_eq!(reply.tool_calls[0].name, "recall");
    assert_eq!(reply.tool_calls[0].arguments, json!({"query": "tea"}));
    assert_eq!(reply.tool_calls[1].arguments["text"], "我喜欢乌龙茶");
    assert_eq!(reply.attempts, 1);
    assert!(reply.parse_warnings.is_empty());

    let sent = &model.requests()[0];
    assert_eq!(sent["model"], "test-model");
    assert_eq!(sent["stream"], false);
    assert_eq!(sent["max_tokens"], 256);
    assert!((sent["temperature"].as_f64().unwrap() - 0.1).abs() < 1e-6);
    assert_eq!(
        sent["messages"][1],
        json!({"role": "user", "content": "hi"})
    );
    assert_eq!(sent["tools"][0]["type"], "function");
    assert_eq!(sent["tools"][0]["function"]["name"], "recall");
    assert_eq!(
        sent["tools"][1]["function"]["parameters"]["required"][0],
        "text"
    );
    model.stop().await;
}

#[tokio::test]
async fn native_object_arguments_and_missing_ids() {
    let body = json!({"choices": [{"message": {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "recall", "arguments": {"query": "x"}}},
        {"type": "function", "function": {"name": "recall", "arguments": "{\"query\": \"y\",}"}}
    ]}}]});
    let (reply, model) = one_reply(Reply::Body(body)).await;
    assert_eq!(reply.tool_calls.len(), 2);
    assert_eq!(reply.tool_calls[0].arguments, json!({"query": "x"}));
    assert_eq!(reply.tool_calls[1].arguments, json!({"query": "y"}));
    assert!(!reply.tool_calls[0].id.is_empty());
    assert_ne!(reply.tool_calls[0].id, reply.tool_calls[1].id);
    model.stop().await;
}

#[tokio::test]
async fn native_unrepairable_arguments_kept_raw_with_warning() {
    let body = json!({"choices": [{"message": {"role": "assistant", "tool_calls": [
        {"id": "c9", "type": "function", "function": {"name": "recall", "arguments": "{query: 'x'}"}}
    ]}}]});
    let model = ScriptedModel::start(vec![Reply::Body(body)]).await;
    let gw = gateway_for(&model);
    let reply = gw.chat("fast", &ask("hi"), &tools()).await.unwrap();
    assert_eq!(reply.tool_calls.len(), 1);
    assert_eq!(
        reply.tool_calls[0].arguments,
        Value::String("{query: 'x'}".into())
    );
    assert_eq!(reply.parse_warnings.len(), 1);
    assert_eq!(gw.parse_failures(), 1);
    model.stop().await;
}

#[tokio::test]
async fn fenced_json_call() {
    let (reply, model) = one_reply(Reply::content(
        "Let me check.\n```json\n{\"name\": \"recall\", \"arguments\": {\"query\": \"tea\"}}\n```",
    ))
    .await;
    assert_eq!(reply.tool_calls.len(), 1);
    assert_eq!(reply.tool_calls[0].name, "recall");
    assert_eq!(reply.tool_calls[0].arguments, json!({"query": "tea"}));
    assert_eq!(reply.content, "Let me check.");
    model.stop().await;
}

#[tokio::test]
async fn fence_without_language_and_function_wrapper() {
    let (reply, model) = one_reply(Reply::content(
        "```\n{\"function\": {\"name\": \"remember\", \"arguments\": {\"text\": \"a\"}}}\n```",
    ))
    .await;
    assert_eq!(reply.tool_calls.len(), 1);
    assert_eq!(reply.tool_calls[0].name, "remember");
    assert_eq!(reply.content, "");
    model.stop().await;
}

#[tokio::test]
async fn hermes_tool_call_tags_several_in_one_message() {
    let content = "<tool_call>\n{\"name\": \"recall\", \"arguments\": {\"query\": \"茶\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"remember\", \"parameters\": {\"text\": \"用户喜欢\n乌龙茶\",},}\n</tool_call>";
    let (reply, model) = one_reply(Reply::content(content)).await;
    assert_eq!(reply.tool_calls.len(), 2, "{reply:?}");
    assert_eq!(reply.tool_calls[0].arguments, json!({"query": "茶"}));
    assert_eq!(
        reply.tool_calls[1].arguments,
        json!({"text": "用户喜欢\n乌龙茶"})
    );
    assert_eq!(reply.content, "");
    assert!(reply.parse_warnings.is_empty());
    model.stop().await;
}

#[tokio::test]
async fn bare_json_object_with_repairs() {
    let (reply, model) = one_reply(Reply::content(
        "{\"name\": \"remember\", \"arguments\": {\"text\": \"line one\nline\ttwo {not a brace}\",},}",
    ))
    .await;
    assert_eq!(reply.tool_calls.len(), 1);
    assert_eq!(
        reply.tool_calls[0].arguments["text"],
        "line one\nline\ttwo {not a brace}"
    );
    assert_eq!(reply.content, "");
    model.stop().await;
}

#[tokio::test]
async fn unrepairable_text_call_becomes_plain_answer_with_warning() {
    let raw = "<tool_call>{\"name\": \"recall\", \"arguments\": {\"query\": \"tea\"</tool_call>";
    let model = ScriptedModel::start(vec![Reply::content(raw)]).await;
    let gw = gateway_for(&model);
    let reply = gw.chat("fast", &ask("hi"), &tools()).await.unwrap();
    assert!(reply.tool_calls.is_empty());
    assert_eq!(reply.content, raw);
    assert_eq!(reply.parse_warnings.len(), 1);
    assert!(
        reply.parse_warnings[0].contains("<tool_call>"),
        "{:?}",
        reply.parse_warnings
    );
    assert_eq!(gw.parse_failures(), 1);
    model.stop().await;
}

#[tokio::test]
async fn json_answer_and_no_tools_offered_stay_answers() {
    let call_shaped = "{\"name\": \"recall\", \"arguments\": {\"query\": \"x\"}}";
    let model = ScriptedModel::start(vec![
        Reply::content("{\"temperature\": 21, \"city\": \"Shanghai\"}"),
        Reply::content(call_shaped),
    ])
    .await;
    let gw = gateway_for(&model);
    let data = gw.chat("fast", &ask("hi"), &tools()).await.unwrap();
    assert!(data.tool_calls.is_empty() && data.parse_warnings.is_empty());
    assert_eq!(
        data.content,
        "{\"temperature\": 21, \"city\": \"Shanghai\"}"
    );
    // With no tools offered, nothing is read as a call and no `tools` field is sent.
    let plain = gw.chat("fast", &ask("hi"), &[]).await.unwrap();
    assert!(plain.tool_calls.is_empty());
    assert_eq!(plain.content, call_shaped);
    assert!(model.requests()[1].get("tools").is_none());
    model.stop().await;
}

#[tokio::test]
async fn history_is_sent_in_openai_shape() {
    let model = ScriptedModel::start(vec![Reply::text("done")]).await;
    let gw = gateway_for(&model);
    let call = ToolCall::new("call_a", "recall", json!({"query": "tea"}));
    let messages = vec![
        Message::system("s"),
        Message::user("u"),
        Message::assistant("", vec![call]),
        Message::tool("call_a", "{\"facts\": []}"),
    ];
    let reply = gw.chat("fast", &messages, &tools()).await.unwrap();
    assert_eq!(reply.content, "done");
    let sent = &model.requests()[0]["messages"];
    assert_eq!(
        sent[2]["tool_calls"][0],
        json!({"id": "call_a", "type": "function", "function": {"name": "recall", "arguments": "{\"query\":\"tea\"}"}})
    );
    assert_eq!(
        sent[3],
        json!({"role": "tool", "content": "{\"facts\": []}", "tool_call_id": "call_a"})
    );
    model.stop().await;
}

#[tokio::test]
async fn server_down_is_a_connect_error_after_retries() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}/v1");
    let gw = Gateway::new(&settings(&url, KEY, 5))
        .unwrap()
        .with_retry(quick_retry(2));
    let err = gw.chat("fast", &ask("hi"), &[]).await.unwrap_err();
    assert!(
        matches!(err, LlmError::Connect { attempts: 3, .. }),
        "{err:?}"
    );
    assert!(err.is_retryable());
    let text = err.to_string();
    assert!(text.contains(&url), "{text}");
    assert!(text.contains("connection refused"), "{text}");
    assert!(text.contains("model.profiles.fast.base_url"), "{text}");
    assert!(!text.contains(KEY) && !format!("{err:?}").contains(KEY));
}

#[tokio::test]
async fn server_error_then_success_retries() {
    let model = ScriptedModel::start(vec![
        Reply::Status {
            status: 500,
            headers: vec![],
            body: "{\"error\": {\"message\": \"model loading\"}}".into(),
        },
        Reply::text("ok"),
    ])
    .await;
    let gw = gateway_for(&model);
    let reply = gw.chat("fast", &ask("hi"), &[]).await.unwrap();
    assert_eq!(reply.content, "ok");
    assert_eq!(reply.attempts, 2);
    assert_eq!(model.request_count(), 2);
    // The task's trace says so, and why.
    assert!(
        reply.notes.iter().any(|n| n.contains("tried 2 times")
            && n.contains("attempt 1 failed")
            && n.contains("HTTP 500")),
        "{:?}",
        reply.notes
    );
    model.stop().await;
}

#[tokio::test]
async fn exhausted_retries_report_the_last_status() {
    let model = ScriptedModel::start(vec![]).await;
    let gw = gateway_for(&model);
    let err = gw.chat("fast", &ask("hi"), &[]).await.unwrap_err();
    assert!(
        matches!(
            err,
            LlmError::Status {
                status: 500,
                attempts: 4,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("script exhausted"), "{err}");
    assert_eq!(model.request_count(), 4);
    model.stop().await;
}

#[tokio::test]
async fn rate_limit_honours_retry_after() {
    let model = ScriptedModel::start(vec![
        Reply::Status {
            status: 429,
            headers: vec![("Retry-After".into(), "1".into())],
            body: "slow down".into(),
        },
        Reply::text("ok"),
    ])
    .await;
    let gw = gateway_for(&model);
    let started = Instant::now();
    let reply = gw.chat("fast", &ask("hi"), &[]).await.unwrap();
    let waited = started.elapsed();
    assert_eq!(reply.attempts, 2);
    assert!(
        waited >= Duration::from_millis(950) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    model.stop().await;
}

#[tokio::test]
async fn a_context_too_long_says_so_and_what_to_change() {
    let model = ScriptedModel::start(vec![Reply::Status {
        status: 400,
        headers: vec![],
        body: r#"{"error": {"message": "This model's maximum context length is 8192 tokens", "code": "context_length_exceeded"}}"#.into(),
    }])
    .await;
    let gw = gateway_for(&model);
    let e = gw
        .chat("fast", &ask("hi"), &[])
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("context window") && e.contains("max_dialog_rounds"),
        "{e}"
    );
    assert!(!e.contains("tool calling"), "{e}");
    model.stop().await;
}

#[tokio::test]
async fn client_error_is_not_retried_and_quotes_the_body() {
    let model = ScriptedModel::start(vec![
        Reply::Status {
            status: 400,
            headers: vec![],
            body: format!(
                "{{\"error\": {{\"message\": \"tools are not supported by this model {}\"}}}}",
                "x".repeat(2000)
            ),
        },
        Reply::text("never reached"),
    ])
    .await;
    // Native on purpose: `auto` would switch to text mode on this answer (tested below).
    let mut s = settings(&model.base_url(), "", 10);
    if let Some(p) = s.profiles.get_mut("fast") {
        p.tool_mode = hermes_config::ToolMode::Native;
    }
    let gw = Gateway::new(&s).unwrap().with_retry(quick_retry(3));
    let err = gw.chat("fast", &ask("hi"), &tools()).await.unwrap_err();
    assert!(
        matches!(
            err,
            LlmError::Status {
                status: 400,
                attempts: 1,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(!err.is_retryable());
    let text = err.to_string();
    assert!(text.contains("tools are not supported"), "{text}");
    assert!(
        text.len() < 1200,
        "the body excerpt is capped: {} chars",
        text.len()
    );
    assert_eq!(model.request_count(), 1);
    model.stop().await;
}

#[tokio::test]
async fn non_json_success_is_a_bad_response() {
    let model = ScriptedModel::start(vec![Reply::Status {
        status: 200,
        headers: vec![],
        body: "<html>proxy login</html>".into(),
    }])
    .await;
    let gw = gateway_for(&model);
    let err = gw.chat("fast", &ask("hi"), &[]).await.unwrap_err();
    assert!(matches!(err, LlmError::BadResponse { .. }), "{err:?}");
    assert!(err.to_string().contains("proxy login"), "{err}");
    assert_eq!(model.request_count(), 1);
    model.stop().await;
}

#[tokio::test]
async fn slow_server_times_out() {
    let model = ScriptedModel::start(vec![Reply::Delay(
        Duration::from_secs(3),
        Box::new(Reply::text("late")),
    )])
    .await;
    let gw = Gateway::new(&settings(&model.base_url(), "", 1))
        .unwrap()
        .with_retry(quick_retry(0));
    let started = Instant::now();
    let err = gw.chat("fast", &ask("hi"), &[]).await.unwrap_err();
    assert!(
        matches!(
            err,
            LlmError::Timeout {
                timeout_s: 1,
                attempts: 1,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(started.elapsed() < Duration::from_millis(2500));
    assert!(
        err.to_string().contains("model.profiles.fast.timeout_s"),
        "{err}"
    );
    model.stop().await;
}

#[tokio::test]
async fn usage_from_server_or_estimated() {
    let model = ScriptedModel::start(vec![
        Reply::Body(
            json!({"choices": [{"message": {"role": "assistant", "content": "hello"}}],
                           "usage": {"prompt_tokens": 123, "completion_tokens": 7}}),
        ),
        Reply::content("a reply without usage"),
    ])
    .await;
    let gw = gateway_for(&model);
    let counted = gw.chat("fast", &ask("hi"), &[]).await.unwrap();
    assert_eq!(counted.usage.prompt_tokens, 123);
    assert_eq!(counted.usage.completion_tokens, 7);
    assert!(!counted.usage.estimated);

    let estimated = gw.chat("fast", &ask("hi"), &[]).await.unwrap();
    assert!(estimated.usage.estimated);
    let request_text = model.requests()[1].to_string();
    assert_eq!(
        estimated.usage.prompt_tokens,
        estimate_tokens(&request_text)
    );
    assert_eq!(
        estimated.usage.completion_tokens,
        estimate_tokens("a reply without usage")
    );
    model.stop().await;
}

#[tokio::test]
async fn bearer_header_only_when_a_key_is_set() {
    let model = ScriptedModel::start(vec![Reply::text("a"), Reply::text("b")]).await;
    let with_key = Gateway::new(&settings(&model.base_url(), KEY, 10)).unwrap();
    with_key.chat("fast", &ask("hi"), &[]).await.unwrap();
    let without = Gateway::new(&settings(&format!("{}/", model.base_url()), "", 10)).unwrap();
    without.chat("fast", &ask("hi"), &[]).await.unwrap();
    assert_eq!(
        model.authorizations(),
        vec![Some(format!("Bearer {KEY}")), None]
    );
    model.stop().await;
}

/// Collects everything the tracing subscriber writes.
#[derive(Clone, Default)]
struct LogBuffer(Arc<Mutex<Vec<u8>>>);

impl Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Alone in a child process: its subscriber must see every event (see
/// [`crate::common::alone_in_child`]); in the shared process it could miss the gateway's.
#[test]
fn key_never_in_debug_errors_or_logs() {
    if crate::common::alone_in_child("llm_gateway::key_never_in_debug_errors_or_logs", &[]) {
        crate::common::block_on(key_never_logged());
    }
}

async fn key_never_logged() {
    let logs = LogBuffer::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    // The test runtime is single-threaded, so a thread-local default sees every event.
    let _guard = tracing::subscriber::set_default(subscriber);

    // A server that echoes the key back in its error bodies, as some gateways do.
    let model = ScriptedModel::start(vec![
        Reply::Status {
            status: 503,
            headers: vec![],
            body: format!("upstream rejected key {KEY}"),
        },
        Reply::Status {
            status: 401,
            headers: vec![],
            body: format!("{{\"error\": {{\"message\": \"invalid api key {KEY}\"}}}}"),
        },
    ])
    .await;
    let gw = Gateway::new(&settings(&model.base_url(), KEY, 10))
        .unwrap()
        .with_retry(quick_retry(3));
    assert!(!format!("{gw:?}").contains(KEY));
    let err = gw.chat("fast", &ask("hi"), &[]).await.unwrap_err();
    assert!(
        matches!(
            err,
            LlmError::Status {
                status: 401,
                attempts: 2,
                ..
            }
        ),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(text.contains("invalid api key <redacted>"), "{text}");
    assert!(text.contains("model.profiles.fast.api_key"), "{text}");
    assert!(!text.contains(KEY) && !format!("{err:?}").contains(KEY));

    let logged = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert_eq!(logged.matches("model call profile=").count(), 2, "{logged}");
    assert!(logged.contains("retrying"), "{logged}");
    assert!(!logged.contains(KEY), "{logged}");
    model.stop().await;
}

#[tokio::test]
async fn unknown_profile_names_the_defined_ones() {
    let gw = Gateway::new(&ModelSettings::default()).unwrap();
    assert!(gw.has_profile("fast") && gw.has_profile("pro") && !gw.has_profile("x"));
    let err = gw.chat("x", &ask("hi"), &[]).await.unwrap_err();
    assert!(matches!(err, LlmError::UnknownProfile { .. }));
    assert!(err.to_string().contains("fast, pro"), "{err}");
}

#[tokio::test]
async fn concurrent_requests_each_get_their_own_answer() {
    let model = ScriptedModel::start_with(|request| {
        let question = request["messages"][1]["content"]
            .as_str()
            .unwrap_or("?")
            .to_string();
        Reply::Delay(
            Duration::from_millis(50),
            Box::new(Reply::text(&format!("echo {question}"))),
        )
    })
    .await;
    let gw = gateway_for(&model);
    let started = Instant::now();
    let calls = (0..1000).map(|i| {
        let gw = gw.clone();
        async move { (i, gw.chat("fast", &ask(&format!("q{i}")), &[]).await) }
    });
    let results = futures::future::join_all(calls).await;
    for (i, result) in results {
        let reply = result.unwrap();
        assert_eq!(reply.content, format!("echo q{i}"));
        assert_eq!(reply.attempts, 1);
    }
    assert_eq!(model.request_count(), 1000);
    // Served concurrently, not one after another (1000 × 50 ms = 50 s).
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    model.stop().await;
}

#[tokio::test]
async fn wait_for_requests_sees_arrivals() {
    let model = ScriptedModel::start(vec![Reply::Delay(
        Duration::from_millis(200),
        Box::new(Reply::text("x")),
    )])
    .await;
    let gw = gateway_for(&model);
    let call = tokio::spawn(async move { gw.chat("fast", &ask("hi"), &[]).await });
    assert!(model.wait_for_requests(1, Duration::from_secs(5)).await);
    assert!(!model.wait_for_requests(2, Duration::from_millis(20)).await);
    assert_eq!(call.await.unwrap().unwrap().content, "x");
    model.stop().await;
}

#[tokio::test]
async fn a_huge_reply_is_refused_at_the_cap_while_it_streams() {
    // 8 MB of content against a 1 MB cap: refused without holding it all.
    let big = "x".repeat(8 * 1024 * 1024);
    let model = ScriptedModel::start(vec![Reply::text(&big)]).await;
    let mut s = settings(&model.base_url(), "", 10);
    s.max_response_bytes = 1_000_000;
    let gw = Gateway::new(&s).unwrap().with_retry(quick_retry(3));
    let err = gw.chat("fast", &ask("hi"), &[]).await.unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("1000000") && text.contains("model.max_response_bytes"),
        "{text}"
    );
    assert!(
        !err.is_retryable(),
        "the same request would get the same reply"
    );
    assert_eq!(model.request_count(), 1);
    model.stop().await;
}

#[tokio::test]
async fn a_long_retry_after_fails_at_once_naming_the_time() {
    let model = ScriptedModel::start(vec![
        Reply::Status {
            status: 429,
            headers: vec![("Retry-After".into(), "3600".into())],
            body: "slow down".into(),
        },
        Reply::text("too late"),
    ])
    .await;
    let gw = gateway_for(&model);
    let started = Instant::now();
    let err = gw.chat("fast", &ask("hi"), &[]).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "not slept through"
    );
    let text = err.to_string();
    assert!(text.contains("rate limited until"), "{text}");
    assert!(text.contains("model.max_retry_after_s"), "{text}");
    assert_eq!(model.request_count(), 1);

    // A wait that fits the setting but not the task's remaining time fails at once too.
    let model = ScriptedModel::start(vec![
        Reply::Status {
            status: 429,
            headers: vec![("Retry-After".into(), "5".into())],
            body: "slow down".into(),
        },
        Reply::text("too late"),
    ])
    .await;
    let gw = gateway_for(&model);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    let started = Instant::now();
    let err = gw
        .chat_until("fast", &ask("hi"), &Default::default(), Some(deadline))
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "not slept through"
    );
    assert!(err.to_string().contains("rate limited until"), "{err}");
    model.stop().await;
}

/// Many tools, so the tool block is large enough to tell whether the server counted it.
fn many_tools() -> Vec<ToolSpec> {
    (0..12)
        .map(|i| ToolSpec {
            name: format!("tool_{i}"),
            description: "A tool with a description long enough to count for something.".into(),
            parameters: json!({"type": "object", "properties": {
                "query": {"type": "string", "description": "What to look for, in plain words."},
                "limit": {"type": "integer", "description": "At most this many results."}},
                "required": ["query"]}),
        })
        .collect()
}

#[tokio::test]
async fn native_requests_carry_tool_choice_auto() {
    let model = ScriptedModel::start(vec![Reply::text("ok")]).await;
    let gw = gateway_for(&model);
    gw.chat("fast", &ask("hi"), &tools()).await.unwrap();
    let r = &model.requests()[0];
    assert_eq!(r["tool_choice"], "auto");
    assert!(r["tools"].is_array());
    model.stop().await;
}

#[tokio::test]
async fn a_server_refusing_tools_switches_an_auto_profile_to_text_mode_once() {
    let model = ScriptedModel::start(vec![
        Reply::Status {
            status: 400,
            headers: vec![],
            body: r#"{"error": {"message": "this model does not support tools"}}"#.into(),
        },
        Reply::content(
            r#"<tool_call>{"name": "tool_3", "arguments": {"query": "tea"}}</tool_call>"#,
        ),
        Reply::text("done"),
    ])
    .await;
    let gw = gateway_for(&model);
    let tools = many_tools();
    let reply = gw.chat("fast", &ask("find tea"), &tools).await.unwrap();
    assert_eq!(reply.tool_calls.len(), 1, "{reply:?}");
    assert_eq!(reply.tool_calls[0].name, "tool_3");
    assert!(
        reply
            .notes
            .iter()
            .any(|n| n.contains("switched to text tool mode")),
        "{:?}",
        reply.notes
    );
    let requests = model.requests();
    let text_request = &requests[1];
    assert!(text_request.get("tools").is_none() && text_request.get("tool_choice").is_none());
    let system = text_request["messages"][0]["content"]
        .as_str()
        .unwrap_or("");
    assert!(
        system.contains("<tool_call>")
            && system.contains("- tool_3(limit?: integer, query: string)"),
        "{system}"
    );
    // From now on this profile asks in text mode at once, without a note.
    let reply = gw.chat("fast", &ask("again"), &tools).await.unwrap();
    assert!(reply.notes.is_empty());
    assert!(model.requests()[2].get("tools").is_none());
    assert_eq!(model.request_count(), 3);
    model.stop().await;
}

#[tokio::test]
async fn a_server_that_counts_no_tools_switches_an_auto_profile_to_text_mode() {
    // llama-cpp-python without tool_choice: a 200, but a prompt count without the tools.
    let model = ScriptedModel::start(vec![
        Reply::Body(json!({
            "choices": [{"message": {"role": "assistant", "content": "Paris."}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 40, "completion_tokens": 2}
        })),
        Reply::Body(json!({
            "choices": [{"message": {"role": "assistant", "content": "Paris."}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 900, "completion_tokens": 3}
        })),
    ])
    .await;
    let gw = gateway_for(&model);
    let reply = gw
        .chat("fast", &ask("capital of France?"), &many_tools())
        .await
        .unwrap();
    assert_eq!(reply.content, "Paris.");
    // The reply given up on was spent too: both count.
    assert_eq!(
        (reply.usage.prompt_tokens, reply.usage.completion_tokens),
        (940, 5)
    );
    assert_eq!(reply.notes.len(), 1, "{:?}", reply.notes);
    assert!(
        reply.notes[0].contains("counted 40 prompt tokens"),
        "{}",
        reply.notes[0]
    );
    assert!(model.requests()[1].get("tools").is_none());
    model.stop().await;
}

#[tokio::test]
async fn a_text_profile_never_sends_tools() {
    let model = ScriptedModel::start(vec![Reply::text("ok")]).await;
    let mut s = settings(&model.base_url(), "", 10);
    if let Some(p) = s.profiles.get_mut("fast") {
        p.tool_mode = hermes_config::ToolMode::Text;
    }
    let gw = Gateway::new(&s).unwrap().with_retry(quick_retry(3));
    let reply = gw.chat("fast", &ask("hi"), &tools()).await.unwrap();
    assert!(reply.notes.is_empty());
    let r = &model.requests()[0];
    assert!(r.get("tools").is_none());
    assert!(
        r["messages"][0]["content"]
            .as_str()
            .unwrap_or("")
            .contains("- recall(")
    );
    model.stop().await;
}

#[tokio::test]
async fn the_tool_probe_names_the_mode_a_profile_needs() {
    use hermes_engine::llm::ToolProbe;
    let counted = |content: Value, prompt: u32| {
        Reply::Body(json!({
            "choices": [{"message": content}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": 3}
        }))
    };
    type Expect = fn(&ToolProbe) -> bool;
    let cases: Vec<(Vec<Reply>, Expect)> = vec![
        (
            // The call, a worded answer with the tool offered, the tool's word repeated.
            vec![
                Reply::text("hi"),
                Reply::tool_calls(&[("ping", json!({"n": 1}))]),
                Reply::text("ready"),
                Reply::text("heliotrope"),
            ],
            |p| *p == ToolProbe::Native,
        ),
        (
            vec![
                Reply::text("hi"),
                Reply::content(r#"<tool_call>{"name": "ping", "arguments": {"n": 1}}</tool_call>"#),
            ],
            |p| *p == ToolProbe::WroteText,
        ),
        (
            // The same count with and without the tool: it was dropped.
            vec![
                counted(json!({"role": "assistant", "content": "pong?"}), 31),
                counted(json!({"role": "assistant", "content": "pong?"}), 31),
            ],
            |p| matches!(p, ToolProbe::Ignored(_)),
        ),
        (
            vec![
                Reply::text("hi"),
                Reply::Status {
                    status: 400,
                    headers: vec![],
                    body: r#"{"error": {"message": "tools not supported"}}"#.into(),
                },
            ],
            |p| matches!(p, ToolProbe::Ignored(_)),
        ),
        (
            vec![Reply::text("hi"), Reply::text("I would rather not.")],
            |p| matches!(p, ToolProbe::NoCall(said) if said.contains("rather not")),
        ),
    ];
    for (script, expected) in cases {
        let model = ScriptedModel::start(script).await;
        let gw = gateway_for(&model);
        let probe = gw.probe_tools("fast").await.expect("probed");
        assert!(expected(&probe), "{probe:?}");
        let advice = probe.advice("fast", hermes_config::ToolMode::Auto);
        assert!(advice.words.contains("tool_mode"), "{advice:?}");
        assert_eq!(model.requests()[1]["tool_choice"], "auto");
        model.stop().await;
    }
}

#[tokio::test]
async fn an_unrecorded_scripted_server_answers_and_counts_but_keeps_no_copies() {
    let model = ScriptedModel::start_unrecorded(|req: &Value| {
        Reply::text(&format!(
            "{} tools",
            req["tools"].as_array().map_or(0, Vec::len)
        ))
    })
    .await;
    let gw = gateway_for(&model);
    let reply = gw.chat("fast", &ask("hi"), &tools()).await.unwrap();
    assert_eq!(reply.content, "2 tools");
    assert!(model.wait_for_requests(1, Duration::from_secs(5)).await);
    assert_eq!(model.request_count(), 1);
    assert!(model.requests().is_empty() && model.authorizations().is_empty());
}

#[tokio::test]
async fn only_a_400_about_the_tools_switches_an_auto_profile_never_a_refusals_wording() {
    let bodies: [(&str, bool); 9] = [
        // Refusals and other faults that mention a tool but say nothing about tool support.
        (
            r#"{"error": {"message": "Request blocked by the content policy: the tool output contains disallowed text"}}"#,
            false,
        ),
        (
            r#"{"error": {"message": "I can't repeat the tool output you sent.", "type": "invalid_request_error", "param": "messages"}}"#,
            false,
        ),
        (
            "The tool result is too long for this model's context window",
            false,
        ),
        (
            r#"{"error": {"message": "max_tokens is too large; the tools are fine"}}"#,
            false,
        ),
        // The server names the parameter, or says it does not support tools.
        (
            r#"{"error": {"message": "Invalid value", "type": "invalid_request_error", "param": "tools"}}"#,
            true,
        ),
        (
            r#"{"error": {"message": "Invalid value", "param": "tool_choice"}}"#,
            true,
        ),
        (r#"{"error": {"message": "tools is not supported"}}"#, true),
        (
            r#"{"error": {"message": "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set"}}"#,
            true,
        ),
        (
            r#"{"detail": [{"loc": ["body", "tools"], "msg": "Extra inputs are not permitted", "type": "extra_forbidden"}]}"#,
            true,
        ),
    ];
    for (body, switches) in bodies {
        let model = ScriptedModel::start(vec![
            Reply::Status {
                status: if body.contains("detail") { 422 } else { 400 },
                headers: vec![],
                body: body.into(),
            },
            Reply::text("second"),
        ])
        .await;
        let gw = gateway_for(&model);
        let first = gw.chat("fast", &ask("hi"), &many_tools()).await;
        if switches {
            let reply = first.unwrap_or_else(|e| panic!("{body}: no switch: {e}"));
            assert_eq!(reply.content, "second", "{body}");
            assert_eq!(reply.notes.len(), 1, "{body}: {:?}", reply.notes);
            assert!(model.requests()[1].get("tools").is_none(), "{body}");
        } else {
            let err = first.expect_err(body);
            // A refusal for the content is its own error; the others stay HTTP statuses.
            assert!(
                matches!(
                    err,
                    LlmError::Status { .. } | LlmError::ContentRefused { .. }
                ),
                "{body}: {err}"
            );
            // Still native: the next call offers the tools again.
            let reply = gw.chat("fast", &ask("hi"), &many_tools()).await.unwrap();
            assert!(reply.notes.is_empty(), "{body}: {:?}", reply.notes);
            assert!(model.requests()[1].get("tools").is_some(), "{body}");
        }
        model.stop().await;
    }
}
