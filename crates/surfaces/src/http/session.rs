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
//! - Sessions live in the database (`store::sessions`), so they survive a restart and work on
//!   every node sharing the database; signing out removes the session at once, everywhere.
//!   A row holds the SHA-256 of the cookie value, never the value: reading the table (a
//!   backup, a dump) gives no way in. A lookup is by that hash, so its timing says nothing
//!   about how close a guessed cookie was. Their number is bounded, the oldest going first.

use super::ApiError;
use axum::http::header::{COOKIE, HOST, ORIGIN};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use hermes_store::{Store, StoreError};
use sha2::{Digest, Sha256};
use std::time::Duration;

/// The cookie's name.
pub(crate) const COOKIE_NAME: &str = "hermes_session";
/// The form field and header that carry the CSRF token.
pub const CSRF_FIELD: &str = "csrf";
pub(crate) const CSRF_HEADER: &str = "x-csrf-token";
/// How long a session lasts after sign-in.
pub(crate) const LIFETIME: Duration = Duration::from_secs(7 * 24 * 3600);
/// The most sessions kept; signing in once more drops the oldest.
const MAX_SESSIONS: i64 = 256;
/// The length of a cookie value we make (256 bits in hex).
const ID_LEN: usize = 64;

/// What a page needs of its session: the CSRF token to put in its forms.
#[derive(Debug, Clone)]
pub struct Session {
    pub csrf: String,
}

/// The dashboard's sessions, kept in the store: a cheap-to-clone handle.
#[derive(Clone)]
pub struct Sessions {
    store: Store,
}

impl Session {
    /// A session that is not stored: for a page shown while the database cannot be written.
    /// Its forms are refused as expired; reloading the page once writes work again fixes that.
    pub(crate) fn unsaved() -> Session {
        Session { csrf: random_hex() }
    }
}

/// A fresh 256-bit random value in hex (two v4 UUIDs' random bytes, from the OS's CSPRNG).
fn random_hex() -> String {
    let a = uuid::Uuid::new_v4();
    let b = uuid::Uuid::new_v4();
    format!("{}{}", hex::encode(a.as_bytes()), hex::encode(b.as_bytes()))
}

/// What the store keeps of a cookie value: its SHA-256, in hex.
fn id_hash(id: &str) -> String {
    hex::encode(Sha256::digest(id.as_bytes()))
}

/// Whether `id` could be a cookie value we made; anything else is not looked up.
fn well_formed(id: &str) -> bool {
    id.len() == ID_LEN && id.bytes().all(|b| b.is_ascii_hexdigit())
}

impl Sessions {
    pub fn new(store: Store) -> Sessions {
        Sessions { store }
    }

    /// A new session: its cookie value and what pages need of it.
    pub async fn create(&self) -> Result<(String, Session), StoreError> {
        let id = random_hex();
        let csrf = random_hex();
        let lifetime = chrono::TimeDelta::seconds(LIFETIME.as_secs() as i64);
        let expires = hermes_store::now() + lifetime;
        self.store
            .sessions()
            .add(&id_hash(&id), &csrf, expires, MAX_SESSIONS)
            .await?;
        Ok((id, Session { csrf }))
    }

    /// The live session with this cookie value.
    pub async fn get(&self, id: &str) -> Result<Option<Session>, StoreError> {
        if !well_formed(id) {
            return Ok(None);
        }
        let found = self.store.sessions().get(&id_hash(id)).await?;
        Ok(found.map(|s| Session { csrf: s.csrf }))
    }

    /// Sign out: the session is gone at once, on every node.
    pub async fn remove(&self, id: &str) -> Result<(), StoreError> {
        if well_formed(id) {
            self.store.sessions().remove(&id_hash(id)).await?;
        }
        Ok(())
    }

    /// The session named by the request's cookie, if it is live.
    pub async fn from_headers(
        &self,
        headers: &HeaderMap,
    ) -> Result<Option<(String, Session)>, StoreError> {
        let Some(id) = cookie(headers, COOKIE_NAME) else {
            return Ok(None);
        };
        Ok(self.get(id).await?.map(|s| (id.to_string(), s)))
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
pub(crate) fn set_cookie(id: &str, secure: bool) -> HeaderValue {
    let value = format!(
        "{COOKIE_NAME}={id}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}{}",
        LIFETIME.as_secs(),
        if secure { "; Secure" } else { "" }
    );
    // Hex and fixed words only: always a valid header value.
    HeaderValue::from_str(&value).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// `Set-Cookie` that makes the browser forget the session.
pub(crate) fn clear_cookie(secure: bool) -> HeaderValue {
    if secure {
        HeaderValue::from_static(
            "hermes_session=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0; Secure",
        )
    } else {
        HeaderValue::from_static("hermes_session=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0")
    }
}

/// Whether `given` is the session's CSRF token (constant time).
pub(crate) fn csrf_matches(session: &Session, given: &str) -> bool {
    token_matches(given, &session.csrf)
}

/// A secret (the API token, a CSRF token) compared in constant time in its content, so timing
/// does not reveal how much of a guess was right.
pub(crate) fn token_matches(given: &str, expected: &str) -> bool {
    use subtle::ConstantTimeEq;
    given.len() == expected.len() && bool::from(given.as_bytes().ct_eq(expected.as_bytes()))
}

/// Methods that only read.
pub(crate) fn is_safe(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// A request that changes something must not say it comes from another site: `Origin`, when
/// sent, names this very host (or `server.public_url`), and `Sec-Fetch-Site`, when sent, is
/// `same-origin` or `none` (typed by the user). Clients that are not browsers send neither.
pub(crate) fn same_origin(
    method: &Method,
    headers: &HeaderMap,
    public_url: &str,
) -> Result<(), ApiError> {
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
    fn tokens_compare_exactly() {
        assert!(token_matches("abc", "abc"));
        assert!(!token_matches("abd", "abc"));
        assert!(!token_matches("ab", "abc"));
        assert!(!token_matches("", "abc"));
    }

    #[tokio::test]
    async fn sessions_live_until_removed_and_only_their_hash_is_stored() {
        let store = Store::open_in_memory().await.unwrap();
        let s = Sessions::new(store.clone());
        let (id, session) = s.create().await.unwrap();
        assert_eq!(id.len(), 64);
        let found = s.get(&id).await.unwrap().map(|x| x.csrf);
        assert_eq!(found, Some(session.csrf.clone()));
        assert!(s.get(&id[..63]).await.unwrap().is_none());
        assert!(s.get("").await.unwrap().is_none());
        assert!(s.get(&id.to_uppercase()).await.unwrap().is_none());
        // The store has the hash, not the cookie value.
        assert!(store.sessions().get(&id).await.unwrap().is_none());
        assert!(store.sessions().get(&id_hash(&id)).await.unwrap().is_some());
        // Another handle on the same database (another node, a restart) knows it too.
        let other = Sessions::new(store.clone());
        assert!(other.get(&id).await.unwrap().is_some());
        other.remove(&id).await.unwrap();
        assert!(s.get(&id).await.unwrap().is_none());
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
