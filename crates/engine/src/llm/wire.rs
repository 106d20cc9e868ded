//! The request as it goes on the wire, in either tool mode.
//!
//! - **native**: the OpenAI shape — `tools` with `"tool_choice": "auto"` (llama-cpp-python and
//!   some chat templates render no tools at all without it), assistant `tool_calls`, `tool`-role
//!   results.
//! - **text**: for servers and templates without tool support — no `tools` field; the tools are
//!   described compactly (the [`Toolset`]'s prompt) at the end of the system prompt (which stays the same bytes from task to
//!   task, so a prefix cache keeps it), calls are written as `<tool_call>{…}</tool_call>` blocks
//!   (read back by [`super::parse`]), results go back as user-role text in the registry's
//!   `<tool_result>` form.
//!
//! Also: when a server shows it ignored the tools it was sent ([`tools_ignored`], [`tools_blanked`])
//! or says it rejects them ([`rejects_tools`]).
//! Must not: decide which mode a profile uses (the gateway does) or know what a tool does.

use super::{LlmError, Message, ModelReply, Role, ToolSpec, Toolset, Usage};
use hermes_config::Profile;
use serde::Serialize;
use serde_json::{Value, json};
use std::borrow::Cow;

/// The OpenAI request body as JSON text. `tools` (and `tool_choice`) are omitted when there are
/// none: some servers reject an empty list. Messages are written from where they lie and the
/// tools go in as the set serialised them once, so a step copies neither.
pub(crate) fn request_body(
    profile: &Profile,
    messages: &[Message],
    tools: &Toolset,
) -> Result<String, serde_json::Error> {
    let mut body = serde_json::to_string(&Envelope {
        model: &profile.model,
        messages: messages.iter().map(WireMessage::from).collect(),
        temperature: profile.temperature,
        max_tokens: profile.max_tokens,
        stream: false,
    })?;
    if !tools.is_empty() {
        // An object always ends in its closing brace: the two fields go in before it.
        body.pop();
        body.push_str(r#","tool_choice":"auto","tools":"#);
        body.push_str(tools.json());
        body.push('}');
    }
    Ok(body)
}

#[derive(Serialize)]
struct Envelope<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    temperature: f32,
    max_tokens: u32,
    stream: bool,
}

#[derive(Serialize)]
struct WireMessage<'a> {
    role: Role,
    content: &'a str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<WireCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
}

#[derive(Serialize)]
struct WireCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    /// OpenAI sends arguments as a JSON string, not an object.
    arguments: Cow<'a, str>,
}

impl<'a> From<&'a Message> for WireMessage<'a> {
    fn from(m: &'a Message) -> WireMessage<'a> {
        let tool_calls = match m.role {
            Role::Assistant => m
                .tool_calls
                .iter()
                .map(|c| WireCall {
                    id: &c.id,
                    kind: "function",
                    function: WireFunction {
                        name: &c.name,
                        // An argument string we could not repair goes back verbatim: it is
                        // what the model wrote, and the tool's error message refers to it.
                        arguments: match &c.arguments {
                            Value::String(raw) => Cow::Borrowed(raw.as_str()),
                            other => Cow::Owned(other.to_string()),
                        },
                    },
                })
                .collect(),
            _ => Vec::new(),
        };
        WireMessage {
            role: m.role,
            content: &m.content,
            tool_calls,
            tool_call_id: m.tool_call_id.as_deref(),
        }
    }
}

/// The conversation as text mode sends it (no `tools` field goes with it).
pub(crate) fn text_mode(messages: &[Message], tools: &Toolset) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::with_capacity(messages.len() + 1);
    let block = tools.prompt();
    for m in messages {
        match m.role {
            Role::System if out.is_empty() => {
                out.push(Message::system(format!("{}\n\n{block}", m.content)))
            }
            Role::Assistant if !m.tool_calls.is_empty() => {
                let mut text = m.content.trim().to_string();
                for c in &m.tool_calls {
                    let call = json!({"name": c.name, "arguments": c.arguments});
                    if !text.is_empty() {
                        text.push('\n');
                    }
                    text.push_str(&format!("<tool_call>{call}</tool_call>"));
                }
                out.push(Message::assistant(text, Vec::new()));
            }
            // Results are user text; those of one turn become one message, so roles alternate
            // (some templates refuse two user messages in a row).
            Role::Tool => match out.last_mut() {
                Some(prev) if prev.role == Role::User && prev.content.starts_with("<tool_") => {
                    prev.content.push('\n');
                    prev.content.push_str(&m.content);
                }
                _ => out.push(Message::user(m.content.clone())),
            },
            _ => out.push(m.clone()),
        }
    }
    if !matches!(out.first(), Some(m) if m.role == Role::System) {
        out.insert(0, Message::system(block));
    }
    out
}

