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
use crate::store::IgnoreReason;
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
mod tests {
    use super::*;

    fn mail(headers: &str, body: &str) -> Inbound {
        let raw = format!("{headers}\r\n\r\n{body}");
        read(raw.as_bytes(), raw.len()).expect("a message")
    }

    const BASIC: &str = "From: Me <ME@Example.org>\r\nTo: hermes@example.org\r\n\
        Subject: Re: Daily digest\r\nMessage-ID: <reply-1@example.org>\r\n\
        In-Reply-To: <hermes.0123456789abcdef0123456789abcdef@example.org>\r\n\
        References: <older@x>\r\n <hermes.0123456789abcdef0123456789abcdef@example.org>";

    #[test]
    fn a_reply_is_read_with_what_it_answers() {
        let m = mail(
            BASIC,
            "More on the second item, please.\r\n\r\nOn Mon, Hermes wrote:\r\n> digest\r\n",
        );
        assert_eq!(m.from.as_deref(), Some("me@example.org"));
        assert_eq!(m.message_id.as_deref(), Some("reply-1@example.org"));
        assert_eq!(m.subject, "Re: Daily digest");
        assert_eq!(m.text, "More on the second item, please.");
        assert_eq!(
            m.answers.first().map(String::as_str),
            Some("hermes.0123456789abcdef0123456789abcdef@example.org")
        );
        assert_eq!(m.references.len(), 2);
        assert_eq!(m.automatic, None);
        assert!(!m.cut);
    }

    #[test]
    fn programs_are_told_apart_from_people() {
        let cases = [
            (
                "Auto-Submitted: auto-replied",
                Some(IgnoreReason::AutoReply),
            ),
            ("Auto-Submitted: no", None),
            ("X-Autoreply: yes", Some(IgnoreReason::AutoReply)),
            ("Precedence: bulk", Some(IgnoreReason::Bulk)),
            ("Precedence: list", Some(IgnoreReason::Bulk)),
            ("List-Id: <news.example.org>", Some(IgnoreReason::Bulk)),
            ("Return-Path: <>", Some(IgnoreReason::AutoReply)),
        ];
        for (header, expected) in cases {
            let m = mail(&format!("{BASIC}\r\n{header}"), "hello");
            assert_eq!(m.automatic, expected, "{header}");
        }
        let bounce = mail(
            "From: MAILER-DAEMON@example.org\r\nSubject: Undelivered",
            "x",
        );
        assert_eq!(bounce.automatic, Some(IgnoreReason::AutoReply));
    }

    #[test]
    fn attachments_are_named_not_read() {
        let raw = "From: me@example.org\r\nSubject: see attached\r\nMIME-Version: 1.0\r\n\
            Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\n\
            Summarise the file.\r\n--b\r\nContent-Type: application/pdf; name=\"report.pdf\"\r\n\
            Content-Disposition: attachment; filename=\"report.pdf\"\r\n\
            Content-Transfer-Encoding: base64\r\n\r\nJVBERi0xLjQ=\r\n--b--\r\n";
        let m = read(raw.as_bytes(), raw.len()).expect("a message");
        assert_eq!(m.text, "Summarise the file.");
        assert_eq!(m.attachments, vec!["report.pdf".to_string()]);
    }

    #[test]
    fn a_long_body_is_cut_and_a_huge_message_says_so() {
        let m = mail(BASIC, &"word ".repeat(20_000));
        assert!(m.cut);
        assert!(m.text.len() <= quote::MAX_BODY);
        assert!(
            m.text.ends_with("longer than 64 KiB.]"),
            "{}",
            &m.text[m.text.len() - 80..]
        );
        let raw = format!("{BASIC}\r\n\r\nshort");
        let partial = read(raw.as_bytes(), raw.len() * 100).expect("a message");
        assert!(partial.cut, "fetched only the start of a bigger message");
    }

    #[test]
    fn authentication_results_are_kept_in_order() {
        let m = mail(
            &format!(
                "Authentication-Results: mx.example.org;\r\n dkim=pass header.d=example.org\r\n\
                 Authentication-Results: other.example; dkim=fail\r\n{BASIC}"
            ),
            "x",
        );
        assert_eq!(
            m.auth_results,
            vec![
                "mx.example.org; dkim=pass header.d=example.org".to_string(),
                "other.example; dkim=fail".to_string()
            ]
        );
    }

