//! Readable text, title and links out of an HTML document.
//!
//! Owns: what counts as page chrome (script, style, nav, header, footer, aside, form, svg and
//! the like are dropped), preferring `<main>`/`<article>` content, line structure (block
//! elements on their own lines, whitespace collapsed) and CSS-selector extraction.
//! Must not: fetch anything or decide what a tool returns; it only reads a parsed document.
//! `scraper::Html` is not `Send`, so everything here is synchronous and never held across an
//! `.await`.

use crate::tools::ToolError;
use ego_tree::iter::Edge;
use scraper::{ElementRef, Html, Node, Selector};
use serde::Serialize;
use std::collections::HashSet;
use url::Url;

/// At most this many links are returned: enough to navigate, few enough to stay cheap.
pub(crate) const MAX_LINKS: usize = 50;
const MAX_LINK_TEXT: usize = 120;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Link {
    pub text: String,
    pub url: String,
}

#[derive(Debug, Clone, Default)]
pub(super) struct Page {
    pub title: Option<String>,
    pub text: String,
    pub links: Vec<Link>,
    /// Set when the selector matched nothing.
    pub note: Option<String>,
}

pub(crate) fn parse_selector(selector: &str) -> Result<Selector, ToolError> {
    Selector::parse(selector).map_err(|e| {
        ToolError::Failed(format!(
            "the selector '{selector}' is invalid CSS ({e}); use a plain CSS selector such as 'div.price' or '#content h2'"
        ))
    })
}

fn sel(s: &str) -> Option<Selector> {
    Selector::parse(s).ok()
}

/// Elements whose whole subtree is chrome or code, never readable content.
fn is_skipped(el: &scraper::node::Element) -> bool {
    matches!(
        el.name(),
        "script"
            | "style"
            | "noscript"
            | "nav"
            | "header"
            | "footer"
            | "aside"
            | "form"
            | "svg"
            | "template"
            | "iframe"
            | "canvas"
            | "object"
            | "head"
            | "button"
            | "select"
    ) || el.attr("hidden").is_some()
        || el.attr("aria-hidden") == Some("true")
}

fn is_block(name: &str) -> bool {
    matches!(
        name,
        "address"
            | "article"
            | "blockquote"
            | "br"
            | "dd"
            | "details"
            | "dialog"
            | "div"
            | "dl"
            | "dt"
            | "fieldset"
            | "figcaption"
            | "figure"
            | "h1"
            | "h2"
            | "h3"
            | "h4"
            | "h5"
            | "h6"
            | "hr"
            | "li"
            | "main"
            | "ol"
            | "p"
            | "pre"
            | "section"
            | "summary"
            | "table"
            | "tbody"
            | "thead"
            | "tfoot"
            | "tr"
            | "ul"
            | "body"
            | "html"
            | "caption"
            | "legend"
    )
}

/// Collects text into lines: runs of whitespace become one space, block boundaries end a line,
/// empty lines vanish.
#[derive(Default)]
struct Lines {
    lines: Vec<String>,
    current: String,
    pending_space: bool,
}

impl Lines {
    fn push_text(&mut self, text: &str) {
        for c in text.chars() {
            if c.is_whitespace() {
                self.pending_space = true;
            } else {
                if self.pending_space && !self.current.is_empty() {
                    self.current.push(' ');
                }
                self.pending_space = false;
                self.current.push(c);
            }
        }
    }

    fn space(&mut self) {
        self.pending_space = true;
    }

    fn end_line(&mut self) {
        if !self.current.is_empty() {
            self.lines.push(std::mem::take(&mut self.current));
        }
        self.pending_space = false;
    }

    fn finish(mut self) -> String {
        self.end_line();
        self.lines.join("\n")
    }
}

