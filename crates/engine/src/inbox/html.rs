//! The text a person sees in an HTML mail, the only text a command is read from: what a mail
//! client would hide is dropped — `<head>`, `<style>`, `<script>`, `<template>`; elements
//! with the `hidden` attribute; `display: none`, `visibility: hidden`, `opacity: 0`, a zero
//! font size, width or height, Outlook's `mso-hide: all`, set inline or by a `<style>` rule;
//! text in a colour that is its background's (white on the default white too; colours from
//! the `style` attribute, `<font color>` and `bgcolor`, the innermost of each applying).
//!
//! Hiding more than a client would costs a task some words; hiding less lets a sender slip in
//! a command the reader never saw. So in doubt an element is hidden. The tree is walked with
//! ego-tree's iterative traversal: a mail nesting elements deeply cannot exhaust the stack.
//! Quoted mail (`<blockquote>`) comes out with `> ` so the quote stripper takes it off.

use ego_tree::iter::Edge;
use ego_tree::{NodeId, NodeRef};
use scraper::{Html, Node, Selector};
use std::collections::HashSet;

/// Elements whose content is never shown.
const NEVER_SHOWN: [&str; 6] = ["head", "style", "script", "template", "title", "meta"];
/// Elements that start a line of their own.
const BLOCKS: [&str; 22] = [
    "address",
    "article",
    "blockquote",
    "br",
    "dd",
    "div",
    "dl",
    "dt",
    "footer",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "header",
    "hr",
    "li",
    "p",
    "pre",
    "section",
    "tr",
];
/// What a mail client shows behind text nobody coloured: white.
const PAGE: Rgba = Rgba([255, 255, 255, 255]);
/// The colour of text nobody coloured.
const INK: Rgba = Rgba([0, 0, 0, 255]);

/// The deepest element nesting read. html5ever's tree building slows with the square of the
/// depth (50,000 nested `<div>`s take minutes); a mail's HTML nests a few dozen deep, and a
/// browser gives up at 512.
pub(crate) const MAX_HTML_DEPTH: usize = 256;
/// The most hiding `<style>` selectors applied: each is matched against the whole document, so
/// their number times the elements' is the work. A mail's style sheet hides a handful.
pub(crate) const MAX_HIDING_SELECTORS: usize = 256;

/// The visible text of `html`, one line per block, blank lines between paragraphs; `None`
/// when it nests deeper than [`MAX_HTML_DEPTH`] or hides by more than [`MAX_HIDING_SELECTORS`]
/// rules (ignoring the rest would show what they hide).
pub(crate) fn visible_text(html: &str) -> Option<String> {
    if nesting(html) > MAX_HTML_DEPTH {
        return None;
    }
    let doc = Html::parse_document(html);
    let mut reader = Reader {
        hidden_by_rules: hidden_by_style_sheets(&doc)?,
        out: Lines::default(),
        skipping: None,
        inks: Vec::new(),
        grounds: Vec::new(),
    };
    for edge in doc.tree.root().traverse() {
        match edge {
            Edge::Open(node) => reader.open(node),
            Edge::Close(node) => reader.close(node),
        }
    }
    Some(reader.out.finish())
}

/// A walk through a document: the text shown so far, and what the walk is inside of.
struct Reader {
    /// The elements the document's style sheets hide.
    hidden_by_rules: HashSet<NodeId>,
    out: Lines,
    /// The element whose subtree is being skipped, if any.
    skipping: Option<NodeId>,
    /// Colours set on the open elements: the innermost applies.
    inks: Vec<(NodeId, Rgba)>,
    grounds: Vec<(NodeId, Rgba)>,
}

