use super::*;
use crate::llm::ToolCall;
use serde_json::json;

fn profile() -> Profile {
    Profile {
        model: "m".into(),
        ..Profile::default()
    }
}

#[test]
fn chat_url_tolerates_trailing_slash() {
    assert_eq!(chat_url("http://h:1/v1"), "http://h:1/v1/chat/completions");
    assert_eq!(chat_url("http://h:1/v1/"), "http://h:1/v1/chat/completions");
}

#[test]
fn body_has_openai_shape() {
    let call = ToolCall::new("c1", "recall", json!({"query": "tea"}));
    let raw = ToolCall {
        id: "c2".into(),
        name: "recall".into(),
        arguments: Value::String("{broken".into()),
    };
    let messages = vec![
        Message::system("s"),
        Message::user("u"),
        Message::assistant("", vec![call, raw]),
        Message::tool("c1", "result"),
    ];
    let tool = ToolSpec {
        name: "recall".into(),
        description: "d".into(),
        parameters: json!({"type": "object"}),
    };
    let body = |tools: Vec<ToolSpec>| -> Value {
        let text = wire::request_body(&profile(), &messages, &tools.into()).unwrap();
        serde_json::from_str(&text).unwrap()
    };
    let without = body(Vec::new());
    let body = body(vec![tool]);
    assert_eq!(body["model"], "m");
    assert_eq!(body["stream"], false);
    assert_eq!(body["max_tokens"], 1024);
    let calls = &body["messages"][2]["tool_calls"];
    assert_eq!(calls[0]["type"], "function");
    assert_eq!(calls[0]["function"]["arguments"], "{\"query\":\"tea\"}");
    assert_eq!(calls[1]["function"]["arguments"], "{broken");
    assert_eq!(body["messages"][3]["tool_call_id"], "c1");
    assert_eq!(body["messages"][3]["role"], "tool");
    assert_eq!(body["tools"][0]["function"]["name"], "recall");
    assert_eq!(body["tools"][0]["type"], "function");
    assert!(without.get("tools").is_none());
    assert!(without["messages"][0].get("tool_calls").is_none());
}

#[test]
fn retry_after_seconds_and_dates() {
    assert_eq!(parse_retry_after("1"), Some(Duration::from_secs(1)));
    assert_eq!(parse_retry_after(" 3600 "), Some(Duration::from_secs(3600)));
    assert_eq!(parse_retry_after("99999999"), Some(RETRY_AFTER_CEILING));
    let soon = (chrono::Utc::now() + chrono::Duration::seconds(20)).to_rfc2822();
    let soon = soon.replace("+0000", "GMT");
    let d = parse_retry_after(&soon).unwrap();
    assert!(
        d > Duration::from_secs(17) && d <= Duration::from_secs(20),
        "{d:?}"
    );
    assert_eq!(
        parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT"),
        Some(Duration::ZERO)
    );
    assert_eq!(parse_retry_after("soon"), None);
}

/// The default settings with the `fast` profile changed.
fn with_fast(change: impl FnOnce(&mut Profile)) -> ModelSettings {
    let mut settings = ModelSettings::default();
    if let Some(p) = settings.profiles.get_mut("fast") {
        change(p);
    }
    settings
}

#[test]
fn debug_hides_the_key() {
    let settings = with_fast(|p| p.api_key = "sk-very-secret".into());
    let gw = Gateway::new(&settings).unwrap();
    let shown = format!("{gw:?}");
    assert!(!shown.contains("sk-very-secret"), "{shown}");
    assert!(shown.contains("api_key_set: true"), "{shown}");
}

#[test]
fn bad_base_url_is_rejected() {
    let settings = with_fast(|p| p.base_url = "localhost:11434".into());
    let err = Gateway::new(&settings).unwrap_err();
    assert!(err.to_string().contains("model.profiles.fast"), "{err}");
}

/// A gateway with one profile, `fast`, on `base_url`, that never waits between retries.
fn scripted_gateway(base_url: &str) -> Gateway {
    let mut settings = hermes_config::ModelSettings::default();
    settings.profiles.insert(
        "fast".into(),
        Profile {
            base_url: base_url.into(),
            model: "m".into(),
            timeout_s: 10,
            ..Profile::default()
        },
    );
    Gateway::new(&settings)
        .expect("a gateway")
        .with_retry(RetryPolicy {
            max_retries: 3,
            backoff: hermes_store::util::Backoff::new(
                Duration::from_millis(1),
                Duration::from_millis(2),
            ),
        })
}

/// The error a gateway gives for the one scripted `reply`, and how many requests it sent.
async fn refusal(reply: crate::llm::scripted::Reply) -> (LlmError, usize) {
    let model = crate::llm::scripted::ScriptedModel::start_with(move |_| reply.clone()).await;
    let err = scripted_gateway(&model.base_url())
        .chat("fast", &[Message::user("something flagged")], &[])
        .await
        .expect_err("the server refused");
    let sent = model.request_count();
    model.stop().await;
    (err, sent)
}

fn status_reply(body: &str) -> crate::llm::scripted::Reply {
    crate::llm::scripted::Reply::Status {
        status: 400,
        headers: vec![],
        body: body.into(),
    }
}

#[tokio::test]
async fn a_content_refusal_is_its_own_kind_and_says_retrying_will_not_help() {
    let bodies = [
        r#"{"error":{"message":"Your request was rejected as a result of our safety system.","type":"invalid_request_error","code":"content_policy_violation"}}"#,
        r#"{"error":{"message":"The response was filtered due to the prompt triggering content management policy.","type":null,"code":"content_filter"}}"#,
        r#"{"error":{"message":"This request was flagged by moderation.","type":"invalid_request_error","code":null}}"#,
    ];
    for body in bodies {
        let (err, sent) = refusal(status_reply(body)).await;
        assert!(
            matches!(err, LlmError::ContentRefused { .. }),
            "{body}: {err:?}"
        );
        assert_eq!(err.kind(), crate::llm::FailureKind::Refused, "{body}");
        assert!(!err.kind().falls_back());
        assert_eq!(sent, 1, "a refusal is not retried: {body}");
        let text = err.to_string();
        assert!(
            text.contains("refused the request to model 'm' for its content")
                && text.contains("Retrying the same content will not help"),
            "{text}"
        );
        assert!(!text.contains("tool calling"), "{text}");
    }
}

#[tokio::test]
async fn a_reply_stopped_by_the_content_filter_is_a_refusal_too() {
    let filtered = crate::llm::scripted::Reply::Body(json!({
        "id": "x", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": ""},
                     "finish_reason": "content_filter"}],
    }));
    let (err, sent) = refusal(filtered).await;
    assert!(matches!(err, LlmError::ContentRefused { .. }), "{err:?}");
    assert_eq!(sent, 1);
    assert!(
        err.to_string().contains("finish_reason content_filter"),
        "{err}"
    );
}

#[tokio::test]
async fn another_400_still_points_at_the_settings() {
    let (err, _) = refusal(status_reply(
        r#"{"error":{"message":"temperature must be <= 2","type":"invalid_request_error"}}"#,
    ))
    .await;
    assert!(
        matches!(err, LlmError::Status { status: 400, .. }),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("max_tokens and temperature"),
        "{err}"
    );
}