/// The readable text under `root`, chrome removed. `root` itself is kept even if it is a
/// skipped kind (the user may select `nav` on purpose).
fn text_into(root: ElementRef<'_>, out: &mut Lines) {
    let mut skip_depth = 0usize;
    for edge in root.traverse() {
        match edge {
            Edge::Open(node) => match node.value() {
                Node::Element(el) => {
                    if skip_depth > 0 {
                        skip_depth += 1;
                    } else if node.id() != root.id() && is_skipped(el) {
                        skip_depth = 1;
                    } else if is_block(el.name()) {
                        out.end_line();
                    }
                }
                Node::Text(t) if skip_depth == 0 => out.push_text(t),
                _ => {}
            },
            Edge::Close(node) => {
                if let Node::Element(el) = node.value() {
                    if skip_depth > 0 {
                        skip_depth -= 1;
                    } else if is_block(el.name()) {
                        out.end_line();
                    } else if matches!(el.name(), "td" | "th" | "img" | "input") {
                        out.space();
                    }
                }
            }
        }
    }
    out.end_line();
}

/// Whether `el` sits inside a skipped element below `root`.
fn inside_skipped(el: ElementRef<'_>, root: ElementRef<'_>) -> bool {
    for ancestor in el.ancestors() {
        if ancestor.id() == root.id() {
            return false;
        }
        if let Node::Element(a) = ancestor.value()
            && is_skipped(a)
        {
            return true;
        }
    }
    false
}

