//! Browser sessions: the `hermes_session` cookie that the dashboard's sign-in sets, each with
//! its own CSRF token, and the same-origin rule for requests that change something.
//!
//! Why a browser session is safe to accept beside the bearer token:
//! - The cookie is `HttpOnly` (no script reads it), `SameSite=Strict` (a browser attaches it
//!   only to requests started by our own pages), `Path=/`, and `Secure` when the dashboard is
//!   reached over https (`server.public_url`).
//! - Every request that changes something and rides on a session must also carry the
//!   session's CSRF token — a hidden `csrf` form field on the pages, an `X-CSRF-Token` header
//!   for scripts. The token is random per session and appears only inside our pages, which
//!   another site cannot read (the same-origin policy; no CORS header is ever sent).
//! - Independently, a request that changes something and says it comes from another site
//!   (`Origin` not this host, `Sec-Fetch-Site: cross-site`) is refused whatever its
//!   credentials: [`same_origin`]. With no token configured (a loopback daemon) this is what
//!   stops a web page from posting a form to the daemon.
//! - Sessions live in this process's memory: a restart signs everyone out, and signing out
//!   removes the session at once. Their number is bounded, the oldest going first.

use super::ApiError;
use crate::util::lock;
use axum::http::header::{COOKIE, HOST, ORIGIN};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;

/// The cookie's name.
pub const COOKIE_NAME: &str = "hermes_session";
/// The form field and header that carry the CSRF token.
pub const CSRF_FIELD: &str = "csrf";
pub const CSRF_HEADER: &str = "x-csrf-token";
/// How long a session lasts after sign-in.
pub const LIFETIME: Duration = Duration::from_secs(7 * 24 * 3600);
/// The most sessions kept; signing in once more drops the oldest.
const MAX_SESSIONS: usize = 256;

/// What a page needs of its session: the CSRF token to put in its forms.
#[derive(Debug, Clone)]
pub struct Session {
    pub csrf: String,
}

struct Entry {
    id: String,
    csrf: String,
    expires: Instant,
}

/// The sessions of this process: a cheap-to-clone handle.
#[derive(Clone, Default)]
pub struct Sessions {
    entries: Arc<Mutex<Vec<Entry>>>,
}

/// A fresh 256-bit random value in hex (two v4 UUIDs' random bytes, from the OS's CSPRNG).
fn random_hex() -> String {
    let a = uuid::Uuid::new_v4();
    let b = uuid::Uuid::new_v4();
    format!("{}{}", hex::encode(a.as_bytes()), hex::encode(b.as_bytes()))
}

impl Sessions {
    /// A new session: its cookie value and what pages need of it.
    pub fn create(&self) -> (String, Session) {
        let id = random_hex();
        let csrf = random_hex();
        let mut entries = lock(&self.entries);
        let now = Instant::now();
        entries.retain(|e| e.expires > now);
        if entries.len() >= MAX_SESSIONS {
            entries.remove(0);
        }
        entries.push(Entry {
            id: id.clone(),
            csrf: csrf.clone(),
            expires: now + LIFETIME,
        });
        (id, Session { csrf })
    }

    /// The live session with this cookie value. Every entry is compared in constant time, so
    /// timing tells nothing about how close a guess was.
    pub fn get(&self, id: &str) -> Option<Session> {
        let now = Instant::now();
        let entries = lock(&self.entries);
        let mut found = None;
        for e in entries.iter() {
            let same = id.len() == e.id.len() && bool::from(id.as_bytes().ct_eq(e.id.as_bytes()));
            if same && e.expires > now {
                found = Some(Session {
                    csrf: e.csrf.clone(),
                });
            }
        }
        found
    }

    /// Sign out: the session is gone at once.
    pub fn remove(&self, id: &str) {
        lock(&self.entries).retain(|e| e.id != id);
    }

    /// The session named by the request's cookie, if it is live.
    pub fn from_headers(&self, headers: &HeaderMap) -> Option<(String, Session)> {
        let id = cookie(headers, COOKIE_NAME)?;
        self.get(id).map(|s| (id.to_string(), s))
    }
}

