//! One message's bytes read into what the inbox decides on (mail-parser does the MIME), in
//! two steps so that a stranger's mail never reaches the body parser:
//!
//! 1. [`headers`]: who sent it, what it answers, whether a program sent it, its identity
//!    (the Message-ID, and a digest of what it says for mail without one) — from the top
//!    header block only, which mail-parser reads without descending into parts;
//! 2. [`body`], for a sender the screen let through: what the person wrote (quotes and
//!    signature off, cut at 64 KiB; an HTML-only mail's visible text) and the names of its
//!    attachments (never their content). A message nested deeper than [`scan::MAX_DEPTH`]
//!    or with more than [`scan::MAX_PARTS`] parts is not parsed at all; the rest is parsed
//!    on a thread of its own with a stack big enough for any fetch and its panics caught,
//!    so no message, whatever the parser does with it, ends the daemon.
//!
//! Every header value kept is bounded here ([`MAX_ID`], [`MAX_IDS`], [`MAX_ADDRESS`],
//! [`MAX_SUBJECT`]): they are stored, listed by `GET /v1/inbox` and looked up one by one.

use super::{html, quote, scan};
use crate::notify::thread;
use hermes_store::IgnoreReason;
use mail_parser::{MessageParser, MimeHeaders, PartType};
use sha2::{Digest, Sha256};

/// The longest message id kept, in bytes: real ones are well under 100; RFC 5322 allows a
/// line of 998, which is no id anyone's client writes. A longer Message-ID is cut (it stays
/// the message's identity: the cut is the same each time); a longer reference is dropped.
pub(crate) const MAX_ID: usize = 255;
/// The most ids kept from In-Reply-To and References together (each is one lookup, and a
/// notice's token is within the last few of a real thread).
pub(crate) const MAX_IDS: usize = 50;
/// The longest From address kept, in bytes (RFC 5321's limit on a path).
pub(crate) const MAX_ADDRESS: usize = 254;
/// The longest subject kept, in bytes (RFC 5322's line limit).
pub(crate) const MAX_SUBJECT: usize = 998;
/// The stack of the thread a body is parsed on. mail-parser (and what it hands back) nests
/// on the stack with the message; within [`super::imap::MAX_FETCH`] a message cannot nest
/// more than ~36,000 parts, which this covers many times over in an unoptimised build. It is
/// address space, touched only as deep as a parse goes.
const PARSE_STACK: usize = 256 * 1024 * 1024;

/// A message as the inbox sees it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Inbound {
    /// Without angle brackets, at most [`MAX_ID`] bytes.
    pub message_id: Option<String>,
    /// SHA-256 (hex) of the headers that make the message what it is (From, To, Date,
    /// Subject, In-Reply-To, References) and its body: its identity without a Message-ID,
    /// the same under any UID or UIDVALIDITY.
    pub digest: String,
    /// The From address, lower case.
    pub from: Option<String>,
    pub subject: String,
    /// In-Reply-To's ids, then References' from the newest back: where a token is looked for.
    pub answers: Vec<String>,
    /// References as written, oldest first (for threading an answer); the newest kept.
    pub references: Vec<String>,
    /// What the person wrote: quotes and signature off, cut at [`quote::MAX_BODY`].
    pub text: String,
    /// Whether the text was cut (or the message was too big to fetch whole).
    pub cut: bool,
    pub attachments: Vec<String>,
    /// Sent by a program: [`IgnoreReason::AutoReply`] or [`IgnoreReason::Bulk`].
    pub automatic: Option<IgnoreReason>,
    /// Every `Authentication-Results` value, the topmost (the last added) first.
    pub auth_results: Vec<String>,
}

/// What the body gave.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Body {
    pub text: String,
    pub cut: bool,
    pub attachments: Vec<String>,
}

/// Why a body was not read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyError {
    /// The message cannot be read, and never will be: record it `unreadable`.
    #[error("{0}")]
    Unreadable(Unreadable),
    /// No thread could be started to read it (the machine, not the mail): read it again later.
    #[error("cannot start a thread to read mail: {0}")]
    Spawn(#[source] std::io::Error),
}

/// What made a message unreadable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Unreadable {
    #[error(
        "its parts nest {depth} deep and number {parts} (at most {} and {})",
        scan::MAX_DEPTH,
        scan::MAX_PARTS
    )]
    TooComplex { depth: usize, parts: usize },
    #[error("it is not a MIME message, or its HTML nests too deep to read")]
    NotMime,
    #[error("the parser failed on it")]
    ParserFailed,
}

