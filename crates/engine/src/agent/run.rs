//! One task's execution: pending → running → succeeded | failed | cancelled, and the
//! plan-execute-check loop in between. Every model call and tool call becomes a trace row.
//! The counters and unwritten rows that outlive the loop are in `tally.rs`; one round of tool
//! calls is in `round.rs`.

use super::guard::LoopGuard;
use super::hold::{Checkpoint, HeldRound};
use super::tally::{LoopEnd, Tally, final_outcome};
use super::{Agent, RunOptions, StopReason, trace};
use crate::llm::{Gateway, LlmError, Message, ModelReply, ToolCall};
use crate::memory::{ShortTerm, Summariser, SummaryModel};
use crate::metrics::ModelOutcome;
use crate::tools::{ToolContext, ToolError, ToolOutcome, shape};
use futures::future::BoxFuture;
use hermes_store::util::{Backoff, lock};
use hermes_store::{FailReason, NewStep, StorageFault, StoreError, Task};
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How long a step's trace rows wait for a database out of reach (no free connection in the
/// pool while several busy daemons share one server, a server restarting) before the task fails
/// for it: the rows are kept and written again, so a moment's saturation does not cost a task
/// its run. A write after this node lost its lease is still refused by the write itself.
const STEP_WRITE_PATIENCE: Duration = Duration::from_secs(30);
const STEP_WRITE_RETRY: Backoff =
    Backoff::new(Duration::from_millis(200), Duration::from_secs(5)).with_jitter();

/// The model-backed summariser: a short `fast`-profile call through the gateway handle.
struct GatewaySummary {
    gateway: Gateway,
    profile: String,
}

impl SummaryModel for GatewaySummary {
    fn summarise<'a>(&'a self, prompt: String) -> BoxFuture<'a, Result<String, LlmError>> {
        Box::pin(async move {
            let messages = [
                Message::system(
                    "You write terse progress notes for an agent. Reply with the note only.",
                ),
                Message::user(prompt),
            ];
            self.gateway
                .chat(&self.profile, &messages, &[])
                .await
                .map(|r| r.content)
        })
    }
}

impl Agent {
    /// Run a stored task now, in the caller's tokio task. A task that is no longer pending
    /// (taken by another worker, or cancelled) is returned as it is, not run twice.
    pub async fn execute(
        &self,
        task_id: &str,
        opts: RunOptions,
    ) -> Result<Task, super::AgentError> {
        let store = &self.inner.store;
        match store.tasks().start_row(task_id).await? {
            Some(task) => self.drive(task, opts, None).await,
            None => Ok(store.tasks().get(task_id).await?),
        }
    }

    /// Run a task a worker already took from the queue (it is `running`).
    pub(super) async fn run_taken(
        &self,
        task: Task,
        opts: RunOptions,
    ) -> Result<Task, super::AgentError> {
        self.drive(task, opts, None).await
    }

    /// Run a task this process created with [`Agent::create_claimed`].
    pub async fn run_claimed(
        &self,
        claimed: super::Claimed,
        opts: RunOptions,
    ) -> Result<Task, super::AgentError> {
        self.drive(claimed.into_task(), opts, None).await
    }

