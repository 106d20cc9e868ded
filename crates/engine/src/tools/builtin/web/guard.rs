//! The SSRF guard: which addresses the web tools may connect to.
//!
//! Owns: classifying IP addresses, refusing URLs whose scheme or host is not allowed, and the
//! DNS resolver plugged into the shared HTTP client. The resolver is where the check happens
//! for names: it resolves, refuses when ANY address is not allowed, and hands reqwest exactly
//! the addresses it checked — so there is no second lookup a DNS-rebinding name could answer
//! differently. IP-literal hosts never reach a resolver, so [`check_url`] checks them before a
//! request is built. Every redirect hop goes through both again.
//!
//! Policy: loopback, RFC 1918, CGNAT (100.64/10) and IPv6 ULA / site-local addresses are
//! "private": refused unless `tools.web_fetch.allow_private` is set. Link-local addresses
//! (169.254/16, fe80::/10 — where cloud metadata services such as 169.254.169.254 answer),
//! unspecified, broadcast, multicast, documentation, benchmarking and reserved ranges are
//! refused ALWAYS, even with `allow_private`: nothing legitimate lives there and a metadata
//! endpoint hands out credentials.
//!
//! Must not: send any traffic itself, or know about page content.

use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Where an address belongs, as far as fetching from it is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AddrClass {
    Public,
    /// Refused unless `allow_private`; the text names the range.
    Private(&'static str),
    /// Refused always; the text names the range.
    Forbidden(&'static str),
}

/// Why a host was refused. It travels through reqwest's error chain (from the resolver) and
/// is recognised there by downcasting, so it must stay a concrete `std::error::Error`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refusal {
    #[error(
        "refused to fetch from {host}: {ip} is a private address ({why}); web tools only reach public addresses unless tools.web_fetch.allow_private is set to true in settings.yaml"
    )]
    Private {
        host: String,
        ip: IpAddr,
        why: &'static str,
    },
    #[error(
        "refused to fetch from {host}: {ip} is a {why} address, which web tools never fetch (not even with tools.web_fetch.allow_private)"
    )]
    Forbidden {
        host: String,
        ip: IpAddr,
        why: &'static str,
    },
    #[error("refused to fetch {url}: only http and https URLs can be fetched")]
    Scheme { url: String },
    #[error("refused to fetch {url}: the URL has no host")]
    NoHost { url: String },
}

pub(crate) fn classify(ip: IpAddr) -> AddrClass {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn in_v4(ip: Ipv4Addr, net: [u8; 4], prefix: u32) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    };
    (u32::from(ip) & mask) == (u32::from(Ipv4Addr::from(net)) & mask)
}

fn classify_v4(ip: Ipv4Addr) -> AddrClass {
    use AddrClass::{Forbidden, Private, Public};
    const RANGES: &[([u8; 4], u32, AddrClass)] = &[
        ([0, 0, 0, 0], 8, Forbidden("unspecified ('this network')")),
        ([127, 0, 0, 0], 8, Private("loopback")),
        ([10, 0, 0, 0], 8, Private("RFC 1918 private network")),
        ([172, 16, 0, 0], 12, Private("RFC 1918 private network")),
        ([192, 168, 0, 0], 16, Private("RFC 1918 private network")),
        // Inside carrier-grade NAT, so before it: Alibaba Cloud's metadata service.
        (
            [100, 100, 100, 200],
            32,
            Forbidden("cloud metadata (Alibaba Cloud)"),
        ),
        ([100, 64, 0, 0], 10, Private("carrier-grade NAT")),
        (
            [169, 254, 0, 0],
            16,
            Forbidden("link-local (cloud metadata)"),
        ),
        ([192, 0, 0, 0], 24, Forbidden("IETF protocol assignment")),
        ([192, 0, 2, 0], 24, Forbidden("documentation")),
        ([198, 51, 100, 0], 24, Forbidden("documentation")),
        ([203, 0, 113, 0], 24, Forbidden("documentation")),
        ([198, 18, 0, 0], 15, Forbidden("benchmarking")),
        ([224, 0, 0, 0], 4, Forbidden("multicast")),
        ([255, 255, 255, 255], 32, Forbidden("broadcast")),
        ([240, 0, 0, 0], 4, Forbidden("reserved")),
    ];
    RANGES
        .iter()
        .find(|(net, prefix, _)| in_v4(ip, *net, *prefix))
        .map_or(Public, |(_, _, class)| *class)
}

