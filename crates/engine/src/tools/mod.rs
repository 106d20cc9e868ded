//! Tools: the registry, argument validation, allowlist, timeouts, retries, circuit breaking,
//! result shaping, the built-in tools and manifest tools from `tools/`.
//!
//! Owns: everything between "the model asked for tool X with arguments Y" and "this text goes
//! back to the model". Tools that need a service (jobs, notices, sub-agents) get a narrow
//! handle at registration.
//! Must not: know about the agent loop or the model's messages.

use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::time::Duration;

/// Who is calling a tool: the task and where it came from. Tools use it for policy (a task
/// started by a job may not create jobs; a sub-agent may not delegate past the depth limit)
/// and to file what they store under the right task.
#[derive(Debug, Clone, Default)]
pub struct ToolContext {
    pub task_id: String,
    pub origin: hermes_store::Origin,
    pub job_id: Option<String>,
    /// Sub-agent nesting depth: 0 for a top-level task.
    pub depth: u32,
    /// The model profile the task runs on.
    pub profile: String,
    /// Who continues the task when it waits for a person: `None`, the daemon's workers; else
    /// the id of the task whose process (a `run`) does. Sub-agents inherit it.
    pub resumer: Option<String>,
    /// What this call left waiting for a person (filled by the delegate tools: its sub-tasks,
    /// one of which holds a call); the agent then holds the calling task too.
    pub waiting: Waiting,
}

/// The sub-tasks one tool call left waiting (see [`ToolContext::waiting`]): one JSON entry
/// per sub-task, in the call's order.
#[derive(Debug, Clone, Default)]
pub struct Waiting(std::sync::Arc<std::sync::Mutex<Vec<Value>>>);

impl Waiting {
    pub fn set(&self, entries: Vec<Value>) {
        *hermes_store::util::lock(&self.0) = entries;
    }

    pub fn take(&self) -> Vec<Value> {
        std::mem::take(&mut *hermes_store::util::lock(&self.0))
    }
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
    /// A tool the model was offered whose source (an MCP server) is away for now.
    #[error(
        "tool '{tool}' is unavailable for now: its server '{server}' {why}; answer without it, or call it again in a later step"
    )]
    Unavailable {
        tool: String,
        server: String,
        why: Withdrawn,
    },
    /// The breaker is open for this tool (`web_fetch`) or this tool on one target
    /// (`web_fetch for example.org`).
    #[error("tool '{0}' is temporarily disabled after repeated failures; try another way")]
    CircuitOpen(String),
    /// Not run by the agent's loop guard: the same call was made this many times already.
    #[error(
        "not run: this exact call (same tool, same arguments) was already made {0} times in this task and its result is above; answer with what you have, or change course (other arguments, another tool)"
    )]
    Repeated(u32),
    /// The tool needs a person's approval, and this way of calling it cannot ask for one (a
    /// job's precheck; any caller but the agent's loop).
    #[error(
        "tool '{0}' needs a person's approval for each call (tools.approval), which cannot be asked for here"
    )]
    NeedsApproval(String),
    /// A person declined this exact call (or it expired unanswered); it did not run.
    #[error(
        "not run: a person declined this call ({0}); do not ask for it again — answer without it, or say what you would have needed"
    )]
    Declined(String),
    /// Nobody answered the request for this call in time (it expired); it did not run.
    #[error(
        "not run: nobody answered the request to approve this call in time ({0}); do not ask for it again — answer without it, or say what you would have needed"
    )]
    Unanswered(String),
    /// Not run: a person approved this exact call for one run, and it had it (the same call
    /// twice in one reply).
    #[error(
        "not run: a person approved this exact call for one run, which it had (its result is here too); make the call again in a later step if it must run again, and a person will be asked"
    )]
    ApprovedOnce,
    /// Not run: the reply made more calls than one reply may.
    #[error(
        "not run: one reply may make at most {0} tool calls, and this one made more; make the calls you still need in your next reply"
    )]
    TooMany(usize),
}

