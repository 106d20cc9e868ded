//! The agent: the plan-execute-check loop, the task state machine and sub-agents.
//!
//! Owns: turning a task into model calls and tool calls until an answer, within `max_steps`
//! and the task's wall-clock limit; recording every transition and step through the store;
//! the worker pool that takes pending tasks in order; cancellation; the orders of the parts
//! built before it (the job runner, the delegate tools), taken from its task queue.
//! Must not: write SQL or HTTP itself; it reaches the model through `llm`, tools through the
//! `tools` registry, and memory through `memory`. Each task owns its own message list.

mod approvals;
mod claim;
mod delegate;
mod elsewhere;
mod follow;
mod guard;
mod hold;
mod jobs;
mod opening;
mod own;
mod pool;
pub mod prompt;
mod queue;
mod round;
mod run;
mod stop;
mod tally;
mod trace;
mod unsaved;

use stop::{Running, StopReason};

pub use approvals::{ApprovalError, Approvals, Decision, VIA_HEADER, answered_via};
pub use claim::Claimed;
pub use delegate::DelegateTools;
pub(crate) use delegate::MAX_DEPTH;
pub use elsewhere::Heard;
pub use follow::Followed;
pub use jobs::{JobExecution, JobRunner};
pub use queue::{Desk, Serving, TaskQueue};

use crate::llm::Gateway;
use crate::memory::LongTerm;
use crate::tools::Registry;
use hermes_config::Settings;
use hermes_store::util::{configure, lock};
use hermes_store::{
    FailReason, MAX_TASK_CHARS, NewTask, Origin, Step, Store, StoreError, Task, TaskOutcome,
    TaskState,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, broadcast, mpsc};

/// How long a cancel waits for the running task to notice and end, reporting the state it
/// ends in.
const CANCEL_WAIT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("the task text is empty; say what the agent should do")]
    EmptyTask,
    #[error("the task has {chars} characters; the limit is {max}")]
    TaskTooLong { chars: usize, max: usize },
    #[error("unknown model profile '{name}'; defined profiles: {known}")]
    UnknownProfile { name: String, known: String },
    #[error("task '{0}' not found; `hermes-agent tasks list` shows the ids")]
    NotFound(String),
    #[error("task '{id}' already {state}; only pending or running tasks can be cancelled")]
    AlreadyFinished { id: String, state: TaskState },
    #[error(
        "task '{0}' is running in another process (e.g. a `hermes-agent run`); stop it there (Ctrl-C)"
    )]
    RunningElsewhere(String),
    #[error("the daemon is shutting down and takes no new tasks; submit it again once it is back")]
    ShuttingDown,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A request to run a task.
#[derive(Debug, Clone, Default)]
pub struct Submit {
    pub task: String,
    pub origin: Origin,
    pub profile: Option<String>,
    pub parent_id: Option<String>,
    pub job_id: Option<String>,
}

impl Submit {
    /// A top-level task (no parent, no job) from `origin`, on `profile` or the default one.
    pub fn new(task: impl Into<String>, origin: Origin, profile: Option<String>) -> Submit {
        Submit {
            task: task.into(),
            origin,
            profile,
            ..Submit::default()
        }
    }
}

/// A task reached a final state (announced to waiters: `wait: true`, jobs, sub-agents).
#[derive(Debug, Clone)]
pub struct TaskFinished {
    pub id: String,
    pub state: TaskState,
    /// The row as its runner finished it, when someone was listening: [`Agent::wait`] returns
    /// it without reading it back (an end that could not be written yet is the row shown in
    /// its place, see `unsaved.rs`). `None` when the task was finished elsewhere (a cancel of
    /// a pending task).
    pub task: Option<Arc<Task>>,
}

/// A trace row was stored for a task (announced to live followers: the API's event stream and
/// the dashboard). It carries only where to look: followers read the row from the store, the
/// one source of truth, so a follower that lags or joins late misses nothing.
#[derive(Debug, Clone)]
pub struct StepRecorded {
    pub task_id: String,
    pub seq: i64,
}

