//! The data-dir side: the data dir opened in this process, when no daemon answers.
//!
//! Owns: opening only what a command needs — the store for `tasks`, the store and the memory
//! index for `memory`, every part for `jobs` and tasks (built by the caller's [`BuildParts`]) —
//! and running a fired job or a task here to its end, with the tool sources (MCP servers)
//! started for it and stopped by `close`.
//! Must not: be used while a daemon runs on the same data dir (the CLI checks first): the
//! daemon holds the memory index, and its scheduler would not see changes made here at once.

use super::{Backend, ClientError, DELIVER_NOW, Fired, FoundFact, OnStep, Remembered, Reply};
use futures::future::BoxFuture;
use hermes_config::Config;
use hermes_engine::agent::{Agent, Decision, Followed, RunOptions, Serving, Submit};
use hermes_engine::memory::LongTerm;
use hermes_engine::notify::Notifier;
use hermes_engine::scheduler::{JobRequest, JobView, Scheduler};
use hermes_engine::tools::ToolSources;
use hermes_store::{
    Approval, ApprovalState, Origin, Store, Task, TaskFilter, TaskRecord, TaskState, Upsert, Usage,
    UsageWindow,
};
use std::sync::Arc;
use tokio::sync::OnceCell;

/// Every part a job or a task needs, connected.
#[derive(Clone)]
pub struct Parts {
    pub store: Store,
    pub agent: Agent,
    pub scheduler: Scheduler,
    pub notifier: Notifier,
    /// The tool sources (MCP servers), started before a task runs here.
    pub sources: Arc<dyn ToolSources>,
    /// Keeps the agent serving its task queue (jobs run here and sub-agents go through it)
    /// while these parts live.
    pub serving: Serving,
}

/// Builds the parts on a data dir, with the memory index already open here (an index opens
/// once at a time: `hermes-agent mcp` both remembers and runs tasks in one process). The CLI
/// builds them with `app::App`, which this module cannot name without a cycle.
pub type BuildParts = Box<
    dyn Fn(Config, Option<LongTerm>) -> BoxFuture<'static, Result<Parts, ClientError>>
        + Send
        + Sync,
>;

/// The data dir in this process; each part is opened on first use.
pub struct Local {
    config: Config,
    /// On whose behalf: the origin of the jobs, tasks and facts it creates.
    origin: Origin,
    build: BuildParts,
    store: OnceCell<Store>,
    memory: OnceCell<LongTerm>,
    parts: OnceCell<Parts>,
}

impl Local {
    pub fn new(config: Config, build: BuildParts) -> Local {
        Local {
            config,
            origin: Origin::Cli,
            build,
            store: OnceCell::new(),
            memory: OnceCell::new(),
            parts: OnceCell::new(),
        }
    }

    /// The same backend, creating things with `origin` (`hermes-agent mcp`: `mcp`).
    pub fn acting_for(mut self, origin: Origin) -> Local {
        self.origin = origin;
        self
    }

    async fn store(&self) -> Result<&Store, ClientError> {
        self.store
            .get_or_try_init(|| async {
                // Every part shares one pool when they were opened already.
                match self.parts.get() {
                    Some(parts) => Ok(parts.store.clone()),
                    None => {
                        Store::open_configured(
                            &self.config.data_dir,
                            &self.config.settings.storage.url,
                            Default::default(),
                        )
                        .await
                    }
                }
            })
            .await
            .map_err(Into::into)
    }

    /// The memory index; unlike the agent, `memory` commands cannot do without it.
    async fn memory(&self) -> Result<&LongTerm, ClientError> {
        let store = self.store().await?.clone();
        self.memory
            .get_or_try_init(|| LongTerm::open(&self.config.data_dir, store))
            .await
            .map_err(Into::into)
    }

    /// Every part, with job firings run in this process.
    async fn parts(&self) -> Result<&Parts, ClientError> {
        self.parts
            .get_or_try_init(|| async {
                let memory = self.memory().await.ok().cloned();
                (self.build)(self.config.clone(), memory).await
            })
            .await
    }

    /// Every part, with the tool sources started: a task run here gets the tools it would get
    /// on the daemon (its first model call waits, bounded, for sources still starting).
    async fn parts_with_tools(&self) -> Result<&Parts, ClientError> {
        let parts = self.parts().await?;
        parts.sources.start();
        Ok(parts)
    }
}

