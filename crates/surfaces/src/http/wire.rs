//! What the API's connections send and receive before and around hyper: every connection is
//! read and written through a [`HeadGuard`], so that the errors the server produces below the
//! router are JSON like every other answer, and a slow head is cut off.
//!
//! - A head line (request line or header) over [`MAX_HEAD_LINE`] is answered with a JSON
//!   `414`/`431` before hyper would take it (hyper allows 64 KiB of URI).
//! - A head that is not complete within the header timeout — counted from the connection's
//!   start for its first request, from a head's first byte for later ones — is answered with a
//!   JSON `408`, or, when nothing at all was sent, closed quietly. (The wait between requests
//!   is hyper's header-read timer, set to the idle timeout in `conn`.)
//! - hyper's own answers to what it cannot parse (too many headers, a byte not allowed in the
//!   request line, a malformed header) are empty `400`/`414`/`431` heads; they are written in
//!   place of them as the same status with a JSON body. One is recognised as an error head
//!   with `content-length: 0` that lacks the security headers every answer of the router
//!   carries (`http/headers.rs`).
//!
//! Owns: watching heads on the wire (with `framing`) and the canned answers above.
//! Must not: change any other byte, or look at what a request asks for.

pub(crate) use super::framing::MAX_HEAD_LINE;
use super::framing::{Framing, Seen};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// A connection, watched.
pub(crate) struct HeadGuard<T> {
    inner: T,
    framing: Framing,
    header_timeout: Duration,
    /// When the head being awaited must be complete; armed while one is.
    deadline: Option<Pin<Box<Sleep>>>,
    /// A canned answer being written: its bytes and how many are out.
    out: Option<(Vec<u8>, usize)>,
    /// The read side has refused: once `out` is written, the stream ends.
    closing: bool,
}

impl<T> HeadGuard<T> {
    pub(super) fn new(inner: T, header_timeout: Duration) -> HeadGuard<T> {
        HeadGuard {
            inner,
            framing: Framing::default(),
            header_timeout,
            // The first request's head is timed from the connection's start.
            deadline: Some(Box::pin(tokio::time::sleep(header_timeout))),
            out: None,
            closing: false,
        }
    }

    /// Time a head while one is awaited (the first) or under way (any later one).
    fn update_deadline(&mut self) {
        let timed = self.framing.in_head() || self.framing.before_first_head();
        match (&self.deadline, timed) {
            (None, true) => {
                self.deadline = Some(Box::pin(tokio::time::sleep(self.header_timeout)));
            }
            (Some(_), false) => self.deadline = None,
            _ => {}
        }
    }

    /// Answer with `status` and `message`, then end the stream.
    fn refuse(&mut self, status: Status, message: &str) {
        self.out = Some((canned(status, message).into_bytes(), 0));
        self.closing = true;
        self.deadline = None;
    }
}

