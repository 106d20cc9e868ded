//! The bounds of the MCP side in one place: how much of what a peer sends is kept.
//!
//! Owns: the numbers, each with the reason for it.
//! Must not: depend on any other file of the module (they all read these).

/// The longest line `hermes-agent mcp` reads from its client: its requests are tool calls
/// with a task's text, far below this; a longer one is answered with an error, never held.
pub const MAX_CLIENT_LINE: usize = 1024 * 1024;
