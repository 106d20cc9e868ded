//! The worker pool of the daemon: `agent.workers` tasks at once, the rest wait as `pending`
//! and are taken oldest first. Pending tasks live in the store, not in a RAM queue, so a
//! restart loses none and the queue cannot grow memory.

use super::{Agent, RunOptions};
use crate::store::HoldOwner;
use std::time::Duration;
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
            // Tasks whose approvals were answered go on first: they started earlier.
            match self.inner.store.take_ready_hold(HoldOwner::Pool).await {
                Ok(Some(hold)) => {
                    if let Err(e) = self.resume(hold, None).await {
                        tracing::error!(worker, error = %e, "a task could not go on after its approvals");
                    }
                    continue;
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::error!(worker, error = %e, "cannot take a task that waited; retrying")
                }
            }
            match self.inner.store.claim_next_pending().await {
                Ok(Some(task)) => {
                    if self.inner.store.is_postgres() {
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
