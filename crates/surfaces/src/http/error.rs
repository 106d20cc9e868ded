//! API errors: one type, converted to `{"error": {"code", "message"}}` in one place. Details of
//! internal failures are logged, never sent.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// Set when the database could not be written; the router then names the file in the
    /// message and health reports it (see `http::note_storage_faults`).
    pub storage: Option<hermes_store::StorageFault>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            storage: None,
        }
    }
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }
    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, "conflict", message)
    }
    pub(crate) fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
    }
    /// An unexpected failure: the cause goes to the log, the client gets a generic message.
    pub fn internal(cause: impl std::fmt::Display) -> ApiError {
        tracing::error!(error = %cause, "API request failed");
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error; the daemon's log has the details",
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"code": self.code, "message": self.message}});
        let mut resp = (self.status, Json(body)).into_response();
        if let Some(fault) = self.storage {
            resp.extensions_mut().insert(fault);
        }
        resp
    }
}

impl From<hermes_store::StoreError> for ApiError {
    fn from(e: hermes_store::StoreError) -> ApiError {
        use hermes_store::StoreError;
        match e {
            StoreError::NotFound { .. } => ApiError::not_found(e.to_string()),
            StoreError::Conflict(m) => ApiError::conflict(m),
            StoreError::Unavailable { fault, ref detail } => {
                tracing::error!(%fault, detail, "the database failed");
                ApiError {
                    storage: Some(fault),
                    ..ApiError::new(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "storage_unavailable",
                        format!(
                            "the database {} ({fault}); {}",
                            fault.headline(),
                            fault.hint()
                        ),
                    )
                }
            }
            other => ApiError::internal(other),
        }
    }
}

impl From<hermes_engine::agent::AgentError> for ApiError {
    fn from(e: hermes_engine::agent::AgentError) -> ApiError {
        use hermes_engine::agent::AgentError;
        match e {
            AgentError::EmptyTask | AgentError::UnknownProfile { .. } => {
                ApiError::bad_request(e.to_string())
            }
            AgentError::TaskTooLong { .. } => {
                ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", e.to_string())
            }
            AgentError::NotFound(_) => ApiError::not_found(e.to_string()),
            AgentError::AlreadyFinished { .. } | AgentError::RunningElsewhere(_) => {
                ApiError::conflict(e.to_string())
            }
            AgentError::ShuttingDown => ApiError::unavailable(e.to_string()),
            AgentError::Store(s) => s.into(),
        }
    }
}

impl From<hermes_engine::memory::MemoryError> for ApiError {
    fn from(e: hermes_engine::memory::MemoryError) -> ApiError {
        use hermes_engine::memory::MemoryError;
        match e {
            MemoryError::Store(s) => s.into(),
            MemoryError::EmptyFact | MemoryError::FactTooLong(_) => {
                ApiError::bad_request(e.to_string())
            }
            MemoryError::Locked { .. } | MemoryError::Rebuilding { .. } => {
                ApiError::unavailable(e.to_string())
            }
            MemoryError::Index { .. } | MemoryError::Io { .. } | MemoryError::Worker(_) => {
                ApiError::internal(e)
            }
        }
    }
}

/// Rejections of the JSON extractor (bad JSON, wrong content type, unknown fields, too big)
/// become JSON errors too.
impl From<axum::extract::rejection::JsonRejection> for ApiError {
    fn from(r: axum::extract::rejection::JsonRejection) -> ApiError {
        use axum::extract::rejection::JsonRejection as J;
        let status = r.status();
        let code = match &r {
            J::JsonDataError(_) => "invalid_body",
            J::JsonSyntaxError(_) => "bad_json",
            J::MissingJsonContentType(_) => "unsupported_media_type",
            _ if status == StatusCode::PAYLOAD_TOO_LARGE => "too_large",
            _ => "bad_request",
        };
        let message = match &r {
            J::MissingJsonContentType(_) => {
                "send the body as JSON with `Content-Type: application/json`".to_string()
            }
            _ if status == StatusCode::PAYLOAD_TOO_LARGE => {
                format!("request body too large (limit {} bytes)", super::BODY_LIMIT)
            }
            other => without_type_names(&other.body_text()),
        };
        // A body over the limit surfaces as a 400 with a "length limit" cause on some paths.
        let (status, code, message) = if message.contains("length limit") {
            (
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                format!("request body too large (limit {} bytes)", super::BODY_LIMIT),
            )
        } else {
            (status, code, message)
        };
        ApiError::new(status, code, message)
    }
}

