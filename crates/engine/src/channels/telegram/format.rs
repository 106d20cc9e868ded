//! Notices as Telegram text: Markdown → the Bot API's HTML subset, its plain-text fallback,
//! and cutting a long text into messages Telegram accepts.
//!
//! Owns: Telegram's HTML subset (`<b> <i> <u> <s> <code> <pre> <a href> <blockquote>
//! <tg-spoiler>`, nothing else), escaping (the Markdown is the model's, so untrusted: raw HTML
//! is shown as text, links other than http(s)/mailto/tg keep only their text, images are never
//! images), and splitting at Telegram's limit (UTF-16 code units) outside tags and entities.
//! Must not: do I/O, or know about the Bot API client, its errors or the outbox.

use pulldown_cmark::{CodeBlockKind, Event, Options, Parser, Tag, TagEnd};

/// Telegram's limit on a message's text, in UTF-16 code units.
pub(crate) const MAX_UTF16: usize = 4096;

/// Length as Telegram counts it: UTF-16 code units, so an emoji outside the BMP counts twice.
pub(crate) fn utf16_len(s: &str) -> usize {
    s.chars().map(char::len_utf16).sum()
}

/// Render Markdown to Telegram's HTML subset (see the module doc).
pub(crate) fn to_html(markdown: &str) -> String {
    let options =
        Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    let mut r = Renderer::default();
    Parser::new_ext(markdown, options).for_each(|event| r.event(event));
    r.out.trim_end().trim_start_matches('\n').to_string()
}

#[derive(Default)]
struct Renderer {
    out: String,
    /// The break owed before what comes next: written only then, so none trails or doubles.
    pending: &'static str,
    /// Where a break would be a leading blank line (start, just inside `<blockquote>`).
    fresh: usize,
    /// Next number of each open list (`None`: bulleted).
    lists: Vec<Option<u64>>,
    /// Each open link: its escaped target and where its text starts, if it became an `<a>`.
    links: Vec<Option<(String, usize)>>,
    /// Each open image: its target and where its alt text (plain text only) starts.
    images: Vec<(String, usize)>,
    quotes: usize,
    code: &'static str,
    cell: usize,
    /// The bullet just written, replaced by a checkbox when the item is a task.
    bullet: Option<(usize, usize)>,
}

impl Renderer {
    fn event(&mut self, event: Event<'_>) {
        match event {
            Event::Start(tag) => self.start(tag),
            Event::End(tag) => self.end(tag),
            Event::Text(s) | Event::Html(s) | Event::InlineHtml(s) => self.text(&s),
            Event::Code(s) => {
                self.open("<code>");
                self.text(&s);
                self.close("</code>");
            }
            Event::SoftBreak | Event::HardBreak => self.line_break(),
            Event::Rule => {
                self.text("———");
                self.want("\n\n");
            }
            Event::TaskListMarker(done) => self.task(done),
            _ => {} // Math and footnotes are not enabled.
        }
    }

    fn start(&mut self, tag: Tag<'_>) {
        match tag {
            Tag::Heading { .. } | Tag::Strong => self.open("<b>"),
            Tag::Emphasis => self.open("<i>"),
            Tag::Strikethrough => self.open("<s>"),
            Tag::BlockQuote(_) => {
                self.quotes += 1;
                // Telegram refuses a blockquote inside a blockquote.
                if self.quotes == 1 {
                    self.open("<blockquote>");
                    self.fresh = self.out.len();
                }
            }
            Tag::CodeBlock(CodeBlockKind::Fenced(info)) => self.code_block(&info),
            Tag::CodeBlock(CodeBlockKind::Indented) => self.code_block(""),
            Tag::List(first) => self.lists.push(first),
            Tag::Item => self.item(),
            Tag::TableHead => self.row("<b>"),
            Tag::TableRow => self.row(""),
            Tag::TableCell if self.cell > 0 => self.text(" | "),
            Tag::Link { dest_url, .. } => self.link(&dest_url),
            // Not flushed: an image that shows nothing must not leave its break behind.
            Tag::Image { dest_url, .. } => self.images.push((dest_url.to_string(), self.out.len())),
            _ => {}
        }
    }