fn collapse(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn truncate_chars(text: &str, max: usize) -> String {
    hermes_store::util::text::cut(text, max).into_owned()
}

fn title_of(doc: &Html) -> Option<String> {
    let first_text = |s: &str| {
        let selector = sel(s)?;
        doc.select(&selector)
            .map(|e| collapse(&e.text().collect::<String>()))
            .find(|t| !t.is_empty())
    };
    first_text("head title, title")
        .or_else(|| {
            let selector = sel(r#"meta[property="og:title"]"#)?;
            doc.select(&selector)
                .find_map(|m| m.attr("content").map(collapse))
                .filter(|t| !t.is_empty())
        })
        .or_else(|| first_text("h1"))
}

/// The content roots: `<main>` if present, else the outermost `<article>`s, else `<body>`.
fn readable_roots(doc: &Html) -> Vec<ElementRef<'_>> {
    if let Some(main) = sel("main").and_then(|s| doc.select(&s).find(|m| !is_skipped(m.value()))) {
        return vec![main];
    }
    if let Some(article) = sel("article") {
        let articles: Vec<_> = doc
            .select(&article)
            .filter(|a| {
                !a.ancestors()
                    .any(|p| matches!(p.value(), Node::Element(e) if e.name() == "article"))
            })
            .collect();
        if !articles.is_empty() {
            return articles;
        }
    }
    if let Some(body) = sel("body").and_then(|s| doc.select(&s).next()) {
        return vec![body];
    }
    vec![doc.root_element()]
}

fn links_under(roots: &[ElementRef<'_>], base: &Url) -> Vec<Link> {
    let Some(anchor) = sel("a[href]") else {
        return Vec::new();
    };
    let page = {
        let mut p = base.clone();
        p.set_fragment(None);
        p
    };
    let mut seen = HashSet::new();
    let mut links = Vec::new();
    for root in roots {
        let candidates = std::iter::once(*root)
            .filter(|r| r.value().name() == "a")
            .chain(root.select(&anchor));
        for a in candidates {
            if links.len() >= MAX_LINKS {
                return links;
            }
            if inside_skipped(a, *root) {
                continue;
            }
            let Some(href) = a.attr("href") else { continue };
            let Ok(mut url) = base.join(href.trim()) else {
                continue;
            };
            if !matches!(url.scheme(), "http" | "https") {
                continue;
            }
            url.set_fragment(None);
            if url == page || !seen.insert(url.to_string()) {
                continue;
            }
            let mut text = collapse(&a.text().collect::<String>());
            if text.is_empty() {
                text = a
                    .attr("title")
                    .or_else(|| a.attr("aria-label"))
                    .map(collapse)
                    .unwrap_or_default();
            }
            links.push(Link {
                text: truncate_chars(&text, MAX_LINK_TEXT),
                url: url.to_string(),
            });
        }
    }
    links
}

/// Title, readable text and links of an HTML document fetched from `url`; with `selector`,
/// only the text and links of the matching elements.
pub(crate) fn html_page(html: &str, url: &Url, selector: Option<&Selector>) -> Page {
    let doc = Html::parse_document(html);
    let base = sel("base[href]")
        .and_then(|s| doc.select(&s).next())
        .and_then(|b| b.attr("href"))
        .and_then(|href| url.join(href).ok())
        .unwrap_or_else(|| url.clone());
    let roots = match selector {
        Some(selector) => {
            let matched: Vec<ElementRef<'_>> = doc.select(selector).collect();
            let ids: HashSet<_> = matched.iter().map(|m| m.id()).collect();
            // A match inside another match would repeat its text.
            matched
                .into_iter()
                .filter(|m| !m.ancestors().any(|a| ids.contains(&a.id())))
                .collect()
        }
        None => readable_roots(&doc),
    };
    let mut lines = Lines::default();
    for root in &roots {
        text_into(*root, &mut lines);
    }
    Page {
        title: title_of(&doc),
        text: lines.finish(),
        links: links_under(&roots, &base),
        note: (selector.is_some() && roots.is_empty())
            .then(|| "no element matches the selector".to_string()),
    }
}

/// Plain text of an HTML fragment (feed summaries), whitespace collapsed.
pub(crate) fn fragment_text(html: &str) -> String {
    if !html.contains('<') && !html.contains('&') {
        return collapse(html);
    }
    let doc = Html::parse_fragment(html);
    let mut lines = Lines::default();
    text_into(doc.root_element(), &mut lines);
    collapse(&lines.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(html: &str, selector: Option<&str>) -> Page {
        let url = Url::parse("https://example.com/dir/page.html").expect("test url");
        let selector = selector.map(|s| parse_selector(s).expect("valid test selector"));
        html_page(html, &url, selector.as_ref())
    }

    #[test]
    fn strips_chrome_and_keeps_structure() {
        let p = page(
            r##"<html><head><title> Shop  Home </title><style>p{}</style></head><body>
            <nav><a href="/menu">Menu</a></nav><header>Banner</header>
            <h1>Deals</h1><p>Kettle   costs <b>12</b> EUR</p><script>var x = 1;</script>
            <ul><li>one</li><li>two<br>three</li></ul><footer>(c)</footer>
            <a href="other.html#x">Other</a> <a href="mailto:a@b">mail</a> <a href="#top">top</a>
            </body></html>"##,
            None,
        );
        assert_eq!(p.title.as_deref(), Some("Shop Home"));
        assert_eq!(
            p.text,
            "Deals\nKettle costs 12 EUR\none\ntwo\nthree\nOther mail top"
        );
        assert_eq!(
            p.links,
            vec![Link {
                text: "Other".into(),
                url: "https://example.com/dir/other.html".into()
            }]
        );
    }

    #[test]
    fn prefers_main_then_articles() {
        let p = page("<body><div>side</div><main><p>core</p></main></body>", None);
        assert_eq!(p.text, "core");
        let p = page(
            "<body><div>junk</div><article><p>a</p><article>b</article></article><article>c</article></body>",
            None,
        );
        assert_eq!(p.text, "a\nb\nc");
    }

    #[test]
    fn selector_extracts_only_matches() {
        let html = r#"<body><span class="price">12 €</span><div class="price"><span class="price">inner</span></div><nav class="price">n</nav></body>"#;
        let p = page(html, Some(".price"));
        assert_eq!(p.text, "12 €\ninner\nn");
        assert!(page(html, Some(".nothing")).note.is_some());
        let err = parse_selector("div[").expect_err("invalid selector");
        assert!(
            matches!(&err, ToolError::Failed(m) if m.contains("invalid")),
            "{err:?}"
        );
    }

    #[test]
    fn links_are_absolute_deduplicated_and_capped() {
        let mut html = String::from("<body><base href=\"https://cdn.example.org/x/\">");
        for i in 0..80 {
            html.push_str(&format!(
                "<a href=\"p{i}\">P{i}</a><a href=\"p{i}\">again</a>"
            ));
        }
        let p = page(&html, None);
        assert_eq!(p.links.len(), MAX_LINKS);
        assert_eq!(p.links[0].url, "https://cdn.example.org/x/p0");
        assert_eq!(p.links[1].url, "https://cdn.example.org/x/p1");
    }

    #[test]
    fn fragments_become_plain_text() {
        assert_eq!(
            fragment_text("<p>Hello <b>world</b></p><p>again &amp; more</p>"),
            "Hello world again & more"
        );
        assert_eq!(fragment_text("  plain   text "), "plain text");
    }
}
