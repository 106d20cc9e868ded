//! Staying connected: the one loop every long-lived connection of the daemon runs in (the
//! mail inbox's IMAP session, each chat channel's intake), with its backoff.
//!
//! Owns: when to connect again and how long to wait. Must not: know what a connection is or
//! what its failures mean (the caller says how long to wait, or not to go on); record health
//! (the caller does, when it is told a connection ended).

use hermes_store::util::Backoff;
use std::future::Future;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Waits between connection attempts: 1 s doubling to 5 min, jittered.
pub(crate) const RECONNECT: Backoff =
    Backoff::new(Duration::from_secs(1), Duration::from_secs(300)).with_jitter();
/// A connection that lasted this long was healthy: the next failure starts the backoff over.
const HEALTHY: Duration = Duration::from_secs(60);

/// Keep a connection until `stop`: `connect` runs one connection until it ends — `Ok` when it
/// stopped cleanly (the loop ends), `Err` when it failed; then `ended` is told why and how many
/// failures came before in a row (a connection that lasted [`HEALTHY`] starts the count over),
/// and says how long to wait before the next — or `None`: stop for good (a setting only a
/// person can fix).
pub(crate) async fn keep_connected<T, E, C, F>(
    stop: &CancellationToken,
    mut connect: C,
    mut ended: impl FnMut(&E, u32) -> Option<Duration>,
) where
    C: FnMut() -> F,
    F: Future<Output = Result<T, E>>,
{
    let mut failures: u32 = 0;
    loop {
        let began = Instant::now();
        let e = tokio::select! {
            _ = stop.cancelled() => return,
            r = connect() => match r {
                Ok(_) => return,
                Err(e) => e,
            },
        };
        if began.elapsed() >= HEALTHY {
            failures = 0;
        }
        let Some(wait) = ended(&e, failures) else {
            return;
        };
        failures = failures.saturating_add(1);
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test(start_paused = true)]
    async fn failures_are_counted_until_told_to_stop() {
        let stop = CancellationToken::new();
        let attempts = AtomicU32::new(0);
        let mut seen = Vec::new();
        keep_connected(
            &stop,
            || async {
                attempts.fetch_add(1, Ordering::SeqCst);
                Err::<(), _>("refused")
            },
            |_, failures| {
                seen.push(failures);
                (failures < 2).then_some(Duration::from_secs(1))
            },
        )
        .await;
        assert_eq!(seen, [0, 1, 2]);
        assert_eq!(attempts.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_clean_end_ends_the_loop() {
        let stop = CancellationToken::new();
        let mut told = false;
        keep_connected(
            &stop,
            || async { Ok::<_, &str>(()) },
            |_, _| {
                told = true;
                None
            },
        )
        .await;
        assert!(!told, "a connection that stopped cleanly is no failure");
    }

    #[tokio::test(start_paused = true)]
    async fn stop_ends_a_connection_and_a_wait() {
        let stop = CancellationToken::new();
        stop.cancel();
        keep_connected(&stop, std::future::pending::<Result<(), &str>>, |_, _| {
            Some(Duration::from_secs(3600))
        })
        .await;
    }
}
