use super::*;
use serde_json::json;

fn one(parsed: &ParsedMessage) -> &ToolCall {
    assert_eq!(parsed.tool_calls.len(), 1, "{parsed:?}");
    &parsed.tool_calls[0]
}

#[test]
fn repair_drops_trailing_commas_only_before_closers() {
    let fixed = repair_json(r#"{"a": [1, 2,], "b": {"c": 3,},}"#).unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&fixed).unwrap(),
        json!({"a": [1, 2], "b": {"c": 3}})
    );
}

#[test]
fn repair_keeps_what_is_inside_strings() {
    for (raw, text) in [
        // Raw control characters are escaped...
        ("{\"t\": \"line one\nline\ttwo\"}", "line one\nline\ttwo"),
        // ...commas and braces are left alone...
        ("{\"t\": \"a,} b ,] {x}\",}", "a,} b ,] {x}"),
        // ...and escaped quotes do not end the string.
        ("{\"t\": \"say \\\"hi,\\\" }\n\",}", "say \"hi,\" }\n"),
    ] {
        assert_eq!(parse_lenient(raw).unwrap()["t"], text, "{raw}");
    }
}

#[test]
fn repair_does_not_guess() {
    assert!(parse_lenient("{'name': 'x'}").is_err());
    assert!(parse_lenient(r#"{"a": 1"#).is_err());
    assert!(parse_lenient("[1,,]").is_err());
    assert_eq!(repair_json(r#"{"a": 1}"#), None);
}

#[test]
fn native_string_and_object_arguments() {
    let msg = json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "recall", "arguments": "{\"query\":\"tea\"}"}},
        {"id": "c2", "type": "function", "function": {"name": "remember", "arguments": {"text": "x"}}}
    ]});
    let p = parse_message(&msg, true);
    assert_eq!(p.tool_calls.len(), 2);
    assert_eq!(p.tool_calls[0].id, "c1");
    assert_eq!(p.tool_calls[0].arguments, json!({"query": "tea"}));
    assert_eq!(p.tool_calls[1].arguments, json!({"text": "x"}));
    assert!(p.warnings.is_empty());
    assert_eq!(p.content, "");
}

#[test]
fn native_arguments_repaired_or_kept_raw() {
    let msg = json!({"tool_calls": [
        {"function": {"name": "a", "arguments": "{\"x\": 1,}"}},
        {"function": {"name": "b", "arguments": "{x: 1"}},
        {"function": {"name": "c", "arguments": ""}}
    ]});
    let p = parse_message(&msg, true);
    assert_eq!(p.tool_calls.len(), 3);
    assert_eq!(p.tool_calls[0].arguments, json!({"x": 1}));
    assert_eq!(p.tool_calls[1].arguments, Value::String("{x: 1".into()));
    assert_eq!(p.tool_calls[2].arguments, json!({}));
    assert_eq!(p.warnings.len(), 1);
    assert!(p.warnings[0].contains("`b`"), "{:?}", p.warnings);
    // Missing ids are generated, and distinct.
    assert!(p.tool_calls[0].id.starts_with("call_"));
    assert_ne!(p.tool_calls[0].id, p.tool_calls[1].id);
}

#[test]
fn native_call_without_name_is_dropped_with_warning() {
    let p = parse_native_calls(&json!([{"function": {"arguments": "{}"}}]));
    assert!(p.0.is_empty());
    assert_eq!(p.1.len(), 1);
}

#[test]
fn native_calls_win_over_text() {
    let msg = json!({"content": "<tool_call>{\"name\":\"t\",\"arguments\":{}}</tool_call>",
        "tool_calls": [{"id": "n", "function": {"name": "native", "arguments": "{}"}}]});
    let p = parse_message(&msg, true);
    assert_eq!(one(&p).name, "native");
}

#[test]
fn no_text_fallback_when_not_asked() {
    let msg = json!({"content": "{\"name\":\"t\",\"arguments\":{}}"});
    let p = parse_message(&msg, false);
    assert!(p.tool_calls.is_empty());
    assert_eq!(p.content, "{\"name\":\"t\",\"arguments\":{}}");
}

#[test]
fn json_fence() {
    let text = "I will look.\n```json\n{\"name\": \"web_fetch\", \"arguments\": {\"url\": \"https://x.test\"}}\n```\n";
    let p = extract_text_calls(text);
    let c = one(&p);
    assert_eq!(c.name, "web_fetch");
    assert_eq!(c.arguments, json!({"url": "https://x.test"}));
    assert_eq!(p.content, "I will look.");
}

#[test]
fn bare_fence_with_function_wrapper() {
    let text = "```\n{\"function\": {\"name\": \"recall\", \"arguments\": \"{\\\"query\\\": \\\"tea\\\"}\"}}\n```";
    let p = extract_text_calls(text);
    assert_eq!(one(&p).arguments, json!({"query": "tea"}));
    assert_eq!(p.content, "");
}

