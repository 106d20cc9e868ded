//! The stdio transport to a server we run: its process, its stdout read as bounded lines, its
//! stdin written one message per line, and the orderly stop (as rmcp's child-process transport
//! does it: close stdin, wait, SIGTERM, wait, kill).
//!
//! It exists instead of rmcp's `TokioChildProcess` for one reason: a message over the line
//! limit (a huge tool result) must fail the call it answers at once, as "too large" and naming
//! the server, instead of vanishing and leaving the call to time out.
//!
//! Owns: the child process (killed, with its process group, when dropped) and its pipes.
//! Must not: interpret messages beyond that (rmcp does), or log what the server sent.

use super::limits::MAX_SERVER_LINE;
use super::lines::{BoundedLines, Frame, LineWriter};
use futures::StreamExt;
use process_wrap::tokio::{ChildWrapper, CommandWrap};
use rmcp::RoleClient;
use rmcp::model::{ErrorCode, ErrorData, ServerJsonRpcMessage};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use std::process::Stdio;
use std::time::Duration;
use tokio::process::{ChildStderr, ChildStdin, ChildStdout};
use tokio_util::codec::FramedRead;

/// The error a call gets when its answer was over the line limit: our own code, so the tool
/// can tell it from the server's errors.
pub(super) const TOO_LARGE: ErrorCode = ErrorCode(-32_099);
/// Each wait of the orderly stop (after closing stdin, after SIGTERM).
const EXIT_WAIT: Duration = Duration::from_secs(3);

/// A running server process as an rmcp transport.
pub(super) struct ChildTransport {
    server: String,
    /// `None` once it has exited or been killed.
    child: Option<Box<dyn ChildWrapper>>,
    read: FramedRead<ChildStdout, BoundedLines>,
    write: LineWriter<ChildStdin>,
    /// A confined server's work dir (its TMPDIR), removed when the transport goes.
    workdir: Option<tempfile::TempDir>,
}

impl ChildTransport {
    /// Start `command` for `server` with piped stdio; the transport and the server's stderr.
    pub(super) fn spawn(
        server: &str,
        mut command: CommandWrap,
    ) -> std::io::Result<(ChildTransport, ChildStderr)> {
        command
            .command_mut()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn()?;
        let missing = || std::io::Error::other("the server's stdio could not be piped");
        let stdin = child.stdin().take().ok_or_else(missing)?;
        let stdout = child.stdout().take().ok_or_else(missing)?;
        let stderr = child.stderr().take().ok_or_else(missing)?;
        let transport = ChildTransport {
            server: server.to_string(),
            child: Some(child),
            read: FramedRead::new(stdout, BoundedLines::new(MAX_SERVER_LINE)),
            write: LineWriter::new(stdin),
            workdir: None,
        };
        Ok((transport, stderr))
    }

    pub(super) fn keep_workdir(&mut self, workdir: Option<tempfile::TempDir>) {
        self.workdir = workdir;
    }

    pub(super) fn id(&self) -> Option<u32> {
        self.child.as_ref()?.id()
    }

    /// Close stdin, then SIGTERM, then kill, each after a bounded wait for the exit.
    async fn stop(&mut self) -> std::io::Result<()> {
        self.write.close().await;
        let Some(child) = self.child.as_mut() else {
            return Ok(());
        };
        if exited(child).await {
            self.child = None;
            return Ok(());
        }
        #[cfg(unix)]
        if child.signal(libc::SIGTERM).is_ok() && exited(child).await {
            self.child = None;
            return Ok(());
        }
        let killed = Box::into_pin(child.kill()).await;
        self.child = None;
        killed
    }
}

async fn exited(child: &mut Box<dyn ChildWrapper>) -> bool {
    matches!(
        tokio::time::timeout(EXIT_WAIT, child.wait()).await,
        Ok(Ok(_))
    )
}

impl Drop for ChildTransport {
    fn drop(&mut self) {
        // Killed with its group (a `uvx` wrapper's python too); reaped in the background.
        if let Some(mut child) = self.child.take()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            rt.spawn(async move {
                let _ = Box::into_pin(child.kill()).await;
            });
        }
    }
}

impl Transport<RoleClient> for ChildTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.write.sending(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            match self.read.next().await? {
                Err(e) => {
                    tracing::debug!(server = %self.server, "MCP server's stdout failed: {e}");
                    return None;
                }
                Ok(Frame::Line(line)) if line.is_empty() => {}
                Ok(Frame::Line(line)) => match serde_json::from_slice(&line) {
                    Ok(message) => return Some(message),
                    // As the SDKs do: a line that is no MCP message is passed over (answering
                    // it could start an error storm); its text is not logged.
                    Err(e) => {
                        tracing::debug!(server = %self.server, "MCP server sent a line that is not an MCP message ({e}); ignored")
                    }
                },
                Ok(Frame::TooLong { bytes, id, request }) => {
                    tracing::warn!(
                        server = %self.server,
                        bytes,
                        limit = MAX_SERVER_LINE,
                        "MCP server sent a message over the size limit; dropped"
                    );
                    if let (Some(id), false) = (id, request) {
                        return Some(too_large(id, bytes));
                    }
                }
            }
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.stop()
    }
}

/// The answer to request `id` when the server's own answer was `bytes` long, over the limit.
fn too_large(id: rmcp::model::RequestId, bytes: usize) -> ServerJsonRpcMessage {
    let message = format!(
        "its answer was too large: {} MiB, over the {} MiB limit of a message",
        bytes.div_ceil(1024 * 1024),
        MAX_SERVER_LINE / (1024 * 1024)
    );
    ServerJsonRpcMessage::error(ErrorData::new(TOO_LARGE, message, None), Some(id))
}
