//! A `run` waiting on its own task: the held calls of its task (and of its sub-agents) are
//! answered from elsewhere — another terminal, the dashboard, the API — and this process
//! continues them itself, with its live timeline, since the daemon's workers never take a
//! task a `run` owns.
//!
//! Owns: the wait's loop (expiry, the optional per-request timeout, taking this run's ready
//! holds) and the heartbeat that keeps those holds this run's: a run that dies stops beating,
//! and after `storage.node_lease_s` the daemon's workers take its task over
//! ([`super::Approvals::adopt_orphans`]).
//! Must not: answer a request except by expiry or the timeout the person asked for.

use super::{Agent, AgentError, Decision};
use hermes_store::Store;
use hermes_store::{Approval, HoldOwner, Step, Task};
use std::collections::HashSet;
use std::time::Duration;
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::task::AbortOnDropHandle;

/// How often a waiting `run` looks for answers: they may come from another process.
const POLL: Duration = Duration::from_millis(250);

/// Who denied a request whose `run --approval-timeout` ran out.
pub(crate) const TIMEOUT_DECIDER: &str = "run --approval-timeout";

impl Agent {
    /// Wait for the answers to `root`'s requests and continue it (and its sub-tasks) here
    /// until it ends. `on_ask` is called once per open request; with `timeout`, a request
    /// open that long is denied with reason `timeout`.
    pub async fn continue_own(
        &self,
        root: &str,
        observer: Option<UnboundedSender<Step>>,
        timeout: Option<Duration>,
        on_ask: &(dyn Fn(&Approval) + Send + Sync),
    ) -> Result<Task, AgentError> {
        let store = self.store();
        let mut announced: HashSet<String> = HashSet::new();
        // Alive while this runs (a resumed task may take minutes), so the daemon leaves this
        // run's holds alone; stopped however this returns.
        let _heartbeat = AbortOnDropHandle::new(tokio::spawn(heartbeat(
            store.clone(),
            root.to_string(),
            self.node_lease() / 3,
        )));
        loop {
            let now = store.tasks().get(root).await?;
            if now.state.is_finished() {
                return Ok(now);
            }
            if let Err(e) = self.approvals().expire_due().await {
                tracing::warn!(error = %e, "could not expire approval requests");
            }
            for a in store.approvals().open_under(root).await? {
                if announced.insert(a.id.clone()) {
                    on_ask(&a);
                }
                let overdue = timeout.is_some_and(|t| {
                    (hermes_store::now() - a.created_at)
                        .to_std()
                        .unwrap_or_default()
                        >= t
                });
                if overdue {
                    let deny = Decision::Deny {
                        reason: Some("timeout".into()),
                    };
                    // Answered meanwhile by someone else: their answer stands.
                    let _ = self.approvals().decide(&a.id, deny, TIMEOUT_DECIDER).await;
                }
            }
            match store.holds().take_ready(HoldOwner::Task(root)).await? {
                Some(hold) => {
                    let observer = (hold.task_id == root).then(|| observer.clone()).flatten();
                    self.resume(hold, observer).await?;
                }
                None => tokio::time::sleep(POLL).await,
            }
        }
    }
}

/// Show every `every` that the run continuing `root` is alive.
async fn heartbeat(store: Store, root: String, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        if let Err(e) = store.holds().touch_owned(&root).await {
            // A few missed beats are harmless; a lease's worth hands the task to the daemon,
            // which then finishes it (this run sees it end and prints it).
            tracing::warn!(task = %root, error = %e, "could not mark this run alive");
        }
    }
}