fn in_v6(ip: Ipv6Addr, net: Ipv6Addr, prefix: u32) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u128::MAX << (128 - prefix)
    };
    (u128::from(ip) & mask) == (u128::from(net) & mask)
}

/// IPv6 ranges that are not public targets, checked after the forms that embed IPv4: the
/// network's first three 16-bit groups, the prefix length, the class.
const V6_RANGES: &[([u16; 3], u32, AddrClass)] = {
    use AddrClass::{Forbidden, Private};
    &[
        ([0xfc00, 0, 0], 7, Private("unique local (ULA)")),
        ([0xfec0, 0, 0], 10, Private("site-local")),
        ([0x64, 0xff9b, 1], 48, Private("local-use NAT64")),
        ([0xfe80, 0, 0], 10, Forbidden("link-local")),
        ([0xff00, 0, 0], 8, Forbidden("multicast")),
        ([0x100, 0, 0], 64, Forbidden("discard-only")),
        ([0x2001, 0xdb8, 0], 32, Forbidden("documentation")),
        ([0x3fff, 0, 0], 20, Forbidden("documentation")),
        // Teredo, ORCHID and other IETF protocol assignments.
        ([0x2001, 0, 0], 23, Forbidden("IETF protocol assignment")),
    ]
};

fn classify_v6(ip: Ipv6Addr) -> AddrClass {
    use AddrClass::{Forbidden, Private, Public};
    let bits = u128::from(ip);
    if ip.is_unspecified() {
        return Forbidden("unspecified");
    }
    if ip.is_loopback() {
        return Private("loopback");
    }
    // Forms that carry an IPv4 address inside are judged by that address, so
    // ::ffff:127.0.0.1 or 64:ff9b::a9fe:a9fe cannot smuggle a private target through.
    if let Some(v4) = ip.to_ipv4_mapped() {
        return classify_v4(v4);
    }
    if bits >> 32 == 0 {
        // Deprecated IPv4-compatible form ::a.b.c.d.
        return classify_v4(Ipv4Addr::from(bits as u32));
    }
    if in_v6(ip, Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96) {
        return classify_v4(Ipv4Addr::from(bits as u32));
    }
    if in_v6(ip, Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0), 16) {
        return classify_v4(Ipv4Addr::from((bits >> 80) as u32));
    }
    // AWS's IPv6 instance-metadata endpoint sits inside the ULA range.
    if ip == Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254) {
        return Forbidden("cloud metadata");
    }
    if let Some((_, _, class)) = V6_RANGES
        .iter()
        .find(|([a, b, c], prefix, _)| in_v6(ip, Ipv6Addr::new(*a, *b, *c, 0, 0, 0, 0, 0), *prefix))
    {
        return *class;
    }
    // Only 2000::/3 is allocated as global unicast; anything else is not a real target.
    if in_v6(ip, Ipv6Addr::new(0x2000, 0, 0, 0, 0, 0, 0, 0), 3) {
        Public
    } else {
        Forbidden("reserved")
    }
}

/// Refuse `ip` (reached as `host`) unless policy allows it.
pub(crate) fn check_ip(host: &str, ip: IpAddr, allow_private: bool) -> Result<(), Refusal> {
    match classify(ip) {
        AddrClass::Public => Ok(()),
        AddrClass::Private(_) if allow_private => Ok(()),
        AddrClass::Private(why) => Err(Refusal::Private {
            host: host.to_string(),
            ip,
            why,
        }),
        AddrClass::Forbidden(why) => Err(Refusal::Forbidden {
            host: host.to_string(),
            ip,
            why,
        }),
    }
}

/// `localhost` and every `*.localhost` name are loopback by definition (RFC 6761), whatever
/// a resolver says — and some resolvers say nothing for `*.localhost`.
fn is_localhost_name(host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    host == "localhost" || host.ends_with(".localhost")
}

/// The checks that need no DNS: the scheme, the presence of a host, IP-literal hosts and
/// localhost names. Names are checked again, with their addresses, by [`GuardResolver`].
pub(crate) fn check_url(url: &Url, allow_private: bool) -> Result<(), Refusal> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(Refusal::Scheme {
            url: url.to_string(),
        });
    }
    match url.host() {
        None => Err(Refusal::NoHost {
            url: url.to_string(),
        }),
        Some(url::Host::Ipv4(ip)) => check_ip(&ip.to_string(), IpAddr::V4(ip), allow_private),
        Some(url::Host::Ipv6(ip)) => check_ip(&format!("[{ip}]"), IpAddr::V6(ip), allow_private),
        Some(url::Host::Domain(name)) if is_localhost_name(name) => {
            check_ip(name, IpAddr::V4(Ipv4Addr::LOCALHOST), allow_private)
        }
        Some(url::Host::Domain(_)) => Ok(()),
    }
}