impl<T: AsyncWrite + Unpin> HeadGuard<T> {
    /// Write what is left of a canned answer.
    fn poll_out(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((bytes, sent)) = &mut self.out {
            if *sent == bytes.len() {
                self.out = None;
                break;
            }
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &bytes[*sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *sent += n;
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncRead for HeadGuard<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = &mut *self;
        if me.closing {
            // Answer, then end the stream: hyper sees the peer go away and drops it.
            ready!(me.poll_out(cx))?;
            ready!(Pin::new(&mut me.inner).poll_flush(cx))?;
            return Poll::Ready(Ok(()));
        }
        if let Some(deadline) = &mut me.deadline
            && deadline.as_mut().poll(cx).is_ready()
        {
            if me.framing.in_head() {
                let secs = me.header_timeout.as_secs_f64();
                tracing::debug!("a request head took over {secs} s; answered 408");
                me.refuse(
                    Status::Timeout,
                    &format!(
                        "the request's head did not arrive within {secs} s; send the request line and headers at once"
                    ),
                );
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            // Nothing sent at all: close quietly (hyper sees the peer go away).
            me.deadline = None;
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut me.inner).poll_read(cx, buf))?;
        let seen = me.framing.watch(&buf.filled()[before..]);
        let refusal = match seen {
            Seen::Fine => None,
            Seen::LongRequestLine => Some(Status::UriTooLong),
            Seen::LongHeaderLine => Some(Status::HeadersTooLarge),
        };
        if let Some(status) = refusal {
            tracing::debug!("request head line over {MAX_HEAD_LINE} bytes refused");
            // Hand hyper nothing of this request.
            buf.set_filled(before);
            me.refuse(
                status,
                &format!(
                    "the request line or a header is longer than {MAX_HEAD_LINE} bytes; send long input in a JSON body"
                ),
            );
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        me.update_deadline();
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for HeadGuard<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = &mut *self;
        ready!(me.poll_out(cx))?;
        if let Some(status) = hypers_own_error(buf) {
            me.out = Some((canned(status, status.message()).into_bytes(), 0));
            // Taken whole; it goes out on the flush hyper does next.
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut me.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_out(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_out(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// hyper's own error heads are a status line, `connection`, `content-length` and `date`.
const MAX_HYPER_HEAD: usize = 512;

/// The statuses answered below the router.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    BadRequest,
    Timeout,
    UriTooLong,
    HeadersTooLarge,
}

impl Status {
    fn line(self) -> &'static str {
        match self {
            Status::BadRequest => "400 Bad Request",
            Status::Timeout => "408 Request Timeout",
            Status::UriTooLong => "414 URI Too Long",
            Status::HeadersTooLarge => "431 Request Header Fields Too Large",
        }
    }

    fn code(self) -> &'static str {
        match self {
            Status::BadRequest => "bad_request",
            Status::Timeout => "timeout",
            Status::UriTooLong => "too_long",
            Status::HeadersTooLarge => "headers_too_large",
        }
    }

    /// The message for hyper's refusals (the guard's own say more).
    fn message(self) -> &'static str {
        match self {
            Status::HeadersTooLarge => concat!(
                "the request has too many headers (at most 100) or too large a head (about 400 KB); ",
                "send fewer headers and long input in a JSON body"
            ),
            Status::UriTooLong => "the request line is too long; send long input in a JSON body",
            _ => concat!(
                "the request is not valid HTTP/1.1 (a byte not allowed in the method, path or ",
                "a header, or a malformed header line); percent-encode the path and send ",
                "headers as `name: value`"
            ),
        }
    }
}

/// A whole answer: `status` with the API's JSON error, closing the connection.
fn canned(status: Status, message: &str) -> String {
    let body =
        serde_json::json!({"error": {"code": status.code(), "message": message}}).to_string();
    format!(
        "HTTP/1.1 {}\r\ncontent-type: application/json\r\nx-content-type-options: nosniff\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        status.line(),
        body.len()
    )
}

/// Whether `buf` is one of hyper's own error answers — a whole head and nothing else, with an
/// error status, no body, and none of the headers the router puts on every answer — and which.
fn hypers_own_error(buf: &[u8]) -> Option<Status> {
    // hyper writes such a head by itself in one write (it flattens its writes, as this stream is
    // not vectored), and it is short: anything else is passed on without a scan.
    if buf.len() > MAX_HYPER_HEAD || !buf.starts_with(b"HTTP/1.") || !buf.ends_with(b"\r\n\r\n") {
        return None;
    }
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    if end + 4 != buf.len() {
        return None;
    }
    let head = std::str::from_utf8(buf).ok()?.to_ascii_lowercase();
    let mut lines = head.lines();
    let status = lines.next()?.split(' ').nth(1)?;
    let (mut empty, mut ours) = (false, false);
    for l in lines {
        empty |= l.replace(' ', "") == "content-length:0";
        ours |= l.starts_with("x-content-type-options:");
    }
    if !empty || ours {
        return None;
    }
    match status {
        "414" => Some(Status::UriTooLong),
        "431" => Some(Status::HeadersTooLarge),
        s if s.starts_with('4') || s.starts_with('5') => Some(Status::BadRequest),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canned_answers_say_their_own_length_and_are_json() {
        for s in [
            Status::BadRequest,
            Status::Timeout,
            Status::UriTooLong,
            Status::HeadersTooLarge,
        ] {
            let answer = canned(s, s.message());
            let (head, body) = answer.split_once("\r\n\r\n").unwrap_or_default();
            assert!(head.ends_with(&format!("\r\ncontent-length: {}", body.len())));
            let v: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
            assert_eq!(v["error"]["code"], s.code());
            // A canned answer is never taken for one of hyper's.
            assert_eq!(hypers_own_error(format!("{head}\r\n\r\n").as_bytes()), None);
        }
    }

    #[test]
    fn hypers_empty_error_heads_are_recognised_and_nothing_else() {
        let date = "date: Tue, 01 Dec 2026 17:49:58 GMT\r\n";
        let hyper = |status: &str| {
            format!("HTTP/1.1 {status}\r\nconnection: close\r\ncontent-length: 0\r\n{date}\r\n")
        };
        assert_eq!(
            hypers_own_error(hyper("431 Request Header Fields Too Large").as_bytes()),
            Some(Status::HeadersTooLarge)
        );
        assert_eq!(
            hypers_own_error(hyper("400 Bad Request").as_bytes()),
            Some(Status::BadRequest)
        );
        assert_eq!(
            hypers_own_error(hyper("414 URI Too Long").as_bytes()),
            Some(Status::UriTooLong)
        );
        for not in [
            hyper("200 OK"),
            hyper("304 Not Modified"),
            // The router's answers carry its security headers.
            format!(
                "HTTP/1.1 404 Not Found\r\nx-content-type-options: nosniff\r\ncontent-length: 0\r\n{date}\r\n"
            ),
            // A head with a body, or a body alone.
            format!("{}{{}}", hyper("400 Bad Request")),
            "HTTP/1.1 400 Bad Request\r\ncontent-length: 2\r\n\r\n".into(),
            "{\"error\": 1}".into(),
        ] {
            assert_eq!(hypers_own_error(not.as_bytes()), None, "{not}");
        }
    }
}
