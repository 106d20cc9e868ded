//! The worker pool of the daemon: `agent.workers` tasks at once, the rest wait as `pending`
//! and are taken oldest first. Pending tasks live in the store, not in a RAM queue, so a
//! restart loses none and the queue cannot grow memory.

use super::{Agent, RunOptions};
use hermes_store::HoldOwner;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How often an idle worker looks at the store even without a wake-up (tasks created by
/// another process, e.g. `jobs run` while the daemon is up).
const IDLE_POLL: Duration = Duration::from_secs(2);

impl Agent {
    /// Start `n` workers on `tracker`. They stop taking tasks when `stop` is cancelled; a task
    /// already running finishes (or is stopped by [`Agent::stop_all_running`]).
    pub fn spawn_workers(&self, n: usize, tracker: &TaskTracker, stop: CancellationToken) {
        for worker in 0..n.max(1) {
            let agent = self.clone();
            let stop = stop.clone();
            tracker.spawn(async move { agent.worker(worker, stop).await });
        }
    }

    async fn worker(&self, worker: usize, stop: CancellationToken) {
        while !stop.is_cancelled() {
            // Tasks whose approvals were answered go on first: they started earlier. Looked
            // for only when one may have become ready: the look is a write transaction, made
            // before every claim it was two more per task (BENCHMARKS.md §16).
            if let Some(seen) = self.inner.holds.due() {
                match self.inner.store.holds().take_ready(HoldOwner::Pool).await {
                    Ok(Some(hold)) => {
                        if let Err(e) = self.resume(hold, None).await {
                            tracing::error!(worker, error = %e, "a task could not go on after its approvals");
                        }
                        // Its end may be what its parent's hold waited for.
                        self.inner.holds.raise();
                        continue;
                    }
                    Ok(None) => self.inner.holds.found_none(seen),
                    Err(e) => {
                        tracing::error!(worker, error = %e, "cannot take a task that waited; retrying")
                    }
                }
            }
            match self.inner.store.tasks().claim_next_pending().await {
                Ok(Some(task)) => {
                    if self.inner.store.shared().is_some() {
                        // Another daemon's queueing wakes one worker here (a burst is one
                        // notification): each that finds work wakes the next, until one
                        // finds none — not every idle worker at once for every task.
                        self.inner.queued.notify_one();
                    }
                    if let Err(e) = self.run_taken(task, RunOptions::default()).await {
                        tracing::error!(worker, error = %e, "the task's end could not be recorded");
                    }
                    continue;
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::error!(worker, error = %e, "cannot take a pending task; retrying")
                }
            }
            tokio::select! {
                _ = self.inner.queued.notified() => {}
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(IDLE_POLL) => {}
            }
        }
    }
}

/// Whether a held task of the pool may have become ready since a worker last found none:
/// raised where that happens in this process (an answer, an expiry, a hold taken after its
/// answer came, a resumed task's end, news from another daemon), and due by itself every
/// [`IDLE_POLL`] for what happens where no one raises it (an answer given through another
/// daemon on a shared database, a sub-task stopped by its deadline).
#[derive(Debug)]
pub(super) struct HoldWatch {
    /// Bumped by every [`HoldWatch::raise`].
    raised: AtomicU64,
    /// The highest `raised` a look found nothing for.
    settled: AtomicU64,
    /// When the next look by the clock is due, in ms since `since`.
    next_look_ms: AtomicU64,
    since: Instant,
}

impl Default for HoldWatch {
    fn default() -> HoldWatch {
        HoldWatch {
            // Raised at the start: holds left by the last run may be ready.
            raised: AtomicU64::new(1),
            settled: AtomicU64::new(0),
            next_look_ms: AtomicU64::new(0),
            since: Instant::now(),
        }
    }
}

impl HoldWatch {
    /// A held task may be ready now.
    pub(super) fn raise(&self) {
        self.raised.fetch_add(1, Ordering::SeqCst);
    }

    /// `Some(seen)` when a worker should look: raised since the last look that found none, or
    /// the clock's turn (taken by one worker only). `seen` goes back to [`HoldWatch::found_none`].
    fn due(&self) -> Option<u64> {
        let raised = self.raised.load(Ordering::SeqCst);
        let now = u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX);
        let period = u64::try_from(IDLE_POLL.as_millis()).unwrap_or(u64::MAX);
        if self.settled.load(Ordering::SeqCst) < raised {
            // A look is a look: the clock's next turn is a period from now.
            self.next_look_ms
                .fetch_max(now.saturating_add(period), Ordering::SeqCst);
            return Some(raised);
        }
        let next = self.next_look_ms.load(Ordering::SeqCst);
        (now >= next
            && self
                .next_look_ms
                .compare_exchange(
                    next,
                    now.saturating_add(period),
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                )
                .is_ok())
        .then_some(raised)
    }

    /// A look that began at `seen` found nothing ready: no need to look again until the next
    /// raise (one that came during the look is above `seen`, so it is not lost).
    fn found_none(&self, seen: u64) {
        self.settled.fetch_max(seen, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_raise_during_a_look_that_found_nothing_is_not_lost() {
        let w = HoldWatch::default();
        let seen = w.due().expect("raised at the start");
        // An answer lands while the look is in flight.
        w.raise();
        w.found_none(seen);
        let again = w.due().expect("the raise during the look asks for another");
        w.found_none(again);
        // Nothing raised since, and the clock's look was taken by the first `due`.
        assert_eq!(w.due(), None);
        w.raise();
        assert!(w.due().is_some());
    }

    #[test]
    fn the_clock_gives_one_look_per_period_to_one_worker() {
        let w = HoldWatch::default();
        let seen = w.due().expect("raised at the start");
        w.found_none(seen);
        assert_eq!(w.due(), None, "the first look took the clock's turn too");
        // As if a period had passed.
        w.next_look_ms.store(0, Ordering::SeqCst);
        assert!(w.due().is_some());
        assert_eq!(
            w.due(),
            None,
            "a second worker at the same moment does not look"
        );
    }
}
