//! The API's connections: accepted up to a cap, each read through a [`HeadGuard`] and served by
//! hyper's HTTP/1 with a header timeout (the guard's) and an idle timeout (hyper's header-read
//! timer, which runs while a kept-alive connection waits for its next request). Every request
//! carries its peer's address (`ConnectInfo<SocketAddr>`) for the sign-in throttle.
//!
//! Why not `axum::serve`: it has no timeouts and no connection cap, so idle or half-sent
//! connections pile up until the process runs out of file descriptors and nothing — not even
//! `/healthz` — is answered. Here, at the cap, accepting pauses: new connections wait in the
//! kernel's queue (taking none of the daemon's descriptors) until one closes, and the timeouts
//! make sure one does.
//!
//! Owns: accepting, the cap, per-connection timeouts and graceful shutdown.
//! Must not: look at requests (the router's) or at the bytes (the guard's).

use super::wire::HeadGuard;
use axum::body::Body;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

/// How long connections may take, and how many there may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// A request head must be complete within this of the connection's start (its first
    /// request) or of the head's first byte (later ones).
    pub header_timeout: Duration,
    /// A kept-alive connection waiting this long for its next request is closed.
    pub idle_timeout: Duration,
    /// Connections served at once; more wait until one closes.
    pub max_connections: usize,
}

/// The cap when `server.max_connections` is 0 and the open-file limit is high or unlimited: a
/// personal daemon has a handful of clients.
const AUTO_MAX_CONNECTIONS: u64 = 4096;

/// Header lines hyper takes (its default, named so the error message can say it).
const MAX_HEADERS: usize = 100;

/// After a failed accept (out of file descriptors), the pause before the next.
const ACCEPT_RETRY: Duration = Duration::from_millis(250);

/// How often the same warning (cap reached, accept failing) may be logged.
const WARN_EVERY: Duration = Duration::from_secs(60);

impl Limits {
    /// The limits of `server.*` in this process: the cap bounded by this process's open-file
    /// limit. Says at start what it derived, and warns when the setting asks for more.
    pub fn for_process(s: &hermes_config::ServerSettings) -> Limits {
        let files = open_file_limit();
        let limits = Limits::from_settings(s, files);
        let files_text = files.map_or("unlimited".to_string(), |f| f.to_string());
        if s.max_connections > limits.max_connections as u64 {
            tracing::warn!(
                "server.max_connections is {} but the open-file limit is {files_text}: at most {} connections (raise the limit, e.g. LimitNOFILE= in the systemd unit)",
                s.max_connections,
                limits.max_connections
            );
        }
        tracing::info!(
            "HTTP: at most {} connections at once (open-file limit {files_text}), header timeout {} s, idle timeout {} s",
            limits.max_connections,
            s.header_timeout_s,
            s.idle_timeout_s
        );
        limits
    }

    /// The limits of `server.*`, the cap bounded by half the open-file limit `files`.
    pub fn from_settings(s: &hermes_config::ServerSettings, files: Option<u64>) -> Limits {
        Limits {
            header_timeout: Duration::from_secs(s.header_timeout_s),
            idle_timeout: Duration::from_secs(s.idle_timeout_s),
            max_connections: connection_cap(s.max_connections, files),
        }
    }
}

/// The process's soft limit on open files (`ulimit -n`, systemd's `LimitNOFILE=`); `None` when
/// unlimited.
pub(crate) fn open_file_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}

/// Half the open-file limit: the other half is for the database, the index, MCP servers'
/// pipes and outgoing connections. `setting` 0 means that half (at most 4096); a larger
/// setting is cut to it.
pub(crate) fn connection_cap(setting: u64, files: Option<u64>) -> usize {
    let half = files.map_or(u64::MAX, |f| (f / 2).max(1));
    let cap = match setting {
        0 => half.min(AUTO_MAX_CONNECTIONS),
        n => n.min(half),
    };
    usize::try_from(cap)
        .unwrap_or(usize::MAX)
        .clamp(1, Semaphore::MAX_PERMITS)
}

/// A warning said at most once per [`WARN_EVERY`]: one line per burst, not per event.
#[derive(Default)]
struct Once {
    last: Option<Instant>,
}

