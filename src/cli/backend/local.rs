//! The local backend: the data dir opened in this process, when no daemon answers.
//!
//! Owns: opening only what a command needs — the store for `tasks`, the store and the memory
//! index for `memory`, every part for `jobs` — and running a fired job here to its end.
//! Must not: be used while a daemon runs on the same data dir (`connect` checks first): the
//! daemon holds the memory index, and its scheduler would not see changes made here at once.

use super::{Backend, DELIVER_NOW, Fired, FoundFact, Remembered, Reply};
use crate::app::{App, JobExecution};
use crate::config::Config;
use crate::memory::LongTerm;
use crate::scheduler::{JobRequest, JobView};
use crate::store::{Origin, Store, Task, TaskFilter, TaskRecord, TaskState, Upsert};
use tokio::sync::OnceCell;

/// The data dir in this process; each part is opened on first use.
pub struct Local {
    config: Config,
    store: OnceCell<Store>,
    memory: OnceCell<LongTerm>,
    app: OnceCell<App>,
}

impl Local {
    pub fn new(config: Config) -> Local {
        Local {
            config,
            store: OnceCell::new(),
            memory: OnceCell::new(),
            app: OnceCell::new(),
        }
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

    /// Every part, with job firings run in this process.
    async fn app(&self) -> anyhow::Result<&App> {
        self.app
            .get_or_try_init(|| App::build(self.config.clone(), JobExecution::Direct))
            .await
            .map_err(Into::into)
    }
}

impl Backend for Local {
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
            let job = scheduler.add(job, Origin::Cli).await?;
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
            let app = self.app().await?;
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
            let (fact, how) = self.memory().await?.remember(text, tags, "cli").await?;
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
}