    fn end(&mut self, tag: TagEnd) {
        match tag {
            TagEnd::Paragraph | TagEnd::Table => self.want("\n\n"),
            TagEnd::Heading(_) => self.end_block(false, "</b>"),
            TagEnd::HtmlBlock => self.end_block(true, ""),
            TagEnd::CodeBlock => self.end_block(true, self.code),
            TagEnd::BlockQuote(_) => {
                self.quotes = self.quotes.saturating_sub(1);
                let outer = self.quotes == 0;
                self.end_block(false, if outer { "</blockquote>" } else { "" });
            }
            TagEnd::List(_) => {
                self.lists.pop();
                // A nested list ends inside its item: the next item follows on the next line.
                self.want(if self.lists.is_empty() { "\n\n" } else { "\n" });
            }
            TagEnd::Item => self.want("\n"),
            TagEnd::TableHead | TagEnd::Strong => self.close("</b>"),
            TagEnd::TableCell => self.cell += 1,
            TagEnd::Emphasis => self.close("</i>"),
            TagEnd::Strikethrough => self.close("</s>"),
            TagEnd::Link => self.end_link(),
            TagEnd::Image => self.end_image(),
            _ => {}
        }
    }

    fn want(&mut self, gap: &'static str) {
        self.pending = std::cmp::max_by_key(self.pending, gap, |g| g.len());
    }

    /// Write the pending break, now that something follows it.
    fn flush(&mut self) {
        let gap = std::mem::take(&mut self.pending);
        if self.out.len() != self.fresh {
            self.out.push_str(gap);
        }
    }

    fn text(&mut self, s: &str) {
        self.flush();
        self.out.push_str(&escape(s, false));
    }

    fn open(&mut self, tag: &str) {
        if self.images.is_empty() {
            self.flush();
            self.out.push_str(tag);
        }
    }

    fn close(&mut self, tag: &str) {
        if self.images.is_empty() {
            self.out.push_str(tag);
        }
    }

    /// `trim`: code and raw HTML blocks end with a newline that would show as an empty line.
    fn end_block(&mut self, trim: bool, close: &str) {
        if trim {
            let kept = self.out.trim_end_matches('\n').len();
            self.out.truncate(kept.max(self.fresh));
        }
        self.close(close);
        self.want("\n\n");
    }

    fn row(&mut self, open: &str) {
        self.want("\n");
        self.open(open);
        self.cell = 0;
    }

    fn line_break(&mut self) {
        self.flush();
        self.out.push('\n');
        // Continuation lines line up with the item's text, not with its bullet.
        self.out.push_str(&"  ".repeat(self.lists.len()));
    }