/// Read the top header block of `raw` (the first bytes of a message whose whole size is
/// `size`); the body is left alone. `None`: not a message at all.
pub(crate) fn headers(raw: &[u8], size: usize) -> Option<Inbound> {
    let msg = MessageParser::default().parse_headers(raw)?;
    let headers: Vec<(String, String)> = msg
        .headers_raw()
        .map(|(n, v)| (n.to_ascii_lowercase(), unfold(v)))
        .collect();
    let first = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    let all = |name: &str| -> Vec<String> {
        headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .collect()
    };
    let from = msg
        .from()
        .and_then(|a| a.first())
        .and_then(|a| a.address())
        .map(|a| a.trim().to_lowercase())
        .filter(|a| a.contains('@'))
        .map(|a| prefix(&a, MAX_ADDRESS).to_string());
    let ids = |name: &str| -> Vec<String> {
        first(name)
            .map(thread::ids_in)
            .unwrap_or_default()
            .into_iter()
            .filter(|id| id.len() <= MAX_ID)
            .collect()
    };
    let in_reply_to = ids("in-reply-to");
    let mut references = ids("references");
    // The newest are where a token is, and what an answer's References keeps.
    references.drain(..references.len().saturating_sub(MAX_IDS));
    let mut answers = in_reply_to;
    answers.extend(references.iter().rev().cloned());
    answers.truncate(MAX_IDS);
    let digest = digest(&first, raw);
    Some(Inbound {
        message_id: msg
            .message_id()
            .map(|id| id.trim().trim_matches(['<', '>']).trim())
            .filter(|id| !id.is_empty())
            .map(|id| prefix(id, MAX_ID).to_string()),
        digest,
        automatic: automatic(&first, from.as_deref()),
        from,
        subject: prefix(msg.subject().unwrap_or("").trim(), MAX_SUBJECT)
            .trim()
            .to_string(),
        answers,
        references,
        text: String::new(),
        cut: size > raw.len(),
        attachments: Vec::new(),
        auth_results: all("authentication-results"),
    })
}

/// The identity of a message that cannot be read at all: the digest of its bytes.
pub(crate) fn digest_of_bytes(raw: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(b"raw\n");
    update_without_cr(&mut h, raw);
    hex::encode(h.finalize())
}

/// SHA-256 over the headers that make a message what it is and its body bytes. A server
/// that renumbers a mailbox keeps every byte; carriage returns are left out so that a store
/// which keeps LF line ends gives the same digest.
fn digest<'a>(header: &impl Fn(&str) -> Option<&'a str>, raw: &[u8]) -> String {
    let mut h = Sha256::new();
    for name in ["from", "to", "date", "subject", "in-reply-to", "references"] {
        h.update(name.as_bytes());
        h.update(b":");
        h.update(header(name).unwrap_or_default().as_bytes());
        h.update(b"\n");
    }
    h.update(b"\n");
    update_without_cr(&mut h, body_bytes(raw));
    hex::encode(h.finalize())
}

fn update_without_cr(h: &mut Sha256, bytes: &[u8]) {
    for piece in bytes.split(|b| *b == b'\r') {
        h.update(piece);
    }
}

/// The bytes after the first blank line (the end of the top header block).
fn body_bytes(raw: &[u8]) -> &[u8] {
    let mut at = 0;
    for line in raw.split_inclusive(|b| *b == b'\n') {
        at += line.len();
        if line == b"\n" || line == b"\r\n" {
            return &raw[at..];
        }
    }
    &[]
}

/// Read the body of `raw` (the first bytes of a message whose whole size is `size`): bounded
/// first, then parsed on a thread of its own (see the module's notes).
pub(crate) async fn body(raw: &[u8], size: usize) -> Result<Body, BodyError> {
    let shape = scan::shape(raw);
    if !shape.within_bounds() {
        return Err(BodyError::Unreadable(Unreadable::TooComplex {
            depth: shape.depth,
            parts: shape.parts,
        }));
    }
    let bytes = completed(raw, size, &shape);
    let partial = size > raw.len();
    match isolated(move || body_now(&bytes, partial)).await? {
        Some(b) => Ok(b),
        None => Err(BodyError::Unreadable(Unreadable::NotMime)),
    }
}

