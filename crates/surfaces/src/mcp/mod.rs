//! MCP (Model Context Protocol) in both directions, on `rmcp`, the official Rust SDK.
//!
//! - Client: each server of `mcp.servers` is run (stdio) or reached (streamable HTTP), kept
//!   alive and restarted with backoff by [`McpManager`]; its tools become registry tools named
//!   `SERVER__TOOL` ([`McpTool`](tool::McpTool)), so every call goes through the registry's guards like any
//!   other tool. [`McpManager::status`] is what `doctor` and the dashboard show.
//! - Server: `hermes-agent mcp` ([`serve_stdio`]) offers the daemon's tasks, jobs and memory
//!   to MCP clients (desktop assistants, editors) over stdio, through the CLI's `Backend`.
//!
//! Files: `client.rs` (one connection), `child.rs` (a stdio server's process as a transport),
//! `lines.rs` (bounded newline-delimited framing), `listing.rs` (a server's tools, listed with
//! bounds), `manager.rs` (the servers' lives), `status.rs` (what they report), `tool.rs` (a
//! server's tool as a registry tool), `names.rs` (tool names), `limits.rs` (the fixed
//! bounds), `server.rs` + `serve_io.rs` + `catalog.rs` (`hermes-agent mcp`).
//! Must not: bypass the registry's guards (validation, allowlist, timeouts, retries, breaker,
//! result caps), read the environment itself (config does; the manager is handed the map), log
//! env values or headers, or write anything but MCP to stdout.

mod catalog;
mod child;
mod client;
mod limits;
mod lines;
mod listing;
mod manager;
mod names;
mod serve_io;
mod server;
mod status;
mod tool;

pub use limits::RUN_START_WAIT;
pub use listing::probe;
pub(crate) use manager::McpManager;
pub(crate) use names::SEPARATOR;
pub use server::serve_stdio;
pub use server::{ServeError, TOOL_NAMES};
pub use status::{ServerState, ServerStatus};

/// A program that is not there, said as it was looked for: a path is not searched on PATH.
fn missing(program: &str) -> String {
    if program.contains('/') {
        format!("`{program}` does not exist")
    } else {
        format!("`{program}` not found on PATH")
    }
}

/// Why an MCP server could not be started or used. Each names the server and says what to
/// change; none carries an env value or a header value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum McpError {
    #[error(
        "MCP server '{server}' could not start: {}; install it or change \
         mcp.servers.{server}.command",
        missing(program)
    )]
    NotFound { server: String, program: String },
    #[error(
        "MCP server '{server}' could not start `{program}`: {reason}; check \
         mcp.servers.{server}.command"
    )]
    Spawn {
        server: String,
        program: String,
        reason: String,
    },
    #[error(
        "MCP server '{server}' could not start: its working directory {cwd} does not exist; \
         create it or change mcp.servers.{server}.cwd"
    )]
    NoCwd { server: String, cwd: String },
    #[error("MCP server '{server}' not started: {message}")]
    Sandbox { server: String, message: String },
    #[error(
        "MCP server '{server}': header '{header}' is not a valid HTTP header (name or value); \
         fix mcp.servers.{server}.headers"
    )]
    Header { server: String, header: String },
    #[error(
        "MCP server '{server}' did not answer the MCP handshake within {seconds} s; check that \
         mcp.servers.{server} runs an MCP server{last_words}"
    )]
    HandshakeTimeout {
        server: String,
        seconds: u64,
        /// `; it said: …` with its last line on stderr, or empty.
        last_words: String,
    },
    #[error(
        "MCP server '{server}' failed the MCP handshake: {reason}; check that \
         mcp.servers.{server} runs an MCP server{last_words}"
    )]
    Handshake {
        server: String,
        reason: String,
        last_words: String,
    },
    #[error("MCP server '{server}' could not list its tools: {reason}")]
    ListTools { server: String, reason: String },
}
