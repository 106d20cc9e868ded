//! Following HTTP/1.1 requests through a connection's bytes as they are read: where each
//! request head starts and ends, and which bytes are a body to skip — by `Content-Length`, or
//! chunk by chunk (sizes, data, trailers) for `Transfer-Encoding: chunked` — so that every head
//! on a kept-alive connection is watched, whatever framing the bodies before it had.
//!
//! Owns: the framing state of one connection, and the line limit of a head.
//! Must not: do IO or judge anything but line lengths. Framing it cannot follow (a malformed
//! chunk size, a `Transfer-Encoding` other than chunked, a conflicting `Content-Length`) is
//! hyper's to refuse: it stops watching the connection, which hyper then closes.

/// The longest line a request head may have. Well under hyper's own 64 KiB URI limit, and far
/// above anything the API or the dashboard send.
pub(crate) const MAX_HEAD_LINE: usize = 16 * 1024;

/// A head this long is refused by hyper (its read buffer holds about 400 KiB); past it the
/// watch stops instead of keeping a copy.
const MAX_HEAD_BYTES: usize = 1024 * 1024;

/// A chunk-size line (hex size and extensions); hyper refuses far shorter extensions.
const MAX_CHUNK_LINE: usize = 4096;

/// What a read showed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Seen {
    Fine,
    /// The request line went over [`MAX_HEAD_LINE`].
    LongRequestLine,
    /// A header line went over [`MAX_HEAD_LINE`].
    LongHeaderLine,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// In (or waiting for) a request head: `line` bytes since the last `\n`.
    Head { line: usize },
    /// In a body of known length: this many bytes before the next head.
    Body { left: u64 },
    /// In a chunk-size line (kept in `chunk_line`).
    ChunkSize,
    /// In a chunk's data: this many bytes before its line end.
    ChunkData { left: u64 },
    /// The line end after a chunk's data: `seen` bytes of it so far.
    ChunkEnd { seen: u8 },
    /// In the trailer section after the last chunk: `line` bytes (not counting `\r`) since the
    /// last `\n`; an empty line ends the request.
    Trailer { line: usize },
    /// Not watching any more.
    Off,
}

#[derive(Debug)]
pub(crate) struct Framing {
    phase: Phase,
    /// The current head's bytes, for its framing headers.
    head: Vec<u8>,
    chunk_line: Vec<u8>,
    /// Heads completed on this connection.
    heads: u64,
}

impl Default for Framing {
    fn default() -> Self {
        Framing {
            phase: Phase::Head { line: 0 },
            head: Vec::new(),
            chunk_line: Vec::new(),
            heads: 0,
        }
    }
}

impl Framing {
    /// Some of a head has arrived, not all of it.
    pub(crate) fn in_head(&self) -> bool {
        matches!(self.phase, Phase::Head { .. }) && !self.head.is_empty()
    }

    /// No head has been completed on this connection yet (its first request is awaited).
    pub(crate) fn before_first_head(&self) -> bool {
        self.heads == 0 && matches!(self.phase, Phase::Head { .. })
    }

    /// Follow `bytes` through heads and bodies.
    pub(super) fn watch(&mut self, mut bytes: &[u8]) -> Seen {
        while !bytes.is_empty() {
            match self.phase {
                Phase::Off => return Seen::Fine,
                Phase::Body { left } => {
                    let n = skip(&mut bytes, left);
                    self.phase = match left - n {
                        0 => Phase::Head { line: 0 },
                        left => Phase::Body { left },
                    };
                }
                Phase::Head { line } => {
                    if let Some(long) = self.head_bytes(&mut bytes, line) {
                        return long;
                    }
                }
                Phase::ChunkSize => self.chunk_size(&mut bytes),
                Phase::ChunkData { left } => {
                    let n = skip(&mut bytes, left);
                    self.phase = match left - n {
                        0 => Phase::ChunkEnd { seen: 0 },
                        left => Phase::ChunkData { left },
                    };
                }
                Phase::ChunkEnd { seen } => {
                    let b = bytes[0];
                    bytes = &bytes[1..];
                    self.phase = match (b, seen) {
                        (b'\n', _) => Phase::ChunkSize,
                        (b'\r', 0) => Phase::ChunkEnd { seen: 1 },
                        _ => Phase::Off,
                    };
                }
                Phase::Trailer { line } => {
                    let (part, ended) = take_line(&mut bytes);
                    let line = line + part.iter().filter(|b| !matches!(b, b'\r' | b'\n')).count();
                    self.phase = match (ended, line) {
                        (true, 0) => Phase::Head { line: 0 },
                        (true, _) => Phase::Trailer { line: 0 },
                        (false, l) if l > MAX_HEAD_LINE => Phase::Off,
                        (false, l) => Phase::Trailer { line: l },
                    };
                }
            }
        }
        Seen::Fine
    }

