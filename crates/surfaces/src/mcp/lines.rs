//! Newline-delimited JSON-RPC, read with a bound: the framing under both stdio transports
//! (`child.rs`, a server we run; `serve_io.rs`, `hermes-agent mcp` itself).
//!
//! rmcp's own stdio transport drops a line over its limit without a word and ignores a line
//! that is not JSON, so a request that was too large is never answered and a call whose answer
//! was too large waits for its timeout. Here an over-long line is reported as a [`Frame`] with
//! the `id` of the message it carried — found while the line is skipped, never buffered — so
//! the transports can answer or fail that very request.
//!
//! Owns: the line decoder and the writer of one message per line.
//! Must not: decide what a bad line means (the transports do) or hold more than one line.

use rmcp::model::RequestId;
use serde::Serialize;
use std::sync::Arc;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio_util::bytes::{Buf, BytesMut};
use tokio_util::codec::Decoder;

/// One line off the wire.
#[derive(Debug, PartialEq)]
pub(super) enum Frame {
    /// A line within the bound, without its `\n` (or `\r\n`) and a leading BOM.
    Line(BytesMut),
    /// A line over the bound, already skipped: its length, the top-level `id` of the message
    /// it carried when it had one, and whether that message was a request or notification
    /// (it had a `method`) rather than an answer.
    TooLong {
        bytes: usize,
        id: Option<RequestId>,
        request: bool,
    },
}

/// Splits a byte stream into [`Frame`]s of at most `max` bytes each; a longer line is
/// skipped as it arrives, so the buffer never holds much more than `max` bytes.
pub(super) struct BoundedLines {
    max: usize,
    /// How far the current buffer was searched for `\n` already.
    searched: usize,
    /// Set while the rest of an over-long line is being skipped.
    skipping: Option<Skipping>,
}

struct Skipping {
    bytes: usize,
    id: IdScan,
}

impl BoundedLines {
    pub(super) fn new(max: usize) -> BoundedLines {
        BoundedLines {
            max,
            searched: 0,
            skipping: None,
        }
    }
}

impl Decoder for BoundedLines {
    type Item = Frame;
    type Error = std::io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, std::io::Error> {
        if let Some(skip) = &mut self.skipping {
            let end = buf.iter().position(|b| *b == b'\n');
            let upto = end.unwrap_or(buf.len());
            skip.id.feed(&buf[..upto]);
            skip.bytes += upto;
            buf.advance(end.map_or(upto, |e| e + 1));
            if end.is_none() {
                return Ok(None);
            }
            let done = self.skipping.take().map(|s| Frame::TooLong {
                bytes: s.bytes,
                id: s.id.found(),
                request: s.id.has_method,
            });
            return Ok(done);
        }
        let from = self.searched.min(buf.len());
        match buf[from..].iter().position(|b| *b == b'\n') {
            Some(at) if from + at <= self.max => {
                let mut line = buf.split_to(from + at + 1);
                self.searched = 0;
                line.truncate(from + at);
                if line.last() == Some(&b'\r') {
                    line.truncate(line.len() - 1);
                }
                if line.starts_with(BOM) {
                    line.advance(BOM.len());
                }
                Ok(Some(Frame::Line(line)))
            }
            found => {
                if found.is_none() && buf.len() <= self.max {
                    self.searched = buf.len();
                    return Ok(None);
                }
                // Over the bound: scan what is here for the id and skip the rest as it comes.
                self.searched = 0;
                self.skipping = Some(Skipping {
                    bytes: 0,
                    id: IdScan::default(),
                });
                self.decode(buf)
            }
        }
    }

    /// A last line without `\n` is incomplete (the peer died mid-message): dropped.
    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, std::io::Error> {
        let frame = self.decode(buf)?;
        if frame.is_none() {
            buf.clear();
        }
        Ok(frame)
    }
}

/// RFC 8259 lets a JSON reader skip a leading UTF-8 byte-order mark; some Windows tools write one.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Reads the top level of a JSON object fed in pieces: its `"id"` (only the id's own bytes are
/// kept, bounded) and whether it has a `"method"` (a request or notification, not an answer) —
/// enough to answer or fail the message a skipped line carried, wherever in the object the id
/// comes (the TypeScript SDK writes it after the result).
#[derive(Default)]
struct IdScan {
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// At depth 1, the next string is a key.
    expect_key: bool,
    /// The key being read at depth 1 (only its first few bytes matter).
    key: Vec<u8>,
    reading_key: bool,
    /// The last key at depth 1 was `id`, and its value is being read.
    reading_id: bool,
    id: Vec<u8>,
    id_done: bool,
    has_method: bool,
}

/// An id longer than this is no id this process sent or will answer.
const MAX_ID_BYTES: usize = 128;
/// Keys are read this far: enough to tell `id` and `method` from others.
const MAX_KEY_BYTES: usize = 8;

