//! Threading email: the Message-ID an email notice carries (its token inside), finding that
//! token again in a reply's `In-Reply-To` / `References`, and the subject of a reply.
//!
//! Owns: the form `<hermes.TOKEN@DOMAIN>`. Must not: decide what a reply may do (the inbox
//! does), or trust a token it did not find in the store.

/// The local part's prefix: what marks a Message-ID as one of ours.
const PREFIX: &str = "hermes.";
/// A token is this many lower-case hex digits (`store::new_token`).
const TOKEN_LEN: usize = 32;

/// The Message-ID (without angle brackets) of a notice with `token`, sent from `domain`.
pub fn message_id(token: &str, domain: &str) -> String {
    format!("{PREFIX}{token}@{domain}")
}

/// The token inside one of our Message-IDs (with or without angle brackets); `None` for any
/// other id, or one whose token is not of the form we make.
pub(crate) fn token_of(id: &str) -> Option<&str> {
    let id = id.trim().trim_start_matches('<').trim_end_matches('>');
    let (local, _domain) = id.split_once('@')?;
    let token = local.strip_prefix(PREFIX)?;
    let ok = token.len() == TOKEN_LEN
        && token
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    ok.then_some(token)
}

/// Every message id in a header value (`<a@b> <c@d>`, as In-Reply-To and References hold
/// them), without angle brackets, in order. Text outside angle brackets is ignored, except a
/// bare id when the value has no brackets at all.
pub(crate) fn ids_in(value: &str) -> Vec<String> {
    let mut ids = Vec::new();
    let mut rest = value;
    while let Some(start) = rest.find('<') {
        let after = &rest[start + 1..];
        let Some(end) = after.find('>') else { break };
        let id = after[..end].trim();
        if !id.is_empty() {
            ids.push(id.to_string());
        }
        rest = &after[end + 1..];
    }
    if ids.is_empty() {
        ids.extend(
            value
                .split_whitespace()
                .filter(|w| w.contains('@'))
                .map(str::to_string),
        );
    }
    ids
}

/// `Re: SUBJECT`, with the prefixes a reply already had (`Re:`, `RE:`, German `AW:`, `回复：`, `答复：`)
/// taken off first, so a long thread does not pile them up.
pub(crate) fn reply_subject(subject: &str) -> String {
    let mut s = subject.trim();
    loop {
        let lower = s.to_lowercase();
        let cut = ["re:", "aw:", "回复:", "回复：", "答复:", "答复："]
            .iter()
            .find(|p| lower.starts_with(*p))
            .map(|p| p.len());
        match cut {
            // The prefixes are the same length in bytes in either case (ASCII letters, or the
            // same CJK characters), so the lower-cased length indexes the original.
            Some(n) if s.is_char_boundary(n) => s = s[n..].trim_start(),
            _ => break,
        }
    }
    if s.is_empty() {
        "Re: your message".to_string()
    } else {
        format!("Re: {s}")
    }
}

/// The References of an answer to a mail: the mail's own References, then its Message-ID;
/// only the last `keep` ids, so a long thread's header stays short.
pub(crate) fn references(prior: &[String], answered: Option<&str>, keep: usize) -> Vec<String> {
    let mut refs: Vec<String> = prior.to_vec();
    if let Some(id) = answered {
        refs.push(id.to_string());
    }
    let skip = refs.len().saturating_sub(keep);
    refs.split_off(skip)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_comes_back_out_of_its_message_id() {
        let token = "0123456789abcdef0123456789abcdef";
        let id = message_id(token, "example.org");
        assert_eq!(id, format!("hermes.{token}@example.org"));
        assert_eq!(token_of(&id), Some(token));
        assert_eq!(token_of(&format!("<{id}>")), Some(token));
        assert_eq!(token_of("<CAF=x@mail.gmail.com>"), None);
        assert_eq!(token_of("hermes.short@example.org"), None);
        assert_eq!(
            token_of("hermes.0123456789ABCDEF0123456789ABCDEF@example.org"),
            None,
            "upper case is not a token we make"
        );
    }

    #[test]
    fn ids_are_read_from_header_values() {
        assert_eq!(
            ids_in("<a@b>\r\n <c@d>  <>"),
            vec!["a@b".to_string(), "c@d".to_string()]
        );
        assert_eq!(ids_in("a@b"), vec!["a@b".to_string()]);
        assert!(ids_in("").is_empty());
    }

    #[test]
    fn reply_subjects_do_not_pile_up() {
        assert_eq!(reply_subject("Daily digest"), "Re: Daily digest");
        assert_eq!(reply_subject("Re: RE: re:Daily digest"), "Re: Daily digest");
        assert_eq!(reply_subject("回复：每日摘要"), "Re: 每日摘要");
        assert_eq!(reply_subject("  "), "Re: your message");
    }

    #[test]
    fn references_keep_the_last_ids() {
        let prior: Vec<String> = (0..30).map(|i| format!("{i}@x")).collect();
        let refs = references(&prior, Some("new@x"), 10);
        assert_eq!(refs.len(), 10);
        assert_eq!(refs.last().map(String::as_str), Some("new@x"));
        assert_eq!(references(&[], None, 10), Vec::<String>::new());
    }
}