    /// Bytes of a head; `Some` when a line went over the limit.
    fn head_bytes(&mut self, bytes: &mut &[u8], line: usize) -> Option<Seen> {
        if self.head.is_empty() {
            // Empty lines before a request are ignored (RFC 9112 §2.2), as hyper does.
            let blank = bytes
                .iter()
                .take_while(|b| matches!(b, b'\r' | b'\n'))
                .count();
            *bytes = &bytes[blank..];
            if bytes.is_empty() {
                return None;
            }
        }
        let on_request_line = !self.head.contains(&b'\n');
        let (part, ended) = take_line(bytes);
        let line = line + part.len() - usize::from(ended);
        if line > MAX_HEAD_LINE {
            self.head.clear();
            self.phase = Phase::Off;
            return Some(if on_request_line {
                Seen::LongRequestLine
            } else {
                Seen::LongHeaderLine
            });
        }
        self.head.extend_from_slice(part);
        self.phase = Phase::Head {
            line: if ended { 0 } else { line },
        };
        if self.head.ends_with(b"\r\n\r\n") || self.head.ends_with(b"\n\n") {
            self.end_of_head();
        } else if self.head.len() > MAX_HEAD_BYTES {
            self.head.clear();
            self.phase = Phase::Off;
        }
        None
    }

    /// A head is complete: how its body is framed.
    fn end_of_head(&mut self) {
        self.heads += 1;
        let head = String::from_utf8_lossy(&self.head).to_ascii_lowercase();
        self.head.clear();
        let values = |name: &str| -> Vec<String> {
            head.lines()
                .skip(1)
                .filter_map(|l| l.split_once(':'))
                .filter(|(n, _)| *n == name)
                .map(|(_, v)| v.trim().to_string())
                .collect()
        };
        let codings = values("transfer-encoding");
        if let Some(last) = codings.last() {
            // Chunked must be the last coding (RFC 9112 §6.1); else hyper refuses the request.
            let chunked = last
                .rsplit(',')
                .next()
                .is_some_and(|c| c.trim() == "chunked");
            self.phase = if chunked {
                Phase::ChunkSize
            } else {
                Phase::Off
            };
            return;
        }
        let lengths: Vec<Option<u64>> = values("content-length")
            .iter()
            .map(|v| v.parse().ok())
            .collect();
        match lengths.first() {
            None | Some(Some(0)) if lengths.windows(2).all(|w| w[0] == w[1]) => {}
            Some(Some(n)) if lengths.iter().all(|l| *l == Some(*n)) => {
                self.phase = Phase::Body { left: *n };
            }
            _ => self.phase = Phase::Off,
        }
    }

    fn chunk_size(&mut self, bytes: &mut &[u8]) {
        let (part, ended) = take_line(bytes);
        self.chunk_line.extend_from_slice(part);
        if !ended {
            if self.chunk_line.len() > MAX_CHUNK_LINE {
                self.phase = Phase::Off;
            }
            return;
        }
        let line = String::from_utf8_lossy(&self.chunk_line).into_owned();
        self.chunk_line.clear();
        let size = line.split(';').next().unwrap_or("").trim();
        self.phase = match u64::from_str_radix(size, 16) {
            Ok(0) => Phase::Trailer { line: 0 },
            Ok(n) => Phase::ChunkData { left: n },
            Err(_) => Phase::Off,
        };
    }
}

/// Take up to `left` bytes off the front of `bytes`; how many were taken.
fn skip(bytes: &mut &[u8], left: u64) -> u64 {
    let n = (bytes.len() as u64).min(left);
    // `n` is at most `bytes.len()`, so it fits a usize.
    *bytes = &bytes[n as usize..];
    n
}

