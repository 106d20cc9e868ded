//! Fetching one URL under the web tools' caps: the shared client, the redirect loop, the
//! body size cap, the overall time cap, and turning bytes into text in the right charset.
//!
//! Owns: the reqwest client (redirects disabled, no proxy, the guard's resolver) and the
//! mapping of HTTP outcomes to [`ToolError`]s: connect errors, timeouts and 5xx are
//! `Network` (the registry retries those); refusals, 4xx and bad URLs are `Failed`.
//! Must not: interpret page content beyond decoding it (that is `extract` and `feed`).

use super::guard::{self, GuardResolver};
use crate::tools::ToolError;
use encoding_rs::{Encoding, UTF_8};
use hermes_config::WebFetchSettings;
use reqwest::Url;
use reqwest::header::{CONTENT_TYPE, LOCATION};
use std::time::Duration;

const USER_AGENT: &str = concat!(
    "hermes-agent/",
    env!("CARGO_PKG_VERSION"),
    " (personal automation)"
);

/// A fetched response: the final URL after redirects and at most `max_bytes` of its body.
#[derive(Debug, Clone)]
pub(crate) struct Fetched {
    pub url: Url,
    pub status: u16,
    /// The media type without parameters, lower-cased (`text/html`); empty when absent.
    pub mime: String,
    /// The `charset` parameter of Content-Type, when given.
    pub charset: Option<String>,
    pub body: Vec<u8>,
    /// The body was longer than `max_bytes` and was cut there.
    pub truncated: bool,
}

/// One client for all three tools. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Fetcher {
    client: Result<reqwest::Client, String>,
    settings: WebFetchSettings,
}

impl Fetcher {
    pub(super) fn new(settings: WebFetchSettings) -> Fetcher {
        let client = reqwest::Client::builder()
            // Each hop is followed by hand so the guard sees every target.
            .redirect(reqwest::redirect::Policy::none())
            // A proxy would resolve the target itself, out of the guard's sight.
            .no_proxy()
            .dns_resolver(GuardResolver {
                allow_private: settings.allow_private,
                named_host: None,
            })
            .user_agent(USER_AGENT)
            .build()
            .map_err(|e| format!("cannot set up the HTTP client: {e}"));
        Fetcher { client, settings }
    }

    pub(super) fn settings(&self) -> &WebFetchSettings {
        &self.settings
    }

    /// Fetch `url` (http/https only), following up to `max_redirects` redirects, each hop
    /// checked by the guard, within `timeout_s` overall.
    pub(super) async fn fetch(&self, url: &str) -> Result<Fetched, ToolError> {
        let client = self
            .client
            .as_ref()
            .map_err(|e| ToolError::Failed(e.clone()))?;
        let url = Url::parse(url.trim()).map_err(|e| {
            ToolError::InvalidArguments(format!(
                "'{url}' is not a valid URL ({e}); give a full http:// or https:// URL"
            ))
        })?;
        let limit = Duration::from_secs(self.settings.timeout_s.max(1));
        // A timeout, not a network error: the cap is on the whole fetch, so the registry does
        // not try it again (three attempts were three times the cap).
        tokio::time::timeout(limit, self.fetch_inner(client, url))
            .await
            .unwrap_or(Err(ToolError::Timeout(limit)))
    }

    async fn fetch_inner(
        &self,
        client: &reqwest::Client,
        mut url: Url,
    ) -> Result<Fetched, ToolError> {
        let allow_private = self.settings.allow_private;
        guard::check_url(&url, allow_private).map_err(|r| ToolError::Failed(r.to_string()))?;
        let mut redirects = 0u32;
        loop {
            let mut response = client
                .get(url.clone())
                .header(
                    reqwest::header::ACCEPT,
                    "text/html,application/xhtml+xml,application/json;q=0.9,application/rss+xml;q=0.9,application/atom+xml;q=0.9,*/*;q=0.8",
                )
                .send()
                .await
                .map_err(|e| send_error(&url, e))?;
            let status = response.status();
            if status.is_redirection()
                && let Some(location) = response.headers().get(LOCATION)
            {
                let location = location.to_str().map_err(|_| {
                    ToolError::Failed(format!(
                        "{url} redirected to a Location that is not valid text"
                    ))
                })?;
                let next = url.join(location).map_err(|e| {
                    ToolError::Failed(format!(
                        "{url} redirected to '{location}', which is not a valid URL ({e})"
                    ))
                })?;
                if redirects >= self.settings.max_redirects {
                    return Err(ToolError::Failed(format!(
                        "too many redirects: stopped after {redirects} at {url} (next: {next}); the limit is tools.web_fetch.max_redirects"
                    )));
                }
                guard::check_url(&next, allow_private)
                    .map_err(|r| ToolError::Failed(format!("{url} redirected to {next}: {r}")))?;
                redirects += 1;
                url = next;
                continue;
            }
            if status.is_server_error() {
                return Err(ToolError::Network(format!(
                    "{url} answered {status} (a server error; worth retrying later)"
                )));
            }
            if status.is_client_error() {
                return Err(ToolError::Failed(format!(
                    "{url} answered {status}; check the URL (a 401/403 page needs a login this tool does not have)"
                )));
            }
            let (mime, charset) = content_type(response.headers().get(CONTENT_TYPE));
            let max = usize::try_from(self.settings.max_bytes).unwrap_or(usize::MAX);
            let mut body = Vec::new();
            let mut truncated = false;
            while let Some(chunk) = response.chunk().await.map_err(|e| send_error(&url, e))? {
                let room = max.saturating_sub(body.len());
                if chunk.len() > room {
                    body.extend_from_slice(&chunk[..room]);
                    truncated = true;
                    // Dropping the response here closes the connection: the rest is never read.
                    break;
                }
                body.extend_from_slice(&chunk);
            }
            return Ok(Fetched {
                url,
                status: status.as_u16(),
                mime,
                charset,
                body,
                truncated,
            });
        }
    }
}