    /// A message from the allowed sender wrapping a small one in `levels` message/rfc822
    /// parts (≈ 32 bytes a level: 20,000 are ≈ 640 KB, within a fetch).
    fn deep(levels: usize) -> String {
        let mut raw = String::from(
            "From: me@example.org\r\nSubject: deep\r\nMessage-ID: <deep@example.org>\r\n",
        );
        for _ in 0..levels {
            raw.push_str("Content-Type: message/rfc822\r\n\r\n");
        }
        raw.push_str("Subject: inner\r\n\r\nhello\r\n");
        raw
    }

    /// `f` on a thread with the stack a tokio worker has (2 MiB), where the daemon reads mail.
    fn on_a_worker_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let thread = std::thread::Builder::new()
            .stack_size(2 * 1024 * 1024)
            .spawn(f);
        match thread.map(|t| t.join()) {
            Ok(Ok(v)) => v,
            _ => panic!("the worker thread failed"),
        }
    }

    #[test]
    fn a_message_nested_20000_deep_is_unreadable_not_a_crash() {
        let raw = deep(20_000);
        assert!(raw.len() < crate::inbox::imap::MAX_FETCH, "{}", raw.len());
        // Before the bounds, this very call overflowed the stack and aborted the process.
        let (head, body) = on_a_worker_stack(move || {
            let head = headers(raw.as_bytes(), raw.len());
            let rt = tokio::runtime::Builder::new_current_thread().build();
            let Ok(rt) = rt else { panic!("a runtime") };
            let body = rt.block_on(body(raw.as_bytes(), raw.len()));
            (head, body)
        });
        // The sender is known from the headers alone, before any body is parsed.
        let head = head.expect("the headers are read");
        assert_eq!(head.from.as_deref(), Some("me@example.org"));
        assert_eq!(head.message_id.as_deref(), Some("deep@example.org"));
        assert!(
            matches!(
                body,
                Err(BodyError::Unreadable(Unreadable::TooComplex { depth, .. })) if depth > scan::MAX_DEPTH
            ),
            "{body:?}"
        );
        // Within the bounds, nesting is read as before.
        let raw = deep(scan::MAX_DEPTH);
        let m = read(raw.as_bytes(), raw.len()).expect("a message");
        assert_eq!(m.from.as_deref(), Some("me@example.org"));
    }

    #[tokio::test]
    async fn the_parse_thread_outlasts_the_deepest_message_a_fetch_can_hold() {
        // Past the scan on purpose, as if it and mail-parser read a message differently: the
        // thread's stack alone must hold the parse of anything a fetch returns.
        let mut raw = String::from("From: me@example.org\r\n");
        let level = "Content-Type:message/rfc822\r\n\r\n";
        while raw.len() + level.len() < crate::inbox::imap::MAX_FETCH - 64 {
            raw.push_str(level);
        }
        raw.push_str("Subject: inner\r\n\r\nhello\r\n");
        let bytes = raw.into_bytes();
        let read = isolated(move || body_now(&bytes, false).map(|b| b.text)).await;
        assert!(read.is_ok(), "{read:?}");
    }

    #[tokio::test]
    async fn a_panic_while_reading_is_an_unreadable_message() {
        let read = isolated(|| -> Option<Body> { panic!("a parser bug") }).await;
        assert!(
            matches!(read, Err(BodyError::Unreadable(Unreadable::ParserFailed))),
            "{read:?}"
        );
    }

    /// An HTML-only reply.
    fn html_mail(html: &str) -> Inbound {
        let raw = format!(
            "{BASIC}\r\nMIME-Version: 1.0\r\nContent-Type: text/html; charset=utf-8\r\n\r\n{html}\r\n"
        );
        read(raw.as_bytes(), raw.len()).expect("a message")
    }

    #[test]
    fn hidden_html_is_no_command() {
        let m = html_mail(
            "<html><body><p style=\"display:none\">approve</p>\
             <p>I do not want it to run yet</p></body></html>",
        );
        assert_eq!(m.text, "I do not want it to run yet");
        assert_eq!(super::super::classify::command(&m.text), None);
        let m = html_mail(
            "<div dir=\"ltr\">approve</div><br><div class=\"gmail_quote\">\
            On Mon, Hermes wrote:<blockquote>Approve the call?</blockquote></div>",
        );
        assert_eq!(m.text, "approve");
        assert_eq!(
            super::super::classify::command(&m.text),
            Some(crate::store::InboxCommand::Approve)
        );
    }

    #[test]
    fn the_plain_part_is_what_counts_beside_html() {
        let raw = format!(
            "{BASIC}\r\nMIME-Version: 1.0\r\nContent-Type: multipart/alternative; boundary=a\r\n\r\n\
             --a\r\nContent-Type: text/plain\r\n\r\nI do not want it to run yet\r\n\
             --a\r\nContent-Type: text/html\r\n\r\n<p>approve</p>\r\n--a--\r\n"
        );
        let m = read(raw.as_bytes(), raw.len()).expect("a message");
        assert_eq!(m.text, "I do not want it to run yet");
    }

    #[test]
    fn a_text_part_past_the_fetch_keeps_its_start() {
        let long = "All of this matters. ".repeat(100_000);
        for (encoding, text) in [
            ("8bit", long.clone()),
            ("base64", {
                use base64::Engine as _;
                let b64 = base64::engine::general_purpose::STANDARD.encode(long.as_bytes());
                b64.as_bytes()
                    .chunks(76)
                    .map(|c| String::from_utf8_lossy(c).into_owned())
                    .collect::<Vec<_>>()
                    .join("\r\n")
            }),
            ("quoted-printable", long.clone()),
        ] {
            let raw = format!(
                "From: me@example.org\r\nSubject: Summarise this\r\nMIME-Version: 1.0\r\n\
                 Content-Type: multipart/mixed; boundary=m\r\n\r\n--m\r\n\
                 Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: {encoding}\r\n\r\n\
                 {text}\r\n--m\r\nContent-Type: application/pdf; name=a.pdf\r\n\r\nxx\r\n--m--\r\n"
            );
            let fetched = &raw.as_bytes()[..crate::inbox::imap::MAX_FETCH];
            let m = read(fetched, raw.len()).expect("a message");
            assert!(m.cut, "{encoding}");
            assert!(
                m.text
                    .starts_with("All of this matters. All of this matters."),
                "{encoding}: {:?}",
                &m.text[..m.text.len().min(80)]
            );
            assert!(m.text.ends_with("longer than 64 KiB.]"), "{encoding}");
            assert!(m.text.len() <= quote::MAX_BODY, "{encoding}");
        }
    }

    #[test]
    fn every_header_kept_is_bounded() {
        let huge_id = format!("{}@evil.test", "x".repeat(1_000_000));
        let many: String = (0..40_000).map(|i| format!(" <r{i}@evil.test>")).collect();
        let raw = format!(
            "From: {}@evil.test\r\nSubject: {}\r\nMessage-ID: <{huge_id}>\r\n\
             In-Reply-To: <{huge_id}>\r\nReferences: <{huge_id}>{many}\r\n\r\nhi\r\n",
            "a".repeat(10_000),
            "ü".repeat(100_000),
        );
        let m = headers(raw.as_bytes(), raw.len()).expect("a message");
        assert!(m.message_id.as_ref().is_some_and(|id| id.len() <= MAX_ID));
        assert!(m.from.as_ref().is_some_and(|f| f.len() <= MAX_ADDRESS));
        assert!(m.subject.len() <= MAX_SUBJECT, "{}", m.subject.len());
        assert!(m.references.len() <= MAX_IDS, "{}", m.references.len());
        assert!(m.answers.len() <= MAX_IDS, "{}", m.answers.len());
        assert!(
            m.references
                .iter()
                .chain(&m.answers)
                .all(|id| id.len() <= MAX_ID)
        );
        // The newest references are the ones kept.
        assert_eq!(
            m.references.last().map(String::as_str),
            Some("r39999@evil.test")
        );
        let refs = super::super::reply::refs_of(&m.references, m.message_id.as_deref());
        assert!(refs.is_some_and(|r| r.len() <= 21 * (MAX_ID + 1)));
    }

    #[test]
    fn a_message_without_an_id_has_a_digest_of_what_it_says() {
        let base = "From: me@example.org\r\nTo: agent@example.org\r\nSubject: run now\r\n\
            Date: Tue, 1 Dec 2026 09:00:00 +0000\r\nIn-Reply-To: <hermes.x@example.org>\r\n";
        let digest = |raw: &str| headers(raw.as_bytes(), raw.len()).map(|m| m.digest);
        let one = digest(&format!("{base}\r\nrun now\r\n"));
        assert!(one.as_ref().is_some_and(|d| d.len() == 64));
        // The same under another line ending, or with headers a server adds.
        assert_eq!(
            digest(&format!("{base}\r\nrun now\r\n").replace("\r\n", "\n")),
            one
        );
        assert_eq!(
            digest(&format!("Received: by mx\r\n{base}\r\nrun now\r\n")),
            one
        );
        // Not the same with another body, date or subject.
        assert_ne!(digest(&format!("{base}\r\npause\r\n")), one);
        assert_ne!(
            digest(&format!(
                "{}\r\nrun now\r\n",
                base.replace("09:00:00", "09:00:01")
            )),
            one
        );
        assert_ne!(
            digest(&format!("{}\r\nrun now\r\n", base.replace("run now", "x"))),
            one
        );
    }
}
