//! Tools: the registry, argument validation, allowlist, timeouts, retries, circuit breaking,
//! result shaping, the built-in tools and manifest tools from `tools/`.
//!
//! Owns: everything between "the model asked for tool X with arguments Y" and "this text goes
//! back to the model". Tools that need a service (jobs, notices, sub-agents) get a narrow
//! handle at registration.
//! Must not: know about the agent loop or the model's messages.

use futures::future::BoxFuture;
use serde_json::Value;
use std::time::Duration;

/// Who is calling a tool: the task and where it came from. Tools use it for policy (a task
/// started by a job may not create jobs; a sub-agent may not delegate past the depth limit)
/// and to file what they store under the right task.
#[derive(Debug, Clone, Default)]
pub struct ToolContext {
    pub task_id: String,
    pub origin: crate::store::Origin,
    pub job_id: Option<String>,
    /// Sub-agent nesting depth: 0 for a top-level task.
    pub depth: u32,
    /// The model profile the task runs on.
    pub profile: String,
}

/// Why a tool call did not produce a result. Only [`ToolError::Network`] is retried.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    /// A transient, network-class failure (connect, reset, 5xx): worth retrying.
    #[error("network error: {0}")]
    Network(String),
    /// The tool ran and reported failure: never retried.
    #[error("{0}")]
    Failed(String),
    #[error("timed out after {} s", .0.as_secs_f64())]
    Timeout(Duration),
    #[error("tool '{0}' is not allowed for this task")]
    NotAllowed(String),
    #[error("unknown tool '{0}'")]
    Unknown(String),
    #[error("tool '{0}' is temporarily disabled after repeated failures; try another way")]
    CircuitOpen(String),
}

impl ToolError {
    pub fn is_retryable(&self) -> bool {
        matches!(self, ToolError::Network(_))
    }
}

/// A tool: a name, a description for the model, a JSON Schema for its arguments, and an
/// async executor. Arguments reach `call` only after they validated against `parameters`.
pub trait Tool: Send + Sync {
    fn name(&self) -> &str;
    /// When to use it, and when not: this is all the model knows about the tool.
    fn description(&self) -> &str;
    /// JSON Schema (an object schema) for the arguments.
    fn parameters(&self) -> &Value;
    /// Top-level fields of an object result to keep; empty keeps everything.
    fn keep_fields(&self) -> &[String] {
        &[]
    }
    /// Overrides `tools.timeout_s` for this tool.
    fn timeout(&self) -> Option<Duration> {
        None
    }
    fn call<'a>(
        &'a self,
        args: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>>;
}

pub mod breaker;
pub mod builtin;
pub mod manifest;
pub mod registry;
pub mod shape;

pub use registry::{Registry, RegistryBuilder, RegistryError, ToolOutcome};
