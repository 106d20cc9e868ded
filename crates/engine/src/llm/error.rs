//! What can go wrong talking to a model server, each case worded so the user knows what to do.
//!
//! Owns: [`LlmError`], which cases are worth retrying, and the redaction of API keys from any
//! text that came back from a server. Must not: hold a key — errors are built from text that
//! has already been redacted.

use super::kind::{FailureKind, StatusCause};
use hermes_config::ConfigSource;

/// Why `doctor`'s look at a profile's server (`GET /models`) failed; each names the server
/// and the setting to change.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("no profile '{0}'")]
    UnknownProfile(String),
    #[error("cannot reach {base_url} ({reason}): {hint}")]
    Unreachable {
        base_url: String,
        reason: String,
        hint: String,
    },
    #[error(
        "{base_url} refused the API key ({status}); check model.profiles.{profile}.api_key {place}"
    )]
    KeyRefused {
        base_url: String,
        status: reqwest::StatusCode,
        profile: String,
        place: String,
    },
    #[error(
        "{base_url} is reachable but does not list model {model} (it has: {listed}); pull it (`ollama pull {model}`) or change model.profiles.{profile}.model {place}"
    )]
    ModelMissing {
        base_url: String,
        model: String,
        listed: String,
        profile: String,
        place: String,
    },
}

/// A failed model call. Every message names the server and the setting to change; none
/// contains an API key (server text is redacted before it gets here).
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    #[error(
        "unknown model profile '{profile}'; defined profiles: {known}. Pick one of those or add it under model.profiles in settings.yaml"
    )]
    UnknownProfile { profile: String, known: String },

    #[error(
        "model profile '{profile}' is unusable: {reason}. Fix model.profiles.{profile} in settings.yaml"
    )]
    InvalidProfile { profile: String, reason: String },

    #[error("cannot set up the HTTP client for the model gateway: {reason}")]
    Setup { reason: String },

    #[error(
        "cannot reach the model server at {base_url} ({reason}) after {attempts} attempt(s): {hint}"
    )]
    Connect {
        profile: String,
        base_url: String,
        reason: String,
        attempts: u32,
        hint: String,
    },

    #[error(
        "the model server at {base_url} did not answer within {timeout_s} s ({attempts} attempt(s)): raise model.profiles.{profile}.timeout_s, use a smaller model, or check the server's load"
    )]
    Timeout {
        profile: String,
        base_url: String,
        timeout_s: u64,
        attempts: u32,
    },

    #[error(
        "the model server at {base_url} answered HTTP {status} for model '{model}' after {attempts} attempt(s): {detail}. {hint}"
    )]
    Status {
        status: u16,
        profile: String,
        base_url: String,
        model: String,
        /// The server's own explanation (its `error.message`, or a capped excerpt of the body).
        detail: String,
        attempts: u32,
        /// Boxed, not a `String`: it keeps the error small enough to return by value.
        hint: Box<str>,
        /// The server said that what it rejects is the request's tools: its error names the
        /// `tools` or `tool_choice` parameter, or says tools are not supported (see
        /// `wire::rejects_tools`). The evidence `tool_mode: auto` switches to text mode on.
        tools_rejected: bool,
        /// What the body says the rejection is about (a 4xx only): read once, where it
        /// arrived, so the fallback decision is made on this, never on the text.
        cause: StatusCause,
    },

    /// The model or its provider declined the request for its content (a content policy, a
    /// safety or moderation filter): a 4xx that says so, or a reply stopped with
    /// `finish_reason: content_filter`. An answer about the content, not a fault of the
    /// server or the settings: the same content sent again is refused again.
    #[error(
        "the model server at {base_url} refused the request to model '{model}' for its content ({how}): its content policy or safety filter declined it. Retrying the same content will not help (it was not retried): rephrase the task, or leave out what was flagged"
    )]
    ContentRefused {
        profile: String,
        base_url: String,
        model: String,
        /// How it said so: `HTTP 400: <its message>`, or `finish_reason content_filter`.
        how: String,
        attempts: u32,
    },

    #[error(
        "the model server at {base_url} sent something that is not an OpenAI chat completion ({reason}): check that model.profiles.{profile}.base_url points at an OpenAI-compatible /v1 endpoint"
    )]
    BadResponse {
        profile: String,
        base_url: String,
        reason: String,
    },

    #[error(
        "the model server at {base_url} sent a reply larger than {cap} bytes (model.max_response_bytes); it was refused as it arrived. Lower model.profiles.{profile}.max_tokens, or raise the cap if such replies are expected"
    )]
    TooLarge {
        profile: String,
        base_url: String,
        cap: u64,
    },

    /// serde_json cannot fail on the request's types; this is here so that, were it ever to,
    /// the task fails with a reason rather than the daemon with a panic.
    #[error(
        "cannot write the request for model profile '{profile}' as JSON ({reason}); this is a bug in hermes-agent: please report it with the task's trace"
    )]
    Encode { profile: String, reason: String },

    #[error(
        "the model server at {base_url} is rate limited until {until}, {why}: not waiting. Try again later, use another profile than '{profile}', or raise {setting}"
    )]
    RateLimited {
        profile: String,
        base_url: String,
        /// RFC 3339, UTC.
        until: String,
        /// Why the wait was not taken.
        why: String,
        /// The setting whose bound the wait passed.
        setting: &'static str,
    },

    /// Every profile of a fallback chain failed; `tried` says how each one did, in order.
    #[error(
        "model profile '{profile}' and its fallbacks all failed — {}. The last one: {last}",
        tried.join("; ")
    )]
    Exhausted {
        profile: String,
        /// `NAME: what happened` for each profile asked or skipped.
        tried: Vec<String>,
        last: Box<LlmError>,
    },
}