/// `read` run on a thread of its own with [`PARSE_STACK`], its panic caught: whatever it
/// does, the daemon goes on.
async fn isolated<T: Send + 'static>(
    read: impl FnOnce() -> T + Send + 'static,
) -> Result<T, BodyError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("hermes-mail".into())
        .stack_size(PARSE_STACK)
        .spawn(move || {
            let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(read)));
        })
        .map_err(BodyError::Spawn)?;
    match rx.await {
        Ok(Ok(read)) => Ok(read),
        // A panic in the parser (caught), or the thread gone without a word.
        Ok(Err(_)) | Err(_) => Err(BodyError::Unreadable(Unreadable::ParserFailed)),
    }
}

/// `raw` as the parser should see it: a message the fetch cut off gets every multipart still
/// open closed — else mail-parser drops the part being read when the bytes ran out (often the
/// whole text).
fn completed(raw: &[u8], size: usize, shape: &scan::Shape) -> Vec<u8> {
    if size <= raw.len() {
        return raw.to_vec();
    }
    let mut bytes = raw.to_vec();
    for boundary in &shape.open {
        bytes.extend_from_slice(b"\r\n--");
        bytes.extend_from_slice(boundary);
        bytes.extend_from_slice(b"--\r\n");
    }
    bytes
}

/// The body of `raw`, parsed here and now (on the thread [`body`] starts); `partial`: the
/// fetch did not get the whole message. `None`: not MIME, or HTML too deep to read.
fn body_now(raw: &[u8], partial: bool) -> Option<Body> {
    let msg = MessageParser::default().parse(raw)?;
    // What a person sees: the plain part, or an HTML-only mail's visible text (never
    // mail-parser's conversion, which keeps hidden elements).
    let body = match msg.text_part(0).map(|p| &p.body) {
        Some(PartType::Text(t)) => t.to_string(),
        Some(PartType::Html(h)) => html::visible_text(h)?,
        _ => String::new(),
    };
    let note = "[The rest of this message was cut: it was longer than 64 KiB.]";
    let (text, cut) = quote::cut(&quote::strip(&body), quote::MAX_BODY, note);
    let attachments = msg
        .attachments()
        .filter_map(|p| p.attachment_name())
        .map(|n| n.chars().filter(|c| !c.is_control()).collect())
        .collect();
    Some(Body {
        text,
        cut: cut || partial,
        attachments,
    })
}

impl Inbound {
    /// The message with what its body gave.
    pub(crate) fn with(self, body: Body) -> Inbound {
        Inbound {
            text: body.text,
            cut: self.cut || body.cut,
            attachments: body.attachments,
            ..self
        }
    }
}

/// Both steps at once, on this thread: for tests of what a message reads as.
#[cfg(test)]
pub(crate) fn read(raw: &[u8], size: usize) -> Option<Inbound> {
    let m = headers(raw, size)?;
    let shape = scan::shape(raw);
    let body = body_now(&completed(raw, size, &shape), size > raw.len())?;
    Some(m.with(body))
}

/// `text` cut to at most `max` bytes, at a character boundary.
fn prefix(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// A header's value on one line (folding undone), trimmed.
fn unfold(value: &str) -> String {
    value.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether a program sent the message, by the headers RFC 3834 and mailing lists use, and the
/// senders of bounces.
fn automatic<'a>(
    header: &impl Fn(&str) -> Option<&'a str>,
    from: Option<&str>,
) -> Option<IgnoreReason> {
    let lower = |name: &str| header(name).map(|v| v.trim().to_ascii_lowercase());
    if lower("auto-submitted").is_some_and(|v| !v.is_empty() && !v.starts_with("no")) {
        return Some(IgnoreReason::AutoReply);
    }
    if header("x-autoreply").is_some()
        || header("x-autorespond").is_some()
        || lower("x-auto-response-suppress").is_some_and(|v| v.contains("all") || v.contains("oof"))
        || lower("content-type").is_some_and(|v| v.starts_with("multipart/report"))
        || lower("return-path").is_some_and(|v| v.trim_matches(['<', '>', ' ']).is_empty())
    {
        return Some(IgnoreReason::AutoReply);
    }
    if let Some(local) = from.and_then(|f| f.split('@').next())
        && ["mailer-daemon", "postmaster"].contains(&local)
    {
        return Some(IgnoreReason::AutoReply);
    }
    match lower("precedence").as_deref() {
        Some("auto_reply") => return Some(IgnoreReason::AutoReply),
        Some("bulk" | "junk" | "list") => return Some(IgnoreReason::Bulk),
        _ => {}
    }
    if header("list-id").is_some() || header("list-unsubscribe").is_some() {
        return Some(IgnoreReason::Bulk);
    }
    None
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;
