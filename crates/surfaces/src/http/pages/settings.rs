//! `/settings`: the effective configuration, every secret redacted, and `doctor`'s verdicts
//! (`/settings/checks`, a fragment the page loads by itself, since probing the model and the
//! mail server takes a few seconds).
//!
//! Must not: render a secret. Redaction works on the serialised settings and errs toward
//! hiding: API keys, the SMTP password, webhook secrets and the token are shown as set or
//! empty; MCP `env` and `headers` values are hidden; webhook and MCP URLs keep only their
//! origin (a webhook's path is often its secret); other URLs lose their query and userinfo.

use super::layout::{Ctx, PageResult, Shown, badge, render};
use crate::doctor;
use crate::http::ApiState;
use axum::extract::State;
use axum::response::IntoResponse;
use maud::{Markup, html};
use serde_json::Value;

pub(crate) async fn page(ctx: Ctx) -> PageResult {
    let s = &ctx.state;
    let settings = serde_json::to_value(&s.config.settings).unwrap_or(Value::Null);
    let mut rows = Vec::new();
    flatten("", &settings, &mut rows);
    let mut sections: Vec<(String, Vec<(String, String)>)> = Vec::new();
    for (key, value) in rows {
        let section = key.split('.').next().unwrap_or("").to_string();
        match sections.last_mut() {
            Some((name, items)) if *name == section => items.push((key, value)),
            _ => sections.push((section, vec![(key, value)])),
        }
    }
    let body = html! {
        p { "From " code { (s.config.source) } "; data in " code { (s.config.data_dir.display()) } ". Secrets are never shown." }
        section aria-labelledby="h-checks" {
            h2 #h-checks { "Checks" }
            div #checks data-src="/settings/checks" aria-live="polite" aria-busy="true" {
                p.muted { "Running the checks (model endpoints, mail server, webhooks)…" }
                noscript { p { a href="/settings/checks" { "Run the checks" } } }
            }
        }
        section aria-labelledby="h-config" {
            h2 #h-config { "Configuration" }
            @for (name, items) in &sections {
                details.config open[name == "model" || name == "server"] {
                    summary { (name) }
                    div.scroll { table.kv {
                        tbody { @for (k, v) in items {
                            tr { th scope="row" { code { (k) } } td { code { (v) } } }
                        } }
                    } }
                }
            }
        }
    };
    Ok(render(&ctx, "Settings", body).into_response())
}

/// The verdicts, as an HTML fragment for the page above.
pub(crate) async fn checks(State(s): State<ApiState>) -> Markup {
    let checks = doctor::running_daemon(doctor::Parts {
        config: &s.config,
        store: s.agent.store(),
        memory: s.memory.as_ref(),
        registry: s.agent.registry(),
        notifier: &s.notifier,
        mcp: &s.mcp,
        inbox: &s.inbox,
        matrix: &s.matrix,
        telegram: &s.telegram,
    })
    .await;
    html! {
        ul.checks {
            @for c in &checks {
                li {
                    (badge(Shown::Check(c.verdict)))
                    " " b { (c.what) } " " span { (c.detail) }
                }
            }
        }
    }
}

/// `a.b.c = value` rows, secrets redacted.
fn flatten(prefix: &str, v: &Value, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(map) if !map.is_empty() => {
            for (k, child) in map {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, child, out);
            }
        }
        _ => out.push((prefix.to_string(), redact(prefix, v))),
    }
}

const SECRET_NAMES: &[&str] = &[
    "api_key",
    "password",
    "secret",
    "token",
    "bot_token",
    "recovery_key",
];

/// The value of `path` as it may be shown.
fn redact(path: &str, v: &Value) -> String {
    let parts: Vec<&str> = path.split('.').collect();
    let last = parts.last().copied().unwrap_or("");
    let is_empty = matches!(v, Value::Null)
        || v.as_str().is_some_and(str::is_empty)
        || v.as_object().is_some_and(|m| m.is_empty());
    let mcp_secret = parts.first() == Some(&"mcp")
        && parts.iter().any(|p| *p == "env" || *p == "headers")
        && parts.len() > 4;
    if SECRET_NAMES.contains(&last) || mcp_secret {
        return if is_empty {
            "(empty)".into()
        } else {
            "•••••• (set, hidden)".into()
        };
    }
    let text = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if last == "url" || last == "base_url" {
        let origin_only = parts.first() == Some(&"notify") || parts.first() == Some(&"mcp");
        return redact_url(&text, origin_only);
    }
    text
}

/// A URL without its userinfo and query; with `origin_only`, without its path too.
fn redact_url(text: &str, origin_only: bool) -> String {
    let Ok(mut u) = url::Url::parse(text) else {
        return if text.is_empty() {
            String::new()
        } else {
            "(hidden: not a URL)".into()
        };
    };
    let _ = u.set_username("");
    let _ = u.set_password(None);
    let hidden_query = u.query().is_some();
    u.set_query(None);
    u.set_fragment(None);
    if origin_only && u.path() != "/" && !u.path().is_empty() {
        return format!("{}/… (path hidden)", u.origin().ascii_serialization());
    }
    let mut s = u.to_string();
    if hidden_query {
        s.push_str("?… (query hidden)");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secrets_never_show() {
        let v = json!({
            "model": {"profiles": {"fast": {"api_key": "sk-123", "base_url": "http://u:p@h:1/v1?key=k"}}},
            "notify": {"email": {"password": "hunter2", "username": "me"},
                       "webhooks": {"ops": {"url": "https://hooks.example/T0/B0/XYZ", "secret": "s"}}},
            "server": {"token": "", "public_url": "https://h.example"},
            "mcp": {"servers": {"gh": {"env": {"GH_TOKEN": "ghp_x"}, "headers": {"Authorization": "Bearer y"},
                                       "url": "https://mcp.example/abc?token=z"}}},
            "channels": {"matrix": {"password": "mx-pw", "recovery_key": "EsTx recovery words"},
                         "telegram": {"bot_token": "123:bot-secret"}},
        });
        let mut rows = Vec::new();
        flatten("", &v, &mut rows);
        let all = format!("{rows:?}");
        for secret in [
            "sk-123",
            "hunter2",
            "XYZ",
            "ghp_x",
            "Bearer y",
            "token=z",
            "key=k",
            "u:p",
            "mx-pw",
            "EsTx",
            "bot-secret",
        ] {
            assert!(!all.contains(secret), "{secret} in {all}");
        }
        let get = |k: &str| {
            rows.iter()
                .find(|(p, _)| p == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        assert_eq!(get("server.token"), "(empty)");
        assert!(get("model.profiles.fast.api_key").contains("set"));
        assert_eq!(get("notify.email.username"), "me");
        assert_eq!(get("server.public_url"), "https://h.example");
        assert!(get("notify.webhooks.ops.url").starts_with("https://hooks.example/…"));
    }
}