impl IdScan {
    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.step(b);
        }
    }

    fn step(&mut self, b: u8) {
        if self.reading_id {
            if self.depth == 1 && !self.in_string && matches!(b, b',' | b'}') {
                self.reading_id = false;
                self.id_done = true;
            } else if (self.in_string || !b.is_ascii_whitespace()) && self.id.len() <= MAX_ID_BYTES
            {
                self.id.push(b);
            }
        }
        if self.in_string {
            if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.in_string = false;
                if self.reading_key {
                    self.reading_key = false;
                    self.has_method |= self.key == b"method";
                }
            } else if self.reading_key && self.key.len() < MAX_KEY_BYTES {
                self.key.push(b);
            }
            return;
        }
        match b {
            b'{' | b'[' => {
                self.depth += 1;
                if self.depth == 1 {
                    self.expect_key = b == b'{';
                }
            }
            b'}' | b']' => self.depth = self.depth.saturating_sub(1),
            b'"' => {
                self.in_string = true;
                if self.depth == 1 && self.expect_key {
                    self.reading_key = true;
                    self.key.clear();
                }
            }
            b':' if self.depth == 1 => {
                self.expect_key = false;
                self.reading_id = self.key == b"id" && !self.id_done;
            }
            b',' if self.depth == 1 => self.expect_key = true,
            _ => {}
        }
    }

    fn found(&self) -> Option<RequestId> {
        if !self.id_done || self.id.len() > MAX_ID_BYTES {
            return None;
        }
        serde_json::from_slice(&self.id).ok()
    }
}

/// Writes one message per line to a shared writer; clones write to the same stream, one
/// whole message at a time. Closing drops the writer (for a child: its stdin closes).
pub(super) struct LineWriter<W>(Arc<tokio::sync::Mutex<Option<W>>>);

impl<W> Clone for LineWriter<W> {
    fn clone(&self) -> Self {
        LineWriter(self.0.clone())
    }
}

impl<W: AsyncWrite + Unpin + Send + 'static> LineWriter<W> {
    pub(super) fn new(write: W) -> LineWriter<W> {
        LineWriter(Arc::new(tokio::sync::Mutex::new(Some(write))))
    }

    /// Write `message` as one line and flush it.
    pub(super) async fn send(&self, message: &impl Serialize) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(message)?;
        line.push(b'\n');
        let mut guard = self.0.lock().await;
        let Some(w) = guard.as_mut() else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                "the connection is closed",
            ));
        };
        w.write_all(&line).await?;
        w.flush().await
    }

    /// [`send`](Self::send) as a future that owns the message and a clone of the writer, as
    /// rmcp's `Transport::send` wants (`'static`: it may outlive the transport's borrow).
    pub(super) fn sending<M: Serialize + Send + Sync + 'static>(
        &self,
        message: M,
    ) -> impl Future<Output = std::io::Result<()>> + Send + 'static {
        let write = self.clone();
        async move { write.send(&message).await }
    }

    pub(super) async fn close(&self) {
        if let Some(mut w) = self.0.lock().await.take() {
            let _ = w.shutdown().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::NumberOrString;

    fn frames(max: usize, chunks: &[&[u8]]) -> Vec<Frame> {
        let mut codec = BoundedLines::new(max);
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for c in chunks {
            buf.extend_from_slice(c);
            while let Some(f) = codec.decode(&mut buf).expect("decodes") {
                out.push(f);
            }
            assert!(buf.len() <= max + c.len(), "held {} bytes", buf.len());
        }
        while let Some(f) = codec.decode_eof(&mut buf).expect("decodes") {
            out.push(f);
        }
        out
    }

    fn line(s: &str) -> Frame {
        Frame::Line(BytesMut::from(s))
    }

    #[test]
    fn lines_within_the_bound_come_whole_across_chunks() {
        let got = frames(16, &[b"{\"a\":", b"1}\r\n\xEF\xBB\xBF[]\n", b"\npartial"]);
        assert_eq!(got, [line("{\"a\":1}"), line("[]"), line("")]);
    }

    #[test]
    fn an_over_long_line_is_skipped_with_its_id_and_the_next_one_still_read() {
        let big = format!(
            "{{\"result\":{{\"id\":\"inner\",\"text\":\"{}\\\"}}\"}},\"jsonrpc\":\"2.0\",\"id\":42}}\n",
            "x".repeat(100)
        );
        let (a, b) = big.as_bytes().split_at(60);
        let got = frames(32, &[a, b, b"{\"ok\":1}\n"]);
        assert_eq!(
            got,
            [
                Frame::TooLong {
                    bytes: big.len() - 1,
                    id: Some(NumberOrString::Number(42)),
                    request: false,
                },
                line("{\"ok\":1}"),
            ]
        );
        let request = b"{\"id\": \"r-7\" , \"method\": \"tools/call\", \"params\": {}}\n";
        assert_eq!(
            frames(8, &[request]),
            [Frame::TooLong {
                bytes: request.len() - 1,
                id: Some(NumberOrString::String("r-7".into())),
                request: true,
            }]
        );
        let no_id = frames(8, &[b"not json at all, and long\n"]);
        assert!(matches!(no_id[..], [Frame::TooLong { id: None, .. }]));
    }
}