/// The media type (lower-cased, no parameters) and charset parameter of a Content-Type.
fn content_type(value: Option<&reqwest::header::HeaderValue>) -> (String, Option<String>) {
    let Some(raw) = value.and_then(|v| v.to_str().ok()) else {
        return (String::new(), None);
    };
    let mut parts = raw.split(';');
    let mime = parts.next().unwrap_or("").trim().to_ascii_lowercase();
    let charset = parts.find_map(|p| {
        let (k, v) = p.split_once('=')?;
        (k.trim().eq_ignore_ascii_case("charset")).then(|| v.trim().trim_matches('"').to_string())
    });
    (mime, charset)
}

fn send_error(url: &Url, err: reqwest::Error) -> ToolError {
    if let Some(refusal) = guard::find_refusal(&err) {
        return ToolError::Failed(refusal.to_string());
    }
    let detail = hermes_store::util::error_chain(&err);
    if err.is_timeout() {
        ToolError::Network(format!("fetching {url} timed out ({detail})"))
    } else if err.is_connect() {
        ToolError::Network(format!("cannot connect to {url} ({detail})"))
    } else {
        ToolError::Network(format!("fetching {url} failed ({detail})"))
    }
}

impl Fetched {
    /// The body as text: BOM first, then the Content-Type charset, then (for HTML and XML)
    /// the charset the document declares, else UTF-8. Undecodable bytes become U+FFFD.
    pub(super) fn text(&self) -> String {
        let declared = self
            .charset
            .as_deref()
            .and_then(|label| Encoding::for_label(label.as_bytes()))
            .or_else(|| sniff_declared_charset(&self.body));
        // A document cannot honestly declare UTF-16 in ASCII-compatible bytes (WHATWG).
        let encoding = match declared {
            Some(e) if e == encoding_rs::UTF_16LE || e == encoding_rs::UTF_16BE => {
                if self.charset.is_some() { e } else { UTF_8 }
            }
            Some(e) => e,
            None => UTF_8,
        };
        // `decode` lets a byte-order mark override the label, as browsers do.
        let (text, _, _) = encoding.decode(&self.body);
        text.into_owned()
    }
}

/// A charset declared inside the first bytes of an HTML (`<meta charset>`, `<meta
/// http-equiv content="...; charset=...">`) or XML (`<?xml encoding="..."?>`) document.
fn sniff_declared_charset(body: &[u8]) -> Option<&'static Encoding> {
    let head = &body[..body.len().min(4096)];
    let head = String::from_utf8_lossy(head).to_ascii_lowercase();
    if head.trim_start().starts_with("<?xml") {
        let decl_end = head.find("?>")?;
        let decl = &head[..decl_end];
        let at = decl.find("encoding")?;
        return label_after(&decl[at + "encoding".len()..]);
    }
    let mut rest = head.as_str();
    while let Some(at) = rest.find("<meta") {
        let tag_end = rest[at..].find('>').map_or(rest.len(), |e| at + e);
        let tag = &rest[at..tag_end];
        if let Some(c) = tag.find("charset")
            && let Some(enc) = label_after(&tag[c + "charset".len()..])
        {
            return Some(enc);
        }
        rest = &rest[tag_end..];
    }
    None
}

/// Parse `= "label"` (quotes and spaces optional) into an encoding.
fn label_after(s: &str) -> Option<&'static Encoding> {
    let s = s.trim_start().strip_prefix('=')?.trim_start();
    let s = s.trim_start_matches(['"', '\'']);
    let label: String = s
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':' | '.'))
        .collect();
    Encoding::for_label(label.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fetched(charset: Option<&str>, body: &[u8]) -> Fetched {
        Fetched {
            url: Url::parse("http://example.com/").expect("test url"),
            status: 200,
            mime: "text/html".into(),
            charset: charset.map(str::to_string),
            body: body.to_vec(),
            truncated: false,
        }
    }

    #[test]
    fn header_charset_wins() {
        // "café" in ISO-8859-1.
        assert_eq!(fetched(Some("ISO-8859-1"), b"caf\xe9").text(), "café");
    }

    #[test]
    fn meta_charset_is_sniffed() {
        let mut page = b"<html><head><meta charset=\"gbk\"></head><body>".to_vec();
        page.extend_from_slice(&[0xc4, 0xe3, 0xba, 0xc3]); // 你好 in GBK
        assert!(fetched(None, &page).text().contains("你好"));
        let page =
            b"<meta http-equiv=\"Content-Type\" content=\"text/html; charset=iso-8859-1\">caf\xe9";
        assert!(fetched(None, page).text().ends_with("café"));
    }

    #[test]
    fn xml_declaration_and_default() {
        let xml = b"<?xml version=\"1.0\" encoding=\"ISO-8859-1\"?><rss>caf\xe9</rss>";
        assert!(fetched(None, xml).text().contains("café"));
        assert_eq!(fetched(None, "naïve".as_bytes()).text(), "naïve");
    }

    #[test]
    fn content_type_parts() {
        let v = reqwest::header::HeaderValue::from_static("Text/HTML; Charset=\"GBK\"");
        assert_eq!(
            content_type(Some(&v)),
            ("text/html".to_string(), Some("GBK".to_string()))
        );
        assert_eq!(content_type(None), (String::new(), None));
    }
}
