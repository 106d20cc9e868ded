//! A tool of an MCP server as a registry [`Tool`]: its name as the model sees it
//! (`SERVER__TOOL`), its description (marked as the server's, and cut to a bound) and input
//! schema (refused over a bound) as the server gave them, and a call that goes to whichever
//! connection the server has at that moment (so a retry after a restart reaches the new
//! process).
//!
//! Owns: the bounds on what one listed tool may cost, and turning a `tools/call` answer into a
//! value or a [`ToolError`] — a transport failure is `Network` (retried by the registry), the
//! tool's own `isError` is `Failed` with its text, a refusal of the arguments is
//! `InvalidArguments`, an answer over the transport's limit is `Failed` as "too large".
//! Must not: validate, time out, retry or cap results — the registry does all of that, as for
//! any tool.

use super::child::TOO_LARGE;
use super::limits::{MAX_DESCRIPTION_BYTES, MAX_SCHEMA_BYTES};
use super::names::tool_names;
use futures::future::BoxFuture;
use hermes_engine::tools::{Tool, ToolContext, ToolError, ToolInfo};
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock, ErrorCode};
use rmcp::service::ServiceError;
use rmcp::{Peer, RoleClient};
use serde_json::{Map, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A server's current connection, shared by its tools; `None` while it is not running.
pub(super) type PeerSlot = Arc<Mutex<Option<Peer<RoleClient>>>>;

/// One tool of one MCP server.
pub(crate) struct McpTool {
    info: ToolInfo,
    server: String,
    /// The name the server knows it by.
    remote: String,
    peer: PeerSlot,
}

impl McpTool {
    /// The registry tools for what `server` listed, named `server__tool`: a description
    /// over [`MAX_DESCRIPTION_BYTES`] is cut, a tool whose schema is over [`MAX_SCHEMA_BYTES`]
    /// is left out; each is logged with the server and the tool.
    pub(super) fn from_listed(
        server: &str,
        listed: Vec<rmcp::model::Tool>,
        peer: &PeerSlot,
        timeout: Option<Duration>,
    ) -> Vec<Arc<dyn Tool>> {
        let real: Vec<&str> = listed.iter().map(|t| t.name.as_ref()).collect();
        let names = tool_names(server, &real);
        let mut tools: Vec<Arc<dyn Tool>> = Vec::with_capacity(listed.len());
        for (t, name) in listed.iter().zip(names) {
            let schema_bytes = serde_json::to_vec(&t.input_schema).map_or(usize::MAX, |v| v.len());
            if schema_bytes > MAX_SCHEMA_BYTES {
                tracing::warn!(
                    server,
                    tool = %t.name,
                    bytes = schema_bytes,
                    limit = MAX_SCHEMA_BYTES,
                    "MCP tool left out: its input schema is too large"
                );
                continue;
            }
            let given = t
                .description
                .as_deref()
                .or(t.title.as_deref())
                .unwrap_or("(no description)");
            let cut = &given[..given.floor_char_boundary(MAX_DESCRIPTION_BYTES)];
            if cut.len() < given.len() {
                tracing::warn!(
                    server,
                    tool = %t.name,
                    bytes = given.len(),
                    limit = MAX_DESCRIPTION_BYTES,
                    "MCP tool description cut to the limit"
                );
            }
            tools.push(Arc::new(McpTool {
                info: ToolInfo {
                    timeout,
                    ..ToolInfo::new(
                        name,
                        described(server, cut, cut.len() < given.len()),
                        object_schema(&t.input_schema),
                    )
                },
                server: server.to_string(),
                remote: t.name.to_string(),
                peer: peer.clone(),
            }));
        }
        tools
    }

    async fn run(&self, args: Value) -> Result<Value, ToolError> {
        let peer = hermes_store::util::lock(&self.peer)
            .clone()
            .ok_or_else(|| {
                ToolError::Network(format!(
                    "MCP server '{}' is not connected (it is starting or restarting)",
                    self.server
                ))
            })?;
        let mut params = CallToolRequestParams::new(self.remote.clone());
        if let Value::Object(map) = args {
            params = params.with_arguments(map);
        }
        match peer.call_tool(params).await {
            Ok(result) => from_result(result),
            Err(e) => Err(from_service_error(&self.server, e)),
        }
    }
}

impl Tool for McpTool {
    fn info(&self) -> &ToolInfo {
        &self.info
    }

    fn call<'a>(
        &'a self,
        args: Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>> {
        Box::pin(self.run(args))
    }
}

/// A description as the model sees it: marked as the server's words, so the model can tell a
/// third party's text from ours.
fn described(server: &str, description: &str, cut: bool) -> String {
    let mark = if cut { "…" } else { "" };
    format!("[from MCP server `{server}`] {description}{mark}")
}

/// The server's input schema as an object schema (a schema without `type` gets it: MCP
/// input schemas are always objects, and the registry wants it said).
fn object_schema(schema: &Map<String, Value>) -> Value {
    let mut schema = schema.clone();
    schema
        .entry("type")
        .or_insert_with(|| Value::String("object".into()));
    Value::Object(schema)
}

/// A `tools/call` answer: the structured content when there is some, else the text of the
/// content blocks; `isError` makes it a failure with that text.
fn from_result(result: CallToolResult) -> Result<Value, ToolError> {
    let text = content_text(&result.content);
    if result.is_error == Some(true) {
        return Err(ToolError::Failed(if text.is_empty() {
            "the tool reported an error without saying which".into()
        } else {
            text
        }));
    }
    match result.structured_content {
        Some(v) if !v.is_null() => Ok(v),
        _ => Ok(Value::String(text)),
    }
}

/// The content blocks as text: text as it is, anything binary as a short note (base64 would
/// only cost the model tokens).
fn content_text(blocks: &[ContentBlock]) -> String {
    let parts: Vec<String> = blocks
        .iter()
        .map(|b| match b {
            ContentBlock::Text(t) => t.text.clone(),
            ContentBlock::Image(i) => format!("[image: {}, not shown]", i.mime_type),
            ContentBlock::Audio(a) => format!("[audio: {}, not shown]", a.mime_type),
            ContentBlock::Resource(r) => {
                let text = r.get_text();
                if text.is_empty() {
                    "[binary resource, not shown]".into()
                } else {
                    text
                }
            }
            ContentBlock::ResourceLink(l) => format!("[resource: {} ({})]", l.name, l.uri),
            _ => "[content of a kind hermes-agent does not show]".into(),
        })
        .collect();
    parts.join("\n")
}

fn from_service_error(server: &str, e: ServiceError) -> ToolError {
    match e {
        ServiceError::TransportSend(e) => ToolError::Network(format!(
            "MCP server '{server}' could not be reached: {}",
            super::client::transport_error_text(&e)
        )),
        ServiceError::TransportClosed => {
            ToolError::Network(format!("MCP server '{server}' lost its connection"))
        }
        ServiceError::Timeout { .. } => {
            ToolError::Network(format!("MCP server '{server}' did not answer: {e}"))
        }
        ServiceError::McpError(data) if data.code == TOO_LARGE => ToolError::Failed(format!(
            "MCP server '{server}' answered, but {}; ask for less (a narrower query, fewer items)",
            data.message
        )),
        ServiceError::McpError(data) if data.code == ErrorCode::INVALID_PARAMS => {
            ToolError::InvalidArguments(data.message.to_string())
        }
        ServiceError::McpError(data) => ToolError::Failed(format!(
            "MCP server '{server}' refused the call: {}",
            data.message
        )),
        ServiceError::UnexpectedResponse => ToolError::Failed(format!(
            "MCP server '{server}' answered in a form hermes-agent does not support (e.g. a \
             long-running task); this tool cannot be used from here"
        )),
        other => ToolError::Failed(format!("MCP server '{server}': {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ContentBlock;
    use serde_json::json;

    #[test]
    fn results_become_values_and_errors_keep_their_text() {
        let ok = CallToolResult::success(vec![ContentBlock::text("{\"a\": 1}")]);
        assert_eq!(from_result(ok), Ok(json!("{\"a\": 1}")));
        let mut structured = CallToolResult::success(vec![ContentBlock::text("ignored")]);
        structured.structured_content = Some(json!({"a": 1}));
        assert_eq!(from_result(structured), Ok(json!({"a": 1})));
        let failed = CallToolResult::error(vec![ContentBlock::text("Invalid timezone: Mars")]);
        assert_eq!(
            from_result(failed),
            Err(ToolError::Failed("Invalid timezone: Mars".into()))
        );
        let mixed = vec![
            ContentBlock::text("see:"),
            ContentBlock::image("AAAA", "image/png"),
        ];
        assert_eq!(content_text(&mixed), "see:\n[image: image/png, not shown]");
    }

    #[test]
    fn transport_failures_are_retryable_and_refusals_are_not() {
        let lost = from_service_error("time", ServiceError::TransportClosed);
        assert!(lost.is_retryable(), "{lost:?}");
        let refused = from_service_error(
            "time",
            ServiceError::McpError(rmcp::ErrorData::invalid_params("bad tz", None)),
        );
        assert_eq!(refused, ToolError::InvalidArguments("bad tz".into()));
        assert!(object_schema(&Map::new())["type"] == "object");
    }
}
