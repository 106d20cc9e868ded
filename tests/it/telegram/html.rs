//! Telegram's HTML parse mode, as the Bot API documents it
//! (<https://core.telegram.org/bots/api#html-style>): the supported tags, properly nested and
//! closed; `<` and `&` outside a tag or entity escaped (a bare `>` passes, as on Telegram);
//! only the named entities `&lt;`, `&gt;`, `&amp;`, `&quot;` and numeric ones. Anything else is
//! refused with Telegram's "can't parse entities: …" wording.

const TAGS: &[&str] = &[
    "b",
    "strong",
    "i",
    "em",
    "u",
    "ins",
    "s",
    "strike",
    "del",
    "code",
    "pre",
    "a",
    "blockquote",
    "tg-spoiler",
    "span",
];

/// The text a person sees (tags removed, entities decoded), or why Telegram refuses it (the
/// part after "can't parse entities: ").
pub fn parse(html: &str) -> Result<String, String> {
    let bytes = html.as_bytes();
    let mut shown = String::new();
    let mut open: Vec<String> = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'<' => {
                let Some(len) = html[i..].find('>') else {
                    return Err(format!("Unclosed start tag at byte offset {i}"));
                };
                let inner = &html[i + 1..i + len];
                if let Some(name) = inner.strip_prefix('/') {
                    let name = name.trim().to_ascii_lowercase();
                    match open.pop() {
                        None => return Err(format!("Unexpected end tag at byte offset {i}")),
                        Some(top) if top != name => {
                            return Err(format!(
                                "Unmatched end tag at byte offset {i}, expected \"</{top}>\", found \"</{name}>\""
                            ));
                        }
                        Some(_) => {}
                    }
                } else {
                    let name: String = inner
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                        .collect::<String>()
                        .to_ascii_lowercase();
                    if !TAGS.contains(&name.as_str()) {
                        return Err(format!(
                            "Unsupported start tag \"{name}\" at byte offset {i}"
                        ));
                    }
                    let attrs = attributes(&inner[name.len()..])
                        .map_err(|e| format!("{e} at byte offset {i}"))?;
                    let attr = |n: &str| attrs.iter().find(|(k, _)| k == n).map(|(_, v)| v);
                    if name == "a" && attr("href").is_none_or(|h| h.is_empty()) {
                        return Err(format!("Tag \"a\" must have an href at byte offset {i}"));
                    }
                    if name == "span" && attr("class").is_none_or(|c| c != "tg-spoiler") {
                        return Err(format!(
                            "Tag \"span\" must have class \"tg-spoiler\" at byte offset {i}"
                        ));
                    }
                    open.push(name);
                }
                i += len + 1;
            }
            b'&' => {
                let (c, len) = entity(&html[i..])
                    .ok_or_else(|| format!("Unsupported HTML entity at byte offset {i}"))?;
                shown.push(c);
                i += len;
            }
            _ => {
                let c = html[i..].chars().next().unwrap_or_default();
                shown.push(c);
                i += c.len_utf8();
            }
        }
    }
    match open.pop() {
        Some(tag) => Err(format!(
            "Can't find end tag corresponding to start tag \"{tag}\""
        )),
        None => Ok(shown),
    }
}

/// A start tag's attributes after its name: `name="v"`, `name='v'`, `name=v` or `name`.
fn attributes(mut s: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    loop {
        s = s.trim_start();
        if s.is_empty() || s == "/" {
            return Ok(out);
        }
        let name_len = s
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .unwrap_or(s.len());
        if name_len == 0 {
            return Err("Expected equal sign in declaration of an attribute".into());
        }
        let name = s[..name_len].to_ascii_lowercase();
        s = s[name_len..].trim_start();
        let Some(rest) = s.strip_prefix('=') else {
            out.push((name, String::new()));
            continue;
        };
        let rest = rest.trim_start();
        let (value, after) = match rest.chars().next() {
            Some(q @ ('"' | '\'')) => {
                let end = rest[1..]
                    .find(q)
                    .ok_or("Unclosed attribute value".to_string())?;
                (&rest[1..=end], &rest[end + 2..])
            }
            _ => {
                let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
                (&rest[..end], &rest[end..])
            }
        };
        out.push((name, value.to_string()));
        s = after;
    }
}

/// The character of the entity `s` starts with, and the entity's length in bytes.
fn entity(s: &str) -> Option<(char, usize)> {
    let end = s.find(';')?;
    let name = &s[1..end];
    let c = match name {
        "lt" => '<',
        "gt" => '>',
        "amp" => '&',
        "quot" => '"',
        _ => {
            let num = name.strip_prefix('#')?;
            let code = match num.strip_prefix(['x', 'X']) {
                Some(hex) => u32::from_str_radix(hex, 16).ok()?,
                None => num.parse().ok()?,
            };
            char::from_u32(code)?
        }
    };
    Some((c, end + 1))
}

/// A text's length as Telegram counts it: UTF-16 code units.
pub fn utf16_len(s: &str) -> usize {
    s.encode_utf16().count()
}
