//! Tool sources on their first start (an MCP server being started by the daemon): their tools
//! are not in the registry yet, so a task that began now would be offered less than it will be
//! a second later. The registry keeps their names; a task's first offer waits for them,
//! bounded, so every path that runs a task (the API, a job's firing, a sub-agent, `run`) gets
//! the tools the configuration promises.
//!
//! Owns: the set of names, the guard that takes a name out, and the bounded wait.
//! Must not: know what a source is (the MCP manager says when one starts and when it is up) or
//! hold a name past its first start (a restart makes no one wait).

use futures::future::BoxFuture;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// The longest a task waits for sources on their first start before its first model call:
/// enough for a local MCP server (about a second here), short enough that a slow one (a first
/// `uvx` download) does not hold the task; its tools join from the next step on.
pub const SOURCE_START_WAIT: Duration = Duration::from_secs(5);

/// Tool sources started and stopped as one (the MCP servers of the config): the handle of code
/// that runs tasks in its own process (the client's data-dir side) without knowing what the
/// sources are.
pub trait ToolSources: Send + Sync {
    /// Start every source in the background; later calls do nothing. A task's first model
    /// call waits (bounded) for those still starting.
    fn start(&self);
    /// Stop every source this process started.
    fn stop(&self) -> BoxFuture<'_, ()>;
}

/// The names of the sources still on their first start; a cheap clone.
#[derive(Clone, Default)]
pub struct Starting(Arc<watch::Sender<BTreeSet<String>>>);

impl Starting {
    /// `source` is on its first start until the guard is dropped.
    pub fn begin(&self, source: &str) -> SourceStart {
        self.0.send_modify(|names| {
            names.insert(source.to_string());
        });
        SourceStart {
            starting: self.clone(),
            source: source.to_string(),
        }
    }

    /// The sources on their first start now, sorted.
    pub fn names(&self) -> Vec<String> {
        self.0.borrow().iter().cloned().collect()
    }

    /// Wait until none is starting, at most `bound`; the names still starting then.
    pub async fn wait(&self, bound: Duration) -> Vec<String> {
        let mut changes = self.0.subscribe();
        let _ = tokio::time::timeout(bound, changes.wait_for(BTreeSet::is_empty)).await;
        self.names()
    }
}

/// A source's first start, in progress until this is dropped (whether the source came up,
/// failed, or the daemon stopped first).
pub struct SourceStart {
    starting: Starting,
    source: String,
}

impl Drop for SourceStart {
    fn drop(&mut self) {
        self.starting.0.send_modify(|names| {
            names.remove(&self.source);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_wait_ends_when_the_last_first_start_does_or_at_its_bound() {
        let starting = Starting::default();
        assert!(starting.wait(Duration::from_secs(5)).await.is_empty());

        let a = starting.begin("a");
        let b = starting.begin("b");
        let waiter = tokio::spawn({
            let s = starting.clone();
            async move { s.wait(Duration::from_secs(5)).await }
        });
        drop(a);
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(b);
        assert_eq!(waiter.await.ok(), Some(vec![]));

        let _slow = starting.begin("slow");
        let t0 = tokio::time::Instant::now();
        assert_eq!(starting.wait(Duration::from_secs(5)).await, ["slow"]);
        assert_eq!(t0.elapsed(), Duration::from_secs(5));
    }
}
