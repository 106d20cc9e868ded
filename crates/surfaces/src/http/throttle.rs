//! The lockout after repeated wrong tokens: per client address, `server.max_login_failures`
//! wrong tokens (a bearer token on the API or the `/login` form, counted together) within
//! `server.login_window_s` lock the address out for that window. While locked out, every token
//! attempt from it is refused with 429 and `Retry-After` before the token is compared — the
//! right token too, so a guess that happens to be right during a lockout tells the guesser
//! nothing. A right token while not locked out forgives the address's earlier mistakes.
//!
//! Addresses: IPv4 as is, IPv6 by its /64 (one host usually holds a whole /64). Behind a
//! reverse proxy every client has the proxy's address: a lockout then locks everyone out
//! for the window (README says so). A request with no peer address — only the router driven
//! in-process — is not counted. Sessions are not counted: their ids are 256-bit random values.
//!
//! The log gets one line when an address starts failing and one when it is locked out, not one
//! per guess. The table is bounded ([`MAX_CLIENTS`]): when full, entries whose window has
//! passed go first, then the oldest.
//!
//! Must not: compare tokens (the callers do, in constant time) or keep anything else about a
//! client.

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::header::RETRY_AFTER;
use axum::http::request::Parts;
use axum::http::{Extensions, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use hermes_store::util::lock;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Addresses tracked at once (about 100 bytes each).
pub(crate) const MAX_CLIENTS: usize = 4096;

/// The peer address of a request that came over a socket (`None` when the router is driven
/// in-process), as set by `conn`.
pub(crate) struct Peer(pub Option<IpAddr>);

impl Peer {
    pub(crate) fn of(extensions: &Extensions) -> Peer {
        Peer(
            extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|c| c.0.ip()),
        )
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Peer {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Peer, Self::Rejection> {
        Ok(Peer::of(&parts.extensions))
    }
}

/// Where a token attempt came in, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Door {
    Api,
    SignIn,
}

impl Door {
    fn name(self) -> &'static str {
        match self {
            Door::Api => "the API (bearer token)",
            Door::SignIn => "the dashboard sign-in",
        }
    }
}

/// A client, as counted: an IPv4 address or an IPv6 /64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Client(IpAddr);

impl Client {
    pub fn of(ip: IpAddr) -> Client {
        match ip.to_canonical() {
            IpAddr::V6(v6) => {
                let net = u128::from(v6) & !((1u128 << 64) - 1);
                Client(IpAddr::V6(net.into()))
            }
            v4 => Client(v4),
        }
    }
}

impl std::fmt::Display for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            IpAddr::V6(net) => write!(f, "{net}/64"),
            v4 => write!(f, "{v4}"),
        }
    }
}

/// An address that is locked out, and for how much longer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Locked {
    pub retry_after: Duration,
}

impl Locked {
    /// Whole seconds to wait, rounded up (as `Retry-After` wants).
    pub fn seconds(self) -> u64 {
        let d = self.retry_after;
        d.as_secs() + u64::from(d.subsec_nanos() > 0)
    }

    /// The API's answer: 429 with `Retry-After` and the JSON error.
    pub(crate) fn api_response(self) -> Response {
        let secs = self.seconds();
        let mut resp = super::ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_attempts",
            format!(
                "too many wrong tokens from your address; try again in {secs} s with the right `Authorization: Bearer <server.token>`"
            ),
        )
        .into_response();
        resp.headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from(secs));
        resp
    }
}

struct Entry {
    /// The first failure of the current window.
    since: Instant,
    failures: u32,
    locked_until: Option<Instant>,
}

impl Entry {
    /// Neither counting nor locked any more at `now`.
    fn stale(&self, now: Instant, window: Duration) -> bool {
        match self.locked_until {
            Some(until) => now >= until,
            None => now.duration_since(self.since) >= window,
        }
    }
}

/// The failures of this process, per client: a cheap-to-clone handle.
#[derive(Clone)]
pub struct LoginThrottle {
    max_failures: u32,
    window: Duration,
    entries: Arc<Mutex<HashMap<Client, Entry>>>,
}

impl LoginThrottle {
    pub fn new(max_failures: u32, window: Duration) -> LoginThrottle {
        LoginThrottle {
            max_failures: max_failures.max(1),
            window,
            entries: Arc::default(),
        }
    }

    /// From `server.max_login_failures` and `server.login_window_s`.
    pub fn from_settings(s: &hermes_config::ServerSettings) -> LoginThrottle {
        LoginThrottle::new(s.max_login_failures, Duration::from_secs(s.login_window_s))
    }

    /// Before a token is compared: `Err` while `ip` is locked out.
    pub fn check(&self, ip: Option<IpAddr>) -> Result<(), Locked> {
        self.check_at(ip, Instant::now())
    }

    /// A wrong token from `ip`.
    pub fn failed(&self, ip: Option<IpAddr>, door: Door) {
        self.failed_at(ip, door, Instant::now());
    }

    /// The right token from `ip` (not locked out): its earlier mistakes are forgiven.
    pub fn succeeded(&self, ip: Option<IpAddr>) {
        if let Some(ip) = ip {
            let mut entries = lock(&self.entries);
            if !entries.is_empty() {
                entries.remove(&Client::of(ip));
            }
        }
    }