impl LlmError {
    /// Network failures, timeouts, 429 and 5xx may pass; other 4xx mean the request itself is
    /// wrong and sending it again would fail the same way.
    pub fn is_retryable(&self) -> bool {
        match self {
            LlmError::Connect { .. } | LlmError::Timeout { .. } => true,
            LlmError::Status { status, .. } => *status == 429 || (500..=599).contains(status),
            _ => false,
        }
    }

    /// What failed, without the advice: for the log line of an attempt that will be retried.
    /// The advice comes once, with the error the call ends with, instead of on every attempt.
    pub fn retry_cause(&self) -> String {
        match self {
            LlmError::Connect {
                base_url, reason, ..
            } => format!("cannot reach {base_url} ({reason})"),
            LlmError::Timeout {
                base_url,
                timeout_s,
                ..
            } => format!("{base_url} did not answer within {timeout_s} s"),
            LlmError::Status {
                base_url,
                status,
                detail,
                ..
            } => format!("{base_url} answered HTTP {status}: {detail}"),
            other => other.to_string(),
        }
    }

    /// HTTP attempts made before giving up (0 for errors raised before any request).
    pub fn attempts(&self) -> u32 {
        match self {
            LlmError::Connect { attempts, .. }
            | LlmError::Timeout { attempts, .. }
            | LlmError::Status { attempts, .. }
            | LlmError::ContentRefused { attempts, .. } => *attempts,
            LlmError::Exhausted { last, .. } => last.attempts(),
            _ => 0,
        }
    }

    /// The kind of failure, which decides whether a fallback profile is asked.
    pub fn kind(&self) -> FailureKind {
        match self {
            LlmError::Connect { .. } => FailureKind::Unreachable,
            LlmError::Timeout { .. } => FailureKind::Timeout,
            LlmError::Status {
                status,
                cause,
                tools_rejected,
                ..
            } => FailureKind::of_status(*status, *cause, *tools_rejected),
            LlmError::ContentRefused { .. } => FailureKind::Refused,
            LlmError::BadResponse { .. } => FailureKind::BadResponse,
            LlmError::TooLarge { .. } => FailureKind::TooLarge,
            LlmError::RateLimited { .. } => FailureKind::RateLimited,
            LlmError::Exhausted { last, .. } => last.kind(),
            LlmError::UnknownProfile { .. }
            | LlmError::InvalidProfile { .. }
            | LlmError::Setup { .. }
            | LlmError::Encode { .. } => FailureKind::Local,
        }
    }
}