/// Resolve `host` and return its addresses only when every one of them is allowed. Refusing
/// on ANY bad address (not filtering it out) keeps a name that mixes a public and a private
/// address from being used to probe the private one.
pub(crate) async fn resolve_checked(
    host: &str,
    allow_private: bool,
) -> Result<Vec<SocketAddr>, ResolveError> {
    if is_localhost_name(host) {
        check_ip(host, IpAddr::V4(Ipv4Addr::LOCALHOST), allow_private)?;
    }
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, 0))
        .await
        .map_err(|source| ResolveError::Lookup {
            host: host.to_string(),
            source,
        })?
        .collect();
    if addrs.is_empty() {
        return Err(ResolveError::NoAddress {
            host: host.to_string(),
        });
    }
    for addr in &addrs {
        check_ip(host, addr.ip(), allow_private)?;
    }
    Ok(addrs)
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ResolveError {
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error("cannot resolve {host}: {source} (check the host name)")]
    Lookup {
        host: String,
        source: std::io::Error,
    },
    #[error("{host} resolves to no address (check the host name)")]
    NoAddress { host: String },
}

/// The resolver of a guarded client: every name it resolves is checked, and the client
/// connects to exactly the addresses returned here.
#[derive(Debug, Clone, Default)]
pub(crate) struct GuardResolver {
    pub allow_private: bool,
    /// A host a person named in the config (a manifest's URL): it may be private. Every other
    /// host follows `allow_private`.
    pub named_host: Option<String>,
}

impl GuardResolver {
    fn allows_private(&self, host: &str) -> bool {
        self.allow_private
            || self
                .named_host
                .as_deref()
                .is_some_and(|named| named.eq_ignore_ascii_case(host.trim_end_matches('.')))
    }
}

/// Most redirect hops a manifest tool's request follows.
const MAX_NAMED_HOST_REDIRECTS: usize = 5;

/// A client for a tool whose URL a person wrote (a manifest): its own host may be private —
/// the person chose it — but every redirect, and every other host, is checked like a web fetch
/// (names at resolution, IP literals per hop), so a redirect cannot lead into the private
/// network or to cloud metadata. No proxy: it would resolve names out of the guard's sight.
pub(crate) fn named_host_client(
    url: &Url,
    connect_timeout: std::time::Duration,
) -> reqwest::Result<reqwest::Client> {
    let named = url
        .host_str()
        .map(|h| h.trim_matches(['[', ']']).to_string());
    let resolver = GuardResolver {
        allow_private: false,
        named_host: named.clone(),
    };
    let redirects = reqwest::redirect::Policy::custom(move |attempt| {
        if attempt.previous().len() >= MAX_NAMED_HOST_REDIRECTS {
            return attempt.error(format!("more than {MAX_NAMED_HOST_REDIRECTS} redirects"));
        }
        let next = attempt.url();
        let own = next
            .host_str()
            .map(|h| h.trim_matches(['[', ']']))
            .zip(named.as_deref())
            .is_some_and(|(h, n)| h.eq_ignore_ascii_case(n));
        match check_url(next, own) {
            Ok(()) => attempt.follow(),
            Err(refusal) => attempt.error(refusal),
        }
    });
    reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .redirect(redirects)
        .no_proxy()
        .dns_resolver(resolver)
        .user_agent(concat!("hermes-agent/", env!("CARGO_PKG_VERSION")))
        .build()
}

impl Resolve for GuardResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow_private = self.allows_private(name.as_str());
        let host = name.as_str().to_string();
        Box::pin(async move {
            match resolve_checked(&host, allow_private).await {
                Ok(addrs) => Ok(Box::new(addrs.into_iter()) as Addrs),
                // Box the bare Refusal so the fetcher can find it in reqwest's error chain.
                Err(ResolveError::Refused(refusal)) => Err(Box::new(refusal) as _),
                Err(other) => Err(Box::new(other) as _),
            }
        })
    }
}

