//! The stdio transport of `hermes-agent mcp`: the client's lines read with a bound, and an
//! answer for each line rmcp would pass over in silence, so a client never waits forever:
//! `-32700` for a line that is not JSON, `-32600` for JSON that is no JSON-RPC message and for
//! a line over [`MAX_CLIENT_LINE`] (skipped as it arrives, never held), `-32602` for a method
//! we serve called with params of the wrong shape (rmcp would take it for an unknown method
//! and say `-32601`).
//!
//! rmcp 3.11's own stdio transport ignores unparsable lines on purpose (an error storm with a
//! peer that echoes errors back), answers other malformed messages without their id, and
//! drops an over-long line unanswered; this thin layer in front of it answers all three.
//!
//! Owns: reading and writing the lines, and those answers.
//! Must not: handle requests (rmcp and `server.rs` do) or write anything but JSON-RPC.

use super::limits::MAX_CLIENT_LINE;
use super::lines::{BoundedLines, Frame, LineWriter};
use futures::StreamExt;
use rmcp::RoleServer;
use rmcp::model::{
    CallToolRequestParams, ClientJsonRpcMessage, ClientRequest, ErrorData, InitializeRequestParams,
    JsonRpcMessage, PaginatedRequestParams, RequestId, ServerJsonRpcMessage,
};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::codec::FramedRead;
use tokio_util::task::TaskTracker;

/// `hermes-agent mcp`'s end of a stdio session.
pub(super) struct ServeIo<R, W> {
    read: FramedRead<R, BoundedLines>,
    write: LineWriter<W>,
    /// Our answers to refused lines, each written by a task of its own: rmcp drops a
    /// `receive` future whenever another of its events comes first, and an answer awaited
    /// there would be lost with it (or cut mid-line). Waited for before the session closes.
    answers: TaskTracker,
}

impl<R: AsyncRead, W: AsyncWrite + Unpin + Send + 'static> ServeIo<R, W> {
    pub(super) fn new(read: R, write: W) -> ServeIo<R, W> {
        ServeIo {
            read: FramedRead::new(read, BoundedLines::new(MAX_CLIENT_LINE)),
            write: LineWriter::new(write),
            answers: TaskTracker::new(),
        }
    }
}

/// Every answer handed to a task written (or failed) before the stream ends. A function of the
/// tracker alone: the transport's own reference would ask its reader to be `Sync`.
async fn all_written(answers: &TaskTracker) {
    answers.close();
    answers.wait().await;
}

impl<R, W> Transport<RoleServer> for ServeIo<R, W>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.write.sending(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            let Some(next) = self.read.next().await else {
                // The client is done: what it was owed goes out before rmcp closes the session.
                all_written(&self.answers).await;
                return None;
            };
            let answer = match next {
                Err(e) => {
                    tracing::debug!("MCP client's stdin failed: {e}");
                    all_written(&self.answers).await;
                    return None;
                }
                Ok(Frame::Line(line)) if line.is_empty() => continue,
                Ok(Frame::Line(line)) => match read_message(&line) {
                    Ok(message) => return Some(message),
                    Err(refusal) => refusal.map(|r| ServerJsonRpcMessage::error(r.error, r.id)),
                },
                Ok(Frame::TooLong { bytes, id, request }) => {
                    tracing::warn!(
                        bytes,
                        limit = MAX_CLIENT_LINE,
                        "MCP client sent a message over the size limit; skipped"
                    );
                    // An answer (to a request of ours) is not answered; we send none anyway.
                    request.then(|| too_large(bytes, id))
                }
            };
            if let Some(answer) = answer {
                // Not awaited here: this future may be dropped at any await (see `answers`).
                self.answers.spawn(self.write.sending(on_the_wire(answer)));
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        all_written(&self.answers).await;
        self.write.close().await;
        Ok(())
    }
}

/// An answer as sent: JSON-RPC 2.0 wants `"id": null` on an error whose request's id could
/// not be read (a parse error, an invalid request), where rmcp leaves the member out.
fn on_the_wire(answer: ServerJsonRpcMessage) -> Value {
    let mut v = serde_json::to_value(answer).unwrap_or_default();
    if let Some(fields) = v.as_object_mut() {
        fields.entry("id").or_insert(Value::Null);
    }
    v
}

/// The error a line gets instead of being passed on, and the id it answers when known.
struct Refusal {
    error: ErrorData,
    id: Option<RequestId>,
}

