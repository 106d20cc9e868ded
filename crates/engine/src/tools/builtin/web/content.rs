//! What a fetched body is (HTML, JSON, a feed, plain text, or something binary) and the
//! result each kind gives the model.
//!
//! Owns: content-kind detection from the Content-Type, with sniffing when it is missing or
//! vague, and the shape of `web_fetch`'s result.
//! Must not: fetch, or keep state.

use super::extract::{self, Page};
use super::feed::{self, Feed, MAX_ITEMS};
use super::fetch::Fetched;
use scraper::Selector;
use serde_json::{Value, json};

pub(super) enum Content {
    Html(Page),
    Json(Value),
    Feed(Feed),
    Text(String),
    /// Images, PDFs, archives: nothing readable to return.
    Binary,
}

fn is_json_mime(mime: &str) -> bool {
    mime == "application/json" || mime == "text/json" || mime.ends_with("+json")
}

fn is_feed_mime(mime: &str) -> bool {
    matches!(
        mime,
        "application/rss+xml" | "application/atom+xml" | "application/rdf+xml"
    )
}

fn is_xml_mime(mime: &str) -> bool {
    matches!(mime, "application/xml" | "text/xml") || mime.ends_with("+xml")
}

fn sniff_html(body: &[u8]) -> bool {
    let head = String::from_utf8_lossy(&body[..body.len().min(512)]).to_ascii_lowercase();
    let head = head.trim_start();
    head.starts_with("<!doctype html") || head.starts_with("<html") || head.contains("<body")
}

fn as_feed(f: &Fetched) -> Option<Content> {
    feed::parse(&f.body, &f.url).ok().map(Content::Feed)
}

fn as_json(text: &str) -> Option<Content> {
    serde_json::from_str(text).ok().map(Content::Json)
}

/// Read the body as the kind its Content-Type says, sniffing when that is missing or generic.
/// `selector` applies to HTML only.
pub(crate) fn interpret(f: &Fetched, selector: Option<&Selector>) -> Content {
    let mime = f.mime.as_str();
    if mime == "text/html" || mime == "application/xhtml+xml" {
        return Content::Html(extract::html_page(&f.text(), &f.url, selector));
    }
    if is_json_mime(mime) {
        let text = f.text();
        // A body cut at max_bytes is no longer valid JSON; its text is still worth reading.
        return as_json(&text).unwrap_or(Content::Text(text));
    }
    if is_feed_mime(mime) || is_xml_mime(mime) {
        return as_feed(f).unwrap_or_else(|| Content::Text(f.text()));
    }
    let generic = mime.is_empty() || mime == "application/octet-stream" || mime == "text/plain";
    if generic {
        if sniff_html(&f.body) {
            return Content::Html(extract::html_page(&f.text(), &f.url, selector));
        }
        if feed::looks_like_feed(&f.body)
            && let Some(feed) = as_feed(f)
        {
            return feed;
        }
        let text = f.text();
        if matches!(text.trim_start().chars().next(), Some('{' | '['))
            && let Some(json) = as_json(&text)
        {
            return json;
        }
        if mime == "text/plain" || !f.body.contains(&0) {
            return Content::Text(text);
        }
        return Content::Binary;
    }
    if mime.starts_with("text/") {
        return Content::Text(f.text());
    }
    Content::Binary
}

impl Content {
    /// The text `watch_page` compares between checks, one comparable unit per line.
    pub(crate) fn watch_text(&self) -> String {
        match self {
            Content::Html(page) => page.text.clone(),
            // Pretty-printed so a changed field is a changed line.
            Content::Json(value) => serde_json::to_string_pretty(value).unwrap_or_default(),
            Content::Feed(feed) => feed
                .items
                .iter()
                .map(|i| {
                    format!("{} {}", i.title, i.link.as_deref().unwrap_or(""))
                        .trim()
                        .to_string()
                })
                .collect::<Vec<_>>()
                .join("\n"),
            Content::Text(text) => text
                .lines()
                .map(str::trim_end)
                .collect::<Vec<_>>()
                .join("\n"),
            Content::Binary => String::new(),
        }
    }

    pub(super) fn note(&self, f: &Fetched, selector_given: bool) -> Option<String> {
        match self {
            Content::Html(page) => page.note.clone(),
            Content::Binary => Some(format!(
                "the body is {} ({} bytes), not text; nothing readable to show",
                if f.mime.is_empty() { "binary" } else { &f.mime },
                f.body.len()
            )),
            _ if selector_given => {
                Some("the selector was ignored: the response is not HTML".to_string())
            }
            _ => None,
        }
    }

    /// `web_fetch`'s result.
    pub(crate) fn into_result(self, f: &Fetched, selector_given: bool) -> Value {
        let note = self.note(f, selector_given);
        let mut out = json!({
            "url": f.url.as_str(),
            "status": f.status,
            "content_type": f.mime,
        });
        let fields = match self {
            Content::Html(page) => {
                json!({"title": page.title, "text": page.text, "links": page.links})
            }
            Content::Json(value) => json!({"json": value}),
            Content::Feed(feed) => {
                let items: Vec<_> = feed.items.into_iter().take(MAX_ITEMS).collect();
                json!({"title": feed.title, "items": items})
            }
            Content::Text(text) => json!({"text": text}),
            Content::Binary => json!({}),
        };
        if let (Value::Object(out), Value::Object(fields)) = (&mut out, fields) {
            out.extend(fields);
            out.insert("truncated".into(), Value::Bool(f.truncated));
            if let Some(note) = note {
                out.insert("note".into(), Value::String(note));
            }
        }
        out
    }
}