    /// The running task's life: the loop under its limits, then its final state — or, when it
    /// waits for a person, its checkpoint (stored by the loop) and no end yet.
    pub(super) async fn drive(
        &self,
        task: Task,
        opts: RunOptions,
        resume: Option<Checkpoint>,
    ) -> Result<Task, super::AgentError> {
        let (token, why) = self.register_running(&task);
        tracing::info!(task = %task.id, origin = %task.origin, profile = %task.profile, "task started");
        let started = Instant::now();
        let limit = opts.timeout.unwrap_or(Duration::from_secs(
            self.inner.settings.agent.task_timeout_s,
        ));
        let (tally, used_before) = match &resume {
            Some(cp) => (
                Tally::restored(cp.counts()),
                Duration::from_millis(cp.used_ms),
            ),
            None => (Tally::default(), Duration::ZERO),
        };
        let deadline = tokio::time::Instant::now() + limit.saturating_sub(used_before);
        let run = Run {
            agent: self,
            task: &task,
            opts: &opts,
            tally: &tally,
            deadline,
            budget: Budget {
                limit,
                used_before,
                started,
            },
        };
        let end = run.bounded(resume, &token, &why).await;
        self.unregister_running(&task.id, &why);
        match &end {
            Ok(LoopEnd::Held) => {}
            // Declared dead: its sub-agents are the other nodes' too.
            Err(StoreError::Fenced(_)) => {
                self.stop_children(&task.id, StopReason::Fenced);
            }
            // A sub-agent whose call was dropped (this task's limit, a cancel) still runs.
            _ => {
                self.stop_children(&task.id, StopReason::ParentEnded);
            }
        }
        if let Err(StoreError::Fenced(_)) = end {
            // Declared dead meanwhile: what was not written stays unwritten, and the end is
            // the one the other nodes wrote.
            tracing::warn!(task = %task.id,
                "fenced: this node lost its lease on the database while running the task; the other nodes ended it, and it does nothing more for it here");
            return Ok(self.inner.store.tasks().get(&task.id).await?);
        }
        // A model call the loop was dropped in: its time, and why; its tokens are unknown.
        if let Some((step, took)) = tally.cut_call() {
            let why = match &end {
                Ok(LoopEnd::Failed { error, .. }) => error.as_str(),
                _ => "the task ended",
            };
            let error = format!("cut off after {:.1} s: {why}", took.as_secs_f64());
            run.record(trace::model_error(
                step,
                &task.profile,
                error,
                took.as_millis() as i64,
            ));
        }
        // Rows the loop recorded before it was cut off (a model call whose tools were running).
        let end = match run.flush().await {
            Ok(()) => end,
            Err(e) => end.and(Err(e)),
        };
        self.conclude(&task, end, &tally, started).await
    }

    /// Make `task` stoppable (cancel, shutdown, fencing) while it runs here: its token, and
    /// where the reason for a stop is left.
    fn register_running(&self, task: &Task) -> (CancellationToken, Arc<Mutex<Option<StopReason>>>) {
        let token = CancellationToken::new();
        let why = Arc::new(Mutex::new(None));
        lock(&self.inner.running).insert(
            task.id.clone(),
            super::Running {
                stop: token.clone(),
                why: why.clone(),
                epoch: task.node_epoch.clone(),
                parent: task.parent_id.clone(),
            },
        );
        (token, why)
    }

    /// Forget the running entry of `id` — only our own: once held, a worker may already
    /// continue the task under an entry of its own.
    fn unregister_running(&self, id: &str, why: &Arc<Mutex<Option<StopReason>>>) {
        let mut running = lock(&self.inner.running);
        if running.get(id).is_some_and(|r| Arc::ptr_eq(&r.why, why)) {
            running.remove(id);
        }
    }