    fn check_at(&self, ip: Option<IpAddr>, now: Instant) -> Result<(), Locked> {
        let Some(ip) = ip else { return Ok(()) };
        let entries = lock(&self.entries);
        match entries.get(&Client::of(ip)).and_then(|e| e.locked_until) {
            Some(until) if until > now => Err(Locked {
                retry_after: until - now,
            }),
            _ => Ok(()),
        }
    }

    fn failed_at(&self, ip: Option<IpAddr>, door: Door, now: Instant) {
        let Some(ip) = ip else { return };
        let client = Client::of(ip);
        let window = self.window;
        let mut entries = lock(&self.entries);
        if !entries.contains_key(&client) && entries.len() >= MAX_CLIENTS {
            evict(&mut entries, now, window);
        }
        let e = entries.entry(client).or_insert(Entry {
            since: now,
            failures: 0,
            locked_until: None,
        });
        if e.stale(now, window) {
            *e = Entry {
                since: now,
                failures: 0,
                locked_until: None,
            };
        }
        if e.locked_until.is_some() {
            // Callers check first; a failure racing a lockout is already counted.
            return;
        }
        e.failures += 1;
        let secs = window.as_secs();
        if e.failures == 1 {
            tracing::warn!(
                "a wrong token from {client} at {}; more from it in the next {secs} s are counted, not logged",
                door.name()
            );
        }
        if e.failures >= self.max_failures {
            e.locked_until = Some(now + window);
            tracing::warn!(
                "{} wrong tokens from {client} within {secs} s: its token attempts are locked out (429) for {secs} s, even with the right token",
                e.failures
            );
        }
    }
}

/// Make room for one more entry: drop those whose window has passed, else the oldest.
fn evict(entries: &mut HashMap<Client, Entry>, now: Instant, window: Duration) {
    entries.retain(|_, e| !e.stale(now, window));
    if entries.len() >= MAX_CLIENTS
        && let Some(oldest) = entries.iter().min_by_key(|(_, e)| e.since).map(|(c, _)| *c)
    {
        entries.remove(&oldest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn ip(last: u8) -> Option<IpAddr> {
        Some(IpAddr::V4(Ipv4Addr::new(192, 0, 2, last)))
    }

    const MINUTE: Duration = Duration::from_secs(60);

    #[test]
    fn ten_failures_lock_the_address_for_the_window() {
        let t = LoginThrottle::new(10, MINUTE);
        let start = Instant::now();
        for i in 0..10 {
            assert!(t.check_at(ip(1), start).is_ok(), "attempt {i}");
            t.failed_at(ip(1), Door::Api, start);
        }
        let locked = t.check_at(ip(1), start + Duration::from_millis(1500));
        assert_eq!(locked.map_err(Locked::seconds), Err(59));
        // Other addresses are not affected; no address is not counted.
        assert!(t.check_at(ip(2), start).is_ok());
        t.failed_at(None, Door::Api, start);
        assert!(t.check_at(None, start).is_ok());
        // The window passes: a fresh start.
        let later = start + MINUTE;
        assert!(t.check_at(ip(1), later).is_ok());
        t.failed_at(ip(1), Door::SignIn, later);
        assert!(t.check_at(ip(1), later).is_ok());
    }

    #[test]
    fn failures_spread_beyond_the_window_do_not_lock() {
        let t = LoginThrottle::new(3, MINUTE);
        let start = Instant::now();
        t.failed_at(ip(1), Door::Api, start);
        t.failed_at(ip(1), Door::Api, start + Duration::from_secs(30));
        t.failed_at(ip(1), Door::Api, start + Duration::from_secs(61));
        assert!(t.check_at(ip(1), start + Duration::from_secs(62)).is_ok());
    }

    #[test]
    fn the_right_token_forgives_earlier_mistakes() {
        let t = LoginThrottle::new(3, MINUTE);
        let now = Instant::now();
        t.failed_at(ip(1), Door::SignIn, now);
        t.failed_at(ip(1), Door::SignIn, now);
        t.succeeded(ip(1));
        t.failed_at(ip(1), Door::SignIn, now);
        t.failed_at(ip(1), Door::SignIn, now);
        assert!(t.check_at(ip(1), now).is_ok());
    }

    #[test]
    fn ipv6_counts_by_its_64_and_mapped_ipv4_as_ipv4() {
        let a: IpAddr = "2001:db8:1:2::1"
            .parse()
            .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
        let b: IpAddr = "2001:db8:1:2:ffff::9"
            .parse()
            .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
        let c: IpAddr = "2001:db8:1:3::1"
            .parse()
            .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_eq!(Client::of(a), Client::of(b));
        assert_ne!(Client::of(a), Client::of(c));
        assert_eq!(Client::of(a).to_string(), "2001:db8:1:2::/64");
        let mapped: IpAddr = "::ffff:192.0.2.7"
            .parse()
            .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_eq!(
            Client::of(mapped),
            Client::of(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7)))
        );
    }

    #[test]
    fn the_table_stays_bounded_and_drops_stale_entries_first() {
        let t = LoginThrottle::new(2, MINUTE);
        let now = Instant::now();
        let addr = |n: u32| Some(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + n)));
        for i in 0..(MAX_CLIENTS as u32 + 100) {
            t.failed_at(addr(i), Door::Api, now);
        }
        assert_eq!(lock(&t.entries).len(), MAX_CLIENTS);
        // Once their window has passed, they all make room at once.
        t.failed_at(ip(9), Door::Api, now + MINUTE);
        assert_eq!(lock(&t.entries).len(), 1);
    }
}