/// Where a profile's settings are changed, as error messages say it: `in FILE`, or with no file
/// in use, where to make one. Built from where the configuration came from, which the caller
/// passes in (only the config module reads the environment).
pub(crate) fn settings_place(source: &ConfigSource) -> String {
    match source {
        ConfigSource::File(path) => format!("in {}", path.display()),
        ConfigSource::Defaults { looked_in } => {
            let create = looked_in
                .first()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| DEFAULT_SETTINGS_FILE.to_string());
            format!(
                "in a settings file (none is in use: create {create}, or name one with --config)"
            )
        }
    }
}

/// Where the settings file is looked for on Linux, for when the caller did not say.
const DEFAULT_SETTINGS_FILE: &str = "~/.config/hermes-agent/settings.yaml";

/// What to suggest when the server cannot be reached at all: start it, point the profile
/// elsewhere (`place` is where: see [`settings_place`]), or serve a small model with the script
/// that ships for this case.
pub(crate) fn connect_hint(profile: &str, base_url: &str, place: &str) -> String {
    let start = if base_url.contains(":11434") {
        "is Ollama running (`ollama serve`)?"
    } else {
        "is the model server running and listening there?"
    };
    format!(
        "{start} Or point model.profiles.{profile}.base_url at an OpenAI-compatible server, {place}. \
         No model server at all? scripts/local-model.sh in hermes-agent's source tree serves a \
         small one on loopback and prints the settings to use."
    )
}

/// What to suggest for an HTTP error status; `place` is where the profile is set.
pub(crate) fn status_hint(status: u16, profile: &str, model: &str, place: &str) -> String {
    match status {
        401 | 403 => format!(
            "Check model.profiles.{profile}.api_key {place} (e.g. api_key: ${{OPENAI_API_KEY}})"
        ),
        404 => format!(
            "Check that model '{model}' exists on the server (for Ollama: `ollama pull {model}`) and that model.profiles.{profile}.base_url {place} ends in /v1"
        ),
        429 => {
            "The server is rate limiting: wait and try again, or lower agent.workers".to_string()
        }
        500..=599 => "The server failed; its own logs say why".to_string(),
        _ => format!(
            "The server rejected the request: check that model '{model}' supports tool calling and that model.profiles.{profile}.max_tokens and temperature {place} are in its range"
        ),
    }
}

/// What to suggest when the request was longer than the model's context window.
pub(crate) fn context_hint(profile: &str, place: &str) -> String {
    format!(
        "The conversation is longer than the model's context window: use a model with a larger one for model.profiles.{profile} {place}, serve it with a larger context (llama.cpp -c, Ollama num_ctx), or keep less of it (context.max_dialog_rounds, memory.recall_top_k)"
    )
}

/// Replaces every occurrence of `key` in `text`: a server may echo the key back (an "invalid
/// key sk-…" body), and that text must not reach an error or a log.
pub(crate) fn redact(text: &str, key: &str) -> String {
    if key.is_empty() {
        text.to_string()
    } else {
        text.replace(key, "<redacted>")
    }
}

