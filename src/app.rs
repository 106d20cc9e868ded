//! Wiring: builds the parts from a [`Config`] and connects them through their handles. The
//! one place that knows every part; used by the CLI (`serve`, `run`, `jobs run`, ...) and tests.
//!
//! Must not: hold behaviour of its own beyond construction and the adapters that let the
//! scheduler reach the agent and the notifier without depending on them.

use crate::agent::{Agent, Claimed, DelegateTools, RunOptions, Submit};
use crate::config::{Config, env_map};
use crate::llm::{Gateway, RetryPolicy, ToolCall};
use crate::mcp::McpManager;
use crate::memory::LongTerm;
use crate::notify::Notifier;
use crate::scheduler::{Deliver, Scheduler, TaskRunner};
use crate::store::{Job, NewNotice, Origin, Store, Task};
use crate::tools::{RegistryBuilder, Tool, ToolContext, builtin, manifest};
use crate::util::lock;
use futures::future::BoxFuture;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error("model settings: {0}")]
    Llm(#[from] crate::llm::LlmError),
    #[error("notify settings: {0}")]
    Notify(#[from] crate::notify::NotifyError),
    #[error("tool manifests in {dir}: {source}")]
    Manifest {
        dir: std::path::PathBuf,
        source: crate::tools::manifest::ManifestError,
    },
    #[error("tools: {0}")]
    Registry(#[from] crate::tools::RegistryError),
}

/// How tasks created by job firings get run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobExecution {
    /// The daemon: the worker pool runs them; firings wait for the result.
    Pool,
    /// No daemon (`jobs run` from the CLI): run in the caller's process.
    Direct,
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
}

/// Adjustments to the defaults, for tests and benchmarks (short retry delays, extra tools).
#[derive(Default)]
pub struct BuildOptions {
    pub model_retry: Option<RetryPolicy>,
    pub tool_backoff: Option<Duration>,
    pub notify_retry: Option<crate::notify::RetryPolicy>,
    /// Registered after the built-ins and manifests.
    pub extra_tools: Vec<Arc<dyn Tool>>,
    /// How the database is opened.
    pub store: crate::store::StoreOptions,
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
        let store = Store::open_with(&config.data_dir, options.store).await?;
        let mut gateway = Gateway::new(&s.model)?.with_settings_source(&config.source);
        if let Some(p) = options.model_retry {
            gateway = gateway.with_retry(p);
        }
        // Memory is an aid, not a prerequisite: without its index the agent still works.
        let memory = match options.memory {
            Some(m) => Some(m),
            None => match LongTerm::open(&config.data_dir, store.clone()).await {
                Ok(m) => Some(m),
                Err(e) => {
                    tracing::warn!(error = %e, "long-term memory unavailable; continuing without it");
                    None
                }
            },
        };
        let mut notifier = Notifier::new(s.notify.clone(), store.clone())?;
        if let Some(p) = options.notify_retry {
            notifier = notifier.with_retry(p);
        }
        let agent_link: Arc<OnceLock<Agent>> = Arc::new(OnceLock::new());
        let runner = Arc::new(AgentRunner {
            agent: agent_link.clone(),
            mode,
            claimed: Mutex::new(HashMap::new()),
        });
        let scheduler = Scheduler::new(
            s.scheduler.clone(),
            store.clone(),
            runner,
            Arc::new(OutboxDeliver(notifier.clone())),
        )
        .with_profiles(s.model.profiles.keys().cloned().collect())
        .with_public_url(&s.server.public_url);

        let mut tools = RegistryBuilder::new(s.tools.clone(), store.clone());
        if let Some(b) = options.tool_backoff {
            tools = tools.with_retry_backoff(b);
        }
        let delegate = DelegateTools::new();
        let mut all = Vec::new();
        all.extend(builtin::working::tools(store.clone()));
        all.extend(builtin::web::tools(
            s.tools.web_fetch.clone(),
            store.clone(),
        ));
        all.extend(builtin::notify::tools(notifier.clone()));
        all.extend(builtin::schedule::tools(scheduler.clone()));
        if let Some(m) = &memory {
            all.extend(builtin::memory::tools(m.clone()));
        }
        all.extend(delegate.tools(s));
        let env = env_map();
        let manifests = manifest::load_dir(&config.manifests_dir, &env).map_err(|source| {
            AppError::Manifest {
                dir: config.manifests_dir.clone(),
                source,
            }
        })?;
        all.extend(manifests);
        all.extend(options.extra_tools);
        for t in all {
            tools.register(t)?;
        }
        let registry = tools.build();
        let mcp = McpManager::new(&s.mcp, registry.clone(), env);
        let agent = Agent::new(s.clone(), store.clone(), gateway, registry, memory.clone());
        delegate.bind(&agent);
        let _ = agent_link.set(agent.clone());
        Ok(App {
            config: Arc::new(config),
            store,
            agent,
            notifier,
            scheduler,
            memory,
            mcp,
        })
    }
}

