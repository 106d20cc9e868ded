//! The agent's side of the scheduler's [`TaskRunner`]: a job firing's task, created and handed
//! back as a [`JobTask`] to run or abandon, and the precheck run without the model. Every one
//! of them is an order on the agent's [`TaskQueue`].
//!
//! Owns: the one choice of how a firing's task runs ([`JobExecution`]): on the daemon's worker
//! pool, or here in the caller's process (`jobs run` with no daemon), claimed so that a daemon
//! on the same data dir cannot take it meanwhile.
//! Must not: decide anything about the firing itself (the run row, delivery, the run lock are
//! the scheduler's); hold the agent (it holds the scheduler, which holds this).

use super::queue::{QueueError, TaskQueue};
use super::{AgentError, Claimed, RunOptions, Submit};
use crate::llm::ToolCall;
use crate::scheduler::{CreatedMany, JobTask, RunnerError, TaskRunner};
use crate::tools::ToolContext;
use futures::future::BoxFuture;
use hermes_store::{Job, Origin, Task};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// How long a firing waits for its task: a queue in front of it, a person's answer.
const FIRING_WAIT: Duration = Duration::from_secs(48 * 3600);

/// How tasks created by job firings get run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobExecution {
    /// The daemon: the worker pool runs them; firings wait for the result.
    Pool,
    /// No daemon (`jobs run` from the CLI): run in the caller's process.
    Direct,
}

/// The scheduler's way to the agent. Built before the agent (the agent's tools hold the
/// scheduler, which holds this), so it reaches the agent through the agent's [`TaskQueue`];
/// with nobody serving it, every call fails with [`RunnerError::ShuttingDown`].
pub struct JobRunner {
    queue: TaskQueue,
    mode: JobExecution,
}

impl JobRunner {
    pub fn new(mode: JobExecution, queue: TaskQueue) -> Arc<JobRunner> {
        Arc::new(JobRunner { queue, mode })
    }
}

/// A job's firing as a task request.
fn job_task(job: &Job) -> Submit {
    Submit {
        job_id: Some(job.id.clone()),
        ..Submit::new(job.task.clone(), Origin::Job, job.profile.clone())
    }
}

impl From<AgentError> for RunnerError {
    fn from(e: AgentError) -> Self {
        match e {
            AgentError::Store(e) => RunnerError::Store(e),
            AgentError::ShuttingDown => RunnerError::ShuttingDown,
            other => RunnerError::Refused(other.to_string()),
        }
    }
}

impl From<QueueError> for RunnerError {
    fn from(e: QueueError) -> Self {
        match e {
            // The App serves the queue for as long as it lives: closed means it is going.
            QueueError::Closed => RunnerError::ShuttingDown,
            QueueError::Unanswered => RunnerError::Unanswered,
        }
    }
}

impl TaskRunner for JobRunner {
    fn create<'a>(&'a self, job: &'a Job) -> BoxFuture<'a, Result<Box<dyn JobTask>, RunnerError>> {
        Box::pin(async move {
            let queue = &self.queue;
            Ok(match self.mode {
                JobExecution::Direct => here(queue, queue.create_claimed(job_task(job)).await??),
                // Pending: a worker takes it once `run` wakes the pool.
                JobExecution::Pool => pooled(queue, queue.create(job_task(job)).await??),
            })
        })
    }

    fn create_many<'a>(&'a self, jobs: &'a [Job]) -> BoxFuture<'a, CreatedMany> {
        Box::pin(async move {
            let queue = &self.queue;
            Ok(match self.mode {
                // Claimed one by one: each handle keeps its own claim until it runs.
                JobExecution::Direct => {
                    let mut tasks = Vec::with_capacity(jobs.len());
                    // One answer per job even when the queue fails partway: the tasks
                    // created before it keep their handles, so they run or are abandoned.
                    for job in jobs {
                        let task = match queue.create_claimed(job_task(job)).await {
                            Ok(claimed) => claimed.map(|c| here(queue, c)).map_err(Into::into),
                            Err(e) => Err(e.into()),
                        };
                        tasks.push(task);
                    }
                    tasks
                }
                // Pending, stored in one statement: the pool's workers take them.
                JobExecution::Pool => queue
                    .create_many(jobs.iter().map(job_task).collect())
                    .await??
                    .into_iter()
                    .map(|t| t.map(|t| pooled(queue, t)).map_err(Into::into))
                    .collect(),
            })
        })
    }

    fn follow(&self, task_id: &str) -> Result<Box<dyn JobTask>, RunnerError> {
        // Whichever process started it, the daemon's workers continue a held task once it is
        // answered: waiting for it is all a firing has left to do.
        Ok(Box::new(Pooled {
            queue: self.queue.clone(),
            id: task_id.to_string(),
        }))
    }

