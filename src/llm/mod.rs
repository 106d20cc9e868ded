//! The model gateway: one HTTP client for any OpenAI-compatible `/chat/completions`.
//!
//! Owns: profiles, requests, retries with backoff, tool-call parsing and repair, token usage.
//! Must not: know how any tool is implemented, or let an API key reach a log or a trace.

pub mod parse;
mod types;

pub use types::*;
