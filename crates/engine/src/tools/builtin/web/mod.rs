//! Built-in web tools: `web_fetch`, `watch_page` and `read_feed`.
//!
//! Owns: the three tools, their descriptions and schemas, and their snapshots in the store
//! (`page:<url>#<selector>` for watched pages, `feed:<url>` for feeds' seen items). All three
//! share one HTTP client whose every connection passes the SSRF guard ([`guard`]), including
//! each redirect hop; see `guard` for which addresses are refused and why link-local /
//! metadata addresses stay refused even with `tools.web_fetch.allow_private`.
//! Must not: reach any address the guard refuses, or treat page content as instructions —
//! what a page says is returned as data.

mod content;
mod diff;
mod extract;
mod feed;
mod fetch;
pub mod guard;

use crate::tools::{Tool, ToolContext, ToolError, ToolInfo, TypedTool};
use chrono::{DateTime, Utc};
use fetch::Fetcher;
use hermes_config::WebFetchSettings;
use hermes_store::Store;
use hermes_store::util::text;
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// `watch_page` returns at most this many added and this many removed lines.
const MAX_DIFF_LINES: usize = 50;
const EXCERPT_CHARS: usize = 500;

/// The three web tools over one shared, guarded client.
pub fn tools(settings: WebFetchSettings, store: Store) -> Vec<Arc<dyn Tool>> {
    let fetcher = Fetcher::new(settings);
    // The registry's default timeout is shorter than a slow page may need: the fetch's own cap
    // plus a margin for parsing and the store.
    let timeout = Duration::from_secs(fetcher.settings().timeout_s.max(1) + 5);
    [
        (
            Kind::Fetch,
            "web_fetch",
            "Fetch a web page or URL: title, text and links (JSON as `json`, a feed as items); \
             `selector` (CSS) keeps only that part. Not to see what changed (watch_page).",
            url_schema("selector", None),
        ),
        (
            Kind::Watch,
            "watch_page",
            "Did a page (or its CSS `selector` part, e.g. '.price') change since the last \
             watch_page of it? Added and removed lines; the first check only records. For 'tell me \
             when X changes' jobs, not to read a page.",
            url_schema("selector", None),
        ),
        (
            Kind::Feed,
            "read_feed",
            "New items of an RSS/Atom feed: those after `since`, else those the last read_feed of \
             this url did not return (the first read: the latest 20). Not for web pages.",
            url_schema("since", Some("RFC 3339 time.")),
        ),
    ]
    .into_iter()
    .map(|(kind, name, description, parameters)| {
        let tool: Arc<dyn Tool> = Arc::new(WebTool {
            kind,
            fetcher: fetcher.clone(),
            store: store.clone(),
            info: ToolInfo::new(name, description, parameters).with_timeout(timeout),
        });
        tool
    })
    .collect()
}

/// `{url, EXTRA?}`; the extra field's description only where its name and the tool's own
/// description leave its form open.
fn url_schema(extra: &str, extra_description: Option<&str>) -> Value {
    let mut field = json!({"type": "string"});
    if let Some(d) = extra_description {
        field["description"] = json!(d);
    }
    json!({
        "type": "object",
        "properties": {
            "url": {"type": "string"},
            extra: field,
        },
        "required": ["url"],
        "additionalProperties": false,
    })
}

/// `{url, selector?}` (`web_fetch`, `watch_page`) or `{url, since?}` (`read_feed`): each tool's
/// schema admits only its own fields, and is checked first.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WebArgs {
    url: String,
    #[serde(default)]
    selector: Option<String>,
    #[serde(default)]
    since: Option<String>,
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Fetch,
    Watch,
    Feed,
}

/// The three web tools: one shape, three behaviours.
struct WebTool {
    kind: Kind,
    fetcher: Fetcher,
    store: Store,
    info: ToolInfo,
}

impl TypedTool for WebTool {
    type Args = WebArgs;

    fn info(&self) -> &ToolInfo {
        &self.info
    }

    /// One dead or overloaded site must not switch off web access: health is per host.
    fn breaker_scope(&self, args: &Value) -> Option<String> {
        let url = reqwest::Url::parse(args.get("url")?.as_str()?.trim()).ok()?;
        let host = url.host_str()?;
        Some(match url.port_or_known_default() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_string(),
        })
    }

    async fn run(&self, a: WebArgs, ctx: &ToolContext) -> Result<Value, ToolError> {
        let url = url_of(&a.url)?;
        let watcher = watcher(ctx);
        match self.kind {
            Kind::Fetch => self.fetch_page(url, non_blank(&a.selector)).await,
            Kind::Watch => self.watch_page(url, non_blank(&a.selector), &watcher).await,
            Kind::Feed => self.read_feed(url, non_blank(&a.since), &watcher).await,
        }
    }
}

/// Whose last look a watch or a feed read compares against: a job's own (its precheck and its
/// runs' tasks alike), so a change one job or task saw is still news to every other job; tasks
/// of no job share one.
fn watcher(ctx: &ToolContext) -> String {
    match &ctx.job_id {
        Some(job) => hermes_store::job_snapshots(job),
        None => String::new(),
    }
}