    fn code_block(&mut self, info: &str) {
        let lang = info.split_whitespace().next().unwrap_or("");
        // The language lands in an attribute: a plain name only, nothing to escape.
        let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '+' | '-');
        if lang.is_empty() || !lang.chars().all(plain) {
            self.open("<pre>");
            self.code = "</pre>";
        } else {
            self.open(&format!("<pre><code class=\"language-{lang}\">"));
            self.code = "</code></pre>";
        }
    }

    fn item(&mut self) {
        self.want("\n");
        self.flush();
        let depth = self.lists.len().saturating_sub(1);
        self.out.push_str(&"  ".repeat(depth));
        let start = self.out.len();
        match self.lists.last_mut() {
            Some(Some(n)) => {
                self.out.push_str(&format!("{n}. "));
                *n = n.saturating_add(1);
            }
            _ => self.out.push_str("• "),
        }
        self.bullet = Some((start, self.out.len()));
    }

    fn task(&mut self, done: bool) {
        let just_written = self.bullet.take().filter(|&(_, end)| end == self.out.len());
        if let Some((start, _)) = just_written {
            self.out.truncate(start);
        }
        self.out.push_str(if done { "☑ " } else { "☐ " });
    }

    fn link(&mut self, dest: &str) {
        // A link inside a link (or inside an image's alt text) is not valid: text only.
        let nested = !self.images.is_empty() || self.links.iter().any(Option::is_some);
        if nested || !has_scheme(dest, &["http://", "https://", "mailto:", "tg:"]) {
            self.links.push(None);
            return;
        }
        let href = escape(dest.trim(), true);
        self.open(&format!("<a href=\"{href}\">"));
        self.links.push(Some((href, self.out.len())));
    }

    fn end_link(&mut self) {
        if let Some(Some((href, start))) = self.links.pop() {
            // An empty `<a>` shows nothing in Telegram: show where it goes instead.
            let empty = start == self.out.len();
            let text = if empty { href.as_str() } else { "" };
            self.out.push_str(&format!("{text}</a>"));
        }
    }

    fn end_image(&mut self) {
        if let Some((dest, start)) = self.images.pop()
            && has_scheme(&dest, &["http://", "https://"])
        {
            let alt = start != self.out.len();
            self.text(&if alt { format!(" ({dest})") } else { dest });
        }
    }
}

fn has_scheme(url: &str, schemes: &[&str]) -> bool {
    let lower = url.trim_start().to_ascii_lowercase();
    schemes.iter().any(|s| lower.starts_with(s))
}

/// Escape for Telegram: text needs only `& < >`; a double-quoted attribute also `"`.
fn escape(s: &str, attribute: bool) -> String {
    let text = s.replace('&', "&amp;").replace('<', "&lt;");
    let quote = if attribute { "&quot;" } else { "\"" };
    text.replace('>', "&gt;").replace('"', quote)
}

/// The text of `html` without tags, entities decoded: sent without `parse_mode` when Telegram
/// refuses the formatting, so the notice still arrives.
pub(crate) fn plain(html: &str) -> String {
    let mut out = String::with_capacity(html.len());
    // The link being read: its target, and where its text began. Without the tag the target
    // would be lost, so it follows the text (unless the text is the target).
    let mut link: Option<(String, usize)> = None;
    for token in tokenize(html) {
        if !is_tag(token) {
            match entity(token) {
                Some(c) => out.push(c),
                None => out.push_str(token),
            }
            continue;
        }
        if !tag_name(token).eq_ignore_ascii_case("a") {
            continue;
        }
        if !token.starts_with("</") {
            link = href_of(token).map(|href| (href, out.len()));
        } else if let Some((href, start)) = link.take()
            && out[start..].trim() != href
        {
            out.push_str(&format!(" ({href})"));
        }
    }
    out
}

/// The target of an `<a href="…">` tag, its entities decoded.
fn href_of(tag: &str) -> Option<String> {
    let value = tag.split_once("href=\"")?.1.split_once('"')?.0;
    Some(plain(value))
}

/// The character an entity token (`&...;`) stands for, if known.
fn entity(token: &str) -> Option<char> {
    let name = token.strip_prefix('&')?.strip_suffix(';')?;
    let code = match name {
        "lt" => '<'.into(),
        "gt" => '>'.into(),
        "amp" => '&'.into(),
        "quot" => '"'.into(),
        _ => match name.strip_prefix('#')?.strip_prefix(['x', 'X']) {
            Some(hex) => u32::from_str_radix(hex, 16).ok()?,
            None => name.get(1..)?.parse().ok()?,
        },
    };
    char::from_u32(code)
}

/// Whether a token opens or closes a tag (`<br/>`, `<!-- -->`: not Telegram's, kept as text).
fn is_tag(token: &str) -> bool {
    token.starts_with('<') && !tag_name(token).is_empty() && !token.ends_with("/>")
}

/// Whether a token shows something: Telegram refuses a message of only tags and blanks.
fn visible(token: &str) -> bool {
    !is_tag(token) && !token.trim().is_empty()
}

