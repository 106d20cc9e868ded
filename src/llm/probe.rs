//! `doctor`'s real test of a profile's tool calling: one request offering one tool, in native
//! mode, and what came back says which `tool_mode` the profile should use.
//!
//! Owns: the probe request and reading its outcome. Must not: change a profile's mode (only the
//! gateway's own evidence during real calls does that, for `auto`).

use super::{Gateway, LlmError, Message, ToolSpec, Toolset, wire};
use crate::config::ToolMode;
use serde_json::json;

/// What a profile's server and model did with one offered tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolProbe {
    /// A native `tool_calls` answer: `native` (or `auto`) works.
    Native,
    /// The model wrote the call as text: `text` fits (`auto` switches only on evidence the
    /// server ignored the tools, so name `text`).
    WroteText,
    /// The server refused or dropped the tools: use `text` (`auto` switches on its own).
    Ignored(String),
    /// The model answered without calling the tool: it may not manage tools at all.
    NoCall(String),
}

impl ToolProbe {
    /// The verdict's words, naming the `tool_mode` to use.
    pub fn advice(&self, profile: &str) -> String {
        match self {
            ToolProbe::Native => "native tool calls work (tool_mode: native, or auto)".into(),
            ToolProbe::WroteText => format!(
                "the model writes tool calls as text: set model.profiles.{profile}.tool_mode: text"
            ),
            ToolProbe::Ignored(why) => format!(
                "{why}: set model.profiles.{profile}.tool_mode: text (auto would switch to it on the first task)"
            ),
            ToolProbe::NoCall(said) => format!(
                "the model did not call the offered tool (it said: {said}); small models often cannot — try tool_mode: text, or a bigger model"
            ),
        }
    }
}

impl Gateway {
    /// Offer one tool natively and ask the model to call it (a short reply: a few tokens).
    pub async fn probe_tools(&self, profile_name: &str) -> Result<ToolProbe, LlmError> {
        let tool = ToolSpec {
            name: "ping".into(),
            description: "Answers pong. Call it when asked to ping.".into(),
            parameters: json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}),
        };
        let messages = [
            Message::system("You are a test of tool calling. Use the tools offered."),
            Message::user("Call the tool ping with n = 1."),
        ];
        let profile = self.profile(profile_name)?;
        let native = ToolMode::Native;
        // The same question without the tool first: a server that renders the tool counts
        // more prompt tokens with it.
        let bare = self
            .exchange(
                profile_name,
                profile,
                &messages,
                &Toolset::default(),
                native,
                None,
            )
            .await?;
        let tools = Toolset::new(vec![tool]);
        let reply = match self
            .exchange(profile_name, profile, &messages, &tools, native, None)
            .await
        {
            Ok(r) => r,
            Err(e) => {
                return match wire::tools_refused(&e) {
                    Some(why) => Ok(ToolProbe::Ignored(why)),
                    None => Err(e),
                };
            }
        };
        let counted = !bare.usage.estimated && !reply.usage.estimated;
        if counted && reply.usage.prompt_tokens <= bare.usage.prompt_tokens + 5 {
            return Ok(ToolProbe::Ignored(format!(
                "the server counted {} prompt tokens with the tool and {} without: it ignored the tool",
                reply.usage.prompt_tokens, bare.usage.prompt_tokens
            )));
        }
        Ok(match reply.tool_calls.first() {
            Some(_) if reply.native_calls => ToolProbe::Native,
            Some(_) => ToolProbe::WroteText,
            None => ToolProbe::NoCall(crate::util::text::one_line(&reply.content, 80)),
        })
    }
}