/// serde's words for a body of the wrong JSON type name our request types ("expected struct
/// CreateTask with 3 elements"); a client knows them as JSON objects.
fn without_type_names(text: &str) -> String {
    let Some(at) = text.find("expected struct ") else {
        return text.to_string();
    };
    let rest = &text[at + "expected struct ".len()..];
    let name_end = rest
        .find(|c: char| !c.is_alphanumeric() && c != '_')
        .unwrap_or(rest.len());
    let mut rest = &rest[name_end..];
    if let Some(tail) = rest.strip_prefix(" with ")
        && let Some(end) = tail.find(" elements")
        && tail[..end].chars().all(|c| c.is_ascii_digit())
    {
        rest = &tail[end + " elements".len()..];
    }
    format!("{}expected a JSON object{rest}", &text[..at])
}

/// A scheduler error's status and code: 400 for a request to fix, 413 for a task too long,
/// 403 for nesting, 404, 409 for a busy job or one that cannot start; a failure inside is a 500 whose details are
/// logged, not sent.
impl From<hermes_engine::scheduler::SchedulerError> for ApiError {
    fn from(e: hermes_engine::scheduler::SchedulerError) -> ApiError {
        use hermes_engine::scheduler::{RunnerError, SchedulerError as E};
        // A storage fault is one whatever part met it (503 with what to do).
        let e = match e {
            E::Store(s) | E::Runner(RunnerError::Store(s)) => return s.into(),
            other => other,
        };
        let (status, code) = match &e {
            E::Schedule(_) => (StatusCode::BAD_REQUEST, "invalid_schedule"),
            E::Invalid(_) => (StatusCode::BAD_REQUEST, "invalid_request"),
            E::TooManyJobs { .. } => (StatusCode::BAD_REQUEST, "too_many_jobs"),
            E::UnknownChannel { .. } => (StatusCode::BAD_REQUEST, "unknown_channel"),
            E::TaskTooLong { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "too_large"),
            E::NestedNotAllowed => (StatusCode::FORBIDDEN, "nested_job"),
            E::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            E::Busy { .. } => (StatusCode::CONFLICT, "busy"),
            // Recorded in the run row as well: its precheck failed, or its task cannot be made
            // (a profile no longer defined) — the job's, not the server's, to fix.
            E::NotStarted(_) => (StatusCode::CONFLICT, "not_started"),
            E::Runner(_) | E::Store(_) => return ApiError::internal(e),
        };
        ApiError::new(status, code, e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::without_type_names;

    #[test]
    fn a_body_of_the_wrong_json_type_is_told_in_json_words() {
        assert_eq!(
            without_type_names(
                "Failed to deserialize the JSON body into the target type: invalid type: sequence, expected struct CreateTask with 3 elements at line 1 column 2"
            ),
            "Failed to deserialize the JSON body into the target type: invalid type: sequence, expected a JSON object at line 1 column 2"
        );
        assert_eq!(
            without_type_names(
                "invalid type: string \"x\", expected struct JobRequest at line 1 column 3"
            ),
            "invalid type: string \"x\", expected a JSON object at line 1 column 3"
        );
        let other = "task: invalid type: integer `42`, expected a string at line 1 column 11";
        assert_eq!(without_type_names(other), other);
    }
}
