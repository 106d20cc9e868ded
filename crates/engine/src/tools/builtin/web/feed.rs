//! RSS and Atom feeds: parsing (with feed-rs), short item summaries, and which items are new.
//!
//! Owns: the item shape the model sees and the "seen" state kept in the snapshot under
//! `feed:<url>` — a JSON list of the ids and links already returned (bounded).
//! Must not: fetch or touch the store; the tool passes bytes in and state in and out.

use super::extract::fragment_text;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use url::Url;

/// At most this many items are returned by one read.
pub(crate) const MAX_ITEMS: usize = 20;
/// The seen list keeps this many ids/links; a feed rarely carries more than a few hundred.
const MAX_SEEN: usize = 2000;
const SUMMARY_CHARS: usize = 280;

#[derive(Debug, Clone, Serialize)]
pub(super) struct Item {
    pub title: String,
    pub link: Option<String>,
    /// RFC 3339; the published time, else the updated time.
    pub published: Option<String>,
    pub summary: String,
    #[serde(skip)]
    pub id: String,
    #[serde(skip)]
    pub when: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone)]
pub(crate) struct Feed {
    pub title: Option<String>,
    /// Newest first when every item is dated; otherwise in the feed's own order.
    pub items: Vec<Item>,
}

/// Whether a body looks like an RSS/Atom document (used when the Content-Type is vague).
pub(crate) fn looks_like_feed(body: &[u8]) -> bool {
    let head = String::from_utf8_lossy(&body[..body.len().min(1024)]).to_ascii_lowercase();
    head.contains("<rss") || head.contains("<feed") || head.contains("<rdf:rdf")
}

fn short(text: &str, max: usize) -> String {
    hermes_store::util::text::cut(text, max).into_owned()
}

/// Parse raw feed bytes (feed-rs honours the XML encoding declaration itself, so bytes, not
/// decoded text, go in). Relative links are resolved against `url`.
pub(super) fn parse(body: &[u8], url: &Url) -> Result<Feed, feed_rs::parser::ParseFeedError> {
    let parsed = feed_rs::parser::Builder::new()
        .base_uri(Some(url.as_str()))
        .build()
        .parse(body)?;
    let mut items: Vec<Item> = parsed
        .entries
        .into_iter()
        .map(|entry| {
            let link = entry
                .links
                .iter()
                .find(|l| l.rel.as_deref().is_none_or(|r| r == "alternate"))
                .or_else(|| entry.links.first())
                .map(|l| l.href.clone());
            let when = entry.published.or(entry.updated);
            let summary_html = entry
                .summary
                .as_ref()
                .map(|t| t.content.clone())
                .or_else(|| entry.content.as_ref().and_then(|c| c.body.clone()))
                .unwrap_or_default();
            Item {
                title: entry
                    .title
                    .map(|t| fragment_text(&t.content))
                    .unwrap_or_default(),
                link,
                published: when.map(|w| w.to_rfc3339()),
                summary: short(&fragment_text(&summary_html), SUMMARY_CHARS),
                id: entry.id,
                when,
            }
        })
        .collect();
    if items.iter().all(|i| i.when.is_some()) {
        items.sort_by_key(|i| std::cmp::Reverse(i.when));
    }
    Ok(Feed {
        title: parsed
            .title
            .map(|t| fragment_text(&t.content))
            .filter(|t| !t.is_empty()),
        items,
    })
}

/// What the snapshot under `feed:<url>` holds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct Seen {
    pub seen: Vec<String>,
}

fn keys(item: &Item) -> impl Iterator<Item = &str> {
    std::iter::once(item.id.as_str())
        .chain(item.link.as_deref())
        .filter(|k| !k.is_empty())
}

/// The new items of `feed` and the seen state to store afterwards.
///
/// With `since`: the dated items newer than it. Without: on the first read (`previous` is
/// None) the latest [`MAX_ITEMS`]; afterwards, the items whose id and link were never seen.
/// Every item now in the feed is marked seen, not only those returned, so an item that was
/// past the first read's cap does not turn up later as "new".
pub(crate) fn select_new(
    feed: &Feed,
    since: Option<DateTime<Utc>>,
    previous: Option<&Seen>,
) -> (Vec<Item>, Seen) {
    let new: Vec<Item> = match (since, previous) {
        (Some(since), _) => feed
            .items
            .iter()
            .filter(|i| i.when.is_some_and(|w| w > since))
            .cloned()
            .collect(),
        (None, None) => feed.items.clone(),
        (None, Some(prev)) => {
            let seen: HashSet<&str> = prev.seen.iter().map(String::as_str).collect();
            feed.items
                .iter()
                .filter(|i| !keys(i).any(|k| seen.contains(k)))
                .cloned()
                .collect()
        }
    };
    let mut next: Vec<String> = Vec::new();
    let mut have = HashSet::new();
    let current = feed.items.iter().flat_map(keys).map(str::to_string);
    let older = previous.map(|p| p.seen.clone()).unwrap_or_default();
    for key in current.chain(older) {
        if next.len() >= MAX_SEEN {
            break;
        }
        if have.insert(key.clone()) {
            next.push(key);
        }
    }
    (
        new.into_iter().take(MAX_ITEMS).collect(),
        Seen { seen: next },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const RSS: &str = r#"<?xml version="1.0"?><rss version="2.0"><channel><title>News</title>
        <item><title>Old</title><link>/old</link><guid>g1</guid><pubDate>Mon, 01 Jan 2024 10:00:00 GMT</pubDate>
          <description>&lt;p&gt;old &lt;b&gt;story&lt;/b&gt;&lt;/p&gt;</description></item>
        <item><title>New</title><link>https://ex.org/new</link><guid>g2</guid><pubDate>Tue, 02 Jan 2024 10:00:00 GMT</pubDate></item>
        </channel></rss>"#;

    fn feed() -> Feed {
        parse(
            RSS.as_bytes(),
            &Url::parse("https://ex.org/feed.xml").expect("url"),
        )
        .expect("parses")
    }

    #[test]
    fn rss_items_newest_first_with_plain_summaries() {
        let f = feed();
        assert_eq!(f.title.as_deref(), Some("News"));
        assert_eq!(f.items[0].title, "New");
        assert_eq!(f.items[1].summary, "old story");
        assert_eq!(f.items[1].link.as_deref(), Some("https://ex.org/old"));
        assert_eq!(
            f.items[0].published.as_deref(),
            Some("2024-01-02T10:00:00+00:00")
        );
    }

    #[test]
    fn seen_items_are_not_new_again() {
        let f = feed();
        let (first, seen) = select_new(&f, None, None);
        assert_eq!(first.len(), 2);
        let (again, _) = select_new(&f, None, Some(&seen));
        assert!(again.is_empty());
        let since = DateTime::parse_from_rfc3339("2024-01-01T12:00:00Z")
            .expect("time")
            .with_timezone(&Utc);
        let (after, _) = select_new(&f, Some(since), Some(&seen));
        assert_eq!(
            after.iter().map(|i| i.title.as_str()).collect::<Vec<_>>(),
            vec!["New"]
        );
    }

    #[test]
    fn not_a_feed() {
        assert!(
            parse(
                b"<html><body>hi</body></html>",
                &Url::parse("https://ex.org/").expect("url")
            )
            .is_err()
        );
        assert!(looks_like_feed(RSS.as_bytes()));
        assert!(!looks_like_feed(b"<html></html>"));
    }
}
