use super::*;
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
