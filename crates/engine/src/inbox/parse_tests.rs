//! Tests of `parse.rs`: what a message's bytes read as.

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
    let mut raw =
        String::from("From: me@example.org\r\nSubject: deep\r\nMessage-ID: <deep@example.org>\r\n");
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
        Some(hermes_store::InboxCommand::Approve)
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
