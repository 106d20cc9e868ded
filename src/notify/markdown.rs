//! Markdown → HTML for the HTML part of notice emails.
//!
//! Owns: turning a notice body (usually the model's answer, so untrusted) into HTML that is
//! safe to open in a mail client. Raw HTML in the input is shown as text, never passed through,
//! and link or image targets other than http(s)/mailto are dropped.
//! Must not: fetch anything or know about channels.

use pulldown_cmark::{CowStr, Event, Options, Parser, Tag, TagEnd, html};

/// Render Markdown to an HTML fragment. Raw HTML in `md` is escaped (model output is untrusted).
pub fn render_markdown(md: &str) -> String {
    let options =
        Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    let events = Parser::new_ext(md, options).map(|event| match event {
        // An HTML block becomes a paragraph of visible text, so `<script>` shows as what it is.
        Event::Start(Tag::HtmlBlock) => Event::Start(Tag::Paragraph),
        Event::End(TagEnd::HtmlBlock) => Event::End(TagEnd::Paragraph),
        Event::Html(raw) | Event::InlineHtml(raw) => Event::Text(raw),
        Event::Start(Tag::Link {
            link_type,
            dest_url,
            title,
            id,
        }) => Event::Start(Tag::Link {
            link_type,
            dest_url: safe_url(dest_url),
            title,
            id,
        }),
        Event::Start(Tag::Image {
            link_type,
            dest_url,
            title,
            id,
        }) => Event::Start(Tag::Image {
            link_type,
            dest_url: safe_url(dest_url),
            title,
            id,
        }),
        other => other,
    });
    let mut out = String::with_capacity(md.len() + md.len() / 2);
    html::push_html(&mut out, events);
    out
}

/// A whole HTML document for an email: the rendered body under the title, with a little
/// inline style (mail clients ignore style sheets) so it reads well on a phone.
pub(crate) fn email_html(title: &str, md: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title}</title></head>\n\
         <body style=\"font-family: -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; \
         font-size: 15px; line-height: 1.5; color: #222; max-width: 42em; margin: 0 auto; padding: 1em;\">\n\
         <h2 style=\"font-size: 1.25em; border-bottom: 1px solid #ddd; padding-bottom: .3em;\">{title}</h2>\n\
         {body}\
         <p style=\"color: #888; font-size: 12px; margin-top: 2em;\">Sent by hermes-agent.</p>\n\
         </body></html>\n",
        title = escape_html(title),
        body = render_markdown(md),
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
    fn email_document_escapes_the_title() {
        let doc = email_html("A <b>digest</b> & more", "body *text*");
        assert!(doc.contains("<title>A &lt;b&gt;digest&lt;/b&gt; &amp; more</title>"));
        assert!(doc.contains("<em>text</em>"));
        assert!(doc.starts_with("<!DOCTYPE html>"));
    }
}
