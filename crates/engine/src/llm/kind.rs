//! What kind of failure a model call met, as an enum the gateway decides on: whether another
//! profile of a fallback chain may be asked, or the failure is final.
//!
//! Owns: [`FailureKind`] and [`StatusCause`], and reading a rejected request's body into a
//! cause once, where it arrives (the error's `code`/`type` fields first, its words only when a
//! server sends no code). Must not: look at error text anywhere else — callers match on the
//! enums.

use serde_json::Value;

/// Why a server rejected a request with a 4xx, as far as its body says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusCause {
    /// The body says nothing we recognise.
    Unspecified,
    /// The conversation does not fit the model's context: a model with a larger one could
    /// take it.
    ContextLength,
    /// The model or its provider declined the request on purpose (content policy, safety
    /// filter): that is an answer, not a fault.
    ContentPolicy,
}

/// What went wrong, in the terms that decide what happens next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// No connection, or the connection refused or reset.
    Unreachable,
    /// No answer within the profile's `timeout_s`.
    Timeout,
    /// HTTP 5xx after the retries.
    ServerError,
    /// HTTP 429 after the retries, or a wait longer than allowed.
    RateLimited,
    /// A reply larger than `model.max_response_bytes`.
    TooLarge,
    /// The conversation is longer than the model's context.
    ContextLength,
    /// The key was refused (401, 403).
    Unauthorized,
    /// The server does not have the model, or the URL is not an API (404).
    NotFound,
    /// The server refused the request's tools.
    ToolsRejected,
    /// A reply that is not an OpenAI chat completion.
    BadResponse,
    /// Declined on purpose (a 400 naming a content policy).
    Refused,
    /// Another 4xx: the request itself is wrong for any server.
    Rejected,
    /// Not a server's answer: an unknown profile, a request that cannot be written.
    Local,
}

impl FailureKind {
    /// The kind in a few words, for notes and summaries (the error itself says more).
    pub fn words(self) -> &'static str {
        match self {
            FailureKind::Unreachable => "unreachable",
            FailureKind::Timeout => "no answer in time",
            FailureKind::ServerError => "server error",
            FailureKind::RateLimited => "rate limited",
            FailureKind::TooLarge => "reply too large",
            FailureKind::ContextLength => "context too long for its model",
            FailureKind::Unauthorized => "key refused",
            FailureKind::NotFound => "model or URL not found",
            FailureKind::ToolsRejected => "tools refused",
            FailureKind::BadResponse => "not a chat completion",
            FailureKind::Refused => "refused",
            FailureKind::Rejected => "request rejected",
            FailureKind::Local => "not sent",
        }
    }

    /// May a different server fix it? Everything that is about *this* server — down, slow,
    /// failing, overloaded, its key, its model, its limits — may; a reply given on purpose, a
    /// request any server would reject, and our own faults may not.
    pub(crate) fn falls_back(self) -> bool {
        match self {
            FailureKind::Unreachable
            | FailureKind::Timeout
            | FailureKind::ServerError
            | FailureKind::RateLimited
            | FailureKind::TooLarge
            | FailureKind::ContextLength
            | FailureKind::Unauthorized
            | FailureKind::NotFound
            | FailureKind::ToolsRejected
            | FailureKind::BadResponse => true,
            FailureKind::Refused | FailureKind::Rejected | FailureKind::Local => false,
        }
    }

    /// The kind of an HTTP status, given what its body said.
    pub(crate) fn of_status(status: u16, cause: StatusCause, tools_rejected: bool) -> FailureKind {
        match (status, cause) {
            (429, _) => FailureKind::RateLimited,
            (500..=599, _) => FailureKind::ServerError,
            (_, StatusCause::ContentPolicy) => FailureKind::Refused,
            (_, StatusCause::ContextLength) => FailureKind::ContextLength,
            (401 | 403, _) => FailureKind::Unauthorized,
            (404, _) => FailureKind::NotFound,
            (413, _) => FailureKind::ContextLength,
            _ if tools_rejected => FailureKind::ToolsRejected,
            _ => FailureKind::Rejected,
        }
    }
}

/// Error codes and types servers send for a conversation too long for the model: OpenAI and
/// vLLM (`context_length_exceeded`), llama.cpp (`exceed_context_size_error`), others.
const CONTEXT_CODES: [&str; 4] = [
    "context_length_exceeded",
    "exceed_context_size_error",
    "context_window_exceeded",
    "string_above_max_length",
];

/// Error codes and types for a request declined by a content policy: OpenAI, Azure OpenAI
/// (`content_filter`, `ResponsibleAIPolicyViolation`), others.
const POLICY_CODES: [&str; 5] = [
    "content_policy_violation",
    "content_filter",
    "responsibleaipolicyviolation",
    "safety",
    "moderation",
];

