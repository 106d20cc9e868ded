//! `doctor`'s real test of a profile's tool calling, in native mode: what came back says which
//! `tool_mode` the profile should use. A native call coming back is not enough: a task also needs
//! a worded answer while tools are offered, and the tool's result to reach the model —
//! llama-cpp-python's `chatml-function-calling` calls tools natively but answers "" to anything
//! else when tools are offered, and drops `tool`-role messages, so a native task on it never ends
//! with an answer. The probe asks all three, a few tokens each.
//!
//! Owns: the probe requests and reading their outcome. Must not: change a profile's mode (only
//! the gateway's own evidence during real calls does that, for `auto`).

use super::client::Ask;
use super::{Gateway, LlmError, Message, ModelReply, ToolCall, ToolSpec, Toolset, wire};
use hermes_config::{Profile, ToolMode};
use serde_json::json;

/// What a profile's server and model did with one offered tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolProbe {
    /// A native `tool_calls` answer, a worded answer with tools offered, and a tool's result
    /// read back: `native` (or `auto`) works.
    Native,
    /// The model wrote the call as text: `text` fits (`auto` switches only on evidence the
    /// server ignored the tools, so name `text`).
    WroteText,
    /// The server refused or dropped the tools: use `text` (`auto` switches on its own).
    Ignored(String),
    /// The model answered without calling the tool: it may not manage tools at all.
    NoCall(String),
    /// Native calls come back, but the rest of a task cannot work natively (the reason): `text`.
    CallsOnly(String),
}

/// What the probe means for a profile with its `tool_mode` as set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeAdvice {
    /// The mode set is one tasks work with: nothing to change.
    pub fits: bool,
    /// What was seen and, when it does not fit, the `tool_mode` to set.
    pub words: String,
}

impl ProbeAdvice {
    fn new(fits: bool, words: String) -> ProbeAdvice {
        ProbeAdvice { fits, words }
    }
}

impl ToolProbe {
    /// The verdict for profile `profile`, whose `tool_mode` is `set`. The probe itself always
    /// asks natively, so a profile already set to `text` is not told to set it again.
    pub fn advice(&self, profile: &str, set: ToolMode) -> ProbeAdvice {
        let text_set = set == ToolMode::Text;
        let seen = match self {
            ToolProbe::Native => {
                let words = if text_set {
                    "native tool calls work too; tool_mode: text is set (native or auto would also do)"
                } else {
                    "native tool calls work (tool_mode: native, or auto)"
                };
                return ProbeAdvice::new(true, words.into());
            }
            ToolProbe::NoCall(said) => {
                let seen = format!("the model did not call the offered tool (it said: {said})");
                let words = if text_set {
                    format!(
                        "{seen}, asked natively; tool_mode: text is set — if its tasks end without calling tools, try a bigger model"
                    )
                } else {
                    format!(
                        "{seen}; small models often cannot — try tool_mode: text, or a bigger model"
                    )
                };
                return ProbeAdvice::new(false, words);
            }
            ToolProbe::WroteText => "the model writes tool calls as text".to_string(),
            ToolProbe::Ignored(why) => why.clone(),
            ToolProbe::CallsOnly(why) => format!("native tool calls come back, but {why}"),
        };
        if text_set {
            return ProbeAdvice::new(true, format!("{seen}; tool_mode: text is set"));
        }
        let auto = match self {
            ToolProbe::Ignored(_) => " (auto would switch to it on the first task)",
            _ => "",
        };
        ProbeAdvice::new(
            false,
            format!("{seen}: set model.profiles.{profile}.tool_mode: text{auto}"),
        )
    }
}

/// The word the probe's tool returns, for the model to repeat.
const WORD: &str = "heliotrope";
/// The call id of the probe's one call.
const CALL_ID: &str = "call_probe";

fn ping() -> ToolSpec {
    ToolSpec {
        name: "ping".into(),
        description: "Answers pong and a word. Call it when asked to ping.".into(),
        parameters: json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}),
    }
}

fn system() -> Message {
    Message::system("You are a test of tool calling. Use the tools offered when asked to.")
}

fn ask_to_call() -> Message {
    Message::user("Call the tool ping with n = 1, then tell me the word it returns.")
}

/// What the tool returns: the word, and enough numbers after it (≈ 175 tokens by our estimate,
/// more by a real tokenizer) that a server's prompt count shows whether the message was there,
/// far beyond what the call message before it adds.
fn tool_result() -> String {
    let filler: Vec<String> = (1..=200).map(|n| n.to_string()).collect();
    format!("pong: the word is {WORD}. Counted: {}", filler.join(" "))
}