    /// Record how the loop ended: held for a person (no end yet), or the task's final row —
    /// kept and retried in the background when the database will not take it now.
    async fn conclude(
        &self,
        task: &Task,
        end: Result<LoopEnd, StoreError>,
        tally: &Tally,
        started: Instant,
    ) -> Result<Task, super::AgentError> {
        let store = &self.inner.store;
        if let Ok(LoopEnd::Held) = end {
            let now = store.tasks().get(&task.id).await?;
            tracing::info!(task = %task.id, ms = started.elapsed().as_millis() as u64,
                "task waits for approval; its worker is free");
            self.announce(&now.id, now.state, Some(&now));
            return Ok(now);
        }
        let out = final_outcome(end, tally);
        let done = match store.tasks().finish_row(&task.id, &out).await {
            Ok(Some(done)) => done,
            // Finished already, by someone else (the shutdown marking every running task).
            Ok(None) => store.tasks().get(&task.id).await?,
            Err(e) => {
                // Never a silent `running`: the end is kept, shown in the row's place and
                // written once the database takes it (`unsaved.rs`); waiters (API clients, a
                // job's run holding its lock) hear it now; the runner's caller gets the error.
                tracing::error!(
                    task = %task.id,
                    state = %out.state,
                    reason = out.reason.map(FailReason::as_str).unwrap_or(""),
                    error = %e,
                    "task finished, but its end could not be written; retrying in the background"
                );
                let shown = self.keep_unsaved(task, out, &e);
                self.announce(&task.id, shown.state, Some(&shown));
                return Err(e.into());
            }
        };
        tracing::info!(
            task = %done.id,
            state = %done.state,
            reason = done.reason.map(FailReason::as_str).unwrap_or(""),
            ms = started.elapsed().as_millis() as u64,
            tokens_in = done.prompt_tokens,
            tokens_out = done.completion_tokens,
            "task finished"
        );
        let (state, origin) = (done.state.as_str(), done.origin.as_str());
        self.inner
            .metrics
            .observe_task(state, origin, started.elapsed());
        self.announce(&done.id, done.state, Some(&done));
        Ok(done)
    }

    /// How older rounds are folded: by a short `fast`-profile model call, or by rules.
    fn summariser(&self, task: &Task) -> Summariser {
        if !self.inner.settings.context.summary_enabled {
            return Summariser::Rules;
        }
        let profile = if self.inner.gateway.has_profile("fast") {
            "fast".to_string()
        } else {
            task.profile.clone()
        };
        Summariser::Model(Arc::new(GatewaySummary {
            gateway: self.inner.gateway.clone(),
            profile,
        }))
    }
}

/// One execution of a task: what every step of its loop needs, passed once instead of to
/// every method.
pub(super) struct Run<'a> {
    pub(super) agent: &'a Agent,
    pub(super) task: &'a Task,
    pub(super) opts: &'a RunOptions,
    /// Token counts and trace rows not yet written: they outlive the loop (a timeout or a
    /// cancel drops it) and are written by `drive`.
    pub(super) tally: &'a Tally,
    /// The task's wall-clock limit; model calls are cut off at it.
    deadline: tokio::time::Instant,
    /// What of the limit was used, kept when the task waits (waiting does not count).
    pub(super) budget: Budget,
}

/// An execution's wall-clock limit and what earlier executions of the task used of it.
pub(super) struct Budget {
    pub limit: Duration,
    pub used_before: Duration,
    pub started: Instant,
}

impl Budget {
    pub(super) fn used(&self) -> Duration {
        self.used_before + self.started.elapsed()
    }
}