#[test]
fn fence_that_is_data_is_left_alone() {
    let text = "Here is the data:\n```json\n{\"name\": \"Alice\", \"age\": 3}\n```";
    let p = extract_text_calls(text);
    assert!(p.tool_calls.is_empty());
    assert!(p.warnings.is_empty());
    assert_eq!(p.content, text);
}

#[test]
fn non_json_fence_ignored() {
    let text = "```rust\nfn main() { let name = \"arguments\"; }\n```";
    let p = extract_text_calls(text);
    assert!(p.tool_calls.is_empty() && p.warnings.is_empty());
}

#[test]
fn hermes_tags_several_calls() {
    let text = "<tool_call>\n{\"name\": \"recall\", \"arguments\": {\"query\": \"a\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"recall\", \"arguments\": {\"query\": \"b\"},}\n</tool_call>";
    let p = extract_text_calls(text);
    assert_eq!(p.tool_calls.len(), 2);
    assert_eq!(p.tool_calls[1].arguments, json!({"query": "b"}));
    assert_eq!(p.content, "");
    assert!(p.warnings.is_empty());
}

#[test]
fn tag_without_arguments_and_unclosed_tag() {
    let p = extract_text_calls("Checking.\n<tool_call>{\"name\": \"list_schedules\"}");
    assert_eq!(one(&p).name, "list_schedules");
    assert_eq!(one(&p).arguments, json!({}));
    assert_eq!(p.content, "Checking.");
}

#[test]
fn tag_with_nested_braces_and_newlines_in_strings() {
    let text = "<tool_call>{\"name\": \"notify\", \"arguments\": {\"channel\": \"email\", \"title\": \"t {x}\", \"text\": \"line1\nline2 }{ ,]\",}}</tool_call>";
    let p = extract_text_calls(text);
    let c = one(&p);
    assert_eq!(c.arguments["text"], "line1\nline2 }{ ,]");
    assert_eq!(c.arguments["title"], "t {x}");
}

#[test]
fn chinese_text_kept_intact() {
    let text =
        "```json\n{\"name\": \"remember\", \"arguments\": {\"text\": \"我喜欢喝\n乌龙茶\",}}\n```";
    let p = extract_text_calls(text);
    assert_eq!(one(&p).arguments["text"], "我喜欢喝\n乌龙茶");
}

#[test]
fn bare_object_and_list() {
    let p = extract_text_calls("  {\"name\": \"recall\", \"parameters\": {\"query\": \"x\"}}  ");
    assert_eq!(one(&p).arguments, json!({"query": "x"}));
    assert_eq!(p.content, "");
    let p = extract_text_calls(
        "[{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", \"arguments\": {}}]",
    );
    assert_eq!(p.tool_calls.len(), 2);
}

/// Text that is not a call stays the answer, word for word; a call too broken to repair also
/// gets one warning.
#[test]
fn what_is_not_a_call_stays_the_answer() {
    #[rustfmt::skip]
    let cases: &[(&str, usize)] = &[
        // JSON answers and prose.
        ("{\"name\": \"Alice\", \"arguments\": {}, \"age\": 3}", 0),
        ("{\"result\": 42}", 0),
        ("[1, 2, 3]", 0),
        ("{\"name\": \"x\"}", 0),
        ("{\"name\": \"x\", \"arguments\": [1]}", 0),
        ("", 0),
        ("Hello there.", 0),
        ("{{{{", 0),
        ("}{", 0),
        ("```\n```", 0),
        ("The answer is {x}.", 0),
        // Broken calls.
        ("{'name': 'recall', 'arguments': {'query': 'x'}}", 1),
        ("```json\n{\"name\": \"recall\", \"arguments\": {\"query\": \"x\"\n```", 1),
        ("<tool_call>{\"name\": \"recall\", \"arguments\": {\"query\": }</tool_call>", 1),
        ("<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call><tool_call>not json</tool_call>", 1),
        ("<tool_call>{\"arguments\": {}}</tool_call>", 1),
    ];
    for &(text, warnings) in cases {
        let p = extract_text_calls(text);
        assert!(p.tool_calls.is_empty(), "{text}");
        assert_eq!(p.warnings.len(), warnings, "{text}: {:?}", p.warnings);
        assert_eq!(p.content, text);
    }
}

#[test]
fn content_parts_are_joined() {
    let msg = json!({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]});
    assert_eq!(parse_message(&msg, true).content, "ab");
}

#[test]
fn excerpt_is_capped_on_char_boundaries() {
    let long = "茶".repeat(500);
    let e = excerpt(&long);
    assert_eq!(e.chars().count(), EXCERPT_CHARS + 1);
}