/// Did the server leave the tools out of the prompt it evaluated? Its own count of prompt
/// tokens is under a quarter of what the tool block alone is estimated at: a server that
/// rendered the tools cannot have counted so few (real tokenizers count JSON *more* densely
/// than the estimate), one that dropped them (llama-cpp-python without `tool_choice`, a
/// template with no tool support) counts only the messages.
pub(crate) fn tools_ignored(usage: &Usage, tools: &Toolset) -> Option<String> {
    if usage.estimated || tools.is_empty() {
        return None;
    }
    let tools_estimate = tools.tokens();
    // A tool block too small to tell from the noise proves nothing either way.
    (tools_estimate >= 200 && usage.prompt_tokens.saturating_mul(4) < tools_estimate).then(|| {
        format!(
            "the server counted {} prompt tokens for a request whose tools alone are about {tools_estimate}",
            usage.prompt_tokens
        )
    })
}

/// Did the server answer a native request that offered tools with nothing at all — no text,
/// no call? llama-cpp-python's `chatml-function-calling` does that whenever the model chooses
/// to answer in words (its grammar then allows only a function name or the end), and it drops
/// `tool`-role messages from the prompt: text mode is the only way to get an answer from it.
pub(crate) fn tools_blanked(reply: &ModelReply, tools: &[ToolSpec]) -> Option<String> {
    if tools.is_empty() || !reply.tool_calls.is_empty() || !reply.content.trim().is_empty() {
        return None;
    }
    Some(
        "the server answered a request that offered tools with neither text nor a tool call".into(),
    )
}

/// Did the server refuse the request because of its tools? Only what [`rejects_tools`] found
/// in its error counts.
pub(crate) fn tools_refused(e: &LlmError) -> Option<String> {
    match e {
        LlmError::Status {
            status,
            detail,
            tools_rejected: true,
            ..
        } => Some(format!("the server refused tools: HTTP {status}: {detail}")),
        _ => None,
    }
}

/// Words that name the request's tools in an error message (as word sequences).
const TOOL_WORDS: [&[&str]; 8] = [
    &["tools"],
    &["tool_choice"],
    &["tool", "choice"],
    &["tool", "calling"],
    &["tool", "calls"],
    &["tool", "use"],
    &["function", "calling"],
    &["functions"],
];

/// Words that say something is not supported or not accepted.
const REFUSAL_WORDS: [&[&str]; 12] = [
    &["not", "supported"],
    &["unsupported"],
    &["not", "support"],
    &["t", "support"],
    &["requires"],
    &["not", "allowed"],
    &["not", "permitted"],
    &["unrecognized"],
    &["unrecognised"],
    &["unknown"],
    &["not", "enabled"],
    &["cannot", "be", "used"],
];

/// How many words apart the tools and the refusal may be and still be one statement.
const NEAR: usize = 5;

/// Does a 400 (or a validation 422) say that the request's tools are what the server rejects?
/// Evidence, in order: the error's `param` is `tools`/`tool_choice` (OpenAI and its imitators), a
/// validation error's `loc` names them (FastAPI servers such as llama-cpp-python), or its
/// message says tools are not supported, within a few words ("this model does not support
/// tools", "tools is not supported", "\"auto\" tool choice requires --enable-auto-tool-choice").
/// A refusal that only quotes "the tool output" is about the content, and switching the profile
/// to text mode for the rest of the process on it would be wrong.
pub(crate) fn rejects_tools(status: u16, body: &str) -> bool {
    if !matches!(status, 400 | 422) {
        return false;
    }
    let json: Option<Value> = serde_json::from_str(body).ok();
    if let Some(v) = &json {
        let named = [v.pointer("/error/param"), v.get("param")]
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .any(is_tools_param);
        let located = v
            .get("detail")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|d| d.get("loc").and_then(Value::as_array))
            .flatten()
            .filter_map(Value::as_str)
            .any(is_tools_param);
        if named || located {
            return true;
        }
    }
    let message = json
        .as_ref()
        .and_then(|v| {
            let e = v.get("error")?;
            e.get("message").and_then(Value::as_str).or(e.as_str())
        })
        .unwrap_or(body);
    says_tools_unsupported(message)
}

/// `tools`, `tool_choice`, or a part of them (`tools[0].function`).
fn is_tools_param(param: &str) -> bool {
    let head = param.trim().split(['.', '[']).next().unwrap_or("");
    matches!(
        head.to_ascii_lowercase().as_str(),
        "tools" | "tool_choice" | "functions" | "function_call"
    )
}