/// How one execution is shaped; the defaults are a top-level task.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Receives every trace row as it is recorded (the live timeline of `run`).
    pub observer: Option<mpsc::UnboundedSender<Step>>,
    /// A sub-agent's own tool list, within the global allowlist.
    pub restrict: Option<Vec<String>>,
    /// A sub-agent's system prompt.
    pub agent_prompt: Option<String>,
    /// Sub-agent nesting depth.
    pub depth: u32,
    /// Overrides `agent.task_timeout_s`.
    pub timeout: Option<Duration>,
    /// Who continues the task if it waits for a person: `None`, the daemon's workers; the
    /// task's own id for a `run`, which continues it itself.
    pub resumer: Option<String>,
}

/// The agent service: a cheap-to-clone handle shared by the CLI, the API, the worker pool and
/// the loop serving its [`TaskQueue`] (the way in of the scheduler and the delegate tools,
/// which are built before it).
#[derive(Clone)]
pub struct Agent {
    inner: Arc<Inner>,
}

struct Inner {
    settings: Settings,
    store: Store,
    gateway: Gateway,
    registry: Registry,
    /// Long-term facts; `None` when the index could not be opened (the agent still works).
    memory: Option<LongTerm>,
    /// Running tasks' stop switches, so the API can cancel one and shutdown can stop all.
    running: Mutex<HashMap<String, Running>>,
    /// Ends the runner could not write yet, by task id: shown in place of the stored row and
    /// retried in the background (see `unsaved.rs`).
    unsaved: Mutex<HashMap<String, Task>>,
    /// Every finished task is announced here.
    finished: broadcast::Sender<TaskFinished>,
    /// Every stored trace row is announced here.
    steps: broadcast::Sender<StepRecorded>,
    /// News of tasks other daemons run on a shared database (see `elsewhere.rs`).
    elsewhere: elsewhere::Watchers,
    /// Wakes an idle worker when a task is queued.
    queued: Notify,
    /// Whether a worker should look for held tasks ready to go on (`pool.rs`).
    holds: pool::HoldWatch,
    /// Where new approval requests are announced (`tools.approval_notify`), given at
    /// construction ([`Agent::with_notifier`]); none: requests are only listed.
    notifier: Option<crate::notify::Notifier>,
    /// Set when the daemon begins to shut down: no new task is queued from then on (one
    /// would only wait, pending, for the next start).
    closed: std::sync::atomic::AtomicBool,
    /// Cancelled with `closed`: a wait on a task still pending ends then (its answer is "it
    /// runs at the next start"), rather than hold its client until the server stops.
    closing: tokio_util::sync::CancellationToken,
    /// Where task ends and model calls are counted ([`Agent::with_metrics`]).
    metrics: crate::metrics::Metrics,
}

impl Agent {
    pub fn new(
        settings: Settings,
        store: Store,
        gateway: Gateway,
        registry: Registry,
        memory: Option<LongTerm>,
    ) -> Agent {
        let (finished, _) = broadcast::channel(1024);
        let (steps, _) = broadcast::channel(1024);
        Agent {
            inner: Arc::new(Inner {
                settings,
                store,
                gateway,
                registry,
                memory,
                running: Mutex::new(HashMap::new()),
                unsaved: Mutex::new(HashMap::new()),
                finished,
                steps,
                elsewhere: Default::default(),
                queued: Notify::new(),
                holds: Default::default(),
                notifier: Default::default(),
                closed: Default::default(),
                closing: Default::default(),
                metrics: Default::default(),
            }),
        }
    }

    /// Announce new approval requests through `notifier` (`tools.approval_notify`). Called
    /// while building, before the agent is shared.
    pub fn with_notifier(mut self, notifier: crate::notify::Notifier) -> Agent {
        configure(&mut self.inner, |inner| inner.notifier = Some(notifier));
        self
    }

    /// Count task ends and model calls in `metrics`. Called while building, before the agent
    /// is shared.
    pub fn with_metrics(mut self, metrics: crate::metrics::Metrics) -> Agent {
        configure(&mut self.inner, |inner| inner.metrics = metrics);
        self
    }

