//! Cutting and flattening text for messages, traces and terminal output, and making text that
//! came from elsewhere safe to print on a terminal. Lengths count characters (never bytes), so a
//! cut never splits a character, Chinese included. Also counts and durations written as a
//! person reads them (the dashboard and the CLI write them alike).

use std::borrow::Cow;
use std::fmt::Write;

/// The mark left where text was cut.
pub const ELLIPSIS: char = '…';

/// At most `max` characters of `text`; when cut, `…` follows the kept part (so the result
/// may be one character longer than `max`).
pub fn cut(text: &str, max: usize) -> Cow<'_, str> {
    match text.char_indices().nth(max) {
        Some((at, _)) => Cow::Owned(format!("{}{ELLIPSIS}", &text[..at])),
        None => Cow::Borrowed(text),
    }
}

/// At most `max` characters of `text`, cut without a mark.
pub fn prefix(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

/// Whitespace runs (newlines included) folded to single spaces, control characters dropped.
pub fn collapse(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for word in text
        .split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|w| !w.is_empty())
    {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

/// One line of at most `max` characters (the `…` included): for tables and timelines.
pub fn one_line(text: &str, max: usize) -> String {
    if max == 0 {
        return String::new();
    }
    let flat = collapse(text);
    if flat.chars().count() <= max {
        return flat;
    }
    format!("{}{ELLIPSIS}", prefix(&flat, max.saturating_sub(1)))
}

/// `text` as a terminal may show it: every control character but newline and tab written out
/// visibly (`\x1b`, `\x07`, `\r`'s `\x0d`; C1 controls as `\u{9b}`), and the bidi overrides,
/// embeddings, isolates and marks written the same way (`\u{202e}`). Borrowed when there was
/// nothing to change (the common case).
///
/// Answers, errors, facts and server replies are text someone else wrote: printed raw, an
/// `ESC ] 0 ; … BEL` retitles the window, `ESC [ 2 J` clears the screen, `ESC ] 8` plants a
/// hyperlink, `\r` overwrites the line and U+202E shows the rest of it reversed. Escaping
/// (rather than dropping) keeps what was sent readable.
pub fn for_terminal(text: &str) -> Cow<'_, str> {
    let Some(first) = text.find(unsafe_on_terminal) else {
        return Cow::Borrowed(text);
    };
    let mut out = String::with_capacity(text.len() + 16);
    out.push_str(&text[..first]);
    for c in text[first..].chars() {
        if !unsafe_on_terminal(c) {
            out.push(c);
        } else if (c as u32) < 0x80 {
            let _ = write!(out, "\\x{:02x}", c as u32);
        } else {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
    }
    Cow::Owned(out)
}

/// A character a terminal acts on instead of showing: C0 controls but newline and tab, DEL, C1
/// controls, and the bidi formatting characters (which reorder what follows them).
fn unsafe_on_terminal(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(
            c,
            '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
        )
}

/// `1234567` as `1,234,567`.
pub fn grouped(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if n < 0 {
        out.push('-');
    }
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Milliseconds read at a glance: `850 ms`, `12.4 s`, `3 min 20 s`, `2 h 5 min`.
pub fn duration_ms(ms: i64) -> String {
    let ms = ms.max(0);
    let s = ms / 1000;
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, s % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_durations_read_as_a_person_reads_them() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1000), "1,000");
        assert_eq!(grouped(1_234_567), "1,234,567");
        assert_eq!(grouped(-12_345), "-12,345");
        assert_eq!(duration_ms(850), "850 ms");
        assert_eq!(duration_ms(12_400), "12.4 s");
        assert_eq!(duration_ms(200_000), "3 min 20 s");
        assert_eq!(duration_ms(7_500_000), "2 h 5 min");
    }

    #[test]
    fn terminal_sequences_are_written_out_not_sent() {
        let evil = "a\u{1b}]0;title\u{7}b\u{1b}[2Jc\u{1b}]8;;file:///etc/passwd\u{1b}\\d\re\u{202e}f\u{9b}g\u{7f}h\u{2066}i";
        assert_eq!(
            for_terminal(evil),
            r"a\x1b]0;title\x07b\x1b[2Jc\x1b]8;;file:///etc/passwd\x1b\d\x0de\u{202e}f\u{9b}g\x7fh\u{2066}i"
        );
        assert_eq!(for_terminal("\u{0}\u{8}\u{200f}"), r"\x00\x08\u{200f}");
    }

    #[test]
    fn ordinary_text_passes_as_it_is() {
        for plain in ["line one\n\tline two", "中文 العربية", "a \\x1b b", "", "…"] {
            assert!(matches!(for_terminal(plain), Cow::Borrowed(p) if p == plain));
        }
    }

    #[test]
    fn cuts_on_characters() {
        assert_eq!(cut("abcdef", 3), "abc…");
        assert_eq!(cut("abc", 3), "abc");
        assert_eq!(cut("中文字符", 2), "中文…");
        assert_eq!(prefix("中文字符", 3), "中文字");
        assert_eq!(prefix("ab", 3), "ab");
        assert_eq!(one_line("乌龙茶好喝", 3), "乌龙…");
        assert_eq!(one_line("abc", 0), "");
    }

    #[test]
    fn one_line_folds_and_fits() {
        assert_eq!(collapse(" a\n\tb  c\u{7}d "), "a b c d");
        assert_eq!(one_line("a\nb", 10), "a b");
        let long = one_line(&"x".repeat(50), 10);
        assert_eq!(long.chars().count(), 10);
        assert!(long.ends_with('…'));
    }
}
