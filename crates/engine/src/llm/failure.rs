//! One model call's failure as it happened — a refused connection, a timeout, an HTTP status
//! with its body and `Retry-After`, a reply that is not what was asked for — and how it becomes
//! the [`LlmError`] a user reads: the server named, its text redacted, the setting to change.
//!
//! Owns: classifying an attempt's failure (which ones are worth a retry, how long a server
//! asks to wait) and wording it. Must not: retry or sleep (the gateway decides), or quote an
//! API key.

use super::LlmError;
use super::error::{body_detail, connect_hint, context_hint, redact, status_hint};
use super::kind::StatusCause;
use hermes_config::Profile;
use std::time::Duration;

/// A `Retry-After` is read up to this; anything longer is as good as "not today".
pub(super) const RETRY_AFTER_CEILING: Duration = Duration::from_secs(24 * 3600);
/// How much of an error body is quoted in an error message.
pub(super) const ERROR_BODY_CHARS: usize = 400;

/// `Retry-After` as delta-seconds or an HTTP date (at most a day).
pub(crate) fn parse_retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    let wait = if let Ok(secs) = value.parse::<u64>() {
        Duration::from_secs(secs)
    } else {
        let when = chrono::DateTime::parse_from_rfc2822(value).ok()?;
        let delta = when.with_timezone(&chrono::Utc) - chrono::Utc::now();
        delta.to_std().unwrap_or(Duration::ZERO)
    };
    Some(wait.min(RETRY_AFTER_CEILING))
}

/// One attempt's failure, before it is worded for the user.
pub(super) enum Failure {
    Connect(String),
    Timeout,
    Status {
        status: u16,
        body: String,
        retry_after: Option<Duration>,
    },
    BadResponse(String),
    /// The body passed `model.max_response_bytes` (the cap).
    TooLarge(u64),
}

impl Failure {
    pub(super) fn from_reqwest(e: reqwest::Error) -> Failure {
        if e.is_timeout() {
            return Failure::Timeout;
        }
        Failure::Connect(root_cause(&e, e.is_connect()))
    }

    pub(super) fn retry_after(&self) -> Option<Duration> {
        match self {
            Failure::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    pub(super) fn label(&self) -> String {
        match self {
            Failure::Connect(_) => "connect-error".into(),
            Failure::Timeout => "timeout".into(),
            Failure::Status { status, .. } => status.to_string(),
            Failure::BadResponse(_) => "bad-response".into(),
            Failure::TooLarge(_) => "too-large".into(),
        }
    }

    pub(super) fn into_error(
        self,
        profile_name: &str,
        profile: &Profile,
        attempts: u32,
        place: &str,
    ) -> LlmError {
        let key = &profile.api_key;
        match self {
            Failure::Connect(reason) => LlmError::Connect {
                profile: profile_name.to_string(),
                base_url: profile.base_url.clone(),
                reason: redact(&reason, key),
                attempts,
                hint: connect_hint(profile_name, &profile.base_url, place),
            },
            Failure::Timeout => LlmError::Timeout {
                profile: profile_name.to_string(),
                base_url: profile.base_url.clone(),
                timeout_s: profile.timeout_s.max(1),
                attempts,
            },
            Failure::Status { status, body, .. }
                if super::kind::status_cause(status, &body) == StatusCause::ContentPolicy =>
            {
                LlmError::ContentRefused {
                    profile: profile_name.to_string(),
                    base_url: profile.base_url.clone(),
                    model: profile.model.clone(),
                    how: format!(
                        "HTTP {status}: {}",
                        redact(&body_detail(&body, ERROR_BODY_CHARS), key)
                    ),
                    attempts,
                }
            }
            Failure::Status { status, body, .. } => {
                let cause = super::kind::status_cause(status, &body);
                let hint = match cause {
                    StatusCause::ContextLength => context_hint(profile_name, place),
                    _ => status_hint(status, profile_name, &profile.model, place),
                };
                LlmError::Status {
                    tools_rejected: super::wire::rejects_tools(status, &body),
                    cause,
                    status,
                    profile: profile_name.to_string(),
                    base_url: profile.base_url.clone(),
                    model: profile.model.clone(),
                    detail: redact(&body_detail(&body, ERROR_BODY_CHARS), key),
                    attempts,
                    hint: hint.into(),
                }
            }
            Failure::BadResponse(reason) => LlmError::BadResponse {
                profile: profile_name.to_string(),
                base_url: profile.base_url.clone(),
                reason: redact(&reason, key),
            },
            Failure::TooLarge(cap) => LlmError::TooLarge {
                profile: profile_name.to_string(),
                base_url: profile.base_url.clone(),
                cap,
            },
        }
    }
}

/// The innermost cause of a transport error, worded plainly ("connection refused").
fn root_cause(e: &reqwest::Error, connecting: bool) -> String {
    if let Some(io) = hermes_store::util::find_cause::<std::io::Error>(e) {
        return match io.kind() {
            std::io::ErrorKind::ConnectionRefused => "connection refused".to_string(),
            std::io::ErrorKind::ConnectionReset => "connection reset by the server".to_string(),
            _ => io.to_string(),
        };
    }
    let mut innermost = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        innermost = s.to_string();
        source = s.source();
    }
    if connecting {
        innermost
    } else {
        format!("the connection failed mid-request: {innermost}")
    }
}
