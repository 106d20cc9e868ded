//! Stopping running tasks from outside: a cancel, the daemon's shutdown after its grace, a lease
//! this node lost (`crates/store/src/lease.rs`). Each running task has a switch and the reason it was
//! pulled; the task's own loop (`run.rs`) turns the reason into its end.
//! Must not: write a task's end itself (the task's runner does, or, fenced, nobody here).

use super::Agent;
use hermes_store::util::lock;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// Why a running task was stopped from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StopReason {
    Cancelled,
    Shutdown,
    /// This node lost the lease the task was claimed under: the task is the others' now.
    Fenced,
    /// The sub-agent's parent task ended (cancelled, timed out, failed): nobody takes its
    /// answer any more, and every model call it made would be spent for nothing.
    ParentEnded,
}

/// A running task's stop switch and why it was pulled (the first reason wins).
pub(super) struct Running {
    pub(super) stop: CancellationToken,
    pub(super) why: Arc<Mutex<Option<StopReason>>>,
    /// The lease epoch it was claimed under (`crates/store/src/lease.rs`), if any.
    pub(super) epoch: Option<String>,
    /// The task that delegated it, for a sub-agent: stopping that one stops this one too.
    pub(super) parent: Option<String>,
}

impl Agent {
    /// Stop every running task (daemon shutdown after the grace period): each ends `failed`
    /// with reason `shutdown`. Returns how many were stopped.
    pub fn stop_all_running(&self) -> usize {
        let ids: Vec<String> = lock(&self.inner.running).keys().cloned().collect();
        ids.iter()
            .filter(|id| self.stop_running(id, StopReason::Shutdown))
            .count()
    }

    /// Stop, first and at once, every task this process runs under a lease it no longer
    /// holds: the other nodes took this one for dead and ended them; nothing more of theirs
    /// may happen here. Returns how many were stopped.
    pub fn stop_fenced(&self) -> usize {
        let lease = self.inner.store.lease();
        let fenced: Vec<String> = lock(&self.inner.running)
            .iter()
            .filter(|(_, r)| r.epoch.as_deref().is_some_and(|e| !lease.holds(e)))
            .map(|(id, _)| id.clone())
            .collect();
        fenced
            .iter()
            .filter(|id| self.stop_running(id, StopReason::Fenced))
            .count()
    }

    /// Pull `id`'s switch, and those of its sub-agents running here (theirs with
    /// [`StopReason::ParentEnded`], all the way down). False when `id` does not run here.
    pub(super) fn stop_running(&self, id: &str, why: StopReason) -> bool {
        let stopped = match lock(&self.inner.running).get(id) {
            Some(running) => {
                lock(&running.why).get_or_insert(why);
                running.stop.cancel();
                true
            }
            None => false,
        };
        self.stop_children(id, why);
        stopped
    }

    /// Stop the sub-agents of `parent` still running here: it ended, or is being stopped for
    /// `why`. A shutdown or a lost lease is theirs too (a fenced task must write nothing);
    /// anything else ends them as [`StopReason::ParentEnded`].
    pub(super) fn stop_children(&self, parent: &str, why: StopReason) -> usize {
        let theirs = match why {
            StopReason::Shutdown | StopReason::Fenced => why,
            StopReason::Cancelled | StopReason::ParentEnded => StopReason::ParentEnded,
        };
        let children: Vec<String> = lock(&self.inner.running)
            .iter()
            .filter(|(_, r)| r.parent.as_deref() == Some(parent))
            .map(|(id, _)| id.clone())
            .collect();
        children
            .iter()
            .filter(|id| self.stop_running(id, theirs))
            .count()
    }
}