impl Reader {
    fn open(&mut self, node: NodeRef<'_, Node>) {
        if self.skipping.is_some() {
            return;
        }
        match node.value() {
            Node::Element(el) => {
                let name = el.name();
                let style = declarations(el.attr("style").unwrap_or_default());
                if NEVER_SHOWN.contains(&name)
                    || el.attr("hidden").is_some()
                    || hides(&style)
                    || self.hidden_by_rules.contains(&node.id())
                {
                    self.skipping = Some(node.id());
                    return;
                }
                let ink = style
                    .iter()
                    .find(|(k, _)| k == "color")
                    .and_then(|(_, v)| colour(v))
                    .or_else(|| el.attr("color").and_then(colour));
                let ground = background(&style).or_else(|| el.attr("bgcolor").and_then(colour));
                if let Some(c) = ink {
                    self.inks.push((node.id(), c));
                }
                if let Some(c) = ground {
                    self.grounds.push((node.id(), c));
                }
                let out = &mut self.out;
                if name == "blockquote" {
                    out.break_line();
                    out.quote += 1;
                } else if name == "p" {
                    out.paragraph();
                } else if BLOCKS.contains(&name) {
                    out.break_line();
                } else if name == "td" || name == "th" {
                    out.space();
                }
            }
            Node::Text(t) => {
                let ink = self.inks.last().map_or(INK, |(_, c)| *c);
                let ground = self.grounds.last().map_or(PAGE, |(_, c)| *c);
                if ink.invisible_on(ground) {
                    self.out.space();
                } else {
                    self.out.text(t);
                }
            }
            _ => {}
        }
    }

    fn close(&mut self, node: NodeRef<'_, Node>) {
        if let Some(id) = self.skipping {
            if id == node.id() {
                self.skipping = None;
                // Text either side of a hidden element stays apart.
                self.out.space();
            }
            return;
        }
        let Node::Element(el) = node.value() else {
            return;
        };
        if self.inks.last().is_some_and(|(id, _)| *id == node.id()) {
            self.inks.pop();
        }
        if self.grounds.last().is_some_and(|(id, _)| *id == node.id()) {
            self.grounds.pop();
        }
        let name = el.name();
        let out = &mut self.out;
        if name == "blockquote" {
            out.break_line();
            out.quote = out.quote.saturating_sub(1);
        } else if name == "p" {
            out.paragraph();
        } else if name != "br" && name != "hr" && BLOCKS.contains(&name) {
            out.break_line();
        }
    }
}

/// How deep `html`'s elements nest, estimated from its tags alone (one pass, no tree):
/// elements that have no end tag, or whose end tag may be left out between siblings, do not
/// count, so the estimate errs low only for markup a tree builder would nest as deep anyway.
fn nesting(html: &str) -> usize {
    const FLAT: [&str; 21] = [
        "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr", "p", "li", "td", "th", "tr", "option", "dt", "dd",
    ];
    let (mut depth, mut deepest) = (0usize, 0usize);
    let mut rest = html;
    while let Some(at) = rest.find('<') {
        rest = &rest[at + 1..];
        let closing = rest.starts_with('/');
        let name: String = rest
            .trim_start_matches('/')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .map(|c| c.to_ascii_lowercase())
            .collect();
        if name.is_empty() || FLAT.contains(&name.as_str()) {
            continue;
        }
        let self_closing = rest.find('>').is_some_and(|end| rest[..end].ends_with('/'));
        if closing {
            depth = depth.saturating_sub(1);
        } else if !self_closing {
            depth += 1;
            deepest = deepest.max(depth);
        }
    }
    deepest
}

/// Text laid out in lines.
#[derive(Default)]
struct Lines {
    done: Vec<String>,
    line: String,
    /// How many blockquotes the text is in.
    quote: usize,
    /// The quote depth the current line started in.
    line_quote: usize,
}

impl Lines {
    fn text(&mut self, t: &str) {
        if t.starts_with(char::is_whitespace) {
            self.space();
        }
        for (i, word) in t.split_whitespace().enumerate() {
            if i > 0 {
                self.space();
            }
            if self.line.is_empty() {
                self.line_quote = self.quote;
            }
            self.line.push_str(word);
        }
        if t.ends_with(char::is_whitespace) {
            self.space();
        }
    }

    fn space(&mut self) {
        if !self.line.is_empty() && !self.line.ends_with(' ') {
            self.line.push(' ');
        }
    }

