//! Wiring: builds the parts from a [`Config`] and connects them through their handles. The
//! one place that knows every part; used by the CLI (`serve`, `run`, `jobs run`, ...) and tests.
//!
//! The scheduler's job runner and the delegate tools are built before the agent (the agent's
//! tool registry holds them), so they get the agent's task queue, made first; the agent serves
//! it once built, and the [`App`] keeps the guard that keeps it serving.
//!
//! Must not: hold behaviour of its own beyond construction and the adapter that lets the
//! scheduler reach the notifier without depending on it (the agent's side of the scheduler is
//! `agent::JobRunner`).

use crate::mcp::McpManager;
use futures::future::BoxFuture;
use hermes_config::{Config, Settings, env_map};
use hermes_engine::agent::JobExecution;
use hermes_engine::agent::{Agent, DelegateTools, JobRunner, Serving, TaskQueue};
use hermes_engine::inbox::{Finished, Handoff, Inbox};
use hermes_engine::llm::Gateway;
use hermes_engine::memory::LongTerm;
use hermes_engine::metrics::Metrics;
use hermes_engine::notify::{Notifier, NotifyError};
use hermes_engine::scheduler::{Deliver, DeliverError, Scheduler};
use hermes_engine::tools::{Registry, RegistryBuilder, Tool, builtin, manifest};
use hermes_store::util::RetryPolicy;
use hermes_store::{Job, NewNotice, Store};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Store(#[from] hermes_store::StoreError),
    #[error("model settings: {0}")]
    Llm(#[from] hermes_engine::llm::LlmError),
    #[error("notify settings: {0}")]
    Notify(#[from] hermes_engine::notify::NotifyError),
    #[error("tool manifests in {dir}: {source}")]
    Manifest {
        dir: std::path::PathBuf,
        source: hermes_engine::tools::manifest::ManifestError,
    },
    #[error("tools: {0}")]
    Registry(#[from] hermes_engine::tools::RegistryError),
    #[error("memory.embeddings: {0}")]
    Embeddings(#[from] hermes_engine::llm::EmbedError),
}

/// The embedder and its similarity floor, when `memory.embeddings` is set.
pub fn embeddings(
    m: &hermes_config::MemorySettings,
) -> Result<Option<(hermes_engine::llm::Embedder, f32)>, hermes_engine::llm::EmbedError> {
    m.embeddings
        .as_ref()
        .map(|e| Ok((hermes_engine::llm::Embedder::new(e)?, e.min_similarity)))
        .transpose()
}

/// Every part, built and connected. Cheap to clone.
#[derive(Clone)]
pub struct App {
    pub config: Arc<Config>,
    pub store: Store,
    pub agent: Agent,
    pub notifier: Notifier,
    pub scheduler: Scheduler,
    pub memory: Option<LongTerm>,
    /// The MCP servers of `mcp.servers`, whose tools join the registry once started
    /// (`serve` and `run` start them; commands that run no task do not).
    pub mcp: McpManager,
    /// The inbox of every channel (off without `inbox.email` and a chat channel); the daemon
    /// starts it.
    pub inbox: Inbox,
    /// The Matrix account of `channels.matrix` (off without it); the daemon starts it.
    pub matrix: hermes_engine::channels::Matrix,
    /// The Telegram bot of `channels.telegram` (off without it); the daemon starts it.
    pub telegram: hermes_engine::channels::Telegram,
    /// What the parts count, for `GET /metrics`; named by the data dir's node id.
    pub metrics: Metrics,
    /// Keeps the agent serving its task queue, the only way the scheduler's job runner and the
    /// delegate tools reach it. The serving loop holds the agent, so it must end with the App:
    /// dropping the last clone stops it and lets the agent go (and with it the memory index's
    /// lock). Whoever keeps parts of the App beyond it keeps a clone of this too.
    pub serving: Serving,
}

/// Adjustments to the defaults, for tests and benchmarks (short retry delays, extra tools).
#[derive(Default)]
pub struct BuildOptions {
    pub model_retry: Option<RetryPolicy>,
    pub tool_backoff: Option<Duration>,
    pub notify_retry: Option<RetryPolicy>,
    /// Registered after the built-ins and manifests.
    pub extra_tools: Vec<Arc<dyn Tool>>,
    /// How the database is opened.
    pub store: hermes_store::StoreOptions,
    /// The memory index, already open in this process (it can be opened only once at a time).
    pub memory: Option<LongTerm>,
}

impl App {
    pub async fn build(config: Config, mode: JobExecution) -> Result<App, AppError> {
        App::build_with(config, mode, BuildOptions::default()).await
    }

    pub async fn build_with(
        config: Config,
        mode: JobExecution,
        options: BuildOptions,
    ) -> Result<App, AppError> {
        let s = &config.settings;
        let (store, metrics) = open_store(&config, options.store).await?;
        let mut gateway = Gateway::new(&s.model)?.with_settings_source(&config.source);
        if let Some(p) = options.model_retry {
            gateway = gateway.with_retry(p);
        }
        let memory = open_memory(&config, &store, options.memory).await?;
        // The chat accounts are built before the notifier, which sends through them; their
        // intake is started by the daemon with the inbox, so neither holds the other.
        let matrix = hermes_engine::channels::Matrix::new(s, &config.data_dir, store.clone());
        let telegram = hermes_engine::channels::Telegram::new(s, store.clone());
        let notifier = notifier(s, &store, &matrix, &telegram, options.notify_retry)?
            .with_metrics(metrics.clone());
        // Made before the agent, for the parts its own registry holds; served once it exists.
        let (queue, desk) = TaskQueue::new();
        let runner = JobRunner::new(mode, queue.clone());
        let scheduler = scheduler(s, &store, &runner, &notifier, &metrics);
        let delegate = DelegateTools::new(queue);
        let mut all = builtin_tools(s, &store, &notifier, &scheduler, memory.as_ref(), &delegate);
        let env = env_map();
        all.extend(manifest_tools(&config, &env)?);
        all.extend(options.extra_tools);
        let registry = tool_registry(s, &store, &metrics, options.tool_backoff, all)?;
        let mcp = McpManager::with_sandbox(&s.mcp, registry.clone(), env, s.tools.sandbox);
        let agent = Agent::new(s.clone(), store.clone(), gateway, registry, memory.clone())
            .with_metrics(metrics.clone())
            .with_notifier(notifier.clone());
        let serving = agent.serve(desk);
        let inbox = Inbox::new(
            s,
            store.clone(),
            Arc::new(AppHandoff {
                agent: agent.clone(),
                scheduler: scheduler.clone(),
                notifier: notifier.clone(),
            }),
        )
        .with_metrics(metrics.clone());
        Ok(App {
            config: Arc::new(config),
            store,
            agent,
            notifier,
            scheduler,
            memory,
            mcp,
            inbox,
            matrix,
            telegram,
            metrics,
            serving,
        })
    }
}

/// The database, labelled with this node, and the metrics named after the same node.
async fn open_store(
    config: &Config,
    options: hermes_store::StoreOptions,
) -> Result<(Store, Metrics), AppError> {
    let store =
        Store::open_configured(&config.data_dir, &config.settings.storage.url, options).await?;
    // The data dir's node id names this process's work in a database other daemons may
    // share (the tasks it claims, the runs it fires) and its metrics.
    let node = hermes_engine::metrics::node_id(&config.data_dir);
    Ok((store.with_node(&node), Metrics::new(&node)))
}

/// The long-term memory given in the options, or else the one in the data dir.
async fn open_memory(
    config: &Config,
    store: &Store,
    given: Option<LongTerm>,
) -> Result<Option<LongTerm>, AppError> {
    if given.is_some() {
        return Ok(given);
    }
    let embedder = embeddings(&config.settings.memory)?;
    // Memory is an aid, not a prerequisite: without its index the agent still works.
    match LongTerm::open_with(&config.data_dir, store.clone(), embedder).await {
        Ok(m) => Ok(Some(m)),
        Err(e) => {
            tracing::warn!(error = %e, "long-term memory unavailable; continuing without it");
            Ok(None)
        }
    }
}

fn notifier(
    s: &Settings,
    store: &Store,
    matrix: &hermes_engine::channels::Matrix,
    telegram: &hermes_engine::channels::Telegram,
    retry: Option<RetryPolicy>,
) -> Result<Notifier, AppError> {
    // Replies to mail go to the allowed senders who wrote, besides notify.email.to.
    let reply_to = s
        .inbox
        .email
        .as_ref()
        .map(|e| e.allow_from.clone())
        .unwrap_or_default();
    let chats = matrix
        .sender()
        .into_iter()
        .chain(telegram.sender())
        .collect();
    let notifier = Notifier::with_chat(s.notify.clone(), store.clone(), &reply_to, chats)?;
    Ok(match retry {
        Some(p) => notifier.with_retry(p),
        None => notifier,
    })
}

fn scheduler(
    s: &Settings,
    store: &Store,
    runner: &Arc<JobRunner>,
    notifier: &Notifier,
    metrics: &Metrics,
) -> Scheduler {
    Scheduler::new(
        s.scheduler.clone(),
        store.clone(),
        runner.clone(),
        Arc::new(OutboxDeliver(notifier.clone())),
    )
    .with_profiles(s.model.profiles.keys().cloned().collect())
    .with_public_url(&s.server.public_url)
    .with_metrics(metrics.clone())
}

/// The tools built into the program; memory's only when its index is open.
fn builtin_tools(
    s: &Settings,
    store: &Store,
    notifier: &Notifier,
    scheduler: &Scheduler,
    memory: Option<&LongTerm>,
    delegate: &DelegateTools,
) -> Vec<Arc<dyn Tool>> {
    let mut all = Vec::new();
    all.extend(builtin::working::tools(store.clone()));
    all.extend(builtin::web::tools(
        s.tools.web_fetch.clone(),
        store.clone(),
    ));
    all.extend(builtin::notify::tools(notifier.clone()));
    all.extend(builtin::schedule::tools(scheduler.clone()));
    if let Some(m) = memory {
        all.extend(builtin::memory::tools(m.clone()));
    }
    all.extend(delegate.tools(s));
    all
}

/// The tools of the manifests in the manifests dir, run under the configured sandbox.
fn manifest_tools(
    config: &Config,
    env: &HashMap<String, String>,
) -> Result<Vec<Arc<dyn Tool>>, AppError> {
    let sandbox = config.settings.tools.sandbox;
    hermes_engine::tools::sandbox::announce(sandbox);
    manifest::load_dir_with(&config.manifests_dir, env, sandbox).map_err(|source| {
        AppError::Manifest {
            dir: config.manifests_dir.clone(),
            source,
        }
    })
}

fn tool_registry(
    s: &Settings,
    store: &Store,
    metrics: &Metrics,
    backoff: Option<Duration>,
    all: Vec<Arc<dyn Tool>>,
) -> Result<Registry, AppError> {
    let mut tools = RegistryBuilder::new(s.tools.clone(), store.clone())
        .with_working_max_bytes(s.memory.working_max_bytes)
        .with_metrics(metrics.clone());
    if let Some(b) = backoff {
        tools = tools.with_retry_backoff(b);
    }
    for t in all {
        tools.register(t)?;
    }
    Ok(tools.build())
}

/// The inbox's way to hand tasks and commands over: the agent's workers, the scheduler and
/// the outbox's sender.
struct AppHandoff {
    agent: Agent,
    scheduler: Scheduler,
    notifier: Notifier,
}

impl Handoff for AppHandoff {
    fn task_queued(&self) {
        self.agent.wake_workers();
    }

    fn jobs_changed(&self) {
        self.scheduler.wake();
    }

    fn notices_queued(&self) {
        self.notifier.wake_all();
    }

    fn resumed_next_run(&self, job: &Job) -> Option<chrono::DateTime<chrono::Utc>> {
        self.scheduler.resumed_next_run(job)
    }

    fn run_now<'a>(
        &'a self,
        job_id: &'a str,
    ) -> BoxFuture<'a, Result<String, hermes_engine::scheduler::SchedulerError>> {
        Box::pin(async move { self.scheduler.run_now(job_id).await })
    }

    fn decide_approval<'a>(
        &'a self,
        id: &'a str,
        decision: hermes_engine::agent::Decision,
        by: &'a str,
    ) -> BoxFuture<'a, Result<hermes_store::Approval, hermes_engine::agent::ApprovalError>> {
        Box::pin(async move { self.agent.approvals().decide(id, decision, by).await })
    }

    fn finished(&self) -> futures::stream::BoxStream<'static, Finished> {
        use tokio::sync::broadcast::error::RecvError;
        let rx = self.agent.subscribe();
        Box::pin(futures::stream::unfold(rx, |mut rx| async move {
            loop {
                match rx.recv().await {
                    // Only tasks from messages are answered; a task whose row did not come along may be one.
                    Ok(ev) => match ev.task.as_deref() {
                        Some(t)
                            if !matches!(
                                t.origin,
                                hermes_store::Origin::Email
                                    | hermes_store::Origin::Matrix
                                    | hermes_store::Origin::Telegram
                            ) =>
                        {
                            continue;
                        }
                        _ => return Some((Finished::Task(ev.id), rx)),
                    },
                    Err(RecvError::Lagged(_)) => return Some((Finished::Missed, rx)),
                    Err(RecvError::Closed) => return None,
                }
            }
        }))
    }
}

/// The scheduler's way to deliver a run's result: the notifier's durable outbox.
struct OutboxDeliver(Notifier);

impl Deliver for OutboxDeliver {
    fn deliver(&self, notice: NewNotice) -> BoxFuture<'_, Result<i64, DeliverError>> {
        Box::pin(async move {
            self.0.enqueue(notice).await.map_err(|e| match e {
                NotifyError::Store(e) => DeliverError::Store(e),
                // `enqueue` checks only the channel; a settings error cannot come from it.
                e @ (NotifyError::UnknownChannel { .. } | NotifyError::Config { .. }) => {
                    DeliverError::UnknownChannel(e.to_string())
                }
            })
        })
    }

    fn channels(&self) -> Vec<String> {
        self.0.channels()
    }
}
