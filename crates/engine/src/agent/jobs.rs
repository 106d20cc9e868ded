//! The agent's side of the scheduler's [`TaskRunner`]: a job firing's task, created and handed
//! back as a [`JobTask`] to run or abandon, and the precheck run without the model.
//!
//! Owns: the one choice of how a firing's task runs ([`JobExecution`]): on the daemon's worker
//! pool, or here in the caller's process (`jobs run` with no daemon), claimed so that a daemon
//! on the same data dir cannot take it meanwhile.
//! Must not: decide anything about the firing itself (the run row, delivery, the run lock are
//! the scheduler's).

use super::{Agent, AgentError, Claimed, Inner, RunOptions, Submit};
use crate::llm::ToolCall;
use crate::scheduler::{CreatedMany, JobTask, RunnerError, TaskRunner};
use crate::tools::ToolContext;
use futures::future::BoxFuture;
use hermes_store::{Job, Origin, Task};
use serde_json::Value;
use std::sync::{Arc, OnceLock, Weak};
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
/// scheduler, which holds this), so it holds a weak link set once by [`JobRunner::bind`].
pub struct JobRunner {
    agent: OnceLock<Weak<Inner>>,
    mode: JobExecution,
}

impl JobRunner {
    pub fn new(mode: JobExecution) -> Arc<JobRunner> {
        Arc::new(JobRunner {
            agent: OnceLock::new(),
            mode,
        })
    }

    /// Link the agent, once it is built.
    pub fn bind(&self, agent: &Agent) {
        let _ = self.agent.set(Arc::downgrade(&agent.inner));
    }

    fn agent(&self) -> Result<Agent, RunnerError> {
        self.agent
            .get()
            .and_then(Weak::upgrade)
            .map(|inner| Agent { inner })
            .ok_or(RunnerError::NotReady)
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

impl TaskRunner for JobRunner {
    fn create<'a>(&'a self, job: &'a Job) -> BoxFuture<'a, Result<Box<dyn JobTask>, RunnerError>> {
        Box::pin(async move {
            let agent = self.agent()?;
            Ok(match self.mode {
                JobExecution::Direct => here(&agent, agent.create_claimed(job_task(job)).await?),
                // Pending: a worker takes it once `run` wakes the pool.
                JobExecution::Pool => pooled(&agent, agent.create(job_task(job)).await?),
            })
        })
    }

    fn create_many<'a>(&'a self, jobs: &'a [Job]) -> BoxFuture<'a, CreatedMany> {
        Box::pin(async move {
            let agent = self.agent()?;
            Ok(match self.mode {
                // Claimed one by one: each handle keeps its own claim until it runs.
                JobExecution::Direct => {
                    let mut tasks = Vec::with_capacity(jobs.len());
                    for job in jobs {
                        let claimed = agent.create_claimed(job_task(job)).await;
                        tasks.push(claimed.map(|c| here(&agent, c)).map_err(Into::into));
                    }
                    tasks
                }
                // Pending, stored in one statement: the pool's workers take them.
                JobExecution::Pool => agent
                    .submit_many(jobs.iter().map(job_task).collect())
                    .await?
                    .into_iter()
                    .map(|t| t.map(|t| pooled(&agent, t)).map_err(Into::into))
                    .collect(),
            })
        })
    }

    fn follow(&self, task_id: &str) -> Result<Box<dyn JobTask>, RunnerError> {
        // Whichever process started it, the daemon's workers continue a held task once it is
        // answered: waiting for it is all a firing has left to do.
        Ok(Box::new(Pooled {
            agent: self.agent()?,
            id: task_id.to_string(),
        }))
    }

    fn check_precheck(&self, tool: &str, arguments: &Value) -> Result<(), RunnerError> {
        let agent = self.agent()?;
        // A precheck runs without the model and without a person: never a gated tool.
        if agent.registry().needs_approval(tool) {
            return Err(RunnerError::Tool(
                crate::tools::ToolError::NeedsApproval(tool.to_string()).to_string(),
            ));
        }
        agent
            .registry()
            .check_call(tool, arguments)
            .map_err(|e| RunnerError::Tool(e.to_string()))
    }

    fn precheck<'a>(
        &'a self,
        tool: &'a str,
        arguments: Value,
        job: &'a Job,
    ) -> BoxFuture<'a, Result<Value, RunnerError>> {
        Box::pin(async move {
            let agent = self.agent()?;
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
            agent
                .registry()
                .call_raw(&call, &ctx)
                .await
                .map_err(|e| RunnerError::Tool(e.to_string()))
        })
    }
}

/// A task claimed by this process, run here.
fn here(agent: &Agent, claimed: Claimed) -> Box<dyn JobTask> {
    Box::new(Here {
        agent: agent.clone(),
        claimed,
    })
}

/// A pending task, run by the worker pool.
fn pooled(agent: &Agent, task: Task) -> Box<dyn JobTask> {
    Box::new(Pooled {
        agent: agent.clone(),
        id: task.id,
    })
}

struct Here {
    agent: Agent,
    claimed: Claimed,
}

impl JobTask for Here {
    fn id(&self) -> &str {
        &self.claimed.task().id
    }

    fn run(self: Box<Self>) -> BoxFuture<'static, Result<Task, RunnerError>> {
        Box::pin(async move {
            let rx = self.agent.subscribe();
            let t = self
                .agent
                .run_claimed(self.claimed, RunOptions::default())
                .await?;
            if !t.waiting {
                return Ok(t);
            }
            // Waiting for a person: the daemon's workers continue it once answered; the
            // firing's result is the task's end.
            Ok(self.agent.wait(&t.id, rx, FIRING_WAIT).await?)
        })
    }

    fn abandon(self: Box<Self>, why: String) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let id = self.claimed.task().id.clone();
            abandon(&self.agent, &id, &why).await
        })
    }
}

struct Pooled {
    agent: Agent,
    id: String,
}

impl JobTask for Pooled {
    fn id(&self) -> &str {
        &self.id
    }

    fn run(self: Box<Self>) -> BoxFuture<'static, Result<Task, RunnerError>> {
        Box::pin(async move {
            let rx = self.agent.subscribe();
            self.agent.wake_workers();
            // The agent enforces the task's own limit; this wait only has to outlast a queue
            // in front of it, and a person's answer (`tools.approval_expire_s`).
            Ok(self.agent.wait(&self.id, rx, FIRING_WAIT).await?)
        })
    }

    fn abandon(self: Box<Self>, why: String) -> BoxFuture<'static, ()> {
        Box::pin(async move { abandon(&self.agent, &self.id, &why).await })
    }
}

async fn abandon(agent: &Agent, id: &str, why: &str) {
    if let Err(e) = agent.abandon(id, why).await {
        // It stays as it is until the next start marks it interrupted.
        tracing::error!(task = id, error = %e, "could not end a task whose job run was not recorded");
    }
}
