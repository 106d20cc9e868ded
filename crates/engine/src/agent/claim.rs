//! A claimed task: created running for the one that holds it (the CLI's `run`, a sub-agent, a
//! job run in-process), so no worker takes it, and no daemon sharing the data dir.
//!
//! Owns: the claim, and ending its task when the claim is let go unrun (its holder cancelled
//! between the answer and the run). Must not: run the task (the holder does, through
//! [`Agent::run_claimed`]), or end one that was handed over.

use super::{Agent, AgentError, Submit};
use hermes_store::Task;

/// Why a claimed task its holder let go unrun was ended.
pub(super) const UNRUN: &str = "nobody was left to run it";

/// A task created running for the process that holds this value; see [`Agent::create_claimed`].
/// No worker ever takes a claimed task, so one let go unrun (its holder was cancelled between
/// the answer and the run, or left) is ended by the claim itself.
#[derive(Debug)]
pub struct Claimed {
    task: Task,
    unrun: Unrun,
}

impl Claimed {
    pub fn task(&self) -> &Task {
        &self.task
    }

    /// The task, for the one who runs or ends it: the claim no longer ends it when dropped.
    pub(super) fn into_task(self) -> Task {
        let Claimed { task, mut unrun } = self;
        unrun.0 = None;
        task
    }
}

/// Ends the task (by id) of a [`Claimed`] dropped unrun.
struct Unrun(Option<(Agent, String)>);

impl std::fmt::Debug for Unrun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "unrun"
        } else {
            "handed over"
        })
    }
}

impl Drop for Unrun {
    fn drop(&mut self) {
        let Some((agent, id)) = self.0.take() else {
            return;
        };
        // A drop cannot wait: the end is written in the background. Without a runtime (the
        // process is exiting) the next start marks the task interrupted.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            if let Err(e) = agent.abandon(&id, UNRUN).await {
                tracing::warn!(task = %id, error = %e, "cannot end a claimed task nobody runs");
            }
        });
    }
}

impl Agent {
    /// Store a new task already running and owned by the caller, who runs it with
    /// [`Agent::run_claimed`]. Workers never see it, so a daemon sharing the data dir cannot
    /// take a task meant for this process (the CLI's `run`, a sub-agent, a job run in-process).
    pub async fn create_claimed(&self, req: Submit) -> Result<Claimed, AgentError> {
        let new = self.new_task(req, true)?;
        let task = self.inner.store.tasks().create(&new).await?;
        let unrun = Unrun(Some((self.clone(), task.id.clone())));
        Ok(Claimed { task, unrun })
    }
}
