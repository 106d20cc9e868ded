//! `{{param}}` templates: the only way an argument reaches an argv element, a URL or a header.

use super::*;

/// Text with `{{name}}` placeholders. Only `{{identifier}}` (spaces allowed inside the
/// braces) is a placeholder; other braces are literal text, so `--format {{.Name}}` works.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Template(pub(super) Vec<Piece>);

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Piece {
    Lit(String),
    Param(String),
}

impl Template {
    pub(super) fn parse(s: &str) -> Template {
        let mut pieces = Vec::new();
        let mut lit = String::new();
        let mut rest = s;
        while let Some(open) = rest.find("{{") {
            let after = &rest[open + 2..];
            let param = after.find("}}").and_then(|close| {
                let inner = after[..close].trim();
                let ident = !inner.is_empty()
                    && !inner.starts_with(|c: char| c.is_ascii_digit())
                    && inner.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                ident.then(|| (inner.to_string(), close))
            });
            match param {
                Some((name, close)) => {
                    lit.push_str(&rest[..open]);
                    if !lit.is_empty() {
                        pieces.push(Piece::Lit(std::mem::take(&mut lit)));
                    }
                    pieces.push(Piece::Param(name));
                    rest = &after[close + 2..];
                }
                None => {
                    lit.push_str(&rest[..open + 2]);
                    rest = after;
                }
            }
        }
        lit.push_str(rest);
        if !lit.is_empty() {
            pieces.push(Piece::Lit(lit));
        }
        Template(pieces)
    }

    pub(super) fn params(&self) -> impl Iterator<Item = &str> {
        self.0.iter().filter_map(|p| match p {
            Piece::Param(n) => Some(n.as_str()),
            Piece::Lit(_) => None,
        })
    }

    /// The text when there are no placeholders.
    pub(super) fn literal(&self) -> Option<&str> {
        match self.0.as_slice() {
            [] => Some(""),
            [Piece::Lit(s)] => Some(s),
            _ => None,
        }
    }

    /// The element when it is exactly one placeholder.
    pub(super) fn sole_param(&self) -> Option<&str> {
        match self.0.as_slice() {
            [Piece::Param(p)] => Some(p),
            _ => None,
        }
    }

    pub(super) fn render(
        &self,
        args: &Map<String, Value>,
        encode: impl Fn(&str) -> String,
    ) -> String {
        let mut out = String::new();
        for p in &self.0 {
            match p {
                Piece::Lit(s) => out.push_str(s),
                Piece::Param(n) => out.push_str(&encode(&value_text(args.get(n)))),
            }
        }
        out
    }
}

/// A parameter as text: strings as they are, numbers and booleans printed, missing or null
/// as nothing, arrays and objects as compact JSON.
pub(super) fn value_text(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// Percent-encode everything but RFC 3986 unreserved characters, so a value can never add a
/// path segment, a query parameter or a different host.
pub(super) fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