/// Phrases of servers that send no code: llama-cpp-python ("Requested tokens (N) exceed
/// context window of M"), vLLM ("maximum context length is N tokens"), llama.cpp ("exceeds the
/// available context size"), Ollama, hosted gateways.
const CONTEXT_PHRASES: [&str; 6] = [
    "context window",
    "context length",
    "context size",
    "maximum context",
    "too many tokens",
    "prompt is too long",
];

/// Phrases of a policy refusal without a code ("rejected as a result of our safety system",
/// "violates our content policy", "flagged by the content management policy", "flagged by
/// moderation", "blocked by safety settings").
const POLICY_PHRASES: [&str; 7] = [
    "content policy",
    "safety system",
    "content management policy",
    "usage policies",
    "moderation",
    "safety filter",
    "safety settings",
];

/// The cause a 4xx body gives, read once where the reply arrives.
pub(crate) fn status_cause(status: u16, body: &str) -> StatusCause {
    if !(400..500).contains(&status) || status == 429 {
        return StatusCause::Unspecified;
    }
    let json: Option<Value> = serde_json::from_str(body).ok();
    let error = json.as_ref().and_then(|v| v.get("error"));
    let codes: Vec<String> = ["/code", "/type"]
        .iter()
        .filter_map(|p| error.and_then(|e| e.pointer(p)).and_then(Value::as_str))
        .map(str::to_ascii_lowercase)
        .collect();
    let has = |list: &[&str]| codes.iter().any(|c| list.iter().any(|k| c.contains(k)));
    if has(&POLICY_CODES) {
        return StatusCause::ContentPolicy;
    }
    if has(&CONTEXT_CODES) {
        return StatusCause::ContextLength;
    }
    let message = error
        .and_then(|e| e.get("message").and_then(Value::as_str).or(e.as_str()))
        .or_else(|| json.as_ref().and_then(|v| v.get("detail")?.as_str()))
        .unwrap_or(body)
        .to_ascii_lowercase();
    if POLICY_PHRASES.iter().any(|p| message.contains(p)) {
        StatusCause::ContentPolicy
    } else if CONTEXT_PHRASES.iter().any(|p| message.contains(p)) {
        StatusCause::ContextLength
    } else {
        StatusCause::Unspecified
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_decide_before_words() {
        let openai = r#"{"error":{"message":"This model's maximum context length is 8192 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}"#;
        assert_eq!(status_cause(400, openai), StatusCause::ContextLength);
        let llamacpp = r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error"}}"#;
        assert_eq!(status_cause(400, llamacpp), StatusCause::ContextLength);
        let policy = r#"{"error":{"message":"Your request was rejected as a result of our safety system.","type":"invalid_request_error","code":"content_policy_violation"}}"#;
        assert_eq!(status_cause(400, policy), StatusCause::ContentPolicy);
        let azure = r#"{"error":{"code":"content_filter","message":"The response was filtered"}}"#;
        assert_eq!(status_cause(400, azure), StatusCause::ContentPolicy);
        // A policy refusal that mentions the context is still a refusal.
        let both = r#"{"error":{"code":"content_policy_violation","message":"context length fine, content not"}}"#;
        assert_eq!(status_cause(400, both), StatusCause::ContentPolicy);
    }

    #[test]
    fn servers_without_codes_are_read_by_their_words() {
        let python = r#"{"error":{"message":"Requested tokens (9000) exceed context window of 8192","type":"internal_server_error"}}"#;
        assert_eq!(status_cause(400, python), StatusCause::ContextLength);
        assert_eq!(
            status_cause(400, "prompt is too long for this model"),
            StatusCause::ContextLength
        );
        assert_eq!(
            status_cause(400, r#"{"detail":"violates our content policy"}"#),
            StatusCause::ContentPolicy
        );
        assert_eq!(
            status_cause(400, r#"{"error":"temperature must be <= 2"}"#),
            StatusCause::Unspecified
        );
        // Only a 4xx has a cause; a 500 saying "context" is a server failure.
        assert_eq!(
            status_cause(500, "context window exceeded"),
            StatusCause::Unspecified
        );
    }

    #[test]
    fn which_kinds_fall_back() {
        let k = |status, cause| FailureKind::of_status(status, cause, false);
        use StatusCause::*;
        assert!(k(503, Unspecified).falls_back());
        assert!(k(429, Unspecified).falls_back());
        assert!(k(400, ContextLength).falls_back());
        assert!(k(401, Unspecified).falls_back());
        assert!(k(404, Unspecified).falls_back());
        assert_eq!(k(400, ContentPolicy), FailureKind::Refused);
        assert!(!k(400, ContentPolicy).falls_back(), "a refusal is final");
        assert!(!k(400, Unspecified).falls_back(), "a bad request is final");
        assert!(!k(422, Unspecified).falls_back());
        assert!(FailureKind::of_status(400, Unspecified, true).falls_back());
        assert!(FailureKind::Timeout.falls_back() && FailureKind::Unreachable.falls_back());
        assert!(!FailureKind::Local.falls_back());
    }
}
