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
#[path = "format_tests.rs"]
mod tests;
