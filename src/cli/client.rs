//! Talking to a running daemon over its API, so `tasks`, `jobs` and `memory` work the same
//! whether or not one is up.

use crate::config::Settings;
use anyhow::Context;
use reqwest::{Method, StatusCode};
use serde_json::Value;
use std::time::Duration;

/// A daemon that answered `/healthz`.
pub struct Daemon {
    base: String,
    token: String,
    http: reqwest::Client,
}

impl Daemon {
    /// Look for a daemon at the configured address; `None` when nothing answers quickly.
    pub async fn detect(settings: &Settings) -> Option<Daemon> {
        let host = match settings.server.host.as_str() {
            // A wildcard bind is reachable on loopback.
            "0.0.0.0" | "::" | "[::]" => "127.0.0.1".to_string(),
            h if h.contains(':') && !h.starts_with('[') => format!("[{h}]"),
            h => h.to_string(),
        };
        let base = format!("http://{host}:{}", settings.server.port);
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(600))
            .build()
            .ok()?;
        let probe = http
            .get(format!("{base}/healthz"))
            .timeout(Duration::from_millis(700))
            .send()
            .await
            .ok()?;
        let body: Value = probe.json().await.ok()?;
        (body.get("status").and_then(Value::as_str) == Some("ok")).then(|| Daemon {
            base,
            token: settings.server.token.clone(),
            http,
        })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// Call the API; a JSON error body becomes an error carrying its message.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(StatusCode, Value)> {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if !self.token.is_empty() {
            req = req.bearer_auth(&self.token);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("the daemon at {} stopped answering", self.base))?;
        let status = resp.status();
        let value: Value = if status == StatusCode::NO_CONTENT {
            Value::Null
        } else {
            resp.json().await.unwrap_or(Value::Null)
        };
        if status.is_success() {
            return Ok((status, value));
        }
        let message = value
            .pointer("/error/message")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| format!("the daemon answered {status}"));
        if status == StatusCode::UNAUTHORIZED {
            anyhow::bail!(
                "{message} (the daemon requires server.token; set it in this config too)"
            );
        }
        anyhow::bail!("{message}")
    }
}