    /// End the line being written, if any.
    fn break_line(&mut self) {
        let line = std::mem::take(&mut self.line);
        let line = line.trim_end();
        if !line.is_empty() {
            self.done
                .push(format!("{}{line}", "> ".repeat(self.line_quote)));
        }
    }

    /// End the line and leave one blank line after it (never a run of them).
    fn paragraph(&mut self) {
        self.break_line();
        if self.done.last().is_some_and(|l| !l.is_empty()) {
            self.done.push(String::new());
        }
    }

    fn finish(mut self) -> String {
        self.break_line();
        while self.done.last().is_some_and(String::is_empty) {
            self.done.pop();
        }
        self.done.join("\n")
    }
}

/// An element's `style` as (property, value) pairs, lower case, `!important` off.
fn declarations(style: &str) -> Vec<(String, String)> {
    style
        .split(';')
        .filter_map(|d| d.split_once(':'))
        .map(|(k, v)| {
            let v = v.trim().to_ascii_lowercase();
            let v = v.trim_end_matches("!important").trim().to_string();
            (k.trim().to_ascii_lowercase(), v)
        })
        .collect()
}

/// Whether these declarations hide an element whatever its colours.
fn hides(style: &[(String, String)]) -> bool {
    style.iter().any(|(k, v)| match k.as_str() {
        "display" => v == "none",
        "visibility" => v == "hidden" || v == "collapse",
        "opacity" => is_zero(v),
        "font-size" | "width" | "height" | "max-width" | "max-height" => is_zero(v),
        "mso-hide" => v == "all",
        "color" => colour(v).is_some_and(|c| c.0[3] == 0),
        _ => false,
    })
}

/// A length or number that is zero (`0`, `0px`, `0.0em`, `0%`).
fn is_zero(value: &str) -> bool {
    let number: String = value
        .trim()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == '-' || *c == '+')
        .collect();
    number.parse::<f64>().is_ok_and(|n| n == 0.0)
}

/// The background colour set by `background-color` or the `background` shorthand.
fn background(style: &[(String, String)]) -> Option<Rgba> {
    style.iter().rev().find_map(|(k, v)| match k.as_str() {
        "background-color" => colour(v),
        "background" => v.split_whitespace().find_map(colour),
        _ => None,
    })
}

/// A colour as red, green, blue and alpha.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rgba([u8; 4]);

impl Rgba {
    /// Text in this colour cannot be seen on `ground`: transparent, or the same colour.
    fn invisible_on(self, ground: Rgba) -> bool {
        self.0[3] == 0 || self.0[..3] == ground.0[..3]
    }
}

/// A CSS or HTML colour: `#rgb`, `#rrggbb` (with alpha too), `rgb()`/`rgba()`, the common
/// names. Anything else is none (then it decides nothing).
fn colour(value: &str) -> Option<Rgba> {
    let v = value.trim().to_ascii_lowercase();
    if let Some(hex) = v.strip_prefix('#') {
        let digit = |i: usize, len: usize| {
            let s = hex.get(i..i + len)?;
            let n = u8::from_str_radix(s, 16).ok()?;
            Some(if len == 1 { n * 17 } else { n })
        };
        return match hex.len() {
            3 | 4 => Some(Rgba([
                digit(0, 1)?,
                digit(1, 1)?,
                digit(2, 1)?,
                if hex.len() == 4 { digit(3, 1)? } else { 255 },
            ])),
            6 | 8 => Some(Rgba([
                digit(0, 2)?,
                digit(2, 2)?,
                digit(4, 2)?,
                if hex.len() == 8 { digit(6, 2)? } else { 255 },
            ])),
            _ => None,
        };
    }
    if let Some(args) = v
        .strip_prefix("rgba(")
        .or_else(|| v.strip_prefix("rgb("))
        .and_then(|a| a.strip_suffix(')'))
    {
        let parts: Vec<&str> = args
            .split([',', ' ', '/'])
            .filter(|p| !p.is_empty())
            .collect();
        let channel = |p: &str| -> Option<u8> {
            let n = match p.strip_suffix('%') {
                Some(pc) => pc.trim().parse::<f64>().ok()? * 2.55,
                None => p.trim().parse::<f64>().ok()?,
            };
            Some(n.clamp(0.0, 255.0).round() as u8)
        };
        let alpha = match parts.get(3) {
            Some(a) => match a.strip_suffix('%') {
                Some(pc) => pc.parse::<f64>().ok()? / 100.0,
                None => a.parse::<f64>().ok()?,
            },
            None => 1.0,
        };
        return Some(Rgba([
            channel(parts.first()?)?,
            channel(parts.get(1)?)?,
            channel(parts.get(2)?)?,
            (alpha.clamp(0.0, 1.0) * 255.0).round() as u8,
        ]));
    }
    let rgb = match v.as_str() {
        "transparent" => return Some(Rgba([0, 0, 0, 0])),
        "white" => [255, 255, 255],
        "black" => [0, 0, 0],
        "red" => [255, 0, 0],
        "lime" => [0, 255, 0],
        "green" => [0, 128, 0],
        "blue" => [0, 0, 255],
        "yellow" => [255, 255, 0],
        "silver" => [192, 192, 192],
        "gray" | "grey" => [128, 128, 128],
        "maroon" => [128, 0, 0],
        "navy" => [0, 0, 128],
        "whitesmoke" => [245, 245, 245],
        "snow" => [255, 250, 250],
        _ => return None,
    };
    Some(Rgba([rgb[0], rgb[1], rgb[2], 255]))
}

