//! News of tasks run by other daemons on a shared database: one ended, or waits for a person. The store's change feed (PostgreSQL's `LISTEN`) brings it; the waiters and
//! followers of that task here wake on it and read the store, which stays the one source of
//! truth. A feed that was cut (its notifications lost meanwhile) says so with
//! [`Heard::Lagged`], and everyone looks again; a slow poll covers what no feed brings.
//!
//! Must not: carry rows (only which task to look at), or be needed on one daemon alone (its own
//! runners announce everything on `finished` and `steps`).

use super::{Agent, AgentError};
use hermes_store::util::lock;
use hermes_store::{StoreError, Task};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// What another node did to a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Heard {
    /// This task ended, or waits for a person.
    State(String),
    /// Notifications may have been lost: every waiter looks again.
    Lagged,
}

/// How often a waiter on a shared database reads its task without news: notifications are a
/// wake-up, not a promise (a feed reconnecting loses what was sent meanwhile).
/// Long, as the feed says when it lost something ([`Heard::Lagged`]): ten thousand firings
/// waiting at once must not keep the pool busy with reads that find nothing new.
pub(super) const SHARED_POLL: Duration = Duration::from_secs(30);

/// Who here waits for news of which task. Keyed by task, so a notification wakes only those
/// who wait on that task: with a thousand firings waiting at once, a broadcast to every waiter
/// on every notification of the cluster would cost waiters × notifications wake-ups.
#[derive(Default)]
pub(super) struct Watchers {
    by_task: Mutex<HashMap<String, Vec<Watcher>>>,
    next: AtomicU64,
}

struct Watcher {
    key: u64,
    wake: Arc<Notify>,
}

/// One wait on one task's news, registered until dropped.
pub(super) struct Watch<'a> {
    watchers: &'a Watchers,
    task: String,
    key: u64,
    wake: Arc<Notify>,
}

impl Watch<'_> {
    /// Until news of the task (one that came since the last call counts: `Notify` keeps it).
    pub(super) async fn news(&self) {
        self.wake.notified().await
    }
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        let mut map = lock(&self.watchers.by_task);
        if let Some(list) = map.get_mut(&self.task) {
            list.retain(|w| w.key != self.key);
            if list.is_empty() {
                map.remove(&self.task);
            }
        }
    }
}

impl Watchers {
    /// Wait for news of task `id`.
    pub(super) fn watch(&self, id: &str) -> Watch<'_> {
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        let wake = Arc::new(Notify::new());
        lock(&self.by_task)
            .entry(id.to_string())
            .or_default()
            .push(Watcher {
                key,
                wake: wake.clone(),
            });
        Watch {
            watchers: self,
            task: id.to_string(),
            key,
            wake,
        }
    }

    fn heard(&self, news: &Heard) {
        let map = lock(&self.by_task);
        let wake = |list: &Vec<Watcher>| list.iter().for_each(|w| w.wake.notify_one());
        match news {
            Heard::State(id) => map.get(id).iter().for_each(|l| wake(l)),
            Heard::Lagged => map.values().for_each(wake),
        }
    }
}

impl Agent {
    /// Pass on news from the store's change feed.
    pub fn heard_elsewhere(&self, news: Heard) {
        self.inner.elsewhere.heard(&news);
    }

    /// Register before reading the store, so no news falls between the read and the wait.
    pub(super) fn watch_elsewhere(&self, id: &str) -> Watch<'_> {
        self.inner.elsewhere.watch(id)
    }

    /// How long to wait without news before reading the store again; `None`: only wake on
    /// news (one daemon alone, whose runners announce everything).
    pub(super) fn poll_without_news(&self, id: &str) -> Option<Duration> {
        // Spread over a second poll period by the task's id: a thousand firings that began
        // together must not all read the store in the same instant, every time.
        let spread = id
            .bytes()
            .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
        let jitter = Duration::from_millis(spread % SHARED_POLL.as_millis() as u64);
        self.inner.store.shared().map(|_| SHARED_POLL + jitter)
    }
}

/// How soon a waiter reads its task again after a storage fault.
const READ_RETRY: Duration = Duration::from_secs(1);

impl Agent {
    /// Task `id` for a waiter. A storage fault (the pool busy past its timeout, the server
    /// away for a moment) is waited out until `deadline`: a job firing that waits for its task
    /// must not record the run failed because one read of it failed.
    pub(super) async fn read_waited(
        &self,
        id: &str,
        deadline: tokio::time::Instant,
    ) -> Result<Task, AgentError> {
        loop {
            match self.inner.store.tasks().get(id).await {
                Ok(t) => return Ok(self.as_known(t)),
                Err(StoreError::Unavailable { .. })
                    if tokio::time::Instant::now() + READ_RETRY < deadline =>
                {
                    tokio::time::sleep(READ_RETRY).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// Sleep for `poll`, or forever when there is none.
pub(super) async fn poll(poll: Option<Duration>) {
    match poll {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending::<()>().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn woken(watch: &Watch<'_>) -> bool {
        tokio::time::timeout(Duration::from_millis(50), watch.news())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn news_wakes_only_those_who_wait_on_that_task_and_lost_news_wakes_all() {
        let watchers = Watchers::default();
        let first = watchers.watch("a");
        let second = watchers.watch("a");
        let other = watchers.watch("b");
        watchers.heard(&Heard::State("a".into()));
        assert!(woken(&first).await && woken(&second).await);
        assert!(!woken(&other).await);
        watchers.heard(&Heard::Lagged);
        assert!(woken(&other).await && woken(&first).await);
        drop((first, second, other));
        assert!(
            lock(&watchers.by_task).is_empty(),
            "a dropped watch is gone"
        );
    }
}