    fn check_precheck<'a>(
        &'a self,
        tool: &'a str,
        arguments: &'a Value,
    ) -> BoxFuture<'a, Result<(), RunnerError>> {
        Box::pin(async move {
            // The agent refuses a gated tool too: a precheck runs without the model and
            // without a person.
            self.queue
                .check_precheck(tool, arguments)
                .await?
                .map_err(|e| RunnerError::Tool(e.to_string()))
        })
    }

    fn precheck<'a>(
        &'a self,
        tool: &'a str,
        arguments: Value,
        job: &'a Job,
    ) -> BoxFuture<'a, Result<Value, RunnerError>> {
        Box::pin(async move {
            let ctx = ToolContext {
                task_id: String::new(),
                origin: Origin::Job,
                job_id: Some(job.id.clone()),
                depth: 0,
                profile: job.profile.clone().unwrap_or_default(),
                ..ToolContext::default()
            };
            let call = ToolCall {
                id: "precheck".into(),
                name: tool.to_string(),
                arguments,
            };
            self.queue
                .precheck(call, ctx)
                .await?
                .map_err(|e| RunnerError::Tool(e.to_string()))
        })
    }
}

/// A task claimed by this process, run here (by the agent serving the queue, in this process).
fn here(queue: &TaskQueue, claimed: Claimed) -> Box<dyn JobTask> {
    Box::new(Here {
        queue: queue.clone(),
        claimed,
    })
}

/// A pending task, run by the worker pool.
fn pooled(queue: &TaskQueue, task: Task) -> Box<dyn JobTask> {
    Box::new(Pooled {
        queue: queue.clone(),
        id: task.id,
    })
}

struct Here {
    queue: TaskQueue,
    claimed: Claimed,
}

impl JobTask for Here {
    fn id(&self) -> &str {
        &self.claimed.task().id
    }

    fn run(self: Box<Self>) -> BoxFuture<'static, Result<Task, RunnerError>> {
        Box::pin(async move {
            let t = self
                .queue
                .run_claimed(self.claimed, RunOptions::default())
                .await??;
            if !t.waiting {
                return Ok(t);
            }
            // Waiting for a person: the daemon's workers continue it once answered; the
            // firing's result is the task's end.
            Ok(self.queue.wait(&t.id, FIRING_WAIT).await??)
        })
    }

    fn abandon(self: Box<Self>, why: String) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            // Ended here, with its reason: the claim no longer ends it on its own.
            let id = self.claimed.into_task().id;
            abandon(&self.queue, &id, &why).await
        })
    }
}

struct Pooled {
    queue: TaskQueue,
    id: String,
}

impl JobTask for Pooled {
    fn id(&self) -> &str {
        &self.id
    }

    fn run(self: Box<Self>) -> BoxFuture<'static, Result<Task, RunnerError>> {
        Box::pin(async move {
            self.queue.wake()?;
            // The agent enforces the task's own limit; this wait only has to outlast a queue
            // in front of it, and a person's answer (`tools.approval_expire_s`). The agent listens
            // before it reads the task, so an end that comes before the wait is not missed.
            Ok(self.queue.wait(&self.id, FIRING_WAIT).await??)
        })
    }

    fn abandon(self: Box<Self>, why: String) -> BoxFuture<'static, ()> {
        Box::pin(async move { abandon(&self.queue, &self.id, &why).await })
    }
}

async fn abandon(queue: &TaskQueue, id: &str, why: &str) {
    let ended = match queue.abandon(id, why).await {
        Ok(ended) => ended.map_err(RunnerError::from),
        Err(e) => Err(e.into()),
    };
    if let Err(e) = ended {
        // It stays as it is until the next start marks it interrupted.
        tracing::error!(task = id, error = %e, "could not end a task whose job run was not recorded");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: &str) -> Job {
        Job {
            id: id.into(),
            name: id.into(),
            task: "say hi".into(),
            schedule: "@every 1h".into(),
            timezone: "UTC".into(),
            notify: Vec::new(),
            profile: None,
            origin: Origin::Cli,
            precheck: None,
            enabled: true,
            next_run_at: None,
            running_task_id: None,
            created_at: chrono::Utc::now(),
            pause_reason: None,
            pre_approved: Vec::new(),
        }
    }

    #[tokio::test]
    async fn a_direct_burst_answers_every_job_when_the_agent_is_gone() {
        let (queue, desk) = TaskQueue::new();
        drop(desk);
        let runner = JobRunner::new(JobExecution::Direct, queue);
        let jobs = [job("a"), job("b")];
        let created = runner.create_many(&jobs).await.expect("one answer per job");
        assert_eq!(created.len(), 2);
        for c in created {
            assert!(matches!(c, Err(RunnerError::ShuttingDown)));
        }
    }
}