impl Run<'_> {
    /// The loop under the task's limits: its deadline, and a stop (cancel, shutdown, fencing)
    /// with the reason left in `why`.
    async fn bounded(
        &self,
        resume: Option<Checkpoint>,
        token: &CancellationToken,
        why: &Mutex<Option<StopReason>>,
    ) -> Result<LoopEnd, StoreError> {
        tokio::select! {
            r = tokio::time::timeout_at(self.deadline, self.run_loop(resume)) => match r {
                Ok(end) => end,
                Err(_) => Ok(LoopEnd::Failed {
                    reason: FailReason::Timeout,
                    error: format!(
                        "the task ran longer than its limit of {} s (agent.task_timeout_s)",
                        self.budget.limit.as_secs()
                    ),
                }),
            },
            _ = token.cancelled() => match *lock(why) {
                Some(StopReason::Shutdown) => Ok(LoopEnd::Failed {
                    reason: FailReason::Shutdown,
                    error: "the daemon stopped before the task finished".into(),
                }),
                Some(StopReason::Fenced) => Err(StoreError::Fenced(hermes_store::Fenced)),
                Some(StopReason::ParentEnded) => Ok(LoopEnd::Failed {
                    reason: FailReason::Cancelled,
                    error: "cancelled: the task that delegated it ended first".into(),
                }),
                _ => Ok(LoopEnd::Failed { reason: FailReason::Cancelled, error: "cancelled".into() }),
            },
        }
    }

    async fn run_loop(&self, resume: Option<Checkpoint>) -> Result<LoopEnd, StoreError> {
        let inner = &self.agent.inner;
        let ctx = ToolContext {
            task_id: self.task.id.clone(),
            origin: self.task.origin,
            job_id: self.task.job_id.clone(),
            depth: self.opts.depth,
            profile: self.task.profile.clone(),
            resumer: self.opts.resumer.clone(),
            waiting: Default::default(),
        };
        let max_steps = i64::from(inner.settings.agent.max_steps);
        let summariser = self.agent.summariser(self.task);
        let pre_approved = self.pre_approved().await;
        let (mut window, mut guard, first, mut held) = match resume {
            Some(cp) => (cp.window, cp.guard, cp.step, Some(cp.round)),
            None => {
                let window = self.start_window().await?;
                let guard = LoopGuard::new(inner.settings.agent.max_identical_calls);
                (window, guard, 1, None)
            }
        };
        for step in first..=max_steps {
            let round = match held.take() {
                Some(round) => round,
                None => {
                    let reply = match self.model_turn(step, &window).await? {
                        ControlFlow::Continue(reply) => reply,
                        ControlFlow::Break(end) => return Ok(end),
                    };
                    if reply.tool_calls.is_empty() {
                        return Ok(final_answer(&reply.content));
                    }
                    HeldRound::new(Message::assistant(reply.content, reply.tool_calls))
                }
            };
            let round = match self
                .tool_round(&ctx, step, round, &mut guard, &pre_approved)
                .await?
            {
                RoundEnd::Results(round, results) => (round, results),
                RoundEnd::Held(round) => {
                    self.hold(window, guard, step, round).await?;
                    return Ok(LoopEnd::Held);
                }
                RoundEnd::End(end) => return Ok(end),
            };
            window.push_round(round.0.assistant, round.1);
            window.compact(&summariser).await;
        }
        Ok(LoopEnd::Failed {
            reason: FailReason::MaxSteps,
            error: format!(
                "no final answer after {max_steps} model calls (agent.max_steps); the trace shows what was tried"
            ),
        })
    }

    /// One model call with the window and the tools on offer, recorded; the reply, or the end
    /// of the loop when the call failed.
    async fn model_turn(
        &self,
        step: i64,
        window: &ShortTerm,
    ) -> Result<ControlFlow<LoopEnd, ModelReply>, StoreError> {
        let inner = &self.agent.inner;
        let profile = &self.task.profile;
        self.ensure_lease().await?;
        let tools = inner.registry.offered(self.opts.restrict.as_deref());
        let t0 = Instant::now();
        self.tally.calling(step);
        let reply = inner
            .gateway
            .chat_until(profile, &window.messages(), &tools, Some(self.deadline))
            .await;
        self.tally.called();
        let took = t0.elapsed();
        let ms = took.as_millis() as i64;
        let (outcome, tokens_in, tokens_out) = match &reply {
            Ok(r) => (
                ModelOutcome::Ok,
                r.usage.prompt_tokens,
                r.usage.completion_tokens,
            ),
            Err(_) => (ModelOutcome::Error, 0, 0),
        };
        inner.metrics.observe_model_call(
            profile,
            outcome,
            took,
            tokens_in.into(),
            tokens_out.into(),
        );
        match reply {
            Ok(reply) => {
                self.tally.add(&reply);
                // What the gateway changed on its own (a switch to text tool mode) first.
                for note in &reply.notes {
                    self.record(trace::note(step, Some(note.clone()), None));
                }
                self.record(trace::model(step, &reply, ms));
                // A call that asked for tools is written with their rows, after they ran.
                if reply.tool_calls.is_empty() {
                    self.flush().await?;
                }
                Ok(ControlFlow::Continue(reply))
            }
            Err(e) => {
                let error = e.to_string();
                self.record(trace::model_error(step, profile, error.clone(), ms));
                self.flush().await?;
                Ok(ControlFlow::Break(LoopEnd::Failed {
                    reason: FailReason::Model,
                    error,
                }))
            }
        }
    }

    /// Wait until this node may act for the task: it still holds the lease the task was
    /// claimed under, recently confirmed (`crates/store/src/lease.rs`). Asked before every model call and
    /// every round of tool calls; refused with [`StoreError::Fenced`] once the lease is lost.
    pub(super) async fn ensure_lease(&self) -> Result<(), StoreError> {
        let epoch = self.task.node_epoch.as_deref();
        Ok(self.agent.inner.store.lease().ensure(epoch).await?)
    }

    /// Number a trace row and show it to the observer (the live timeline of `run`) at once;
    /// it is stored by the next [`Run::flush`].
    pub(super) fn record(&self, row: NewStep) {
        self.tally.number(row, |step| {
            if let Some(tx) = &self.opts.observer {
                // The observer may have gone (a closed terminal); the trace is stored regardless.
                let _ = tx.send(step.clone());
            }
        });
    }

    /// Store the rows recorded since the last flush, in one statement, and announce them to
    /// followers (the dashboard's live timeline, `tasks watch`).
    pub(super) async fn flush(&self) -> Result<(), StoreError> {
        let rows = self.tally.take_unwritten();
        let Some(last) = rows.last().map(|r| r.seq) else {
            return Ok(());
        };
        let inner = &self.agent.inner;
        let give_up = Instant::now() + STEP_WRITE_PATIENCE;
        let mut retry = 0;
        loop {
            let wrote = inner
                .store
                .tasks()
                .add_steps(&self.task.id, self.task.node_epoch.as_deref(), &rows)
                .await;
            match wrote {
                Err(StoreError::Unavailable {
                    fault: StorageFault::Unreachable,
                    detail,
                }) if Instant::now() < give_up => {
                    tracing::warn!(task = %self.task.id, error = %detail,
                        "the task's trace could not be written; trying again");
                    tokio::time::sleep(STEP_WRITE_RETRY.delay(retry)).await;
                    retry += 1;
                }
                other => break other?,
            }
        }
        // No receivers is normal (nobody following).
        let _ = inner.steps.send(super::StepRecorded {
            task_id: self.task.id.clone(),
            seq: last,
        });
        Ok(())
    }
}

/// How a round of tool calls ended (`round.rs` runs it; the loop here goes on by it).
pub(super) enum RoundEnd {
    /// Every call has its result: the round and its result messages, in the calls' order.
    Results(HeldRound, Vec<Message>),
    /// Waiting for a person (directly or through a sub-agent).
    Held(HeldRound),
    /// The loop guard stopped the task.
    End(LoopEnd),
}

/// A call that did not run (the loop guard, a person's no), as the model and the trace see it.
pub(super) fn not_run(call: &ToolCall, error: ToolError) -> ToolOutcome {
    let content = shape::wrap_error(&call.name, &error.to_string());
    ToolOutcome {
        result_tokens: crate::llm::estimate_tokens(&content),
        content,
        error: Some(error),
        attempts: 0,
        duration: Duration::ZERO,
        working_key: None,
    }
}

/// A reply without tool calls ends the loop: its text is the answer, if it has any.
fn final_answer(content: &str) -> LoopEnd {
    let answer = content.trim();
    if answer.is_empty() {
        return LoopEnd::Failed {
            reason: FailReason::EmptyAnswer,
            error: "the model answered with neither text nor a tool call".into(),
        };
    }
    LoopEnd::Answer(answer.to_string())
}
