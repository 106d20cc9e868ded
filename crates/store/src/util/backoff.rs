//! The one backoff arithmetic: `base · 2^n`, capped, optionally with "equal jitter".

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// Waits between attempts. The model gateway, the tool registry and the outbox sender each
/// hold one; they differ only in their numbers and whether they jitter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The wait before the first retry.
    pub base: Duration,
    /// No wait is longer than this.
    pub max: Duration,
    /// Half of each wait fixed, half random, so callers that failed together do not all come
    /// back at the same instant. Off where callers are few (one person's notices).
    pub jitter: bool,
}

impl Backoff {
    pub const fn new(base: Duration, max: Duration) -> Backoff {
        Backoff {
            base,
            max,
            jitter: false,
        }
    }

    pub const fn with_jitter(mut self) -> Backoff {
        self.jitter = true;
        self
    }

    /// The wait before retry number `retry` (0 = the first retry).
    pub fn delay(&self, retry: u32) -> Duration {
        let factor = 1u32.checked_shl(retry.min(31)).unwrap_or(u32::MAX);
        let exp = self
            .base
            .checked_mul(factor)
            .unwrap_or(self.max)
            .min(self.max);
        if !self.jitter {
            return exp;
        }
        let half = exp / 2;
        (half + half.mul_f64(random_unit())).min(self.max)
    }
}

/// How often a failed attempt is tried again, and how long to wait before each retry. The
/// model gateway and the outbox sender each have one (with their own numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts after the first; 0 never retries.
    pub max_retries: u32,
    pub backoff: Backoff,
}

impl RetryPolicy {
    /// The wait before retry number `retry` (0 = the first retry).
    pub fn delay(&self, retry: u32) -> Duration {
        self.backoff.delay(retry)
    }
}

/// A number in [0, 1) from the standard library's randomly keyed hasher (each `RandomState`
/// gets fresh keys); jitter needs no more, so no extra crate.
fn random_unit() -> f64 {
    let mut h = RandomState::new().build_hasher();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    h.write_u128(nanos);
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap() {
        let b = Backoff::new(Duration::from_secs(30), Duration::from_secs(3600));
        let secs: Vec<u64> = (0..9).map(|r| b.delay(r).as_secs()).collect();
        assert_eq!(secs, [30, 60, 120, 240, 480, 960, 1920, 3600, 3600]);
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(3600));
    }

    #[test]
    fn jitter_stays_within_half_and_whole() {
        let b = Backoff::new(Duration::from_millis(100), Duration::from_millis(1000)).with_jitter();
        for _ in 0..50 {
            let d0 = b.delay(0);
            assert!(d0 >= Duration::from_millis(50) && d0 <= Duration::from_millis(100));
            let d2 = b.delay(2);
            assert!(d2 >= Duration::from_millis(200) && d2 <= Duration::from_millis(400));
            assert!(b.delay(20) <= Duration::from_millis(1000));
            assert!(b.delay(u32::MAX) >= Duration::from_millis(500));
        }
    }
}
