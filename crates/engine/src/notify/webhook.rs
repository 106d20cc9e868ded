//! The webhook channels: one per `notify.webhooks.NAME`, each a POST of a JSON document.
//!
//! Owns: the payload, its HMAC-SHA256 signature (`X-Hermes-Signature: sha256=<hex>` over the
//! exact body bytes, when the webhook has a secret), and sorting answers into sent (2xx),
//! transient (408, 429, 5xx, connect errors, timeouts) and permanent (any other status). A
//! refusal's body is read only up to [`MAX_ERROR_BODY`], so no receiver can make the daemon
//! hold its whole answer.
//! Must not: follow redirects (the URL in the config is the only place a notice may go), log
//! a webhook's full URL (chat webhooks carry their token in the path), touch the outbox.

use super::sender::SendError;
use chrono::{DateTime, Utc};
use hermes_config::WebhookSettings;
use hermes_store::Notice;
use hmac::{Hmac, KeyInit, Mac};
use reqwest::StatusCode;
use serde::Serialize;
use sha2::Sha256;
use std::time::Duration;

/// The signature header's name.
pub(crate) const SIGNATURE_HEADER: &str = "X-Hermes-Signature";
/// Timeout for `doctor`'s reachability probe.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);
/// How much of a refusing receiver's body goes into the notice's error.
const EXCERPT_CHARS: usize = 200;
/// How much of a refusing receiver's body is read at most: the rest is never read (the
/// connection is dropped), so a receiver answering with hundreds of megabytes costs nothing.
pub(crate) const MAX_ERROR_BODY: usize = 64 * 1024;

pub(crate) struct WebhookChannel {
    pub(crate) name: String,
    url: reqwest::Url,
    secret: String,
    client: reqwest::Client,
}

/// What a receiver gets. `state` is the state of the task behind the notice, if any.
#[derive(Debug, Serialize)]
pub(crate) struct Payload<'a> {
    pub notice_id: i64,
    pub channel: &'a str,
    pub title: &'a str,
    pub text: &'a str,
    pub task_id: Option<&'a str>,
    pub job_id: Option<&'a str>,
    pub state: Option<&'a str>,
    pub created_at: DateTime<Utc>,
    pub sent_at: DateTime<Utc>,
}

impl WebhookChannel {
    pub(crate) fn new(
        name: &str,
        settings: &WebhookSettings,
        client: reqwest::Client,
    ) -> Result<WebhookChannel, super::NotifyError> {
        let url = reqwest::Url::parse(&settings.url)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
            .ok_or_else(|| super::NotifyError::Config {
                key: format!("notify.webhooks.{name}.url"),
                message: "must be an http:// or https:// URL".into(),
            })?;
        Ok(WebhookChannel {
            name: name.to_string(),
            url,
            secret: settings.secret.clone(),
            client,
        })
    }

    /// `scheme://host:port`: enough to recognise the receiver, without a token in the path.
    pub(crate) fn label(&self) -> String {
        let host = self.url.host_str().unwrap_or("?");
        match self.url.port_or_known_default() {
            Some(port) => format!("{}://{host}:{port}", self.url.scheme()),
            None => format!("{}://{host}", self.url.scheme()),
        }
    }

    pub(crate) async fn send(&self, notice: &Notice, state: Option<&str>) -> Result<(), SendError> {
        let payload = Payload {
            notice_id: notice.id,
            channel: &notice.queued.channel,
            title: &notice.queued.title,
            text: &notice.queued.body,
            task_id: notice.queued.task_id.as_deref(),
            job_id: notice.queued.job_id.as_deref(),
            state,
            created_at: notice.created_at,
            sent_at: Utc::now(),
        };
        let body = serde_json::to_vec(&payload)
            .map_err(|e| SendError::Permanent(format!("cannot encode the webhook payload: {e}")))?;
        let mut request = self
            .client
            .post(self.url.clone())
            // No bound of its own: the attempt's is `notify.send_timeout_s`, as for every
            // channel; a shorter one here cut slow receivers off after they had the notice,
            // which the retry then sent again.
            .header(reqwest::header::CONTENT_TYPE, "application/json");
        if !self.secret.is_empty() {
            request = request.header(SIGNATURE_HEADER, signature(&self.secret, &body));
        }
        let label = self.label();
        let response = request.body(body).send().await.map_err(|e| {
            SendError::Transient(format!(
                "webhook '{}' ({label}) unreachable: {}",
                self.name,
                describe(e)
            ))
        })?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let text =
            String::from_utf8_lossy(&read_capped(response, MAX_ERROR_BODY).await).into_owned();
        let excerpt = hermes_store::util::text::prefix(text.trim(), EXCERPT_CHARS);
        let what = format!(
            "webhook '{}' ({label}) answered HTTP {status}{}",
            self.name,
            if excerpt.is_empty() {
                String::new()
            } else {
                format!(": {excerpt}")
            }
        );
        if is_transient(status) {
            Err(SendError::Transient(what))
        } else if status.is_redirection() {
            Err(SendError::Permanent(format!(
                "{what}; redirects are not followed: put the final URL in notify.webhooks.{}.url",
                self.name
            )))
        } else {
            Err(SendError::Permanent(format!(
                "{what}; check notify.webhooks.{}.url and the receiver",
                self.name
            )))
        }
    }

