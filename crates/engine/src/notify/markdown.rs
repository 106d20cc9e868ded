//! Markdown → HTML for the HTML part of notice emails.
//!
//! Owns: turning a notice body (usually the model's answer, so untrusted) into HTML that is
//! safe to open in a mail client, styled inline (mail clients drop `<style>`). Raw HTML in the
//! input is shown as text, never passed through; link targets other than http(s)/mailto are
//! dropped; an image becomes a plain link to it ("image: ALT"), never an `<img>`: a mail
//! client loads images when the mail is opened, which tells the image's host who read it and
//! when (a tracking pixel).
//! Must not: fetch anything or know about channels.

use pulldown_cmark::{CowStr, Event, Options, Parser, Tag, TagEnd, html};

/// Render Markdown to an HTML fragment. Raw HTML in `md` is escaped (model output is untrusted)
/// and images are links (see the module doc).
pub fn render_markdown(md: &str) -> String {
    let options =
        Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    let mut parser = Parser::new_ext(md, options).peekable();
    let mut events = Vec::new();
    // Links open around the current event: an image inside one is only its alt text, since a
    // link inside a link is not HTML.
    let mut links = 0usize;
    while let Some(event) = parser.next() {
        match event {
            // An HTML block becomes a paragraph of visible text, so `<script>` shows as what it is.
            Event::Start(Tag::HtmlBlock) => events.push(Event::Start(Tag::Paragraph)),
            Event::End(TagEnd::HtmlBlock) => events.push(Event::End(TagEnd::Paragraph)),
            Event::Html(raw) | Event::InlineHtml(raw) => events.push(Event::Text(raw)),
            Event::Start(Tag::Link {
                link_type,
                dest_url,
                title,
                id,
            }) => {
                links += 1;
                events.push(Event::Start(Tag::Link {
                    link_type,
                    dest_url: safe_url(dest_url),
                    title,
                    id,
                }));
            }
            Event::End(TagEnd::Link) => {
                links = links.saturating_sub(1);
                events.push(Event::End(TagEnd::Link));
            }
            Event::Start(Tag::Image {
                link_type,
                dest_url,
                title,
                id,
            }) => {
                let dest_url = safe_url(dest_url);
                let no_alt = matches!(parser.peek(), Some(Event::End(TagEnd::Image)));
                if links == 0 {
                    let image = Tag::Link {
                        link_type,
                        dest_url: dest_url.clone(),
                        title,
                        id,
                    };
                    events.push(Event::Start(image));
                }
                events.push(Event::Text("image: ".into()));
                if no_alt {
                    events.push(Event::Text(dest_url));
                }
            }
            Event::End(TagEnd::Image) => {
                if links == 0 {
                    events.push(Event::End(TagEnd::Link));
                }
            }
            other => events.push(other),
        }
    }
    let mut out = String::with_capacity(md.len() + md.len() / 2);
    html::push_html(&mut out, events.into_iter());
    out
}

const INLINE_PRE: &str = "<pre style=\"background: #f6f8fa; padding: 12px; border-radius: 6px; overflow-x: auto; white-space: pre-wrap; word-wrap: break-word; font-size: 13px; line-height: 1.45;\">";

/// Inline style for each element the renderer writes: mail clients drop `<style>` (and
/// ignore classes), so every table, quote and code block carries its own.
const INLINE: &[(&str, &str)] = &[
    (
        "<table>",
        "<table style=\"border-collapse: collapse; margin: 1em 0; font-size: 14px;\">",
    ),
    (
        "<th>",
        "<th style=\"border: 1px solid #d0d7de; padding: 6px 10px; background: #f3f5f8; text-align: left;\">",
    ),
    (
        "<th style=\"",
        "<th style=\"border: 1px solid #d0d7de; padding: 6px 10px; background: #f3f5f8; ",
    ),
    (
        "<td>",
        "<td style=\"border: 1px solid #d0d7de; padding: 6px 10px;\">",
    ),
    (
        "<td style=\"",
        "<td style=\"border: 1px solid #d0d7de; padding: 6px 10px; ",
    ),
    (
        "<blockquote>",
        "<blockquote style=\"margin: 1em 0; padding: 0 1em; color: #57606a; border-left: 4px solid #d0d7de;\">",
    ),
    ("<pre>", INLINE_PRE),
    (
        "<code>",
        "<code style=\"font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 0.9em; background: #f0f2f5; padding: 1px 4px; border-radius: 4px;\">",
    ),
    (
        "<code class=\"",
        "<code style=\"font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 0.9em;\" class=\"",
    ),
    (
        "<hr />",
        "<hr style=\"border: 0; border-top: 1px solid #d0d7de; margin: 1.5em 0;\" />",
    ),
];

