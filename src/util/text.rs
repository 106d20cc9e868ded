//! Cutting and flattening text for messages, traces and terminal output. Lengths count
//! characters (never bytes), so a cut never splits a character, Chinese included.

use std::borrow::Cow;

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

#[cfg(test)]
mod tests {
    use super::*;

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