impl Backend for Local {
    fn watch<'a>(&'a self, id: &'a str, on_step: &'a OnStep) -> Reply<'a, Task> {
        Box::pin(async move {
            use futures::StreamExt;
            // The agent's follower reads the store; with no daemon here, a task another process
            // runs (a `hermes-agent run`) is seen through its poll.
            let parts = self.parts().await?;
            let mut events = std::pin::pin!(parts.agent.follow(id).await?);
            while let Some(event) = events.next().await {
                match event? {
                    Followed::Step(step) => on_step(&step),
                    Followed::End(task) => return Ok(task),
                }
            }
            Err(ClientError::Broken(format!(
                "following task {id} ended before the task did"
            )))
        })
    }

    fn daemon(&self) -> Option<&str> {
        None
    }

    fn tasks(&self, state: Option<TaskState>, limit: i64) -> Reply<'_, Vec<Task>> {
        Box::pin(async move {
            let filter = TaskFilter {
                state,
                limit,
                ..Default::default()
            };
            Ok(self.store().await?.tasks().list(&filter).await?)
        })
    }

    fn task<'a>(&'a self, id: &'a str) -> Reply<'a, TaskRecord> {
        Box::pin(async move {
            match self.store().await?.tasks().record(id).await? {
                Some(record) => Ok(record),
                None => Err(ClientError::NotFound(format!(
                    "no task '{id}'; `hermes-agent tasks list` shows the ids"
                ))),
            }
        })
    }

    fn jobs(&self) -> Reply<'_, Vec<JobView>> {
        Box::pin(async move { Ok(self.parts().await?.scheduler.list().await?) })
    }

    fn add_job(&self, job: JobRequest) -> Reply<'_, JobView> {
        Box::pin(async move {
            let scheduler = &self.parts().await?.scheduler;
            let job = scheduler.add(job, self.origin).await?;
            Ok(scheduler.view(job).await?)
        })
    }

    fn remove_job<'a>(&'a self, id: &'a str) -> Reply<'a, ()> {
        Box::pin(async move {
            if !self.parts().await?.scheduler.remove(id).await? {
                return Err(ClientError::NotFound(format!(
                    "no job '{id}'; `hermes-agent jobs list` shows the ids"
                )));
            }
            Ok(())
        })
    }

    fn pause_job<'a>(&'a self, id: &'a str, paused: bool) -> Reply<'a, JobView> {
        Box::pin(async move {
            let scheduler = &self.parts().await?.scheduler;
            let job = if paused {
                scheduler.pause(id).await?
            } else {
                scheduler.resume(id).await?
            };
            Ok(scheduler.view(job).await?)
        })
    }

    fn fire_job<'a>(&'a self, id: &'a str) -> Reply<'a, Fired> {
        Box::pin(async move {
            let parts = self.parts_with_tools().await?;
            // Runs the task and queues its delivery before returning, so nothing is lost when
            // this process exits.
            let run = parts.scheduler.run_now_wait(id).await?;
            let delivered = tokio::time::timeout(DELIVER_NOW, parts.notifier.deliver_due())
                .await
                .unwrap_or(0);
            Ok(Fired::Here { run, delivered })
        })
    }

    fn remember<'a>(&'a self, text: &'a str, tags: &'a [String]) -> Reply<'a, Remembered> {
        Box::pin(async move {
            if text.trim().is_empty() {
                return Err(ClientError::Invalid(
                    "the fact is empty; say what to remember".into(),
                ));
            }
            let memory = self.memory().await?;
            let (fact, how) = memory.remember(text, tags, self.origin.as_str()).await?;
            Ok(Remembered {
                id: fact.id,
                merged: how == Upsert::Merged,
            })
        })
    }

    fn recall<'a>(&'a self, query: &'a str, k: usize) -> Reply<'a, Vec<FoundFact>> {
        Box::pin(async move {
            let found = self.memory().await?.recall(query, k).await?;
            Ok(found
                .into_iter()
                .map(|r| FoundFact {
                    id: r.fact.id,
                    text: r.fact.text,
                    tags: r.fact.tags,
                    score: f64::from(r.score),
                    keyword_rank: r.keyword_rank,
                    similarity: r.similarity.map(f64::from),
                    created_at: r.fact.created_at,
                })
                .collect())
        })
    }

    fn forget<'a>(&'a self, id: &'a str) -> Reply<'a, ()> {
        Box::pin(async move {
            if !self.memory().await?.forget(id).await? {
                return Err(ClientError::NotFound(format!(
                    "no fact '{id}'; `hermes-agent memory search WORDS` shows ids"
                )));
            }
            Ok(())
        })
    }

    fn approvals(&self, state: Option<ApprovalState>) -> Reply<'_, Vec<Approval>> {
        Box::pin(async move {
            Ok(self
                .parts()
                .await?
                .agent
                .approvals()
                .list(state, 1000)
                .await?)
        })
    }

    fn decide<'a>(&'a self, id: &'a str, decision: Decision) -> Reply<'a, Approval> {
        Box::pin(async move {
            let approvals = self.parts().await?.agent.approvals();
            Ok(approvals.decide(id, decision, "cli").await?)
        })
    }

    fn usage(&self, days: u32) -> Reply<'_, Usage> {
        Box::pin(async move {
            // The daemon counts days in the same zone (`scheduler.timezone`, resolved at load).
            let window = UsageWindow::last_days(days, self.config.timezone.tz, chrono::Utc::now());
            Ok(self.store().await?.tasks().usage(&window).await?)
        })
    }

    fn run_task<'a>(&'a self, task: &'a str, profile: Option<&'a str>) -> Reply<'a, Task> {
        Box::pin(async move {
            let parts = self.parts_with_tools().await?;
            let claimed = parts
                .agent
                .create_claimed(Submit::new(
                    task.to_string(),
                    self.origin,
                    profile.map(str::to_string),
                ))
                .await?;
            let done = parts
                .agent
                .run_claimed(claimed, RunOptions::default())
                .await?;
            // No daemon to send its notices: send them now (they stay queued if this fails).
            if !parts.store.outbox().for_task(&done.id).await?.is_empty() {
                let _ = tokio::time::timeout(DELIVER_NOW, parts.notifier.deliver_due()).await;
            }
            Ok(done)
        })
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if let Some(parts) = self.parts.get() {
                parts.sources.stop().await;
            }
        })
    }
}