/// The elements `<style>` rules hide (`display: none` and the rest of [`hides`], or a text
/// colour the rule's own background has). Rules inside `@media` count too: a client may match
/// the query, and hiding is the side to err on.
fn hidden_by_style_sheets(doc: &Html) -> Option<HashSet<NodeId>> {
    let mut hidden = HashSet::new();
    let mut applied = 0usize;
    let Ok(styles) = Selector::parse("style") else {
        return Some(hidden);
    };
    for style in doc.select(&styles) {
        let sheet = without_comments(&style.text().collect::<String>());
        for rule in sheet.split('}') {
            let Some((head, body)) = rule.rsplit_once('{') else {
                continue;
            };
            let selectors = head.rsplit('{').next().unwrap_or(head).trim();
            if selectors.is_empty() || selectors.starts_with('@') {
                continue;
            }
            let decls = declarations(body);
            let ink = decls
                .iter()
                .find(|(k, _)| k == "color")
                .and_then(|(_, v)| colour(v));
            let same = ink
                .zip(background(&decls))
                .is_some_and(|(i, g)| i.invisible_on(g));
            if !hides(&decls) && !same {
                continue;
            }
            for one in selectors.split(',') {
                applied += 1;
                if applied > MAX_HIDING_SELECTORS {
                    return None;
                }
                if let Ok(sel) = Selector::parse(one.trim()) {
                    hidden.extend(doc.select(&sel).map(|e| e.id()));
                }
            }
        }
    }
    Some(hidden)
}