impl Once {
    fn due(&mut self) -> bool {
        let due = self.last.is_none_or(|t| t.elapsed() >= WARN_EVERY);
        if due {
            self.last = Some(Instant::now());
        }
        due
    }
}

/// Serve the API and the dashboard on `listener` within `limits` (the daemon's:
/// [`Limits::for_process`]; tests use short timeouts) until `shutdown` completes; then stop
/// accepting, let in-flight requests finish and close idle connections.
pub async fn serve(
    listener: TcpListener,
    state: super::ApiState,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = super::router(state);
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        // hyper's header timer runs whenever it waits for a head, between requests too: it is
        // the idle timeout. The guard times the head itself, from its first byte.
        .header_read_timeout(limits.idle_timeout)
        .max_headers(MAX_HEADERS);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let stop = CancellationToken::new();
    let conns = TaskTracker::new();
    let mut shutdown = pin!(shutdown);
    let (mut full, mut failing) = (Once::default(), Once::default());
    loop {
        let Some(slot) =
            free_slot(&slots, limits.max_connections, &mut full, shutdown.as_mut()).await
        else {
            break;
        };
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(c) => c,
                // The peer gave up before we took it: nothing to do.
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    if failing.due() {
                        tracing::warn!(error = %e, "cannot accept connections (out of file descriptors?); retrying");
                    }
                    tokio::select! {
                        () = tokio::time::sleep(ACCEPT_RETRY) => continue,
                        () = &mut shutdown => break,
                    }
                }
            },
            () = &mut shutdown => break,
        };
        let app = app.clone();
        let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
            let mut req = req.map(Body::new);
            req.extensions_mut().insert(ConnectInfo(peer));
            app.clone().oneshot(req)
        });
        let io = TokioIo::new(HeadGuard::new(tcp, limits.header_timeout));
        let conn = http.serve_connection(io, service);
        let stop = stop.clone();
        conns.spawn(async move {
            let _slot = slot;
            let mut conn = pin!(conn);
            tokio::select! {
                done = conn.as_mut() => {
                    if let Err(e) = done {
                        tracing::trace!(error = %e, %peer, "connection ended with an error");
                    }
                    return;
                }
                () = stop.cancelled() => {}
            }
            // Idle connections close now, in-flight requests finish first.
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        });
    }
    stop.cancel();
    conns.close();
    conns.wait().await;
    Ok(())
}

/// A connection slot, at once or when one closes (said once per burst); `None`: shutting down.
async fn free_slot(
    slots: &Arc<Semaphore>,
    cap: usize,
    full: &mut Once,
    shutdown: Pin<&mut impl Future<Output = ()>>,
) -> Option<OwnedSemaphorePermit> {
    if let Ok(slot) = slots.clone().try_acquire_owned() {
        return Some(slot);
    }
    if full.due() {
        tracing::warn!(
            "{cap} connections are open (server.max_connections); new connections wait until one closes"
        );
    }
    tokio::select! {
        slot = slots.clone().acquire_owned() => slot.ok(),
        () = shutdown => None,
    }
}

/// Errors of one connection that was reset before it was accepted; the listener is fine.
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_is_at_most_half_the_open_file_limit() {
        assert_eq!(connection_cap(0, Some(256)), 128);
        assert_eq!(connection_cap(0, Some(1024)), 512);
        assert_eq!(connection_cap(0, Some(1_048_576)), 4096);
        assert_eq!(connection_cap(0, None), 4096);
        assert_eq!(connection_cap(50, Some(1024)), 50);
        assert_eq!(connection_cap(5000, Some(1024)), 512);
        assert_eq!(connection_cap(5000, None), 5000);
        assert_eq!(connection_cap(0, Some(1)), 1);
    }

    #[test]
    fn a_warning_is_due_once_per_burst() {
        let mut once = Once::default();
        assert!(once.due());
        assert!(!once.due());
        once.last = Instant::now().checked_sub(WARN_EVERY);
        assert!(once.due());
    }

    #[test]
    fn this_process_has_an_open_file_limit() {
        // Whatever it is, the cap derived from it leaves room.
        let cap = connection_cap(0, open_file_limit());
        assert!(open_file_limit().is_none_or(|f| (cap as u64) <= f / 2 || f < 2));
    }
}