/// The URL, which the schema cannot require to be non-blank.
fn url_of(url: &str) -> Result<&str, ToolError> {
    let url = url.trim();
    if url.is_empty() {
        return Err(ToolError::InvalidArguments(
            "'url' is required and must be a non-empty string".into(),
        ));
    }
    Ok(url)
}

/// An optional text argument, `None` when blank.
fn non_blank(s: &Option<String>) -> Option<&str> {
    s.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

fn store_error(what: &str, e: hermes_store::StoreError) -> ToolError {
    ToolError::Failed(format!("cannot {what}: {e}"))
}

impl WebTool {
    async fn fetch_page(&self, url: &str, selector: Option<&str>) -> Result<Value, ToolError> {
        let selector = selector.map(extract::parse_selector).transpose()?;
        let fetched = self.fetcher.fetch(url).await?;
        let content = content::interpret(&fetched, selector.as_ref());
        Ok(content.into_result(&fetched, selector.is_some()))
    }

    async fn watch_page(
        &self,
        url: &str,
        selector_text: Option<&str>,
        watcher: &str,
    ) -> Result<Value, ToolError> {
        let selector = selector_text.map(extract::parse_selector).transpose()?;
        let fetched = self.fetcher.fetch(url).await?;
        let content = content::interpret(&fetched, selector.as_ref());
        let note = content.note(&fetched, selector.is_some());
        let text = content.watch_text();
        // Keyed by the URL as given, so a redirect target change does not reset the watch.
        let key = format!("{watcher}page:{url}#{}", selector_text.unwrap_or(""));
        let previous = self
            .store
            .snapshots()
            .get(&key)
            .await
            .map_err(|e| store_error("read the page's last snapshot", e))?;
        let (changed, first_check, added, removed) = match &previous {
            None => (false, true, Vec::new(), Vec::new()),
            Some((old, _)) if *old == text => (false, false, Vec::new(), Vec::new()),
            Some((old, _)) => {
                let d = diff::line_diff(old, &text);
                (true, false, d.added, d.removed)
            }
        };
        if previous.is_none() || changed {
            self.store
                .snapshots()
                .put(&key, &text)
                .await
                .map_err(|e| store_error("store the page snapshot", e))?;
        }
        let mut out = json!({
            "url": fetched.url.as_str(),
            "changed": changed,
            "first_check": first_check,
            "added": added.iter().take(MAX_DIFF_LINES).collect::<Vec<_>>(),
            "removed": removed.iter().take(MAX_DIFF_LINES).collect::<Vec<_>>(),
            "text_excerpt": text::cut(&text, EXCERPT_CHARS),
        });
        if let Value::Object(map) = &mut out {
            let omitted = added.len().saturating_sub(MAX_DIFF_LINES)
                + removed.len().saturating_sub(MAX_DIFF_LINES);
            if omitted > 0 {
                map.insert("omitted_lines".into(), json!(omitted));
            }
            if fetched.truncated {
                map.insert("truncated".into(), json!(true));
            }
            if let Some(note) = note {
                map.insert("note".into(), json!(note));
            }
        }
        Ok(out)
    }

    async fn read_feed(
        &self,
        url: &str,
        since: Option<&str>,
        watcher: &str,
    ) -> Result<Value, ToolError> {
        let since = since
            .map(|s| {
                DateTime::parse_from_rfc3339(s).map(|t| t.with_timezone(&Utc)).map_err(|e| {
                    ToolError::InvalidArguments(format!(
                        "'since' must be an RFC 3339 time such as 2026-01-31T08:00:00Z, not '{s}' ({e})"
                    ))
                })
            })
            .transpose()?;
        let fetched = self.fetcher.fetch(url).await?;
        let feed = feed::parse(&fetched.body, &fetched.url).map_err(|e| {
            let cut = if fetched.truncated {
                " (the body was cut at tools.web_fetch.max_bytes, which may be why)"
            } else {
                ""
            };
            ToolError::Failed(format!(
                "{} is not a readable RSS or Atom feed ({e}){cut}; for an ordinary page use web_fetch",
                fetched.url
            ))
        })?;
        let key = format!("{watcher}feed:{url}");
        let previous = self
            .store
            .snapshots()
            .get(&key)
            .await
            .map_err(|e| store_error("read the feed's seen items", e))?
            // A snapshot we cannot read is treated as a first read, not an error: the
            // worst case is items shown twice.
            .and_then(|(content, _)| serde_json::from_str::<feed::Seen>(&content).ok());
        let (items, seen) = feed::select_new(&feed, since, previous.as_ref());
        let seen = serde_json::to_string(&seen)
            .map_err(|e| ToolError::Failed(format!("cannot encode the feed's seen items: {e}")))?;
        self.store
            .snapshots()
            .put(&key, &seen)
            .await
            .map_err(|e| store_error("store the feed's seen items", e))?;
        Ok(json!({
            "title": feed.title,
            "first_read": previous.is_none() && since.is_none(),
            "items": items,
        }))
    }
}
