//! The message and tool-call types shared by the gateway, the tools and the agent.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// One chat message. `tool_calls` is set on assistant messages that asked for tools;
/// `tool_call_id` on tool messages that answer one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl Message {
    pub fn system(content: impl Into<String>) -> Message {
        Message::plain(Role::System, content)
    }
    pub fn user(content: impl Into<String>) -> Message {
        Message::plain(Role::User, content)
    }
    pub fn assistant(content: impl Into<String>, tool_calls: Vec<ToolCall>) -> Message {
        Message {
            role: Role::Assistant,
            content: content.into(),
            tool_calls,
            tool_call_id: None,
        }
    }
    pub fn tool(call_id: impl Into<String>, content: impl Into<String>) -> Message {
        Message {
            role: Role::Tool,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: Some(call_id.into()),
        }
    }
    fn plain(role: Role, content: impl Into<String>) -> Message {
        Message {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }
}

/// A tool call the model asked for. `arguments` is always a parsed JSON value here, whatever
/// form the server sent it in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: serde_json::Value,
}

impl ToolCall {
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: serde_json::Value,
    ) -> Self {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments,
        }
    }
}

/// What the model is told about a tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: serde_json::Value,
}

/// Token counts of one call: from the server's `usage`, or estimated when it sent none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub estimated: bool,
}

impl Usage {
    /// Both counts together (estimated when either was).
    pub(crate) fn plus(self, other: Usage) -> Usage {
        Usage {
            prompt_tokens: self.prompt_tokens.saturating_add(other.prompt_tokens),
            completion_tokens: self
                .completion_tokens
                .saturating_add(other.completion_tokens),
            estimated: self.estimated || other.estimated,
        }
    }

    /// The tokens a reply reports, or estimated from the request and the reply when it reports
    /// none.
    pub(crate) fn of_reply(
        response: &serde_json::Value,
        request_body: &str,
        content: &str,
        calls: &[ToolCall],
    ) -> Usage {
        let reported = |field: &str| response.pointer(field).and_then(serde_json::Value::as_u64);
        let clamp = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
        match (
            reported("/usage/prompt_tokens"),
            reported("/usage/completion_tokens"),
        ) {
            (Some(prompt), Some(completion)) => Usage {
                prompt_tokens: clamp(prompt),
                completion_tokens: clamp(completion),
                estimated: false,
            },
            _ => Usage {
                prompt_tokens: estimate_tokens(request_body),
                completion_tokens: calls.iter().fold(estimate_tokens(content), |total, call| {
                    total
                        + estimate_tokens(&call.name)
                        + estimate_tokens(&call.arguments.to_string())
                }),
                estimated: true,
            },
        }
    }
}

/// The model's reply to one request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelReply {
    /// Text content, with any tool calls that were recovered from it removed.
    pub content: String,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Usage,
    /// Model output that looked like a tool call but could not be repaired unambiguously.
    pub parse_warnings: Vec<String>,
    /// HTTP attempts this reply took (1 = no retry).
    pub attempts: u32,
    /// What the gateway changed on its own while getting this reply (e.g. a profile switched
    /// to text tool mode): for the task's trace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The calls came in the native `tool_calls` field, not parsed out of text.
    #[serde(default)]
    pub native_calls: bool,
    /// Which profile and model answered.
    #[serde(default)]
    pub served: Served,
}

/// Which profile and model produced a reply: the profile that answered (a fallback's, when the
/// chain moved on), the model it asked for, and what the server said about itself.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Served {
    pub profile: String,
    /// The model name the request carried (the profile's `model`).
    pub requested: String,
    /// The reply's `model` field: the model the server says answered (many local servers echo
    /// the requested name whatever they serve).
    pub model: Option<String>,
    /// The reply's `system_fingerprint`, when the server sends one.
    pub fingerprint: Option<String>,
    /// The profile's identity as last checked (see [`crate::llm::Identity`]), when known.
    pub identity: Option<String>,
}

/// A rough token count for text the server did not count: about 4 bytes per token for
/// Latin text, one token per CJK character. Good enough for budgets and reports.
pub fn estimate_tokens(text: &str) -> u32 {
    let mut ascii_bytes = 0u32;
    let mut other = 0u32;
    for c in text.chars() {
        if c.is_ascii() {
            ascii_bytes += 1;
        } else {
            other += 1;
        }
    }
    ascii_bytes.div_ceil(4) + other
}
