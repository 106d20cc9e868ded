//! Following one task live: every trace row recorded so far, then each new one as it is
//! stored, then the final state — the stream behind `GET /v1/tasks/{id}/events`, the
//! dashboard's live timeline and `tasks watch`.
//!
//! Rows are always read from the store (the one source of truth); the agent's announcements
//! only say when to look. A task running in another process (a CLI `run` on the same data dir,
//! another daemon on a shared database) announces nothing here — another daemon sends only its
//! end through `elsewhere.rs` —, so the store is also looked at every [`POLL`].

use super::{Agent, AgentError};
use futures::Stream;
use hermes_store::{Step, Task};
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};

/// How often the store is read without an announcement (tasks of other processes).
const POLL: Duration = Duration::from_secs(1);
/// Events buffered for a slow follower before the follower task waits for it.
const BUFFER: usize = 64;

/// What a follower sees.
#[derive(Debug, Clone)]
pub enum Followed {
    /// One trace row, in order, each once.
    Step(Step),
    /// The task as it ended; the last event.
    End(Task),
}

impl Agent {
    /// Follow task `id` (an unambiguous prefix is enough) to its end. Fails at once if there is
    /// no such task; after that, a store error ends the stream with that error.
    pub async fn follow(
        &self,
        id: &str,
    ) -> Result<impl Stream<Item = Result<Followed, AgentError>> + Send + 'static, AgentError> {
        // Subscribed before the first read, so nothing falls between the two.
        let steps = self.subscribe_steps();
        let finished = self.subscribe();
        let task = self.find(id).await?;
        let (tx, rx) = mpsc::channel(BUFFER);
        let agent = self.clone();
        tokio::spawn(async move {
            if let Err(e) = agent.pump(&task.id, (steps, finished), &tx).await {
                let _ = tx.send(Err(e)).await;
            }
        });
        Ok(futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|event| (event, rx))
        }))
    }

    /// Send rows as they appear, then the end. Returns when the task ended or the follower
    /// went away.
    async fn pump(
        &self,
        id: &str,
        (mut steps, mut finished): Announcements,
        tx: &mpsc::Sender<Result<Followed, AgentError>>,
    ) -> Result<(), AgentError> {
        // Registered before the first read; the follower task is subscribed to the rest
        // since before its task was found.
        let elsewhere = self.watch_elsewhere(id);
        let store = &self.inner.store;
        let mut seen = 0;
        loop {
            // The state is read before the rows: a task seen finished here has all its rows
            // stored already, so after sending them the stream can end.
            let task = self.as_known(store.tasks().get(id).await?);
            for step in store.tasks().steps_after(id, seen).await? {
                seen = step.seq;
                if tx.send(Ok(Followed::Step(step))).await.is_err() {
                    return Ok(());
                }
            }
            if task.state.is_finished() {
                let _ = tx.send(Ok(Followed::End(task))).await;
                return Ok(());
            }
            // Wait for anything about this task (or a lag, after which the store tells all),
            // or for the poll.
            tokio::select! {
                _ = wait_for(&mut steps, |e| e.task_id == id) => {}
                _ = wait_for(&mut finished, |e| e.id == id) => {}
                _ = elsewhere.news() => {}
                _ = tokio::time::sleep(POLL) => {}
                _ = tx.closed() => return Ok(()),
            }
        }
    }
}

/// Where a follower hears of its task run here: rows stored, its end.
type Announcements = (
    broadcast::Receiver<super::StepRecorded>,
    broadcast::Receiver<super::TaskFinished>,
);

/// Until an announcement `is_ours`, or a lag (some may have been ours). A closed channel never
/// returns: the poll takes over.
async fn wait_for<T: Clone>(rx: &mut broadcast::Receiver<T>, is_ours: impl Fn(&T) -> bool) {
    loop {
        match rx.recv().await {
            Ok(e) if is_ours(&e) => return,
            Ok(_) => {}
            Err(broadcast::error::RecvError::Lagged(_)) => return,
            Err(broadcast::error::RecvError::Closed) => std::future::pending::<()>().await,
        }
    }
}
