//! One message's bytes read into what the inbox decides on (mail-parser does the MIME): who
//! sent it, what it answers, whether a program sent it, what the person wrote (quotes and
//! signature off, cut at 64 KiB) and the names of its attachments (never their content).

use super::quote;
use crate::notify::thread;
use crate::store::IgnoreReason;
use mail_parser::{MessageParser, MimeHeaders};

/// A message as the inbox sees it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Inbound {
    /// Without angle brackets.
    pub message_id: Option<String>,
    /// The From address, lower case.
    pub from: Option<String>,
    pub subject: String,
    /// In-Reply-To's ids, then References' from the newest back: where a token is looked for.
    pub answers: Vec<String>,
    /// References as written, oldest first (for threading an answer).
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

/// Read `raw` (the first bytes of a message whose whole size is `size`). `None`: not a
/// message at all.
pub(crate) fn read(raw: &[u8], size: usize) -> Option<Inbound> {
    let msg = MessageParser::default().parse(raw)?;
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
        .filter(|a| a.contains('@'));
    let in_reply_to = first("in-reply-to").map(thread::ids_in).unwrap_or_default();
    let references = first("references").map(thread::ids_in).unwrap_or_default();
    let mut answers = in_reply_to;
    answers.extend(references.iter().rev().cloned());
    let body = msg.body_text(0).map(|b| b.into_owned()).unwrap_or_default();
    let note = "[The rest of this message was cut: it was longer than 64 KiB.]";
    let (text, cut) = quote::cut(&quote::strip(&body), quote::MAX_BODY, note);
    let attachments = msg
        .attachments()
        .filter_map(|p| p.attachment_name())
        .map(|n| n.chars().filter(|c| !c.is_control()).collect())
        .collect();
    Some(Inbound {
        message_id: msg
            .message_id()
            .map(|id| id.trim().trim_matches(['<', '>']).to_string())
            .filter(|id| !id.is_empty()),
        automatic: automatic(&first, from.as_deref()),
        from,
        subject: msg.subject().unwrap_or("").trim().to_string(),
        answers,
        references,
        text,
        cut: cut || size > raw.len(),
        attachments,
        auth_results: all("authentication-results"),
    })
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
}