/// `html` in pieces no cut may enter: tags, entities, characters.
fn tokenize(html: &str) -> Vec<&str> {
    let mut tokens = Vec::with_capacity(html.len());
    let mut rest = html;
    while let Some(c) = rest.chars().next() {
        let len = match c {
            '<' => rest.find('>').map_or(1, |end| end + 1),
            '&' => entity_len(rest).unwrap_or(1),
            _ => c.len_utf8(),
        };
        let (token, tail) = rest.split_at(len);
        tokens.push(token);
        rest = tail;
    }
    tokens
}

/// Length of an entity-shaped `&name;` starting `s`, known or not: no cut may enter one.
fn entity_len(s: &str) -> Option<usize> {
    let body = s.get(1..)?;
    let end = body.find(|c: char| !(c.is_ascii_alphanumeric() || c == '#'))?;
    (end > 0 && end <= 10 && body[end..].starts_with(';')).then_some(end + 2)
}

fn tag_name(tag: &str) -> &str {
    let name = tag.trim_start_matches('<').trim_start_matches('/');
    name.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .next()
        .unwrap_or("")
}

/// Track the open tags; a stray closing tag (not ours) closes what it matches, if anything.
fn apply<'a>(stack: &mut Vec<&'a str>, token: &'a str) {
    if is_tag(token) && token.starts_with("</") {
        let name = tag_name(token);
        let same = |open: &&str| tag_name(open).eq_ignore_ascii_case(name);
        stack.truncate(stack.iter().rposition(same).unwrap_or(stack.len()));
    } else if is_tag(token) {
        stack.push(token);
    }
}

/// Cut `html` into parts of at most `limit` UTF-16 code units, each well-formed on its own
/// (tags open at a cut are closed before it and reopened after it). Cuts prefer paragraph
/// breaks, then line breaks, then spaces, then any character boundary; the separator at a cut
/// is dropped, and so are blanks that do not fit before the next visible character or after
/// the last. Every part shows at least one character (an input showing none comes back whole),
/// so when `limit` cannot hold even the tags open at a cut plus one character, that part
/// exceeds `limit` (only then).
pub(crate) fn split(html: &str, limit: usize) -> Vec<String> {
    let tokens = tokenize(html);
    if utf16_len(html) <= limit || !tokens.iter().any(|t| visible(t)) {
        let whole = (!html.is_empty()).then(|| html.to_string());
        return whole.into_iter().collect();
    }
    let (mut parts, mut stack, mut start) = (Vec::new(), Vec::new(), 0);
    while start < tokens.len() {
        let (end, resume) = find_cut(&tokens, start, &stack, limit);
        let mut part: String = stack.concat();
        for token in &tokens[start..end] {
            part.push_str(token);
            apply(&mut stack, token);
        }
        for open in stack.iter().rev() {
            part.push_str(&format!("</{}>", tag_name(open)));
        }
        if end > start {
            parts.push(part);
        }
        // What a cut drops may hold tags (among blanks): they still open and close.
        tokens[end..resume]
            .iter()
            .for_each(|t| apply(&mut stack, t));
        start = resume;
    }
    parts
}

