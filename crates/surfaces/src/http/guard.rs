//! The checks every request passes before any route: the `Host` header (against DNS
//! rebinding), the same-origin rule for changes (against cross-site requests, see
//! `session`), and the bearer token or a browser session with its CSRF token.
//!
//! A DNS-rebinding page in the user's browser reaches the loopback daemon under the attacker's
//! own domain name, and the browser sends that name as `Host`. So a request is served only when
//! its `Host` is a loopback name, an IP literal (no DNS answer can rebind a literal), or one of
//! `server.allowed_hosts` (a reverse proxy's name). A request with no `Host` at all cannot come
//! from a browser and is served.
//!
//! Bearer tokens are counted per client address by `throttle`: an address locked out after
//! repeated wrong tokens gets 429 before its token is looked at.

use super::throttle::{Door, Peer};
use super::{ApiError, ApiState, session};
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::http::header::{AUTHORIZATION, HOST};
use axum::middleware::Next;
use axum::response::Response;
use std::net::IpAddr;

pub(super) async fn require_known_host(
    State(state): State<ApiState>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let Some(host) = req.headers().get(HOST) else {
        return Ok(next.run(req).await);
    };
    let allowed = &state.agent.settings().server.allowed_hosts;
    match host.to_str() {
        Ok(h) if host_allowed(h, allowed) => Ok(next.run(req).await),
        _ => Err(ApiError::new(
            StatusCode::MISDIRECTED_REQUEST,
            "misdirected_host",
            format!(
                "this daemon does not answer to the host {:?}; use 127.0.0.1 or localhost, or add the name to server.allowed_hosts",
                String::from_utf8_lossy(host.as_bytes())
            ),
        )),
    }
}

/// Whether a `Host` value (`name`, `name:port`, `[v6]:port`) may be served.
pub(super) fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let name = host_name(host.trim());
    if name.eq_ignore_ascii_case("localhost") || name.parse::<IpAddr>().is_ok() {
        return true;
    }
    allowed.iter().any(|a| {
        let a = a.trim();
        // An entry with a port must match the port too.
        a.eq_ignore_ascii_case(host.trim()) || a.eq_ignore_ascii_case(name)
    })
}

/// The name without its port (and an IPv6 literal without its brackets).
fn host_name(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        // An unclosed bracket is no name at all.
        return rest.split_once(']').map_or("", |(v6, _)| v6);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

/// Refuses a request that changes something and comes from another site's page.
pub(super) async fn require_same_origin(
    State(state): State<ApiState>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let public_url = &state.agent.settings().server.public_url;
    session::same_origin(req.method(), req.headers(), public_url)?;
    Ok(next.run(req).await)
}

pub(super) async fn require_token(
    State(state): State<ApiState>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    if state.token.is_empty() {
        return Ok(next.run(req).await);
    }
    let given = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token);
    if let Some(given) = given {
        let peer = Peer::of(req.extensions()).0;
        if let Err(locked) = state.logins.check(peer) {
            return Ok(locked.api_response());
        }
        if session::token_matches(given, &state.token) {
            state.logins.succeeded(peer);
            return Ok(next.run(req).await);
        }
        state.logins.failed(peer, Door::Api);
    } else if let Some((_, sess)) = state.sessions.from_headers(req.headers()).await? {
        // A browser sends the cookie by itself; a change needs the token only our pages hold.
        let csrf = req
            .headers()
            .get(session::CSRF_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if session::is_safe(req.method()) || session::csrf_matches(&sess, csrf) {
            return Ok(next.run(req).await);
        }
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "csrf",
            "missing or wrong X-CSRF-Token for this session; reload the dashboard page and try again",
        ));
    }
    Err(ApiError::new(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "missing or wrong bearer token; send `Authorization: Bearer <server.token>` (or sign in to the dashboard at /login)",
    ))
}

/// The credentials of an `Authorization: Bearer …` value; the scheme name is case-insensitive
/// (RFC 9110 §11.1), so `bearer x` from a hand-written client works too.
pub(super) fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim_start_matches(' '))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names() {
        let allowed = vec![
            "hermes.example.org".to_string(),
            "proxy.lan:8443".to_string(),
        ];
        for ok in [
            "localhost",
            "LOCALHOST:1",
            "127.0.0.1",
            "127.0.0.1:8765",
            "[::1]:8765",
            "[::1]",
            "10.0.0.5:80",
            "hermes.example.org",
            "hermes.example.org:443",
            "proxy.lan:8443",
        ] {
            assert!(host_allowed(ok, &allowed), "{ok}");
        }
        for refused in [
            "rebind.attacker.example",
            "localhost.attacker.example",
            "127.0.0.1.nip.io",
            "proxy.lan:9999",
            "proxy.lan",
            "",
            "[::1",
        ] {
            assert!(!host_allowed(refused, &allowed), "{refused}");
        }
    }

    #[test]
    fn bearer_scheme_is_case_insensitive() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer abc"), Some("abc"));
        assert_eq!(bearer_token("BEARER  abc"), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearerabc"), None);
        assert_eq!(bearer_token(""), None);
    }
}
