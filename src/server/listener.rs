//! The API's listener: every connection is read through [`HeadGuard`], which answers a request
//! whose head (request line or a header line) is absurdly long with the API's JSON error,
//! before hyper would answer it with an empty `414`/`431` of its own.
//!
//! Owns: watching request heads on the wire. It follows each request's `Content-Length` to
//! skip the body, and stops watching a connection that sends a chunked body (no API client
//! does; hyper still applies its own limits there).
//! Must not: change a byte that passes through.

use axum::serve::Listener;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// The longest line a request head may have. Well under hyper's own 64 KiB URI limit, and far
/// above anything the API or the dashboard send.
pub const MAX_HEAD_LINE: usize = 16 * 1024;

/// Sent instead of hyper's empty answer.
const TOO_LONG: &str = concat!(
    "HTTP/1.1 414 URI Too Long\r\n",
    "content-type: application/json\r\n",
    "connection: close\r\n",
    "content-length: 129\r\n",
    "\r\n",
    r#"{"error":{"code":"too_long","message":"the request line or a header is longer than 16384 bytes; send long input in a JSON body"}}"#
);

/// A TCP listener whose connections are [`HeadGuard`]ed.
pub struct GuardedListener(pub TcpListener);

impl Listener for GuardedListener {
    type Io = HeadGuard<TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (io, addr) = Listener::accept(&mut self.0).await;
        (HeadGuard::new(io), addr)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Listener::local_addr(&self.0)
    }
}

/// Where the guard is in the byte stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// In a request head: `line` bytes since the last `\n`.
    Head { line: usize },
    /// In a body: this many bytes to pass before the next head.
    Body { left: u64 },
    /// The head was too long: the JSON answer is being written (`sent` bytes so far).
    Refusing { sent: usize },
    /// Not watching any more (a chunked body), or done refusing.
    Off,
}

pub struct HeadGuard<T> {
    inner: T,
    phase: Phase,
    /// The current head's bytes, for its `Content-Length` (bounded by the line limit times a
    /// small number of lines; an oversized head is refused anyway).
    head: Vec<u8>,
}

impl<T> HeadGuard<T> {
    pub fn new(inner: T) -> HeadGuard<T> {
        HeadGuard {
            inner,
            phase: Phase::Head { line: 0 },
            head: Vec::new(),
        }
    }

    /// Follow `bytes` through heads and bodies; true when a head line went over the limit.
    fn watch(&mut self, mut bytes: &[u8]) -> bool {
        while !bytes.is_empty() {
            match self.phase {
                Phase::Body { left } => {
                    let n = (bytes.len() as u64).min(left);
                    bytes = &bytes[n as usize..];
                    self.phase = if left == n {
                        Phase::Head { line: 0 }
                    } else {
                        Phase::Body { left: left - n }
                    };
                }
                Phase::Head { mut line } => {
                    let Some(nl) = bytes.iter().position(|b| *b == b'\n') else {
                        line += bytes.len();
                        self.head.extend_from_slice(bytes);
                        self.phase = Phase::Head { line };
                        return line > MAX_HEAD_LINE;
                    };
                    line += nl;
                    if line > MAX_HEAD_LINE {
                        return true;
                    }
                    self.head.extend_from_slice(&bytes[..=nl]);
                    bytes = &bytes[nl + 1..];
                    self.phase = Phase::Head { line: 0 };
                    if self.head.ends_with(b"\r\n\r\n") || self.head.ends_with(b"\n\n") {
                        self.end_of_head();
                    }
                }
                Phase::Refusing { .. } | Phase::Off => return false,
            }
        }
        false
    }

    /// A head is complete: skip its body (by `Content-Length`), or stop watching.
    fn end_of_head(&mut self) {
        let head = String::from_utf8_lossy(&self.head).to_ascii_lowercase();
        self.head.clear();
        let header = |name: &str| {
            head.lines()
                .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()))
        };
        if header("transfer-encoding:").is_some() {
            self.phase = Phase::Off;
            return;
        }
        match header("content-length:").map(|v| v.parse::<u64>()) {
            Some(Ok(n)) if n > 0 => self.phase = Phase::Body { left: n },
            Some(Err(_)) => self.phase = Phase::Off,
            _ => {}
        }
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncRead for HeadGuard<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = &mut *self;
        if let Phase::Refusing { sent } = me.phase {
            // Answer, then end the stream: hyper sees the peer go away and drops it.
            let rest = &TOO_LONG.as_bytes()[sent..];
            if !rest.is_empty() {
                let n = ready!(Pin::new(&mut me.inner).poll_write(cx, rest))?;
                me.phase = Phase::Refusing { sent: sent + n };
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            ready!(Pin::new(&mut me.inner).poll_flush(cx))?;
            me.phase = Phase::Off;
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut me.inner).poll_read(cx, buf))?;
        let fresh = buf.filled()[before..].to_vec();
        if me.watch(&fresh) {
            tracing::debug!("request head over {MAX_HEAD_LINE} bytes refused");
            // Hand hyper nothing of this request.
            buf.set_filled(before);
            me.phase = Phase::Refusing { sent: 0 };
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for HeadGuard<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard() -> HeadGuard<()> {
        HeadGuard::new(())
    }

    #[test]
    fn the_canned_answer_says_its_own_length() {
        let (_, body) = TOO_LONG.split_once("\r\n\r\n").unwrap_or_default();
        assert!(TOO_LONG.contains(&format!("content-length: {}\r\n", body.len())));
        assert!(serde_json::from_str::<serde_json::Value>(body).is_ok());
    }

    #[test]
    fn follows_heads_and_bodies() {
        let mut g = guard();
        let body = "x".repeat(60_000);
        let req = format!(
            "POST /v1/tasks HTTP/1.1\r\nhost: a\r\ncontent-length: {}\r\n\r\n{body}GET /healthz HTTP/1.1\r\n\r\n",
            body.len()
        );
        // A long body line is not a long head line, however it arrives.
        for chunk in req.as_bytes().chunks(1000) {
            assert!(!g.watch(chunk));
        }
        assert_eq!(g.phase, Phase::Head { line: 0 });
        let long = format!("GET /v1/tasks/{} HTTP/1.1\r\n", "a".repeat(MAX_HEAD_LINE));
        assert!(g.watch(long.as_bytes()));
    }

    #[test]
    fn a_chunked_body_ends_the_watch() {
        let mut g = guard();
        assert!(!g.watch(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"));
        assert_eq!(g.phase, Phase::Off);
        assert!(!g.watch("x".repeat(100_000).as_bytes()));
    }
}