/// The scheduler's way to run a firing's task.
///
/// The link is set right after the agent is built; the agent (through the schedule tools) holds
/// the scheduler, which holds this runner: a cycle of handles that lives as long as the process.
struct AgentRunner {
    agent: Arc<OnceLock<Agent>>,
    mode: JobExecution,
    /// Direct mode: tasks created for a firing, held between `create` and `run`.
    claimed: Mutex<HashMap<String, Claimed>>,
}

impl AgentRunner {
    fn agent(&self) -> Result<&Agent, String> {
        self.agent
            .get()
            .ok_or_else(|| "the agent is not ready yet".to_string())
    }
}

/// A job's firing as a task request.
fn job_task(job: &Job) -> Submit {
    Submit {
        job_id: Some(job.id.clone()),
        ..Submit::new(job.task.clone(), Origin::Job, job.profile.clone())
    }
}

impl TaskRunner for AgentRunner {
    fn create_many<'a>(&'a self, jobs: &'a [Job]) -> BoxFuture<'a, Vec<Result<String, String>>> {
        Box::pin(async move {
            let all_failed = |e: String| jobs.iter().map(|_| Err(e.clone())).collect();
            let agent = match self.agent() {
                Ok(a) => a,
                Err(e) => return all_failed(e),
            };
            match self.mode {
                // Claimed tasks are kept one by one for `run`.
                JobExecution::Direct => {
                    let mut ids = Vec::with_capacity(jobs.len());
                    for job in jobs {
                        ids.push(self.create(job).await);
                    }
                    ids
                }
                JobExecution::Pool => {
                    match agent.submit_many(jobs.iter().map(job_task).collect()).await {
                        Ok(tasks) => tasks
                            .into_iter()
                            .map(|t| t.map(|t| t.id).map_err(|e| e.to_string()))
                            .collect(),
                        Err(e) => all_failed(e.to_string()),
                    }
                }
            }
        })
    }

    fn create<'a>(&'a self, job: &'a Job) -> BoxFuture<'a, Result<String, String>> {
        Box::pin(async move {
            let agent = self.agent()?;
            let submit = job_task(job);
            match self.mode {
                // Pending: a worker of the pool takes it.
                JobExecution::Pool => Ok(agent.create(submit).await.map_err(|e| e.to_string())?.id),
                // Claimed for this process, kept until `run` (a daemon elsewhere must not take it).
                JobExecution::Direct => {
                    let claimed = agent
                        .create_claimed(submit)
                        .await
                        .map_err(|e| e.to_string())?;
                    let id = claimed.task().id.clone();
                    lock(&self.claimed).insert(id.clone(), claimed);
                    Ok(id)
                }
            }
        })
    }

    fn abandon<'a>(&'a self, task_id: &'a str, why: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            lock(&self.claimed).remove(task_id);
            let Ok(agent) = self.agent() else { return };
            if let Err(e) = agent.abandon(task_id, why).await {
                // It stays as it is until the next start marks it interrupted.
                tracing::error!(task = task_id, error = %e, "could not end a task whose job run was not recorded");
            }
        })
    }

    fn run<'a>(&'a self, task_id: &'a str) -> BoxFuture<'a, Result<Task, String>> {
        Box::pin(async move {
            let agent = self.agent()?;
            match self.mode {
                JobExecution::Direct => {
                    let claimed = lock(&self.claimed).remove(task_id);
                    match claimed {
                        Some(c) => agent.run_claimed(c, RunOptions::default()).await,
                        None => agent.execute(task_id, RunOptions::default()).await,
                    }
                    .map_err(|e| e.to_string())
                }
                JobExecution::Pool => {
                    let rx = agent.subscribe();
                    agent.wake_workers();
                    // The agent enforces the task's own limit; this wait only has to outlast
                    // a queue in front of it.
                    let limit = Duration::from_secs(24 * 3600);
                    agent
                        .wait(task_id, rx, limit)
                        .await
                        .map_err(|e| e.to_string())
                }
            }
        })
    }

    fn check_precheck(&self, tool: &str, arguments: &serde_json::Value) -> Result<(), String> {
        self.agent()?
            .registry()
            .check_call(tool, arguments)
            .map_err(|e| e.to_string())
    }

    fn precheck<'a>(
        &'a self,
        tool: &'a str,
        arguments: serde_json::Value,
        job: &'a Job,
    ) -> BoxFuture<'a, Result<serde_json::Value, String>> {
        Box::pin(async move {
            let agent = self.agent()?;
            let ctx = ToolContext {
                task_id: String::new(),
                origin: Origin::Job,
                job_id: Some(job.id.clone()),
                depth: 0,
                profile: job.profile.clone().unwrap_or_default(),
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
                .map_err(|e| e.to_string())
        })
    }
}

/// The scheduler's way to deliver a run's result: the notifier's durable outbox.
struct OutboxDeliver(Notifier);

impl Deliver for OutboxDeliver {
    fn deliver(&self, notice: NewNotice) -> BoxFuture<'_, Result<i64, String>> {
        Box::pin(async move { self.0.enqueue(notice).await.map_err(|e| e.to_string()) })
    }

    fn channels(&self) -> Vec<String> {
        self.0.channels()
    }
}