/// Where the part from `start` ends and where the next starts (after the dropped separator).
fn find_cut(tokens: &[&str], start: usize, open: &[&str], limit: usize) -> (usize, usize) {
    let last_text = tokens.iter().rposition(|t| visible(t)).unwrap_or(0);
    let mut stack = open.to_vec();
    let mut length: usize = open.iter().map(|t| utf16_len(t)).sum();
    // Best cut of each kind: paragraph, line, space, anywhere.
    let mut best: [Option<(usize, usize)>; 4] = [None; 4];
    let mut seen_text = false;
    let mut j = start;
    while let Some(&token) = tokens.get(j) {
        length += utf16_len(token);
        apply(&mut stack, token);
        let closing: usize = stack.iter().map(|t| utf16_len(tag_name(t)) + 3).sum();
        // Adding a token never makes the part shorter, so the first overflow ends the search.
        if length + closing > limit {
            break;
        }
        j += 1;
        seen_text |= visible(token);
        if j == tokens.len() {
            return (j, j);
        }
        // This part must show something, and so must the next, unless all that is left is
        // blanks and closing tags: those may go with the cut.
        if !seen_text {
            continue;
        } else if j > last_text {
            best[0] = Some((j, tokens.len()));
            continue;
        }
        if let Some((class, len)) = separator_at(tokens, j)
            && j + len <= last_text
        {
            best[class] = Some((j, j + len));
        }
        // Cutting just after an opening tag only moves the tag into the next part.
        if !is_tag(token) || token.starts_with("</") {
            best[3] = Some((j, j));
        }
    }
    best.iter().flatten().next().copied().unwrap_or_else(|| {
        // Nothing fits. Blanks before the next visible character go (a part of blanks only
        // would be refused); else that character goes in anyway, so splitting advances.
        let first = tokens[start..].iter().position(|t| visible(t));
        let first = first.map_or(tokens.len(), |i| start + i);
        if tokens[start..first].iter().any(|t| !is_tag(t)) {
            return (start, first);
        }
        let end = (first + 1).min(tokens.len());
        (end, if end > last_text { tokens.len() } else { end })
    })
}

