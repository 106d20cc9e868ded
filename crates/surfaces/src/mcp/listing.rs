//! A server's tools, listed with bounds: at most `mcp.max_list_pages` pages of `tools/list`,
//! each under a time bound, and at most `mcp.max_tools_per_server` tools kept (the first ones).
//! A server that pages on forever or lists thousands of tools costs a bounded amount; what
//! was left out is logged once per listing, naming the server.
//!
//! Owns: the paging loop and its log lines, and `probe` (connect, list, disconnect).
//! Must not: shape single tools (`tool.rs` bounds descriptions and schemas) or keep a page.

use super::McpError;
use super::client::{self, Handler};
use super::limits::{HANDSHAKE_TIMEOUT, STOP_WAIT};
use super::names::tool_names;
use hermes_config::{McpServer, McpSettings};
use rmcp::model::{PaginatedRequestParams, Tool};
use rmcp::{Peer, RoleClient};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::Notify;

/// The first tools of `server`, within the bounds of `settings`.
pub(super) async fn list_tools(
    server: &str,
    peer: &Peer<RoleClient>,
    settings: &McpSettings,
) -> Result<Vec<Tool>, McpError> {
    let failed = |reason: String| McpError::ListTools {
        server: server.to_string(),
        reason,
    };
    let max_tools = settings.max_tools_per_server as usize;
    let mut kept: Vec<Tool> = Vec::new();
    let mut dropped = 0usize;
    let mut cursor = None;
    for _ in 0..settings.max_list_pages {
        let params = PaginatedRequestParams::default().with_cursor(cursor.take());
        let page = tokio::time::timeout(HANDSHAKE_TIMEOUT, peer.list_tools(Some(params)))
            .await
            .map_err(|_| {
                failed(format!(
                    "no answer within {} s",
                    HANDSHAKE_TIMEOUT.as_secs()
                ))
            })?
            .map_err(|e| failed(client::service_error_text(&e)))?;
        let room = max_tools.saturating_sub(kept.len());
        dropped += page.tools.len().saturating_sub(room);
        kept.extend(page.tools.into_iter().take(room));
        cursor = page.next_cursor;
        if cursor.is_none() {
            break;
        }
    }
    if cursor.is_some() {
        tracing::warn!(
            server,
            pages = settings.max_list_pages,
            "MCP server has more pages of tools than mcp.max_list_pages; the rest are not listed"
        );
    }
    if dropped > 0 {
        tracing::warn!(
            server,
            kept = kept.len(),
            dropped,
            "MCP server lists more tools than mcp.max_tools_per_server; the first are kept, the rest dropped"
        );
    }
    Ok(kept)
}

/// Connect, list the tools and disconnect: whether `server` works, and the names its tools
/// would get — for `doctor` when no daemon runs.
pub async fn probe(
    name: &str,
    server: &McpServer,
    settings: &McpSettings,
    env: &HashMap<String, String>,
) -> Result<Vec<String>, McpError> {
    let handler = Handler {
        changed: Arc::new(Notify::new()),
    };
    let mut conn = client::connect(
        name,
        server,
        env,
        hermes_engine::tools::sandbox::Mode::Enforce,
        handler,
    )
    .await?;
    let listed = list_tools(name, conn.service.peer(), settings).await;
    let _ = conn.service.close_with_timeout(STOP_WAIT).await;
    let tools = listed?;
    let real: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    let mut names = tool_names(name, &real);
    names.sort();
    Ok(names)
}