impl ToolError {
    pub fn is_retryable(&self) -> bool {
        matches!(self, ToolError::Network(_))
    }

    /// The error's kind in one word: a metric's label, never its (unbounded) text.
    pub fn kind(&self) -> &'static str {
        match self {
            ToolError::InvalidArguments(_) => "invalid_arguments",
            ToolError::Network(_) => "network",
            ToolError::Failed(_) => "failed",
            ToolError::Timeout(_) => "timeout",
            ToolError::NotAllowed(_) => "not_allowed",
            ToolError::Unknown(_) => "unknown",
            ToolError::Unavailable { .. } => "unavailable",
            ToolError::CircuitOpen(_) => "circuit_open",
            ToolError::Repeated(_) => "repeated",
            ToolError::NeedsApproval(_) => "needs_approval",
            ToolError::Declined(_) => "declined",
            ToolError::Unanswered(_) => "unanswered",
            ToolError::TooMany(_) => "too_many",
            ToolError::ApprovedOnce => "approved_once",
        }
    }
}

/// Count one call in `metrics` by tool and outcome. Only a name the registry has becomes a
/// label: a name a model made up is refused as unknown and counted as one series, `unknown`.
pub(crate) fn count_call(metrics: &crate::metrics::Metrics, name: &str, error: Option<&ToolError>) {
    let known = match error {
        Some(ToolError::Unknown(_)) => None,
        _ => Some(name),
    };
    metrics.observe_tool_call(known, error.map_or("ok", ToolError::kind));
}

/// What the model is told about a tool: its name, when to use it, and a JSON Schema (an
/// object schema) for its arguments. The one spec every tool has, built once.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolInfo {
    pub name: String,
    /// When to use it, and when not: this is all the model knows about the tool.
    pub description: String,
    pub parameters: Value,
    /// Overrides `tools.timeout_s` for this tool: a sub-agent or a slow page needs longer.
    pub timeout: Option<Duration>,
    /// Every call waits for a person's approval (a manifest's `approval: required`), whatever
    /// `tools.approval` says.
    pub approval_required: bool,
}

impl ToolInfo {
    pub fn new(name: impl Into<String>, description: impl Into<String>, parameters: Value) -> Self {
        ToolInfo {
            name: name.into(),
            description: description.into(),
            parameters,
            timeout: None,
            approval_required: false,
        }
    }

    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

/// How a result over the registry's cap is brought under it.
#[derive(Debug)]
pub enum Fit {
    /// The registry's rule: show a cut, keep the whole in working memory under a key.
    Store(Value),
    /// The tool fitted it itself; the registry only cuts text that still does not fit, and
    /// stores nothing (a page read from working memory must not be stored there again).
    Fitted(Value),
}

/// A tool: its [`ToolInfo`] and an async executor. Arguments reach `call` only after they
/// validated against `info().parameters`. Built-ins implement [`TypedTool`] instead and get
/// this trait from it; tools whose schema is data (manifests) implement it directly.
pub trait Tool: Send + Sync {
    fn info(&self) -> &ToolInfo;
    /// Top-level fields of an object result to keep; empty keeps everything.
    fn keep_fields(&self) -> &[String] {
        &[]
    }
    /// Fit a result to `max_tokens`; the default leaves it to the registry's rule.
    fn fit(&self, value: Value, _max_tokens: u32) -> Fit {
        Fit::Store(value)
    }
    /// What the circuit breaker's health is kept per, besides the tool: a web tool's health is
    /// its target host's (one dead site must not switch off web access). `None`: the tool alone.
    fn breaker_scope(&self, _args: &Value) -> Option<String> {
        None
    }
    fn call<'a>(
        &'a self,
        args: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>>;
}

/// A tool whose arguments are a typed struct, read with `serde_json::from_value` after the
/// registry validated them against the schema. Every built-in tool is one.
pub(crate) trait TypedTool: Send + Sync {
    type Args: DeserializeOwned + Send;
    fn info(&self) -> &ToolInfo;
    /// As [`Tool::fit`].
    fn fit(&self, value: Value, _max_tokens: u32) -> Fit {
        Fit::Store(value)
    }
    /// As [`Tool::breaker_scope`].
    fn breaker_scope(&self, _args: &Value) -> Option<String> {
        None
    }
    fn run(
        &self,
        args: Self::Args,
        ctx: &ToolContext,
    ) -> impl Future<Output = Result<Value, ToolError>> + Send;
}

impl<T: TypedTool> Tool for T {
    fn info(&self) -> &ToolInfo {
        TypedTool::info(self)
    }
    fn fit(&self, value: Value, max_tokens: u32) -> Fit {
        TypedTool::fit(self, value, max_tokens)
    }
    fn breaker_scope(&self, args: &Value) -> Option<String> {
        TypedTool::breaker_scope(self, args)
    }
    fn call<'a>(
        &'a self,
        args: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>> {
        Box::pin(async move { self.run(parse_args(args)?, ctx).await })
    }
}

/// Arguments as a typed struct. The schema was checked first, so an error here names what the
/// schema could not say (a wrong type deep inside, an unknown field) and where.
pub fn parse_args<A: DeserializeOwned>(args: Value) -> Result<A, ToolError> {
    // A tool without parameters is often called with nothing at all.
    let args = if args.is_null() {
        Value::Object(Default::default())
    } else {
        args
    };
    serde_path_to_error::deserialize(args).map_err(|e| {
        let at = e.path().to_string();
        let inner = e.into_inner();
        ToolError::InvalidArguments(if at == "." {
            inner.to_string()
        } else {
            format!("{at}: {inner}")
        })
    })
}

/// Arguments of a tool that takes none (`{}`).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

/// `{id}`: the arguments of tools that act on one stored thing.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdArgs {
    pub id: String,
}

