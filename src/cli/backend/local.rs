//! The local backend: the data dir opened in this process, when no daemon answers.
//!
//! Owns: opening only what a command needs — the store for `tasks`, the store and the memory
//! index for `memory`, every part for `jobs` — and running a fired job or a task here to its
//! end, with the config's MCP servers started for it (and stopped by `close`).
//! Must not: be used while a daemon runs on the same data dir (`connect` checks first): the
//! daemon holds the memory index, and its scheduler would not see changes made here at once.

use super::{Backend, DELIVER_NOW, Fired, FoundFact, OnStep, Remembered, Reply};
use crate::agent::{Followed, RunOptions, Submit};
use crate::app::{App, BuildOptions, JobExecution};
use crate::config::Config;
use crate::memory::LongTerm;
use crate::scheduler::{JobRequest, JobView};
use crate::store::{Origin, Store, Task, TaskFilter, TaskRecord, TaskState, Upsert};
use futures::future::BoxFuture;
use tokio::sync::OnceCell;

/// The data dir in this process; each part is opened on first use.
pub struct Local {
    config: Config,
    /// On whose behalf: the origin of the jobs, tasks and facts it creates.
    origin: Origin,
    store: OnceCell<Store>,
    memory: OnceCell<LongTerm>,
    app: OnceCell<App>,
}

impl Local {
    pub fn new(config: Config) -> Local {
        Local {
            config,
            origin: Origin::Cli,
            store: OnceCell::new(),
            memory: OnceCell::new(),
            app: OnceCell::new(),
        }
    }

    /// The same backend, creating things with `origin` (`hermes-agent mcp`: `mcp`).
    pub fn acting_for(mut self, origin: Origin) -> Local {
        self.origin = origin;
        self
    }

    async fn store(&self) -> anyhow::Result<&Store> {
        self.store
            .get_or_try_init(|| async {
                // Every part shares one pool when they were opened already.
                match self.app.get() {
                    Some(app) => Ok(app.store.clone()),
                    None => Store::open(&self.config.data_dir).await,
                }
            })
            .await
            .map_err(Into::into)
    }

    /// The memory index; unlike the agent, `memory` commands cannot do without it.
    async fn memory(&self) -> anyhow::Result<&LongTerm> {
        let store = self.store().await?.clone();
        self.memory
            .get_or_try_init(|| LongTerm::open(&self.config.data_dir, store))
            .await
            .map_err(Into::into)
    }

    /// Every part, with job firings run in this process. The memory index is the one
    /// `memory` opened (an index opens once at a time: `hermes-agent mcp` both remembers and
    /// runs tasks in one process).
    async fn app(&self) -> anyhow::Result<&App> {
        self.app
            .get_or_try_init(|| async {
                let options = BuildOptions {
                    memory: self.memory().await.ok().cloned(),
                    ..Default::default()
                };
                App::build_with(self.config.clone(), JobExecution::Direct, options).await
            })
            .await
            .map_err(Into::into)
    }

    /// Every part, with the MCP servers started: a task run here gets the tools it would get
    /// on the daemon (those that start within `RUN_START_WAIT`; the rest join later).
    async fn app_with_tools(&self) -> anyhow::Result<&App> {
        let app = self.app().await?;
        app.mcp.start();
        app.mcp.wait_started(crate::mcp::RUN_START_WAIT).await;
        Ok(app)
    }
}

impl Backend for Local {
    fn watch<'a>(&'a self, id: &'a str, on_step: &'a OnStep) -> Reply<'a, Task> {
        Box::pin(async move {
            use futures::StreamExt;
            // The agent's follower reads the store; with no daemon here, a task another process
            // runs (a `hermes-agent run`) is seen through its poll.
            let app = self.app().await?;
            let mut events = std::pin::pin!(app.agent.follow(id).await?);
            while let Some(event) = events.next().await {
                match event? {
                    Followed::Step(step) => on_step(&step),
                    Followed::End(task) => return Ok(task),
                }
            }
            anyhow::bail!("following task {id} ended before the task did")
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
            Ok(self.store().await?.list_tasks(&filter).await?)
        })
    }

    fn task<'a>(&'a self, id: &'a str) -> Reply<'a, TaskRecord> {
        Box::pin(async move {
            match self.store().await?.task_record(id).await? {
                Some(record) => Ok(record),
                None => anyhow::bail!("no task '{id}'; `hermes-agent tasks list` shows the ids"),
            }
        })
    }

    fn jobs(&self) -> Reply<'_, Vec<JobView>> {
        Box::pin(async move { Ok(self.app().await?.scheduler.list().await?) })
    }

    fn add_job(&self, job: JobRequest) -> Reply<'_, JobView> {
        Box::pin(async move {
            let scheduler = &self.app().await?.scheduler;
            let job = scheduler.add(job, self.origin).await?;
            Ok(scheduler.view(job).await?)
        })
    }

    fn remove_job<'a>(&'a self, id: &'a str) -> Reply<'a, ()> {
        Box::pin(async move {
            if !self.app().await?.scheduler.remove(id).await? {
                anyhow::bail!("no job '{id}'; `hermes-agent jobs list` shows the ids");
            }
            Ok(())
        })
    }

    fn fire_job<'a>(&'a self, id: &'a str) -> Reply<'a, Fired> {
        Box::pin(async move {
            let app = self.app_with_tools().await?;
            // Runs the task and queues its delivery before returning, so nothing is lost when
            // this process exits.
            let run = app.scheduler.run_now_wait(id).await?;
            let delivered = tokio::time::timeout(DELIVER_NOW, app.notifier.deliver_due())
                .await
                .unwrap_or(0);
            Ok(Fired::Here { run, delivered })
        })
    }

    fn remember<'a>(&'a self, text: &'a str, tags: &'a [String]) -> Reply<'a, Remembered> {
        Box::pin(async move {
            if text.trim().is_empty() {
                anyhow::bail!("the fact is empty; say what to remember");
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
                    created_at: r.fact.created_at,
                })
                .collect())
        })
    }

    fn forget<'a>(&'a self, id: &'a str) -> Reply<'a, ()> {
        Box::pin(async move {
            if !self.memory().await?.forget(id).await? {
                anyhow::bail!("no fact '{id}'; `hermes-agent memory search WORDS` shows ids");
            }
            Ok(())
        })
    }

    fn run_task<'a>(&'a self, task: &'a str, profile: Option<&'a str>) -> Reply<'a, Task> {
        Box::pin(async move {
            let app = self.app_with_tools().await?;
            let claimed = app
                .agent
                .create_claimed(Submit::new(
                    task.to_string(),
                    self.origin,
                    profile.map(str::to_string),
                ))
                .await?;
            let done = app
                .agent
                .run_claimed(claimed, RunOptions::default())
                .await?;
            // No daemon to send its notices: send them now (they stay queued if this fails).
            if !app.store.notices_for_task(&done.id).await?.is_empty() {
                let _ = tokio::time::timeout(DELIVER_NOW, app.notifier.deliver_due()).await;
            }
            Ok(done)
        })
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if let Some(app) = self.app.get() {
                app.mcp.stop().await;
            }
        })
    }
}
