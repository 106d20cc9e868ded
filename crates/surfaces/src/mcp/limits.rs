//! The bounds of the MCP side in one place: how long a server gets to start, answer and stop,
//! and how much of what it sends is kept. The settable ones (`mcp.max_tools_per_server`,
//! `mcp.max_list_pages`) come from the settings; these are the fixed ones.
//!
//! Owns: the numbers, each with the reason for it.
//! Must not: depend on any other file of the module (they all read these).

use std::time::Duration;

/// A server gets this long to start and answer `initialize` (and later each `tools/list`
/// page): a program fetched on first use (`uvx`, `npx`) can take a while, a hung one must not
/// block.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long `run` (and any task that starts meanwhile) waits for servers on their first
/// start: enough for a local server (about a second here), short enough that a slow one (a
/// first `uvx` download) does not hold the task; its tools join from the next step on.
pub const RUN_START_WAIT: Duration = hermes_engine::tools::SOURCE_START_WAIT;

/// The orderly stop of one server: close its stdin, wait 3 s, SIGTERM, wait 3 s, kill; this
/// bounds the whole.
pub(crate) const STOP_WAIT: Duration = Duration::from_secs(8);

/// A tool description longer than this (bytes) is cut: the model reads every description at
/// every step, and a server may write anything there.
pub(crate) const MAX_DESCRIPTION_BYTES: usize = 1024;

/// A tool whose input schema is larger than this (bytes, as JSON) is refused: a schema is
/// sent whole at every step (and compiled into a grammar by llama.cpp); cutting one would
/// change what the tool accepts.
pub(crate) const MAX_SCHEMA_BYTES: usize = 16 * 1024;

/// The longest line a server may send (one JSON-RPC message, so one tool result): rmcp's own
/// stdio limit, which matches its streamable-HTTP limit. A longer one is dropped while it is
/// read, and the call it answers fails as "too large".
pub(crate) const MAX_SERVER_LINE: usize = 16 * 1024 * 1024;

/// The longest line `hermes-agent mcp` reads from its client: its requests are tool calls
/// with a task's text, far below this; a longer one is answered with an error, never held.
pub(super) const MAX_CLIENT_LINE: usize = 1024 * 1024;

/// A server's `notifications/tools/list_changed` leads to at most one `tools/list` per this
/// long: a server that sends them in a burst costs one re-list, not one per notification.
pub(crate) const RELIST_EVERY: Duration = Duration::from_secs(1);