/// A simple tool from its info and an async function of its typed arguments: for tools with
/// no state beyond a cloned handle, and for tests.
pub fn tool_fn<A, F, Fut>(info: ToolInfo, f: F) -> std::sync::Arc<dyn Tool>
where
    A: DeserializeOwned + Send + 'static,
    F: Fn(A, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
{
    std::sync::Arc::new(FnTool::new(info, f))
}

/// A [`tool_fn`] over a handle (a store, a scheduler, …): each call gets its own clone, so the
/// function's future owns what it uses.
pub(crate) fn tool_with<S, A, F, Fut>(handle: S, info: ToolInfo, f: F) -> std::sync::Arc<dyn Tool>
where
    S: Clone + Send + Sync + 'static,
    A: DeserializeOwned + Send + 'static,
    F: Fn(S, A, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
{
    tool_fn(info, move |a, ctx| f(handle.clone(), a, ctx))
}

/// See [`tool_fn`].
pub(crate) struct FnTool<A, F> {
    info: ToolInfo,
    f: F,
    args: std::marker::PhantomData<fn(A)>,
}

impl<A, F> FnTool<A, F> {
    pub(crate) fn new(info: ToolInfo, f: F) -> Self {
        FnTool {
            info,
            f,
            args: std::marker::PhantomData,
        }
    }
}

impl<A, F, Fut> TypedTool for FnTool<A, F>
where
    A: DeserializeOwned + Send + 'static,
    F: Fn(A, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
{
    type Args = A;
    fn info(&self) -> &ToolInfo {
        &self.info
    }
    fn run(
        &self,
        args: A,
        ctx: &ToolContext,
    ) -> impl Future<Output = Result<Value, ToolError>> + Send {
        (self.f)(args, ctx.clone())
    }
}

mod away;
pub mod breaker;
pub mod builtin;
mod gate;
pub mod manifest;
mod permit;
pub mod registry;
pub mod sandbox;
pub mod schema;
pub mod shape;
mod starting;

pub use away::Withdrawn;
pub(crate) use permit::Permit;
pub use registry::{Registry, RegistryBuilder, RegistryError, ToolOutcome};
pub use starting::{SOURCE_START_WAIT, SourceStart, ToolSources};