/// A line as a message for rmcp, or the error it gets instead (`None`: one that must not be
/// answered, a notification).
fn read_message(line: &[u8]) -> Result<ClientJsonRpcMessage, Option<Refusal>> {
    let value: Value = serde_json::from_slice(line).map_err(|e| {
        Some(Refusal {
            error: ErrorData::parse_error(format!("not JSON: {e}"), None),
            id: None,
        })
    })?;
    match serde_json::from_slice::<ClientJsonRpcMessage>(line) {
        Ok(JsonRpcMessage::Request(r)) => match &r.request {
            ClientRequest::CustomRequest(c) => match params_problem(&c.method, &c.params) {
                Some(problem) => Err(Some(misfit(&c.method, &problem, r.id))),
                None => Ok(JsonRpcMessage::Request(r)),
            },
            _ => Ok(JsonRpcMessage::Request(r)),
        },
        Ok(message) => Ok(message),
        Err(e) => {
            let id = value
                .get("id")
                .and_then(|id| serde_json::from_value::<RequestId>(id.clone()).ok());
            // A notification gets no answer, even a malformed one.
            if id.is_none() && value.get("method").is_some() {
                return Err(None);
            }
            // A served method whose params are not even the right JSON type (`"params": 5`)
            // fails rmcp's reading outright; it is still a params fault, not a bad message.
            if let (Some(id), Some(method)) = (&id, value.get("method").and_then(Value::as_str))
                && let Some(problem) = params_problem(method, &value.get("params").cloned())
            {
                return Err(Some(misfit(method, &problem, id.clone())));
            }
            Err(Some(Refusal {
                error: ErrorData::invalid_request(format!("not a JSON-RPC 2.0 message: {e}"), None),
                id,
            }))
        }
    }
}

/// The `-32602` a served method gets for params that do not fit it.
fn misfit(method: &str, problem: &str, id: RequestId) -> Refusal {
    Refusal {
        error: ErrorData::invalid_params(format!("invalid params for {method}: {problem}"), None),
        id: Some(id),
    }
}

/// Why `params` do not fit `method`, for the methods this server serves; rmcp reads a served
/// method with unfitting params as an unknown one. `None` for other methods (rmcp answers
/// those as unknown, rightly).
fn params_problem(method: &str, params: &Option<Value>) -> Option<String> {
    fn misfit<T: DeserializeOwned>(params: &Option<Value>) -> Option<String> {
        let params = params.clone().unwrap_or(Value::Null);
        serde_json::from_value::<T>(params)
            .err()
            .map(|e| e.to_string())
    }
    match method {
        "initialize" => misfit::<InitializeRequestParams>(params),
        "tools/call" => misfit::<CallToolRequestParams>(params),
        "tools/list" => misfit::<Option<PaginatedRequestParams>>(params),
        // Params we do not read: no shape to miss, so rmcp's own answer stands.
        _ => None,
    }
}

fn too_large(bytes: usize, id: Option<RequestId>) -> ServerJsonRpcMessage {
    ServerJsonRpcMessage::error(
        ErrorData::invalid_request(
            format!(
                "request too large: {bytes} bytes, over the limit of {MAX_CLIENT_LINE} bytes per message"
            ),
            None,
        ),
        id,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ErrorCode;
    use serde_json::json;

    fn answer_to(line: &str) -> Value {
        match read_message(line.as_bytes()) {
            Err(Some(r)) => on_the_wire(ServerJsonRpcMessage::error(r.error, r.id)),
            Err(None) => Value::Null,
            Ok(message) => panic!("passed on: {message:?}"),
        }
    }

    #[test]
    fn each_bad_line_gets_its_json_rpc_error() {
        let not_json = answer_to("this is not json");
        assert_eq!(not_json["error"]["code"], json!(ErrorCode::PARSE_ERROR.0));
        assert_eq!(not_json.get("id"), Some(&Value::Null), "{not_json}");
        let cut_short = answer_to("{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\":");
        assert_eq!(cut_short["error"]["code"], json!(-32700));

        let no_method = answer_to(r#"{"jsonrpc": "2.0", "id": 4, "params": {}}"#);
        assert_eq!(no_method["error"]["code"], json!(-32600));
        assert_eq!(no_method["id"], json!(4));

        let wrong_types = answer_to(
            r#"{"jsonrpc": "2.0", "id": "x", "method": "tools/call", "params": {"name": 7, "arguments": "a string"}}"#,
        );
        assert_eq!(wrong_types["error"]["code"], json!(-32602));
        assert_eq!(wrong_types["id"], json!("x"));
        let message = wrong_types["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with("invalid params for tools/call"),
            "{message}"
        );

        for method in ["tools/list", "tools/call", "initialize"] {
            let line =
                format!(r#"{{"jsonrpc": "2.0", "id": 9, "method": "{method}", "params": 5}}"#);
            let answer = answer_to(&line);
            assert_eq!(answer["error"]["code"], json!(-32602), "{method}: {answer}");
            assert_eq!(answer["id"], json!(9));
        }

        assert_eq!(
            answer_to(r#"{"jsonrpc": "2.0", "method": "tools/call", "params": 3}"#),
            Value::Null,
            "a notification is never answered"
        );
    }

    #[test]
    fn good_messages_and_unknown_methods_pass_on_to_rmcp() {
        for line in [
            r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}"#,
            r#"{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "recall", "arguments": {"query": 7}}}"#,
            r#"{"jsonrpc": "2.0", "id": 3, "method": "no/such/method", "params": {"a": 1}}"#,
            r#"{"jsonrpc": "2.0", "method": "notifications/initialized"}"#,
        ] {
            assert!(read_message(line.as_bytes()).is_ok(), "{line}");
        }
    }
}
