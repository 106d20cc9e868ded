//! The model gateway: one HTTP client for any OpenAI-compatible `/chat/completions`.
//!
//! Owns: profiles, requests, retries with backoff, tool-call parsing and repair, token usage.
//! Must not: know how any tool is implemented, or let an API key reach a log or a trace.
//!
//! [`Gateway`] is the handle the agent calls; [`parse`] holds the pure tool-call parsing and
//! repair.

mod client;
mod error;
pub mod parse;
mod types;

pub use client::{Gateway, RetryPolicy};
pub use error::LlmError;
pub use types::*;