    /// Reachable = any HTTP answer to a HEAD within a short timeout.
    pub(crate) async fn check(&self) -> Result<String, super::CheckError> {
        match self
            .client
            .head(self.url.clone())
            .timeout(CHECK_TIMEOUT)
            .send()
            .await
        {
            Ok(r) => Ok(format!("reachable (HEAD answered HTTP {})", r.status())),
            Err(e) => Err(super::CheckError::Unreachable(describe(e))),
        }
    }
}

/// At most `cap` bytes of the body, read as they arrive; reading stops there, and dropping the
/// response then closes the connection. A body that breaks off gives what came before.
async fn read_capped(mut response: reqwest::Response, cap: usize) -> Vec<u8> {
    let mut body = Vec::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        let room = cap - body.len();
        if chunk.len() >= room {
            body.extend_from_slice(&chunk[..room]);
            break;
        }
        body.extend_from_slice(&chunk);
    }
    body
}

fn is_transient(status: StatusCode) -> bool {
    status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
        || status.is_server_error()
}

/// reqwest's Display is terse ("error sending request"); the cause is in its sources. The URL
/// is left out on purpose (see the module doc).
fn describe(e: reqwest::Error) -> String {
    let e = e.without_url();
    let what = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "connection failed"
    } else {
        return hermes_store::util::error_chain(&e);
    };
    match std::error::Error::source(&e) {
        Some(cause) => format!("{what}: {}", hermes_store::util::error_chain(cause)),
        None => what.to_string(),
    }
}

/// `sha256=<hex of HMAC-SHA256(secret, body)>`: what a receiver recomputes over the raw body.
pub fn signature(secret: &str, body: &[u8]) -> String {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(secret.as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_matches_a_known_vector() {
        // RFC 4231 test case 2.
        assert_eq!(
            signature("Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn signature_depends_on_every_byte_and_the_secret() {
        let a = signature("s3cret", br#"{"a":1}"#);
        assert_ne!(a, signature("s3cret", br#"{"a":2}"#));
        assert_ne!(a, signature("other", br#"{"a":1}"#));
        assert_eq!(a.len(), "sha256=".len() + 64);
    }

    #[test]
    fn the_label_hides_the_path() {
        let ch = WebhookChannel::new(
            "chat",
            &WebhookSettings {
                url: "https://hooks.example.com/services/T000/SECRET".into(),
                secret: String::new(),
            },
            reqwest::Client::new(),
        )
        .unwrap();
        assert_eq!(ch.label(), "https://hooks.example.com:443");
    }

    #[test]
    fn a_non_http_url_is_refused() {
        for url in ["ftp://example.com/x", "not a url", "file:///etc/passwd"] {
            let err = WebhookChannel::new(
                "w",
                &WebhookSettings {
                    url: url.into(),
                    secret: String::new(),
                },
                reqwest::Client::new(),
            )
            .err()
            .unwrap()
            .to_string();
            assert!(err.contains("notify.webhooks.w.url"), "{err}");
        }
    }

    #[test]
    fn statuses_sort_into_transient_and_permanent() {
        for s in [408, 429, 500, 502, 503] {
            assert!(is_transient(StatusCode::from_u16(s).unwrap()), "{s}");
        }
        for s in [400, 401, 403, 404, 410, 422] {
            assert!(!is_transient(StatusCode::from_u16(s).unwrap()), "{s}");
        }
    }
}