impl Gateway {
    /// Offer one tool natively and ask the model to call it; if it does, ask for a worded answer
    /// with the tool still offered, and send a tool result back as a `tool` message. Four short
    /// requests at most.
    pub async fn probe_tools(&self, profile_name: &str) -> Result<ToolProbe, LlmError> {
        let profile = self.profile(profile_name)?;
        let messages = [system(), ask_to_call()];
        let none = Toolset::default();
        // The same question without the tool first: a server that renders the tool counts
        // more prompt tokens with it. It is also the baseline for the tool result's count.
        let bare = self.native(profile_name, profile, &messages, &none).await?;
        let tools = Toolset::new(vec![ping()]);
        let reply = match self.native(profile_name, profile, &messages, &tools).await {
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
        match reply.tool_calls.first() {
            Some(_) if reply.native_calls => {}
            Some(_) => return Ok(ToolProbe::WroteText),
            None => {
                let said = hermes_store::util::text::one_line(&reply.content, 80);
                return Ok(ToolProbe::NoCall(said));
            }
        }
        // Both asked, so that the verdict names everything that fails.
        let faults: Vec<String> = [
            self.blanks_words(profile_name, profile, &tools).await?,
            self.drops_results(profile_name, profile, &bare).await?,
        ]
        .into_iter()
        .flatten()
        .collect();
        Ok(if faults.is_empty() {
            ToolProbe::Native
        } else {
            ToolProbe::CallsOnly(faults.join("; and "))
        })
    }

    async fn native(
        &self,
        profile_name: &str,
        profile: &Profile,
        messages: &[Message],
        tools: &Toolset,
    ) -> Result<ModelReply, LlmError> {
        let ask = Ask {
            messages,
            tools,
            deadline: None,
        };
        self.exchange(profile_name, profile, ask, ToolMode::Native)
            .await
    }

    /// Asked for a word with the tool offered, does the server answer nothing at all? Every
    /// task ends with such an answer.
    async fn blanks_words(
        &self,
        profile_name: &str,
        profile: &Profile,
        tools: &Toolset,
    ) -> Result<Option<String>, LlmError> {
        let messages = [
            system(),
            Message::user("Do not call any tool now. Reply with the single word: ready"),
        ];
        let reply = self.native(profile_name, profile, &messages, tools).await?;
        Ok(wire::tools_blanked(&reply, tools).map(|_| {
            "asked for a worded answer with tools offered, the server answered nothing at all \
             (so a task could never end with an answer)"
                .to_string()
        }))
    }

    /// Sent a tool's result as a `tool` message, does it reach the model? The server's prompt
    /// count says (compared with `bare`, the same conversation before the call); without counts,
    /// whether the answer repeats the word the tool returned. No tools are offered with it, so a
    /// server that blanks worded answers cannot hide the result.
    async fn drops_results(
        &self,
        profile_name: &str,
        profile: &Profile,
        bare: &ModelReply,
    ) -> Result<Option<String>, LlmError> {
        let call = ToolCall::new(CALL_ID, "ping", json!({"n": 1}));
        let result = tool_result();
        let messages = [
            system(),
            ask_to_call(),
            Message::assistant("", vec![call]),
            Message::tool(CALL_ID, result.clone()),
        ];
        let reply = self
            .native(profile_name, profile, &messages, &Toolset::default())
            .await?;
        let result_tokens = super::estimate_tokens(&result);
        if !bare.usage.estimated && !reply.usage.estimated {
            let grew = reply
                .usage
                .prompt_tokens
                .saturating_sub(bare.usage.prompt_tokens);
            return Ok((grew < result_tokens / 2).then(|| {
                format!(
                    "the server drops `tool` messages (it counted {grew} more prompt tokens with a tool result of about {result_tokens}), so the model never sees a tool's result"
                )
            }));
        }
        Ok((!reply.content.to_lowercase().contains(WORD)).then(|| {
            format!(
                "the answer to a tool result did not use it (it said: {}): the server may drop `tool` messages",
                hermes_store::util::text::one_line(&reply.content, 80)
            )
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_probe() -> [ToolProbe; 5] {
        [
            ToolProbe::Native,
            ToolProbe::WroteText,
            ToolProbe::Ignored("the server refused the tools".into()),
            ToolProbe::NoCall("hello".into()),
            ToolProbe::CallsOnly("the server drops `tool` messages".into()),
        ]
    }

    #[test]
    fn a_profile_already_set_to_text_is_not_told_to_set_it() {
        for probe in every_probe() {
            let advice = probe.advice("fast", ToolMode::Text);
            assert!(!advice.words.contains("set model.profiles"), "{advice:?}");
            assert!(
                advice.words.contains("tool_mode: text is set"),
                "{advice:?}"
            );
            // Only a model that calls no tool at all is still worth a warning.
            assert_eq!(
                advice.fits,
                !matches!(probe, ToolProbe::NoCall(_)),
                "{probe:?}"
            );
        }
    }

    #[test]
    fn native_and_auto_profiles_are_told_the_mode_they_need() {
        for set in [ToolMode::Native, ToolMode::Auto] {
            for probe in every_probe() {
                let advice = probe.advice("fast", set);
                assert!(advice.words.contains("tool_mode"), "{advice:?}");
                assert_eq!(advice.fits, probe == ToolProbe::Native, "{probe:?}");
                if matches!(
                    probe,
                    ToolProbe::WroteText | ToolProbe::Ignored(_) | ToolProbe::CallsOnly(_)
                ) {
                    assert!(
                        advice
                            .words
                            .contains("set model.profiles.fast.tool_mode: text"),
                        "{advice:?}"
                    );
                }
            }
        }
    }
}