/// The useful part of an error body: `error.message` or `error` when the body is JSON, else the
/// body itself; capped so a large HTML page does not flood the message.
pub(crate) fn body_detail(body: &str, cap: usize) -> String {
    let from_json = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            let e = v.get("error")?;
            e.get("message")
                .and_then(|m| m.as_str())
                .or_else(|| e.as_str())
                .map(str::to_string)
        });
    let text = from_json.unwrap_or_else(|| body.trim().to_string());
    if text.is_empty() {
        return "(empty body)".to_string();
    }
    let kept = hermes_store::util::text::prefix(&text, cap);
    if kept.len() == text.len() {
        text
    } else {
        format!("{kept}… (cut)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retried_attempt_is_logged_without_the_advice() {
        let e = LlmError::Connect {
            profile: "fast".into(),
            base_url: "http://127.0.0.1:11434/v1".into(),
            reason: "connection refused".into(),
            attempts: 1,
            hint: connect_hint("fast", "http://127.0.0.1:11434/v1", "in settings.yaml"),
        };
        assert!(e.to_string().contains("ollama serve"), "{e}");
        assert_eq!(
            e.retry_cause(),
            "cannot reach http://127.0.0.1:11434/v1 (connection refused)"
        );
    }

    #[test]
    fn retryable_cases() {
        let status = |status| LlmError::Status {
            status,
            profile: "fast".into(),
            base_url: "u".into(),
            model: "m".into(),
            detail: String::new(),
            attempts: 1,
            hint: "".into(),
            tools_rejected: false,
            cause: StatusCause::Unspecified,
        };
        assert!(status(429).is_retryable());
        assert!(status(500).is_retryable());
        assert!(status(503).is_retryable());
        assert!(!status(400).is_retryable());
        assert!(!status(401).is_retryable());
        assert!(!status(404).is_retryable());
        let bad = LlmError::BadResponse {
            profile: "fast".into(),
            base_url: "u".into(),
            reason: "x".into(),
        };
        assert!(!bad.is_retryable());
    }

    #[test]
    fn body_detail_prefers_error_message_and_caps() {
        assert_eq!(
            body_detail(r#"{"error":{"message":"bad model"}}"#, 50),
            "bad model"
        );
        assert_eq!(body_detail(r#"{"error":"nope"}"#, 50), "nope");
        assert_eq!(body_detail("", 50), "(empty body)");
        let long = "x".repeat(100);
        assert_eq!(body_detail(&long, 10), format!("{}… (cut)", "x".repeat(10)));
    }

    #[test]
    fn redact_removes_every_occurrence() {
        assert_eq!(
            redact("k sk-1 and sk-1", "sk-1"),
            "k <redacted> and <redacted>"
        );
        assert_eq!(redact("text", ""), "text");
    }

    #[test]
    fn ollama_hint_only_for_ollama_port() {
        assert!(connect_hint("fast", "http://127.0.0.1:11434/v1", "in f").contains("ollama serve"));
        assert!(!connect_hint("fast", "http://127.0.0.1:8000/v1", "in f").contains("ollama"));
    }

    #[test]
    fn the_hints_say_which_file_and_that_a_local_model_script_exists() {
        let file = ConfigSource::File("/etc/h/settings.yaml".into());
        let place = settings_place(&file);
        assert_eq!(place, "in /etc/h/settings.yaml");
        let hint = connect_hint("fast", "http://127.0.0.1:11434/v1", &place);
        assert!(
            hint.contains("base_url at an OpenAI-compatible server, in /etc/h/settings.yaml."),
            "{hint}"
        );
        assert!(hint.contains("scripts/local-model.sh"), "{hint}");
        let none = ConfigSource::Defaults {
            looked_in: vec!["/home/u/.config/hermes-agent/settings.yaml".into()],
        };
        let place = settings_place(&none);
        assert!(
            place.contains("create /home/u/.config/hermes-agent/settings.yaml"),
            "{place}"
        );
        assert!(place.contains("--config"), "{place}");
        let unknown = settings_place(&ConfigSource::Defaults { looked_in: vec![] });
        assert!(unknown.contains(DEFAULT_SETTINGS_FILE), "{unknown}");
        assert!(status_hint(401, "fast", "m", &place).contains(&place));
        let context = context_hint("fast", &place);
        assert!(context.contains("context window") && !context.contains("tool calling"));
    }
}