    pub fn settings(&self) -> &Settings {
        &self.inner.settings
    }

    /// `storage.node_lease_s`: how long a process holding work may stay silent.
    pub fn node_lease(&self) -> Duration {
        Duration::from_secs(self.inner.settings.storage.node_lease_s.max(1))
    }

    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    pub fn registry(&self) -> &Registry {
        &self.inner.registry
    }

    /// The model gateway every task calls through (its identity record is the daemon's).
    pub fn gateway(&self) -> &Gateway {
        &self.inner.gateway
    }

    pub fn memory(&self) -> Option<&LongTerm> {
        self.inner.memory.as_ref()
    }

    /// Store a new pending task (it runs when [`Agent::execute`] or a worker takes it).
    pub async fn create(&self, req: Submit) -> Result<Task, AgentError> {
        let new = self.new_task(req, false)?;
        Ok(self.inner.store.tasks().create(&new).await?)
    }

    /// Store several new pending tasks in one statement (a burst of job firings) and wake the
    /// workers. The outer error: nothing was stored; inside, each request's task or why it was
    /// refused, in the order given.
    pub(crate) async fn submit_many(
        &self,
        reqs: Vec<Submit>,
    ) -> Result<Vec<Result<Task, AgentError>>, AgentError> {
        let checked: Vec<Result<NewTask, AgentError>> =
            reqs.into_iter().map(|r| self.new_task(r, false)).collect();
        let valid: Vec<NewTask> = checked
            .iter()
            .filter_map(|c| c.as_ref().ok().cloned())
            .collect();
        let mut created = self
            .inner
            .store
            .tasks()
            .create_many(&valid)
            .await?
            .into_iter();
        let missing = || StoreError::Corrupt("an inserted task did not come back".into()).into();
        let out = checked
            .into_iter()
            .map(|c| c.and_then(|_| created.next().ok_or_else(missing)))
            .collect();
        // One wake-up per task, so every idle worker gets one.
        for _ in 0..valid.len() {
            self.inner.queued.notify_one();
        }
        Ok(out)
    }

    fn new_task(&self, req: Submit, claimed: bool) -> Result<NewTask, AgentError> {
        let text = req.task.trim();
        if text.is_empty() {
            return Err(AgentError::EmptyTask);
        }
        let chars = text.chars().count();
        if chars > MAX_TASK_CHARS {
            return Err(AgentError::TaskTooLong {
                chars,
                max: MAX_TASK_CHARS,
            });
        }
        let profile = match req.profile.as_deref() {
            Some(p) if !p.is_empty() => p.to_string(),
            _ => self.inner.settings.model.default_profile.clone(),
        };
        if !self.inner.settings.model.profiles.contains_key(&profile) {
            let known: Vec<&str> = self
                .inner
                .settings
                .model
                .profiles
                .keys()
                .map(String::as_str)
                .collect();
            return Err(AgentError::UnknownProfile {
                name: profile,
                known: known.join(", "),
            });
        }
        Ok(NewTask {
            task: text.to_string(),
            origin: req.origin,
            profile,
            parent_id: req.parent_id,
            job_id: req.job_id,
            claimed,
        })
    }