fn says_tools_unsupported(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .collect();
    let at = |phrases: &[&[&str]]| -> Vec<usize> {
        (0..words.len())
            .filter(|&i| phrases.iter().any(|p| words[i..].starts_with(p)))
            .collect()
    };
    let tools = at(&TOOL_WORDS);
    let refusals = at(&REFUSAL_WORDS);
    tools
        .iter()
        .any(|t| refusals.iter().any(|r| t.abs_diff(*r) <= NEAR))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::ToolCall;

    fn spec() -> ToolSpec {
        ToolSpec {
            name: "web_fetch".into(),
            description: "Fetch a page.".into(),
            parameters: json!({"type": "object", "properties": {
                "url": {"type": "string"}, "selector": {"type": "string"},
                "mode": {"enum": ["a", "b"]}, "tags": {"type": "array", "items": {"type": "string"}}},
                "required": ["url"]}),
        }
    }

    #[test]
    fn native_sends_tool_choice_auto_with_tools() {
        let body = |tools: Vec<ToolSpec>| -> Value {
            let text = request_body(&Profile::default(), &[Message::user("hi")], &tools.into());
            let text = text.unwrap();
            serde_json::from_str(&text).unwrap()
        };
        let with = body(vec![spec()]);
        assert_eq!(with["tool_choice"], "auto");
        let offered: Value = serde_json::from_str(Toolset::new(vec![spec()]).json()).unwrap();
        assert_eq!(with["tools"], offered);
        assert_eq!(with["messages"][0]["content"], "hi");
        let bare = body(Vec::new());
        assert!(bare.get("tools").is_none() && bare.get("tool_choice").is_none());
        assert_eq!(bare["messages"], with["messages"]);
    }

    #[test]
    fn text_mode_describes_tools_and_writes_calls_and_results_as_text() {
        let call = ToolCall::new("c1", "web_fetch", json!({"url": "https://example.org"}));
        let messages = vec![
            Message::system("You are hermes."),
            Message::user("Task: read it"),
            Message::assistant("", vec![call.clone(), call]),
            Message::tool("c1", "<tool_result tool=\"web_fetch\">a</tool_result>"),
            Message::tool("c1", "<tool_result tool=\"web_fetch\">b</tool_result>"),
        ];
        let tools = Toolset::new(vec![spec()]);
        let out = text_mode(&messages, &tools);
        let roles: Vec<Role> = out.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [Role::System, Role::User, Role::Assistant, Role::User]
        );
        let system = &out[0].content;
        assert!(system.starts_with("You are hermes.\n\n"), "{system}");
        assert!(
            system.contains(r#"- web_fetch(mode?: "a"|"b", selector?: string, tags?: [string], url: string): Fetch a page."#),
            "{system}"
        );
        assert_eq!(out[2].content.matches("<tool_call>").count(), 2);
        assert!(out[2].tool_calls.is_empty());
        assert!(out[3].content.contains(">a<") && out[3].content.contains(">b<"));
        // The same tools give the same bytes: the system prompt stays cacheable.
        assert_eq!(text_mode(&messages, &Toolset::new(vec![spec()]))[0], out[0]);
    }

    #[test]
    fn ignored_tools_are_told_by_the_servers_own_count() {
        let tools: Toolset = (0..12)
            .map(|i| ToolSpec {
                name: format!("tool_{i}"),
                ..spec()
            })
            .collect::<Vec<_>>()
            .into();
        let counted = |n| Usage {
            prompt_tokens: n,
            completion_tokens: 1,
            estimated: false,
        };
        assert!(tools_ignored(&counted(130), &tools).is_some());
        assert!(tools_ignored(&counted(1900), &tools).is_none());
        let estimated = Usage {
            estimated: true,
            ..counted(1)
        };
        assert!(tools_ignored(&estimated, &tools).is_none(), "no evidence");
        assert!(
            tools_ignored(&counted(1), &vec![spec()].into()).is_none(),
            "too small to tell"
        );
    }

    #[test]
    fn only_words_about_tool_support_are_evidence() {
        for (body, rejects) in [
            (
                r#"{"error": {"message": "this model does not support tools"}}"#,
                true,
            ),
            (
                r#"{"error": {"message": "tools param requires --jinja flag"}}"#,
                true,
            ),
            (
                "registry.ollama.ai/library/gemma:2b does not support tools",
                true,
            ),
            (
                r#"{"error": "Unrecognized request argument supplied: tools"}"#,
                true,
            ),
            (
                r#"{"error": {"message": "x", "param": "tools[0].function.name"}}"#,
                true,
            ),
            (
                r#"{"error": {"message": "the tool output is not allowed here"}}"#,
                false,
            ),
            (
                r#"{"error": {"message": "flagged by moderation: the tool output asks for harm"}}"#,
                false,
            ),
            (
                r#"{"error": {"message": "x", "param": "messages[2].content"}}"#,
                false,
            ),
            ("", false),
        ] {
            assert_eq!(rejects_tools(400, body), rejects, "{body}");
        }
        let named = r#"{"error": {"message": "x", "param": "tools"}}"#;
        assert!(!rejects_tools(500, named) && !rejects_tools(401, named));
    }

    #[test]
    fn a_blank_reply_to_offered_tools_is_evidence() {
        let reply = |content: &str, calls: usize| ModelReply {
            content: content.to_string(),
            tool_calls: (0..calls)
                .map(|i| ToolCall::new(format!("c{i}"), "t", serde_json::json!({})))
                .collect(),
            ..ModelReply::default()
        };
        assert!(tools_blanked(&reply(" \n", 0), &[spec()]).is_some());
        assert!(tools_blanked(&reply("Paris.", 0), &[spec()]).is_none());
        assert!(tools_blanked(&reply("", 1), &[spec()]).is_none());
        assert!(
            tools_blanked(&reply("", 0), &[]).is_none(),
            "nothing offered"
        );
    }
}