/// Take the bytes up to and including the next `\n` (or all of them); whether a `\n` ended them.
fn take_line<'a>(bytes: &mut &'a [u8]) -> (&'a [u8], bool) {
    let (part, rest, ended) = match bytes.iter().position(|b| *b == b'\n') {
        Some(nl) => (&bytes[..=nl], &bytes[nl + 1..], true),
        None => (*bytes, &bytes[bytes.len()..], false),
    };
    *bytes = rest;
    (part, ended)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feed `bytes` in pieces of `size`; the first verdict that is not `Fine`.
    fn feed(f: &mut Framing, bytes: &[u8], size: usize) -> Seen {
        for piece in bytes.chunks(size) {
            let seen = f.watch(piece);
            if seen != Seen::Fine {
                return seen;
            }
        }
        Seen::Fine
    }

    fn long_header() -> String {
        format!(
            "GET /healthz HTTP/1.1\r\nx-long: {}\r\n\r\n",
            "a".repeat(MAX_HEAD_LINE)
        )
    }

    #[test]
    fn follows_heads_and_bodies() {
        let body = "x".repeat(60_000);
        let req = format!(
            "POST /v1/tasks HTTP/1.1\r\nhost: a\r\ncontent-length: {}\r\n\r\n{body}GET /healthz HTTP/1.1\r\n\r\n",
            body.len()
        );
        // A long body line is not a long head line, however it arrives.
        for size in [1, 7, 1000, req.len()] {
            let mut f = Framing::default();
            assert_eq!(feed(&mut f, req.as_bytes(), size), Seen::Fine, "{size}");
            assert_eq!(f.phase, Phase::Head { line: 0 });
            assert_eq!(f.heads, 2);
        }
        let mut f = Framing::default();
        let long = format!("GET /v1/tasks/{} HTTP/1.1\r\n", "a".repeat(MAX_HEAD_LINE));
        assert_eq!(f.watch(long.as_bytes()), Seen::LongRequestLine);
        let mut f = Framing::default();
        assert_eq!(
            feed(&mut f, long_header().as_bytes(), 500),
            Seen::LongHeaderLine
        );
    }

    #[test]
    fn chunked_bodies_are_followed_to_the_next_head() {
        let chunked = "POST /v1/tasks HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n\
                       5;name=value\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n\
                       0\r\nx-trailer: yes\r\n\r\n";
        let then = format!("{chunked}{}", long_header());
        for size in [1, 2, 3, 10, then.len()] {
            let mut f = Framing::default();
            assert_eq!(
                feed(&mut f, then.as_bytes(), size),
                Seen::LongHeaderLine,
                "{size}"
            );
        }
        // Without trailers, bare `\n` line ends, and a body line that looks like a head.
        let bare =
            "POST / HTTP/1.1\ntransfer-encoding: chunked\n\n3\n\r\n\n\n0\n\nGET / HTTP/1.1\n\n";
        let mut f = Framing::default();
        assert_eq!(feed(&mut f, bare.as_bytes(), 1), Seen::Fine);
        assert_eq!((f.phase, f.heads), (Phase::Head { line: 0 }, 2));
    }

    #[test]
    fn framing_hyper_refuses_ends_the_watch() {
        for head in [
            "POST / HTTP/1.1\r\ntransfer-encoding: gzip\r\n\r\n",
            "POST / HTTP/1.1\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\n",
            "POST / HTTP/1.1\r\ncontent-length: five\r\n\r\n",
            "POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
            "POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n1\r\nab\r\n",
        ] {
            let mut f = Framing::default();
            assert_eq!(f.watch(head.as_bytes()), Seen::Fine, "{head}");
            assert_eq!(f.phase, Phase::Off, "{head}");
            assert_eq!(f.watch(long_header().as_bytes()), Seen::Fine);
        }
        // Two equal lengths are one length.
        let mut f = Framing::default();
        f.watch(b"POST / HTTP/1.1\r\ncontent-length: 2\r\ncontent-length: 2\r\n\r\n");
        assert_eq!(f.phase, Phase::Body { left: 2 });
    }

    #[test]
    fn where_a_head_is_in_progress() {
        let mut f = Framing::default();
        assert!(f.before_first_head() && !f.in_head());
        // Blank lines before a request are not its start.
        f.watch(b"\r\n");
        assert!(!f.in_head());
        f.watch(b"GET / HTTP/1.1\r\nhost:");
        assert!(f.in_head() && f.before_first_head());
        f.watch(b" a\r\ncontent-length: 3\r\n\r\nab");
        assert!(!f.in_head() && !f.before_first_head());
        f.watch(b"c");
        assert!(!f.in_head());
        f.watch(b"G");
        assert!(f.in_head());
    }
}
