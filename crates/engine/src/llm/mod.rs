//! The model gateway: one HTTP client for any OpenAI-compatible `/chat/completions`, and one
//! for `/embeddings` ([`Embedder`], recall by meaning).
//!
//! Owns: profiles, requests, retries with backoff, fallback chains and their cooldown
//! (`fallback`), which failures move a chain on (`kind`), which model a server really serves
//! (`identity`), tool-call parsing and repair, token usage.
//! Must not: know how any tool is implemented, or let an API key reach a log or a trace.
//!
//! [`Gateway`] is the handle the agent calls; [`parse`] holds the pure tool-call parsing and
//! repair; `scripted` (with the `test-support` feature) is a real OpenAI-compatible HTTP server
//! driven by a script, for tests and benchmarks only.

mod client;
mod embed;
mod error;
mod failure;
mod fallback;
mod identity;
mod kind;
mod known;
pub mod parse;
mod probe;
#[cfg(any(test, feature = "test-support"))]
pub mod scripted;
mod toolset;
mod types;
mod wire;

pub use client::{DEFAULT_RETRY, Gateway};
pub use embed::{EmbedError, Embedder};
pub use error::{LlmError, ProbeError};
pub use kind::{FailureKind, StatusCause};
pub use known::{Identity, Told};
pub use probe::{ProbeAdvice, ToolProbe};
pub use toolset::Toolset;
pub use types::*;