    /// Store a task and wake a worker of the pool to run it.
    pub async fn submit(&self, req: Submit) -> Result<Task, AgentError> {
        if self.inner.closed.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(AgentError::ShuttingDown);
        }
        let task = self.create(req).await?;
        self.inner.queued.notify_one();
        Ok(task)
    }

    /// Take no new tasks through [`Agent::submit`] from now on (the daemon is shutting down).
    pub fn close_intake(&self) {
        self.inner
            .closed
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.inner.closing.cancel();
    }

    /// Wake an idle worker (a task was created some other way, e.g. by a job firing).
    pub fn wake_workers(&self) {
        self.inner.queued.notify_one();
    }

    /// Wake every idle worker: work was queued elsewhere, perhaps a burst of it.
    pub fn wake_all_workers(&self) {
        self.inner.queued.notify_waiters();
    }

    /// A held task may be ready to go on (its requests answered or expired, its hold taken
    /// after an answer came, news from another daemon): a worker looks, and is woken to.
    pub fn wake_for_holds(&self) {
        self.inner.holds.raise();
        self.inner.queued.notify_one();
    }

    /// Announcements of finished tasks. Subscribe before submitting to never miss one.
    pub fn subscribe(&self) -> broadcast::Receiver<TaskFinished> {
        self.inner.finished.subscribe()
    }

    /// Announcements of stored trace rows (see [`StepRecorded`]). Subscribe before reading the
    /// rows recorded so far, so none falls between the read and the first announcement.
    pub(crate) fn subscribe_steps(&self) -> broadcast::Receiver<StepRecorded> {
        self.inner.steps.subscribe()
    }

    /// Wait until `id` is finished (or `timeout` passes) and return it as it then is. A task
    /// waiting for a person is waited for through its wait.
    pub async fn wait(
        &self,
        id: &str,
        rx: broadcast::Receiver<TaskFinished>,
        timeout: Duration,
    ) -> Result<Task, AgentError> {
        self.wait_for(id, rx, timeout, |t| t.state.is_finished())
            .await
    }

    /// Wait until `id` is finished or waits for a person (or `timeout` passes): what a client
    /// that must not block on a person needs (`wait: true`, `hermes-agent mcp`'s `run_task`).
    pub async fn wait_settled(
        &self,
        id: &str,
        rx: broadcast::Receiver<TaskFinished>,
        timeout: Duration,
    ) -> Result<Task, AgentError> {
        self.wait_for(id, rx, timeout, |t| t.state.is_finished() || t.waiting)
            .await
    }

    async fn wait_for(
        &self,
        id: &str,
        mut rx: broadcast::Receiver<TaskFinished>,
        timeout: Duration,
        settled: fn(&Task) -> bool,
    ) -> Result<Task, AgentError> {
        let deadline = tokio::time::Instant::now() + timeout;
        // A task on a shared database may run on another daemon: its end is news from there.
        let elsewhere = self.watch_elsewhere(id);
        let poll = self.poll_without_news(id);
        let closing = &self.inner.closing;
        loop {
            let t = self.read_waited(id, deadline).await?;
            // Still pending while the daemon stops: no worker takes it before the next start.
            if settled(&t) || (t.state == TaskState::Pending && closing.is_cancelled()) {
                return Ok(t);
            }
            // Other tasks' announcements are skipped without touching the store: with many
            // waiters, re-reading on every event would cost waiters × events queries.
            loop {
                let heard = tokio::select! {
                    got = tokio::time::timeout_at(deadline, rx.recv()) => got,
                    _ = elsewhere.news() => break,
                    _ = elsewhere::poll(poll) => break,
                    _ = closing.cancelled(), if !closing.is_cancelled() => break,
                };
                match heard {
                    Err(_) => return Ok(self.as_known(self.inner.store.tasks().get(id).await?)),
                    Ok(Ok(ev)) if ev.id != id => continue,
                    // Our task, with the row its runner finished: no need to read it back.
                    Ok(Ok(TaskFinished { task: Some(t), .. })) if settled(&t) => {
                        return Ok(Arc::unwrap_or_clone(t));
                    }
                    Ok(Err(broadcast::error::RecvError::Closed)) => {
                        return Ok(self.as_known(self.inner.store.tasks().get(id).await?));
                    }
                    // Our task, or we lagged behind and may have missed it: look again.
                    Ok(_) => break,
                }
            }
        }
    }

    /// A task by id or unambiguous prefix (its unsaved end shown, see `unsaved.rs`).
    pub async fn find(&self, id: &str) -> Result<Task, AgentError> {
        match self.inner.store.tasks().find(id).await? {
            Some(task) => Ok(self.as_known(task)),
            None => Err(AgentError::NotFound(id.to_string())),
        }
    }

    /// Cancel a pending or running task.
    pub async fn cancel(&self, id: &str) -> Result<Task, AgentError> {
        let task = self.find(id).await?;
        if task.state.is_finished() {
            return Err(AgentError::AlreadyFinished {
                id: task.id,
                state: task.state,
            });
        }
        // Subscribed before the stop, so the end of the task cannot be missed.
        let rx = self.subscribe();
        if self.stop_running(&task.id, StopReason::Cancelled) {
            // The loop notices the stop at its next await; report the state it ends in.
            return self.wait(&task.id, rx, CANCEL_WAIT).await;
        }
        if task.waiting {
            return self.cancel_waiting(&task).await;
        }
        // Not running here: only a task still pending is finished directly. One running in
        // another process (a CLI `run`) cannot be stopped from here, and must not be marked.
        if self
            .inner
            .store
            .tasks()
            .cancel_pending(&task.id, "cancelled before it started")
            .await?
        {
            self.announce(&task.id, TaskState::Cancelled, None);
            return Ok(self.inner.store.tasks().get(&task.id).await?);
        }
        let now = self.inner.store.tasks().get(&task.id).await?;
        if now.state.is_finished() {
            return Ok(now);
        }
        Err(AgentError::RunningElsewhere(task.id))
    }

    /// Cancel a task that waits for a person: it ends `cancelled`, its open requests are
    /// closed (denied, "the task was cancelled") and its checkpoint dropped; so are those of
    /// its sub-tasks that wait with it.
    fn cancel_waiting<'a>(
        &'a self,
        task: &'a Task,
    ) -> futures::future::BoxFuture<'a, Result<Task, AgentError>> {
        Box::pin(self.cancel_waiting_one(task))
    }

    async fn cancel_waiting_one(&self, task: &Task) -> Result<Task, AgentError> {
        let store = &self.inner.store;
        for child in store.tasks().waiting_children(&task.id).await? {
            let child = store.tasks().get(&child).await?;
            self.cancel_waiting(&child).await?;
        }
        let outcome = TaskOutcome::ended(
            TaskState::Cancelled,
            "cancelled while waiting for approval",
            FailReason::Cancelled,
        )
        .counted(
            task.parse_failures,
            task.prompt_tokens,
            task.completion_tokens,
        );
        let done = store.tasks().finish_row(&task.id, &outcome).await?;
        store.holds().remove(&task.id).await?;
        for a in store.approvals().of_task(&task.id).await? {
            if a.state == hermes_store::ApprovalState::Open {
                store
                    .approvals()
                    .decide(
                        &a.id,
                        hermes_store::ApprovalState::Denied,
                        Some("the task was cancelled"),
                        "cancel",
                    )
                    .await?;
            }
        }
        let done = match done {
            Some(d) => d,
            None => store.tasks().get(&task.id).await?,
        };
        self.announce(&done.id, done.state, Some(&done));
        Ok(done)
    }

    /// How many tasks are running in this process.
    pub fn running_count(&self) -> usize {
        lock(&self.inner.running).len()
    }

    /// End a task that must not run (a job firing whose run row could not be written: its
    /// answer would have nowhere to go): pending → cancelled with `why`; running here →
    /// stopped; claimed by this process and not yet started (a job's direct run) → cancelled.
    pub async fn abandon(&self, id: &str, why: &str) -> Result<(), AgentError> {
        if self.stop_running(id, StopReason::Cancelled) {
            return Ok(());
        }
        if self.inner.store.tasks().cancel_pending(id, why).await? {
            self.announce(id, TaskState::Cancelled, None);
            return Ok(());
        }
        let outcome = TaskOutcome::ended(TaskState::Cancelled, why, FailReason::Cancelled);
        if let Some(done) = self.inner.store.tasks().finish_row(id, &outcome).await? {
            self.announce(id, done.state, Some(&done));
        }
        Ok(())
    }

    fn announce(&self, id: &str, state: TaskState, task: Option<&Task>) {
        // No receivers is normal (nobody waiting); then the row is not even copied.
        if self.inner.finished.receiver_count() == 0 {
            return;
        }
        let _ = self.inner.finished.send(TaskFinished {
            id: id.to_string(),
            state,
            task: task.map(|t| Arc::new(t.clone())),
        });
    }
}
