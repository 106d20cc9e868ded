//! The rows of a task's trace, built in one place: a model call, a tool call, a note. The loop
//! says what happened; these say how it is written down.

use crate::llm::{ModelReply, ToolCall};
use crate::tools::ToolOutcome;
use hermes_store::{NewStep, StepKind};

/// A model call that answered: named by the profile that answered (a fallback's, when the
/// chain moved on), with the model id the server reported (else the one asked for), its
/// fingerprint and the profile's identity as last checked.
pub(super) fn model(step: i64, reply: &ModelReply, ms: i64) -> NewStep {
    let calls = (!reply.tool_calls.is_empty()).then(|| calls_summary(&reply.tool_calls));
    let served = &reply.served;
    NewStep {
        step,
        kind: StepKind::Model,
        name: served.profile.clone(),
        request_tokens: reply.usage.prompt_tokens.into(),
        result_tokens: reply.usage.completion_tokens.into(),
        arguments: calls,
        output: (!reply.content.trim().is_empty()).then(|| reply.content.clone()),
        error: (!reply.parse_warnings.is_empty()).then(|| {
            format!(
                "unparseable tool call treated as text: {}",
                reply.parse_warnings.join("; ")
            )
        }),
        duration_ms: ms,
        model: served
            .model
            .clone()
            .or_else(|| (!served.requested.is_empty()).then(|| served.requested.clone())),
        fingerprint: served.fingerprint.clone(),
        identity: served.identity.clone(),
    }
}

/// A model call that failed.
pub(super) fn model_error(step: i64, profile: &str, error: String, ms: i64) -> NewStep {
    NewStep {
        error: Some(error),
        duration_ms: ms,
        ..NewStep::new(step, StepKind::Model, profile)
    }
}

/// A tool call and what the model was shown of its result.
pub(super) fn tool(step: i64, call: &ToolCall, outcome: &ToolOutcome) -> NewStep {
    NewStep {
        result_tokens: outcome.result_tokens.into(),
        arguments: Some(call.arguments.to_string()),
        output: Some(outcome.content.clone()),
        error: outcome.error.as_ref().map(|e| e.to_string()),
        duration_ms: outcome.duration.as_millis() as i64,
        ..NewStep::new(step, StepKind::Tool, &call.name)
    }
}

/// A call held for a person, or what became of it: `output` is `waiting`, `approved by …`,
/// `pre-approved by the job` or `denied` (with the reason as the error).
pub(super) fn approval(
    step: i64,
    call: &ToolCall,
    output: String,
    error: Option<String>,
) -> NewStep {
    NewStep {
        arguments: Some(super::guard::canonical(&call.arguments)),
        output: Some(output),
        error,
        ..NewStep::new(step, StepKind::Approval, &call.name)
    }
}

/// Something the loop did or saw that is neither a model nor a tool call.
pub(super) fn note(step: i64, text: Option<String>, error: Option<String>) -> NewStep {
    NewStep {
        output: text,
        error,
        ..NewStep::new(step, StepKind::Note, "")
    }
}

/// The calls a model asked for, as stored in its trace row.
fn calls_summary(calls: &[ToolCall]) -> String {
    let v: Vec<serde_json::Value> = calls
        .iter()
        .map(|c| serde_json::json!({"name": c.name, "arguments": c.arguments}))
        .collect();
    serde_json::Value::Array(v).to_string()
}