/// The separator at `j`, if any: its kind (0 paragraph, 1 line, 2 space) and its length.
fn separator_at(tokens: &[&str], j: usize) -> Option<(usize, usize)> {
    match (*tokens.get(j)?, tokens.get(j + 1)) {
        ("\n", Some(&"\n")) => Some((0, 2)),
        ("\n", _) => Some((1, 1)),
        (" ", _) => Some((2, 1)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Panics unless `html` is well-formed: Telegram's tags only, nested right, entities whole.
    fn check_balanced(html: &str) {
        let mut stack = Vec::new();
        for token in tokenize(html) {
            let name = tag_name(token);
            if !is_tag(token) {
                let entity_ok = !token.starts_with('&') || entity(token).is_some();
                assert!(entity_ok && !token.starts_with(['<', '>']), "{token}");
            } else if token.starts_with("</") {
                assert_eq!(stack.pop(), Some(name), "{token} in {html:?}");
            } else {
                let allowed = "b i u s code pre a blockquote tg-spoiler";
                assert!(allowed.split(' ').any(|a| a == name), "{token} in {html:?}");
                stack.push(name);
            }
        }
        assert!(stack.is_empty(), "unclosed {stack:?} in {html:?}");
    }

    /// The text a part shows, without the link targets [`plain`] adds: what a split must
    /// neither lose nor repeat.
    fn text_only(html: &str) -> String {
        let shown = tokenize(html).into_iter().filter(|t| !is_tag(t));
        shown
            .map(|t| entity(t).map_or(t.to_string(), String::from))
            .collect()
    }

    /// `split`, checked: parts within `limit`, balanced, with text, losing only whitespace.
    fn check_parts(html: &str, limit: usize) -> Vec<String> {
        let parts = split(html, limit);
        for part in &parts {
            assert!(utf16_len(part) <= limit, "{} > {limit}", utf16_len(part));
            assert!(!plain(part).trim().is_empty(), "empty part");
            check_balanced(part);
        }
        let squeeze = |s: &str| s.split_whitespace().collect::<String>();
        let joined: String = parts.iter().map(|p| text_only(p)).collect();
        assert_eq!(squeeze(&joined), squeeze(&text_only(html)));
        parts
    }

    #[test]
    #[rustfmt::skip]
    fn renders_telegram_html() {
        let cases = [
            ("**b** *i* `a<b` ~~s~~", "<b>b</b> <i>i</i> <code>a&lt;b</code> <s>s</s>"),
            ("[l](https://e.org/?a=1&b=\"2\")", "<a href=\"https://e.org/?a=1&amp;b=&quot;2&quot;\">l</a>"),
            ("[](tg://user?id=1)", "<a href=\"tg://user?id=1\">tg://user?id=1</a>"),
            ("[m](mailto:x@y.z)", "<a href=\"mailto:x@y.z\">m</a>"),
            ("```rust\nfn f() {}\n```", "<pre><code class=\"language-rust\">fn f() {}</code></pre>"),
            ("```\na < b\n\nc\n```", "<pre>a &lt; b\n\nc</pre>"),
            ("```x\"y\nz\n```", "<pre>z</pre>"),
            ("    indented\n", "<pre>indented</pre>"),
            // The Markdown is untrusted: raw HTML is text, odd links lose their target.
            ("<script>alert(1)</script>", "&lt;script&gt;alert(1)&lt;/script&gt;"),
            ("a < b & c > d", "a &lt; b &amp; c &gt; d"),
            ("x <b onclick=\"y\">z</b>", "x &lt;b onclick=\"y\"&gt;z&lt;/b&gt;"),
            ("<div>\n<img src=x>\n</div>\n\nok", "&lt;div&gt;\n&lt;img src=x&gt;\n&lt;/div&gt;\n\nok"),
            ("[click](javascript:alert(1))", "click"),
            ("[f](file:///etc/passwd)", "f"),
            ("![a *cat*](https://x.org/c.png)", "a cat (https://x.org/c.png)"),
            ("![](http://x.org/c.png)", "http://x.org/c.png"),
            ("a\n\n![](data:image/png;base64,AA)\n\nb", "a\n\nb"),
            ("[![i](https://x.org/i.png)](https://x.org)", "<a href=\"https://x.org\">i (https://x.org/i.png)</a>"),
            ("# Title\n\nSome *text*\nnext  \nhard", "<b>Title</b>\n\nSome <i>text</i>\nnext\nhard"),
            ("> quoted\n>\n> > inner\n\n---\n\nend", "<blockquote>quoted\n\ninner</blockquote>\n\n———\n\nend"),
            ("Intro\n\n- a\n- b\n  - c\n    d\n- e\n\n## After", "Intro\n\n• a\n• b\n  • c\n    d\n• e\n\n<b>After</b>"),
            ("3. three\n4. four\n\n- [ ] to\n- [x] done", "3. three\n4. four\n\n☐ to\n☑ done"),
            ("- one\n\n- two", "• one\n\n• two"),
            ("| A | B |\n|---|:-:|\n| 1 | `2` |\n| 3 | 4 |", "<b>A | B</b>\n1 | <code>2</code>\n3 | 4"),
            ("", ""),
            ("\n\n  \n", ""),
        ];
        for (md, html) in cases {
            assert_eq!(to_html(md), html, "rendering {md:?}");
            check_balanced(html);
        }
    }

    #[test]
    fn plain_strips_tags_and_decodes() {
        let html = to_html("**a** < [b](https://x.org/?q=\"1\") & `c>d` &#39;");
        assert_eq!(plain(&html), "a < b (https://x.org/?q=\"1\") & c>d '");
        // A link whose text is its target is shown once.
        assert_eq!(
            plain(&to_html("see <https://e.org/?a=1&b=2>")),
            "see https://e.org/?a=1&b=2"
        );
        assert_eq!(plain("&lt;&gt;&amp;&quot;&#39;&#x1F600;&#65;"), "<>&\"'😀A");
        assert_eq!(plain("&bogus; & &#xZZ; <b"), "&bogus; & &#xZZ; <b");
        assert_eq!(plain("<pre><code class=\"language-x\">y</code></pre>"), "y");
    }

    #[test]
    fn split_cuts_where_it_should() {
        assert!(split("", 10).is_empty());
        assert_eq!(split("<b>hi</b>", 9), ["<b>hi</b>"]);
        assert_eq!(split("aaaa\nbb cc\n\ndd", 11), ["aaaa\nbb cc", "dd"]);
        assert_eq!(split("aaaa\nbb cc dd", 11), ["aaaa", "bb cc dd"]);
        assert_eq!(split("aa bb  cc", 6), ["aa bb ", "cc"]);
        assert_eq!(split("abcdef", 4), ["abcd", "ef"]);
        assert_eq!(split("&amp;&amp;&amp;", 7), ["&amp;", "&amp;", "&amp;"]);
        assert_eq!(split("x&amp;", 3), ["x", "&amp;"]);
        assert_eq!(split("<b>ab</b>", 1), ["<b>a</b>", "<b>b</b>"]);
        assert_eq!(split("<b></b>", 1), ["<b></b>"]);
        assert_eq!(split("ab<b>cd</b>", 9), ["ab", "<b>cd</b>"]);
        assert_eq!(split(&format!("a{}b", " ".repeat(99)), 5), ["a    ", "b"]);
        assert_eq!(split("<b>a</b>  \n\n  ", 9), ["<b>a</b> "]);
        let paragraph = |c: char| c.to_string().repeat(990);
        let paragraphs: Vec<String> = ('a'..='j').map(paragraph).collect();
        let parts = check_parts(&paragraphs.join("\n\n"), MAX_UTF16);
        assert_eq!(parts.len(), 3);
        let back: Vec<&str> = parts.iter().flat_map(|p| p.split("\n\n")).collect();
        assert_eq!(back, paragraphs);
        check_parts(&"a&amp;".repeat(2000), 999);
        for limit in [0, 1, 3, 5] {
            let parts = split("<b>ab</b> &amp; <i>c</i>", limit);
            assert_eq!(plain(&parts.concat()).replace(' ', ""), "ab&c");
            parts.iter().for_each(|p| check_balanced(p));
        }
    }

    #[test]
    fn split_long_line_and_emoji() {
        for (text, first) in [
            ("x".repeat(9000), 4096),
            ("😀".repeat(5000), 4096),
            (format!("a{}", "😀".repeat(5000)), 4095),
        ] {
            let parts = check_parts(&text, MAX_UTF16);
            assert_eq!((parts.len(), utf16_len(&parts[0])), (3, first));
            assert_eq!(parts.concat(), text);
        }
    }

    #[test]
    fn split_reopens_tags() {
        assert_eq!(split("<b>aaa bbb</b>", 12), ["<b>aaa</b>", "<b>bbb</b>"]);
        let a = "<a href=\"https://e.org\"><b>";
        let pre = "<pre><code class=\"language-sh\">";
        let words = format!("x {a}{}</b></a> y", "word ".repeat(3000));
        let parts = check_parts(&words, MAX_UTF16);
        assert_eq!(parts.len(), 4);
        for part in &parts[1..3] {
            assert!(part.starts_with(&format!("{a}word")), "{part}");
            assert!(part.ends_with("word</b></a>"), "{part}");
        }
        let lines = format!("{pre}{}</code></pre>", "ls\n".repeat(3000));
        for part in check_parts(&lines, 1000) {
            assert!(part.starts_with(&format!("{pre}ls\n")), "{part}");
        }
    }

    #[test]
    fn split_mixed_markdown() {
        let pieces: Vec<&str> =
            "**bold¦*it* ¦`c<d` ¦[l](https://e.org/?a=1&b=2) ¦😀 ¦a & b ¦\n¦\n\n¦\
            - item ¦> quote ¦```py\nx = 1\n```\n¦# Head\n¦~~s~~ ¦é漢字 ¦word ¦1. [x] ok ¦\
            | a | b |\n|---|---|\n| c | d |\n\n"
                .split('¦')
                .collect();
        // Spread over the pieces without a pattern a cut could line up with.
        let piece = |i: usize| pieces[(i * i + i / 7) % pieces.len()];
        let md: String = (0..3000).map(piece).collect();
        let html = to_html(&md);
        check_balanced(&html);
        for limit in [120, 500, MAX_UTF16] {
            assert!(check_parts(&html, limit).len() > 1);
        }
    }
}
