//! What can go wrong on either side of the client, in words that say what to do.

use hermes_engine::agent::AgentError;
use hermes_engine::memory::MemoryError;
use hermes_engine::scheduler::SchedulerError;
use hermes_store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The id names nothing (a task, a job, a fact); the words say where to find ids.
    #[error("{0}")]
    NotFound(String),
    /// The request was refused as it stands (an empty fact, say); the words say what to change.
    #[error("{0}")]
    Invalid(String),
    /// The daemon refused the request: its own error, as its API sent it.
    #[error("{message}{}", auth_hint(*.status))]
    Refused {
        status: u16,
        code: String,
        message: String,
    },
    /// The daemon stopped answering (a network error or a timeout).
    #[error("the daemon at {base} stopped answering: {source}")]
    Unreachable {
        base: String,
        #[source]
        source: reqwest::Error,
    },
    /// The daemon answered in a shape this client cannot read.
    #[error(
        "the daemon at {base} answered {what} in an unexpected shape ({detail}); is it the same version as this command?"
    )]
    Garbled {
        base: String,
        what: String,
        detail: String,
    },
    /// The daemon closed a stream before its end.
    #[error("{0}")]
    Broken(String),
    /// The parts could not be built on the data dir (the caller's builder says why).
    #[error("cannot open the data dir: {0}")]
    Setup(String),
    #[error(transparent)]
    Agent(#[from] AgentError),
    #[error(transparent)]
    Scheduler(#[from] SchedulerError),
    #[error(transparent)]
    Memory(#[from] MemoryError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Approval(#[from] hermes_engine::agent::ApprovalError),
}

/// A 401 from the daemon means the two sides disagree on the token.
fn auth_hint(status: u16) -> &'static str {
    if status == 401 {
        " (the daemon requires server.token; set it in this config too)"
    } else {
        ""
    }
}
