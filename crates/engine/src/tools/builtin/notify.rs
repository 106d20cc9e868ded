//! Built-in tool `notify`: the model queues a notice on a configured channel.
//!
//! Owns: the tool's schema and description (which list the configured channel names) and
//! turning a call into an outbox entry through the [`Notifier`] handle.
//! Must not: accept an address or URL from the model — it names a channel, the settings say
//! where that channel goes; send anything itself (the notifier's sender does, with retries).

use crate::notify::Notifier;
use crate::tools::{Tool, ToolContext, ToolError, ToolInfo, tool_with};
use hermes_store::NewNotice;
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;

/// Longest title, in characters: it becomes an email subject.
pub(crate) const MAX_TITLE_CHARS: usize = 200;
/// Longest text, in characters.
pub(crate) const MAX_TEXT_CHARS: usize = 20_000;

/// The notify tools for this notifier: none when no channel is configured, since a tool that
/// can only fail is not worth its schema in every model call.
pub fn tools(notifier: Notifier) -> Vec<Arc<dyn Tool>> {
    if notifier.channels().is_empty() {
        return Vec::new();
    }
    vec![tool_with(notifier.clone(), notify_info(&notifier), notify)]
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NotifyArgs {
    channel: String,
    title: String,
    text: String,
}

/// The description and schema name the configured channels.
fn notify_info(notifier: &Notifier) -> ToolInfo {
    let channels = notifier.channels();
    let description = format!(
        "Send a notice to the user on a configured channel (channels: {}). Use it when the \
         task asks to notify, alert, email or report to the user, or to deliver a result \
         the user is not waiting for. Do not use it to answer the current request: your \
         final answer already reaches the user. You name a channel, never an address. \
         `text` may be Markdown; `title` is the subject line.",
        if channels.is_empty() {
            "none configured".to_string()
        } else {
            channels.join(", ")
        }
    );
    let parameters = json!({
        "type": "object",
        "properties": {
            "channel": {
                "type": "string",
                "enum": channels,
                "description": "Where to send it: one of the configured channel names."
            },
            "title": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_TITLE_CHARS,
                "description": "Subject line, e.g. \"Daily digest — 2026-11-30\"."
            },
            "text": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_TEXT_CHARS,
                "description": "The notice itself; Markdown is rendered for email."
            }
        },
        "required": ["channel", "title", "text"],
        "additionalProperties": false
    });
    ToolInfo::new("notify", description, parameters)
}

async fn notify(notifier: Notifier, a: NotifyArgs, ctx: ToolContext) -> Result<Value, ToolError> {
    let title = a.title.trim().to_string();
    if title.is_empty() {
        return Err(ToolError::InvalidArguments(
            "title must not be empty".into(),
        ));
    }
    let title_chars = title.chars().count();
    if title_chars > MAX_TITLE_CHARS {
        return Err(ToolError::InvalidArguments(format!(
            "title is {title_chars} characters; keep it to {MAX_TITLE_CHARS}"
        )));
    }
    let text_chars = a.text.chars().count();
    if text_chars > MAX_TEXT_CHARS {
        return Err(ToolError::InvalidArguments(format!(
            "text is {text_chars} characters; keep it to {MAX_TEXT_CHARS} (summarise)"
        )));
    }
    if a.text.trim().is_empty() {
        return Err(ToolError::InvalidArguments("text must not be empty".into()));
    }
    let notice = NewNotice {
        channel: a.channel.clone(),
        title,
        body: a.text,
        task_id: Some(ctx.task_id.clone()).filter(|t| !t.is_empty()),
        job_id: ctx.job_id.clone(),
        ..NewNotice::default()
    };
    match notifier.enqueue(notice).await {
        Ok(id) => Ok(json!({"queued": true, "notice_id": id, "channel": a.channel})),
        // Unknown channel: the message lists the configured ones, so the model can correct.
        Err(e) => Err(ToolError::Failed(e.to_string())),
    }
}