/// The rendered Markdown with [`INLINE`] styles, in one pass (so a styled tag is never
/// styled twice). Only the renderer's own tags are touched: raw HTML in the input was escaped
/// to text (`&lt;table&gt;`) and cannot match.
fn inline_styles(html: &str) -> String {
    let mut out = String::with_capacity(html.len() * 2);
    let mut rest = html;
    while let Some(at) = rest.find('<') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        // Code inside a block is styled by its `<pre>`; its `<code>` stays plain.
        if let Some(after) = rest.strip_prefix("<pre><code") {
            out.push_str(INLINE_PRE);
            out.push_str("<code");
            rest = after;
            continue;
        }
        match INLINE.iter().find(|(tag, _)| rest.starts_with(tag)) {
            Some((tag, styled)) => {
                out.push_str(styled);
                rest = &rest[tag.len()..];
            }
            None => {
                out.push('<');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// A whole HTML document for an email: the rendered body under the title, styled inline
/// (mail clients drop style sheets), in a column of readable width that still fits a phone.
pub(crate) fn email_html(title: &str, md: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title}</title></head>\n\
         <body style=\"margin: 0; padding: 0; background: #ffffff;\">\n\
         <table role=\"presentation\" width=\"100%\" cellpadding=\"0\" cellspacing=\"0\" style=\"border-collapse: collapse;\"><tr><td align=\"center\" style=\"padding: 16px;\">\n\
         <div style=\"max-width: 640px; margin: 0 auto; text-align: left; font-family: -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; \
         font-size: 15px; line-height: 1.55; color: #1f2328;\">\n\
         <h2 style=\"font-size: 20px; margin: 0 0 12px; padding-bottom: 6px; border-bottom: 1px solid #d0d7de;\">{title}</h2>\n\
         {body}\
         <p style=\"color: #6e7781; font-size: 12px; margin-top: 2em;\">Sent by hermes-agent.</p>\n\
         </div></td></tr></table>\n</body></html>\n",
        title = escape_html(title),
        body = inline_styles(&render_markdown(md)),
    )
}

/// Link targets a mail client may follow; anything else (`javascript:`, `data:`, `file:`)
/// becomes an empty target. Relative targets are meaningless in an email, so they go too.
fn safe_url(url: CowStr<'_>) -> CowStr<'_> {
    let lower = url.trim_start().to_ascii_lowercase();
    if ["http://", "https://", "mailto:"]
        .iter()
        .any(|p| lower.starts_with(p))
    {
        url
    } else {
        CowStr::Borrowed("")
    }
}

/// Escape text for an HTML text node or a double-quoted attribute.
pub(crate) fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headings_lists_and_links() {
        let html = render_markdown(
            "# Digest\n\n## News\n\n- one\n- two\n\n1. first\n\n[site](https://example.com/a?b=1&c=2)",
        );
        assert!(html.contains("<h1>Digest</h1>"), "{html}");
        assert!(html.contains("<h2>News</h2>"), "{html}");
        assert!(
            html.contains("<ul>\n<li>one</li>\n<li>two</li>\n</ul>"),
            "{html}"
        );
        assert!(html.contains("<ol>\n<li>first</li>\n</ol>"), "{html}");
        assert!(
            html.contains(r#"<a href="https://example.com/a?b=1&amp;c=2">site</a>"#),
            "{html}"
        );
    }

    #[test]
    fn raw_html_is_escaped_not_passed_through() {
        let html = render_markdown("<script>alert(1)</script>\n\nhi <b onclick=\"x()\">there</b>");
        assert!(!html.contains("<script"), "{html}");
        assert!(!html.contains("<b "), "{html}");
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{html}"
        );
        assert!(html.contains("&lt;b onclick="), "{html}");
    }

    #[test]
    fn unsafe_link_targets_are_dropped() {
        let html = render_markdown("[x](javascript:alert(1)) ![i](data:image/png;base64,AAAA)");
        assert!(!html.contains("javascript"), "{html}");
        assert!(!html.contains("data:"), "{html}");
        assert!(html.contains(r#"<a href="">x</a>"#), "{html}");
        let html = render_markdown("[mail](mailto:me@example.com)");
        assert!(html.contains(r#"href="mailto:me@example.com""#), "{html}");
    }

    #[test]
    fn images_become_links_never_loaded() {
        let html = render_markdown(
            "![pixel](http://tracker.example/p.gif?u=1 \"t\") ![](https://x.example/a.png) \
             ![*bold* alt](data:image/png;base64,AAAA) [![inner](https://x.example/b.png)](https://site.example/)",
        );
        assert!(!html.contains("<img"), "{html}");
        assert!(
            html.contains(
                r#"<a href="http://tracker.example/p.gif?u=1" title="t">image: pixel</a>"#
            ),
            "{html}"
        );
        // Without alt text the link shows where it goes.
        assert!(
            html.contains(
                r#"<a href="https://x.example/a.png">image: https://x.example/a.png</a>"#
            ),
            "{html}"
        );
        assert!(!html.contains("data:"), "{html}");
        assert!(html.contains("image: <em>bold</em> alt</a>"), "{html}");
        // Inside a link, an image is its alt text: no link in a link.
        assert!(
            html.contains(r#"<a href="https://site.example/">image: inner</a>"#),
            "{html}"
        );
        let doc = email_html("t", "![x](https://x.example/c.png)");
        assert!(!doc.contains("<img"), "{doc}");
    }

    #[test]
    fn email_html_is_styled_inline() {
        let md = "| a | b |\n|:-:|---|\n| 1 | 2 |\n\n> quoted\n\n`x` and\n\n```\nblock\n```\n\n<table>raw</table>";
        let doc = email_html("t", md);
        assert!(!doc.contains("<style"), "{doc}");
        for tag in ["<table>", "<th>", "<td>", "<blockquote>", "<pre>"] {
            assert!(!doc.contains(tag), "{tag} left unstyled: {doc}");
        }
        // The only plain `<code>` is the one inside the styled `<pre>`.
        assert_eq!(doc.matches("<code>").count(), 1, "{doc}");
        assert_eq!(
            doc.matches("style=\"border: 1px solid").count(),
            4,
            "styled once each: {doc}"
        );
        assert!(doc.contains("<th style=\"border: 1px solid #d0d7de; padding: 6px 10px; background: #f3f5f8; text-align: center"), "{doc}");
        assert!(doc.contains("<blockquote style="), "{doc}");
        assert!(
            doc.contains("<pre style=") && doc.contains("<code>block"),
            "{doc}"
        );
        assert!(
            doc.contains("<code style=") && doc.contains(">x</code>"),
            "{doc}"
        );
        assert!(doc.contains("max-width: 640px"), "{doc}");
        // Raw HTML stays text, and is not styled.
        assert!(doc.contains("&lt;table&gt;raw&lt;/table&gt;"), "{doc}");
    }

    #[test]
    fn email_document_escapes_the_title() {
        let doc = email_html("A <b>digest</b> & more", "body *text*");
        assert!(doc.contains("<title>A &lt;b&gt;digest&lt;/b&gt; &amp; more</title>"));
        assert!(doc.contains("<em>text</em>"));
        assert!(doc.starts_with("<!DOCTYPE html>"));
    }
}
