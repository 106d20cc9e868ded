//! Circuit breakers: after `threshold` consecutive health failures (timeouts, connection
//! failures, 5xx) a circuit opens for a cool-down, so a broken dependency stops costing model
//! steps. A circuit is a tool (`notify`) or a tool on one target (`web_fetch for example.org`).
//!
//! Owns: the failure counts and open-until times of every circuit, keyed by its name.
//! Must not: decide what counts as a failure (the registry does) or run tools.
//!
//! Time comes from `tokio::time::Instant`, so tests drive the cool-down with
//! `tokio::time::pause()` / `advance()`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// Where one tool's breaker stands at a given moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BreakerState {
    /// Calls go through.
    Closed,
    /// Refused until the instant given.
    Open(Instant),
    /// The cool-down is over: the next outcome decides (success closes, failure re-opens).
    HalfOpen,
}

#[derive(Debug, Default, Clone, Copy)]
struct Record {
    consecutive_failures: u32,
    /// Set when the breaker opened; stays set through the half-open phase so the first
    /// failure after the cool-down re-opens at once.
    opened_until: Option<Instant>,
}

/// The breakers of every tool in a registry. Cheap, lock-per-call; the lock is never held
/// across an await.
#[derive(Debug)]
pub(crate) struct Breakers {
    /// 0 disables breaking altogether.
    threshold: u32,
    cooldown: Duration,
    records: Mutex<HashMap<String, Record>>,
}

impl Breakers {
    pub(crate) fn new(threshold: u32, cooldown: Duration) -> Breakers {
        Breakers {
            threshold,
            cooldown,
            records: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn state(&self, tool: &str) -> BreakerState {
        let records = self.lock();
        match records.get(tool).and_then(|r| r.opened_until) {
            None => BreakerState::Closed,
            Some(until) if Instant::now() < until => BreakerState::Open(until),
            Some(_) => BreakerState::HalfOpen,
        }
    }

    pub(crate) fn is_open(&self, tool: &str) -> bool {
        matches!(self.state(tool), BreakerState::Open(_))
    }

    /// How many circuits are open now (half-open ones are not: they let a call through).
    pub(crate) fn open_count(&self) -> usize {
        let now = Instant::now();
        self.lock()
            .values()
            .filter(|r| r.opened_until.is_some_and(|until| now < until))
            .count()
    }

    pub(crate) fn record_success(&self, tool: &str) {
        self.lock().remove(tool);
    }

    /// Counts one execution failure; returns true when this failure opened the breaker.
    pub(crate) fn record_failure(&self, tool: &str) -> bool {
        if self.threshold == 0 {
            return false;
        }
        let now = Instant::now();
        let mut records = self.lock();
        let r = records.entry(tool.to_string()).or_default();
        r.consecutive_failures = r.consecutive_failures.saturating_add(1);
        let half_open = r.opened_until.is_some_and(|until| now >= until);
        if half_open || r.consecutive_failures >= self.threshold {
            r.opened_until = Some(now + self.cooldown);
            return true;
        }
        false
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Record>> {
        hermes_store::util::lock(&self.records)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn opens_at_threshold_and_half_opens_after_cooldown() {
        let b = Breakers::new(3, Duration::from_secs(60));
        assert!(!b.record_failure("t"));
        assert!(!b.record_failure("t"));
        assert_eq!(b.state("t"), BreakerState::Closed);
        assert!(b.record_failure("t"));
        assert!(b.is_open("t"));
        assert_eq!(b.state("other"), BreakerState::Closed);
        assert_eq!(b.open_count(), 1);

        tokio::time::advance(Duration::from_secs(59)).await;
        assert!(b.is_open("t"));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(b.state("t"), BreakerState::HalfOpen);
        assert_eq!(b.open_count(), 0, "half-open lets a call through");

        // A single failure while half-open re-opens it.
        assert!(b.record_failure("t"));
        assert!(b.is_open("t"));
        tokio::time::advance(Duration::from_secs(61)).await;
        assert_eq!(b.state("t"), BreakerState::HalfOpen);

        // A success closes it and resets the count.
        b.record_success("t");
        assert_eq!(b.state("t"), BreakerState::Closed);
        assert!(!b.record_failure("t"));
        assert_eq!(b.state("t"), BreakerState::Closed);
    }

    #[tokio::test(start_paused = true)]
    async fn a_success_resets_the_count() {
        let b = Breakers::new(2, Duration::from_secs(1));
        b.record_failure("t");
        b.record_success("t");
        assert!(!b.record_failure("t"));
        assert_eq!(b.state("t"), BreakerState::Closed);
    }

    #[tokio::test(start_paused = true)]
    async fn threshold_zero_never_opens() {
        let b = Breakers::new(0, Duration::from_secs(1));
        for _ in 0..10 {
            assert!(!b.record_failure("t"));
        }
        assert_eq!(b.state("t"), BreakerState::Closed);
    }
}
