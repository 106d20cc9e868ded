//! What the person wrote, without what they quoted or signed: the text of a reply with the
//! quoted message (lines starting with `>`, an "On … wrote:" / "… 写道：" line before them, an
//! "-----Original Message-----" or "原始邮件" block and everything under it) and the signature
//! (from a `-- ` line on) taken off, then cut to a size.
//!
//! Rules, not guesses: a line is only dropped when it is quoted, is the attribution of a quote,
//! or follows a separator every mail client writes. Text between quotes (a reply written
//! inline) is kept.

/// The most of a body kept, in bytes.
pub(crate) const MAX_BODY: usize = 64 * 1024;

/// `text` without quotes and signature; blank lines at either end trimmed.
pub(crate) fn strip(text: &str) -> String {
    let text = text.replace("\r\n", "\n").replace('\r', "\n");
    let lines: Vec<&str> = text.lines().collect();
    let mut kept: Vec<&str> = Vec::with_capacity(lines.len());
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if is_signature(line) || opens_forwarded_block(line) {
            break;
        }
        if is_quoted(line) {
            i += 1;
            continue;
        }
        if let Some(span) = attribution(&lines[i..]) {
            // An attribution followed only by quotes, blank lines and a signature ends the
            // reply; one followed by more writing (an inline reply) is just dropped.
            let after = &lines[i + span..];
            let rest_is_quote = after
                .iter()
                .take_while(|l| !is_signature(l))
                .all(|l| is_quoted(l) || l.trim().is_empty());
            if rest_is_quote {
                break;
            }
            i += span;
            continue;
        }
        kept.push(line);
        i += 1;
    }
    let start = kept.iter().position(|l| !l.trim().is_empty());
    let end = kept.iter().rposition(|l| !l.trim().is_empty());
    match (start, end) {
        (Some(s), Some(e)) => kept[s..=e]
            .iter()
            .map(|l| l.trim_end())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// `text` cut to at most `max` bytes at a character boundary, with a note saying so; whether
/// it was cut.
pub(crate) fn cut(text: &str, max: usize, note: &str) -> (String, bool) {
    if text.len() <= max {
        return (text.to_string(), false);
    }
    let room = max.saturating_sub(note.len() + 2);
    let mut end = room.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (format!("{}\n\n{note}", text[..end].trim_end()), true)
}

fn is_quoted(line: &str) -> bool {
    line.trim_start().starts_with('>')
}

/// The signature separator, `-- ` (many clients drop the trailing space).
fn is_signature(line: &str) -> bool {
    line == "-- " || line == "--"
}

/// A separator under which clients put the whole earlier message, unquoted.
fn opens_forwarded_block(line: &str) -> bool {
    let t = line.trim();
    let dashes = |s: &str| s.trim_matches(|c| c == '-' || c == ' ').to_lowercase();
    (t.starts_with("---") && {
        let inner = dashes(t);
        inner == "original message" || inner == "原始邮件" || inner == "forwarded message"
    }) || (t.len() >= 20 && t.chars().all(|c| c == '_'))
}

/// How many lines an attribution ("On Mon, … Hermes <h@x> wrote:", possibly wrapped onto a
/// second line; "… 写道：") spans at the start of `lines`, if it is one.
fn attribution(lines: &[&str]) -> Option<usize> {
    let first = lines.first()?.trim();
    if ends_attribution(first) && opens_attribution(first) {
        return Some(1);
    }
    // Wrapped: "On Mon, 1 Dec 2026 at 08:00, Hermes <h@x>" / "wrote:".
    let second = lines.get(1)?.trim();
    (opens_attribution(first) && ends_attribution(second) && first.len() + second.len() < 300)
        .then_some(2)
}

fn opens_attribution(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with("On ") || t.starts_with("在 ") || t.starts_with("於 ") || ends_cjk(t)
}

fn ends_attribution(line: &str) -> bool {
    let t = line.trim_end();
    t.ends_with("wrote:") || ends_cjk(t)
}

fn ends_cjk(line: &str) -> bool {
    let t = line.trim_end();
    t.ends_with("写道：") || t.ends_with("写道:") || t.ends_with("寫道：") || t.ends_with("寫道:")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_top_posted_reply_loses_the_quote_under_it() {
        let mail = "Tell me more about the second item.\r\n\r\n\
                    On Mon, 1 Dec 2026 at 08:00, Hermes <hermes@example.org> wrote:\r\n\
                    > # Daily digest\r\n> - first\r\n> - second\r\n";
        assert_eq!(strip(mail), "Tell me more about the second item.");
    }

    #[test]
    fn a_wrapped_attribution_is_one() {
        let mail = "pause\n\nOn Mon, 1 Dec 2026 at 08:00, Hermes Agent\n<hermes@example.org> wrote:\n\n> digest\n";
        assert_eq!(strip(mail), "pause");
    }

    #[test]
    fn chinese_clients_are_understood() {
        let mail = "暂停\n\n在 2026年12月1日 08:00，Hermes <hermes@example.org> 写道：\n> 摘要\n";
        assert_eq!(strip(mail), "暂停");
        let foxmail =
            "恢复\n\n------------------ 原始邮件 ------------------\n发件人: Hermes\n摘要\n";
        assert_eq!(strip(foxmail), "恢复");
    }

    #[test]
    fn the_signature_goes() {
        let mail = "run now\n\n-- \nJane Doe\nExample Corp\n";
        assert_eq!(strip(mail), "run now");
        assert_eq!(strip("thanks\n--\nJ"), "thanks");
    }

    #[test]
    fn outlook_blocks_go() {
        let mail =
            "Looks good.\n\n-----Original Message-----\nFrom: Hermes\nSent: Monday\n\nDigest";
        assert_eq!(strip(mail), "Looks good.");
        let underscores = format!("ok\n{}\nFrom: Hermes\n", "_".repeat(32));
        assert_eq!(strip(&underscores), "ok");
    }

    #[test]
    fn an_inline_reply_keeps_what_was_written_between_quotes() {
        let mail = "On Mon, Hermes wrote:\n> first item\nWhat is its source?\n> second item\nAnd this one?\n";
        assert_eq!(strip(mail), "What is its source?\nAnd this one?");
    }

    #[test]
    fn ordinary_text_is_kept_whole() {
        let mail = "Summarise https://example.org/a -- quickly.\nOn Monday I will read it.\n";
        assert_eq!(
            strip(mail),
            "Summarise https://example.org/a -- quickly.\nOn Monday I will read it."
        );
        assert_eq!(strip("\n\n> only a quote\n"), "");
    }

    #[test]
    fn long_bodies_are_cut_at_a_character_with_a_note() {
        let (text, was_cut) = cut(&"é".repeat(100), 51, "[cut]");
        assert!(was_cut);
        assert!(text.len() <= 51, "{}", text.len());
        assert!(text.ends_with("[cut]"), "{text}");
        assert_eq!(cut("short", 51, "[cut]"), ("short".to_string(), false));
    }
}