/// A cookie's value from the `Cookie` headers.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// `Set-Cookie` for a new session (`secure`: the dashboard is reached over https).
pub fn set_cookie(id: &str, secure: bool) -> HeaderValue {
    let value = format!(
        "{COOKIE_NAME}={id}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}{}",
        LIFETIME.as_secs(),
        if secure { "; Secure" } else { "" }
    );
    // Hex and fixed words only: always a valid header value.
    HeaderValue::from_str(&value).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// `Set-Cookie` that makes the browser forget the session.
pub fn clear_cookie(secure: bool) -> HeaderValue {
    if secure {
        HeaderValue::from_static(
            "hermes_session=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0; Secure",
        )
    } else {
        HeaderValue::from_static("hermes_session=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0")
    }
}

/// Whether `given` is the session's CSRF token (constant time).
pub fn csrf_matches(session: &Session, given: &str) -> bool {
    super::token_matches(given, &session.csrf)
}

/// Methods that only read.
pub fn is_safe(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// A request that changes something must not say it comes from another site: `Origin`, when
/// sent, names this very host (or `server.public_url`), and `Sec-Fetch-Site`, when sent, is
/// `same-origin` or `none` (typed by the user). Clients that are not browsers send neither.
pub fn same_origin(method: &Method, headers: &HeaderMap, public_url: &str) -> Result<(), ApiError> {
    if is_safe(method) {
        return Ok(());
    }
    let refuse = |why: String| {
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "cross_origin",
            format!(
                "{why}; requests that change something are only taken from the dashboard's own pages"
            ),
        ))
    };
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok())
        && !matches!(site, "same-origin" | "none")
    {
        return refuse(format!(
            "the request came from another site (Sec-Fetch-Site: {site})"
        ));
    }
    let Some(origin) = headers.get(ORIGIN) else {
        return Ok(());
    };
    let origin = origin.to_str().unwrap_or("null");
    let host = headers
        .get(HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let authority = origin.split_once("://").map_or("", |(_, a)| a);
    let public = public_url.trim().trim_end_matches('/');
    let ours = (!host.is_empty() && authority.eq_ignore_ascii_case(host))
        || (!public.is_empty() && origin.eq_ignore_ascii_case(public));
    if ours {
        Ok(())
    } else {
        refuse(format!(
            "the request came from {origin:?}, not from this host"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_live_until_removed() {
        let s = Sessions::default();
        let (id, session) = s.create();
        assert_eq!(id.len(), 64);
        assert_eq!(s.get(&id).map(|x| x.csrf), Some(session.csrf.clone()));
        assert!(s.get(&id[..63]).is_none());
        assert!(s.get("").is_none());
        s.remove(&id);
        assert!(s.get(&id).is_none());
    }

    #[test]
    fn cookies_are_found_among_others() {
        let mut h = HeaderMap::new();
        h.insert(
            COOKIE,
            HeaderValue::from_static("a=1; hermes_session=abc; b=2"),
        );
        assert_eq!(cookie(&h, COOKIE_NAME), Some("abc"));
        assert_eq!(cookie(&h, "c"), None);
        let set = set_cookie("abc", true);
        let set = set.to_str().unwrap_or("");
        assert!(
            set.contains("HttpOnly") && set.contains("SameSite=Strict"),
            "{set}"
        );
        assert!(set.contains("Path=/") && set.ends_with("Secure"), "{set}");
    }

    #[test]
    fn cross_site_changes_are_refused() {
        let with = |pairs: &[(&'static str, &'static str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.insert(*k, HeaderValue::from_static(v));
            }
            h
        };
        let host = ("host", "127.0.0.1:8765");
        let post = Method::POST;
        assert!(same_origin(&post, &with(&[host]), "").is_ok());
        assert!(
            same_origin(
                &post,
                &with(&[host, ("origin", "http://127.0.0.1:8765")]),
                ""
            )
            .is_ok()
        );
        assert!(
            same_origin(
                &post,
                &with(&[host, ("origin", "https://evil.example")]),
                ""
            )
            .is_err()
        );
        assert!(same_origin(&post, &with(&[host, ("origin", "null")]), "").is_err());
        assert!(same_origin(&post, &with(&[host, ("sec-fetch-site", "cross-site")]), "").is_err());
        assert!(
            same_origin(
                &Method::GET,
                &with(&[host, ("origin", "https://evil.example")]),
                ""
            )
            .is_ok()
        );
        let proxied = with(&[("host", "127.0.0.1:8765"), ("origin", "https://h.example")]);
        assert!(same_origin(&post, &proxied, "https://h.example/").is_ok());
    }
}
