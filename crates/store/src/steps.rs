//! A task's trace rows (`task_steps`): one row per model call, tool call or note, appended a
//! step at a time by the runner and read back in order. The statements are `tasks.rs`'s.

use super::StepKind;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// One row of a task's trace: what was appended, numbered and dated by the store. Serialised
/// flat (`{seq, step, kind, …, created_at}`), as the API has always shown it.
#[derive(Debug, Clone, Serialize, Deserialize, sqlx::FromRow)]
pub struct Step {
    pub seq: i64,
    #[serde(flatten)]
    #[sqlx(flatten)]
    pub row: NewStep,
    pub created_at: DateTime<Utc>,
}

/// A trace row to append; `seq` and `created_at` are assigned by the store.
#[derive(Debug, Clone, Serialize, Deserialize, sqlx::FromRow)]
pub struct NewStep {
    pub step: i64,
    pub kind: StepKind,
    pub name: String,
    pub request_tokens: i64,
    pub result_tokens: i64,
    pub arguments: Option<String>,
    pub output: Option<String>,
    pub error: Option<String>,
    pub duration_ms: i64,
    /// A model row: the model id the server reported for the call (the profile that
    /// answered is `name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// A model row: the reply's `system_fingerprint`, when the server sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    /// A model row: the profile's identity as last checked (see `llm::Identity`), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
}

impl NewStep {
    /// A row with its place, kind and name and nothing else yet: no tokens, texts, time or
    /// model; whoever writes it fills in what it has.
    pub fn new(step: i64, kind: StepKind, name: &str) -> NewStep {
        NewStep {
            step,
            kind,
            name: name.to_string(),
            request_tokens: 0,
            result_tokens: 0,
            arguments: None,
            output: None,
            error: None,
            duration_ms: 0,
            model: None,
            fingerprint: None,
            identity: None,
        }
    }

    /// The row as stored, once the store gave it its `seq` and time.
    pub fn into_step(self, seq: i64, created_at: DateTime<Utc>) -> Step {
        Step {
            seq,
            row: self,
            created_at,
        }
    }
}