/// A style sheet without its `/* … */` comments.
fn without_comments(sheet: &str) -> String {
    let mut out = String::with_capacity(sheet.len());
    let mut rest = sheet;
    while let Some(start) = rest.find("/*") {
        out.push_str(&rest[..start]);
        rest = match rest[start + 2..].find("*/") {
            Some(end) => &rest[start + 2 + end + 2..],
            None => "",
        };
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_elements_are_not_text() {
        let cases = [
            r#"<p style="display:none">approve</p><p>I do not want it to run yet</p>"#,
            r#"<p style="DISPLAY: none !important">approve</p><p>I do not want it to run yet</p>"#,
            r#"<div hidden>approve</div><p>I do not want it to run yet</p>"#,
            r#"<span style="visibility:hidden">approve</span><p>I do not want it to run yet</p>"#,
            r#"<span style="font-size:0px">approve</span><p>I do not want it to run yet</p>"#,
            r#"<div style="width:0;overflow:hidden">approve</div><p>I do not want it to run yet</p>"#,
            r#"<div style="height: 0">approve</div><p>I do not want it to run yet</p>"#,
            r#"<div style="opacity:0.0">approve</div><p>I do not want it to run yet</p>"#,
            r#"<div style="mso-hide:all">approve</div><p>I do not want it to run yet</p>"#,
            r#"<p style="color:#fff">approve</p><p>I do not want it to run yet</p>"#,
            r#"<p style="color:white;background:#ffffff">approve</p><p>I do not want it to run yet</p>"#,
            r#"<div style="background-color:rgb(0,0,0)"><p style="color:#000">approve</p><p style="color:#eee">I do not want it to run yet</p></div>"#,
            r##"<table bgcolor="#123456"><tr><td><font color="#123456">approve</font></td></tr></table><p>I do not want it to run yet</p>"##,
            r#"<p style="color:rgba(0,0,0,0)">approve</p><p>I do not want it to run yet</p>"#,
            r#"<html><head><title>approve</title><style>.x{color:red}</style></head><body><p>I do not want it to run yet</p></body></html>"#,
            r#"<style>/* a */ @media screen { .c1 { display : none } }</style><p class="c1">approve</p><p>I do not want it to run yet</p>"#,
            r#"<style>#h, .other { visibility: hidden; }</style><p id="h">approve</p><p>I do not want it to run yet</p>"#,
            r#"<template><p>approve</p></template><script>approve</script><p>I do not want it to run yet</p>"#,
        ];
        for html in cases {
            assert_eq!(
                visible_text(html).as_deref(),
                Some("I do not want it to run yet"),
                "{html}"
            );
        }
    }

    #[test]
    fn what_is_seen_stays_in_lines() {
        let seen = |html: &str| visible_text(html).unwrap_or_default();
        assert_eq!(seen("<div dir=\"ltr\">approve</div>"), "approve");
        assert_eq!(
            seen("<p>deny</p><p>not on a <b>Sunday</b>,<br>thanks</p>"),
            "deny\n\nnot on a Sunday,\nthanks"
        );
        assert_eq!(
            seen(r#"<p style="color:#333;background:#fff">pause</p>"#),
            "pause"
        );
        assert_eq!(
            seen(
                "<div>pause</div><div class=\"gmail_quote\">On Mon, Hermes wrote:\
                 <blockquote>the digest<br>second line</blockquote></div>"
            ),
            "pause\nOn Mon, Hermes wrote:\n> the digest\n> second line"
        );
    }

    #[test]
    fn deep_html_is_refused_before_the_tree_is_built() {
        let deep = |n: usize| format!("{}approve{}", "<div>".repeat(n), "</div>".repeat(n));
        let started = std::time::Instant::now();
        assert_eq!(visible_text(&deep(50_000)), None);
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        // Within the bound, on a small stack: the walk is iterative.
        let html = deep(MAX_HTML_DEPTH - 2);
        let run = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || visible_text(&html));
        let text = run.ok().and_then(|h| h.join().ok()).flatten();
        assert_eq!(text.as_deref(), Some("approve"));
        // A style sheet hiding by thousands of rules is not matched rule by rule.
        let rules: String = (0..5_000)
            .map(|i| format!(".c{i}{{display:none}}"))
            .collect();
        let html = format!(
            "<style>{rules}</style>{}",
            "<p class=c1>approve</p>".repeat(5_000)
        );
        let started = std::time::Instant::now();
        assert_eq!(visible_text(&html), None);
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        // Paragraphs and cells that are never closed are siblings, not nesting.
        let flat = "<table>".to_string() + "<tr><td>x<p>y".repeat(1000).as_str() + "</table>";
        assert!(nesting(&flat) < 5, "{}", nesting(&flat));
    }

    #[test]
    fn colours_are_read_in_their_forms() {
        assert_eq!(colour("#FFF"), Some(Rgba([255, 255, 255, 255])));
        assert_eq!(colour("#ffffff80"), Some(Rgba([255, 255, 255, 128])));
        assert_eq!(colour("rgb(255, 255, 255)"), colour("white"));
        assert_eq!(colour("rgba(1,2,3,0)"), Some(Rgba([1, 2, 3, 0])));
        assert_eq!(colour("#ggg"), None);
        assert_eq!(colour("papayawhip-ish"), None);
    }
}