/// The refusal somewhere in an error's source chain, if the guard caused the error.
pub(crate) fn find_refusal<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a Refusal> {
    hermes_store::util::find_cause::<Refusal>(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    enum Kind {
        Private,
        Forbidden,
        Public,
    }

    fn kind(s: &str) -> Kind {
        match classify(s.parse().expect("test address parses")) {
            AddrClass::Private(_) => Kind::Private,
            AddrClass::Forbidden(_) => Kind::Forbidden,
            AddrClass::Public => Kind::Public,
        }
    }

    #[rustfmt::skip]
    const RANGES: &[(Kind, &[&str])] = &[
        (Kind::Private, &["127.0.0.1", "127.255.0.9", "10.0.0.1", "10.255.255.255", "172.16.0.1", "172.31.255.254", "192.168.1.1", "100.64.0.1", "100.127.255.255"]),
        (Kind::Forbidden, &["0.0.0.0", "0.1.2.3", "169.254.169.254", "169.254.0.1", "255.255.255.255", "224.0.0.1", "239.1.1.1", "192.0.2.5", "198.51.100.7", "203.0.113.9", "198.18.0.1", "240.0.0.1", "192.0.0.170"]),
        (Kind::Public, &["8.8.8.8", "1.1.1.1", "172.15.255.255", "172.32.0.0", "100.63.255.255", "100.128.0.0", "169.253.1.1", "192.169.0.1", "93.184.216.34"]),
        (Kind::Private, &["::1", "fc00::1", "fd12:3456::1", "fec0::1", "::ffff:127.0.0.1", "::ffff:10.1.2.3", "::127.0.0.1", "64:ff9b::10.0.0.1", "2002:c0a8:0101::1"]),
        (Kind::Forbidden, &["::", "fe80::1", "febf::1", "ff02::1", "2001:db8::1", "::ffff:169.254.169.254", "64:ff9b::a9fe:a9fe", "fd00:ec2::254", "2001::1", "100::1", "4000::1"]),
        (Kind::Public, &["2606:4700::1111", "2a00:1450::1", "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:0808:0808::1"]),
    ];

    #[test]
    fn address_ranges() {
        for (expected, addrs) in RANGES {
            for a in *addrs {
                assert_eq!(&kind(a), expected, "{a}");
            }
        }
    }

    #[test]
    fn allow_private_lifts_only_private_ranges() {
        let lo: IpAddr = "127.0.0.1".parse().expect("literal");
        let meta: IpAddr = "169.254.169.254".parse().expect("literal");
        assert!(check_ip("h", lo, true).is_ok());
        assert!(matches!(
            check_ip("h", lo, false),
            Err(Refusal::Private { .. })
        ));
        assert!(matches!(
            check_ip("h", meta, true),
            Err(Refusal::Forbidden { .. })
        ));
        let msg = check_ip("h", lo, false).expect_err("refused").to_string();
        assert!(
            msg.contains("private") && msg.contains("tools.web_fetch.allow_private"),
            "{msg}"
        );
    }

    #[test]
    fn urls_checked_without_dns() {
        let check = |u: &str| check_url(&Url::parse(u).expect("test url"), false);
        for u in ["ftp://example.com/", "file:///etc/passwd"] {
            assert!(matches!(check(u), Err(Refusal::Scheme { .. })), "{u}");
        }
        // The WHATWG parser normalises odd IPv4 spellings; the guard sees the real address.
        for u in [
            "http://127.0.0.1/",
            "http://0x7f.1/",
            "http://2130706433/",
            "http://[::ffff:7f00:1]/",
            "http://LOCALHOST./",
            "http://shop.localhost/",
        ] {
            assert!(matches!(check(u), Err(Refusal::Private { .. })), "{u}");
        }
        assert!(check("https://example.com/").is_ok());
    }

    #[tokio::test]
    async fn resolver_refuses_names_that_resolve_to_loopback() {
        // The name rule would catch "localhost" first; go through the lookup alone to show
        // the address check itself refuses what the system resolver returns.
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host(("localhost", 0))
            .await
            .expect("localhost resolves on any test machine")
            .collect();
        assert!(!addrs.is_empty());
        for addr in &addrs {
            assert!(check_ip("localhost", addr.ip(), false).is_err());
        }
        let err = GuardResolver::default()
            .resolve("localhost".parse().expect("valid name"))
            .await
            .err()
            .expect("refused");
        assert!(matches!(find_refusal(&*err), Some(Refusal::Private { .. })));
        let ok = GuardResolver {
            allow_private: true,
            named_host: None,
        }
        .resolve("localhost".parse().expect("valid name"))
        .await
        .expect("allowed with allow_private");
        assert!(ok.count() > 0);
    }
}
