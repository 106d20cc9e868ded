//! One task's execution: pending → running → succeeded | failed | cancelled, and the
//! plan-execute-check loop in between. Every model call and tool call becomes a trace row.

use super::guard::{LoopGuard, Verdict};
use super::{Agent, RunOptions, StopReason, prompt, trace};
use crate::llm::{Gateway, LlmError, Message, ModelReply, ToolCall};
use crate::memory::{ShortTerm, Summariser, SummaryModel};
use crate::metrics::ModelOutcome;
use crate::store::{FailReason, NewStep, Step, StoreError, Task, TaskOutcome, TaskState, now};
use crate::tools::{ToolContext, ToolError, ToolOutcome, shape};
use crate::util::lock;
use futures::future::{BoxFuture, join_all};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// What must survive the loop being dropped by a timeout or a cancel: the token counters, and
/// the trace rows recorded but not yet written.
#[derive(Debug, Default)]
pub(super) struct Tally {
    prompt_tokens: AtomicI64,
    completion_tokens: AtomicI64,
    parse_failures: AtomicI64,
    trace: Mutex<Unwritten>,
}

/// Trace rows numbered by the runner — the only writer of its task's trace — and written in
/// batches: a model call together with the tool calls it asked for is one store round trip.
#[derive(Debug, Default)]
struct Unwritten {
    last_seq: i64,
    rows: Vec<Step>,
}

impl Tally {
    fn add(&self, reply: &ModelReply) {
        let add = |counter: &AtomicI64, n: i64| counter.fetch_add(n, Ordering::Relaxed);
        add(&self.prompt_tokens, reply.usage.prompt_tokens.into());
        add(
            &self.completion_tokens,
            reply.usage.completion_tokens.into(),
        );
        add(&self.parse_failures, reply.parse_warnings.len() as i64);
    }
}

/// How the loop's end is stored: a cancelled task ends in its own state, a store failure as a
/// failure of the task.
fn final_outcome(end: Result<LoopEnd, StoreError>, tally: &Tally) -> TaskOutcome {
    match end {
        Ok(LoopEnd::Answer(a)) => outcome(TaskState::Succeeded, Some(a), None, None, tally),
        Ok(LoopEnd::Failed { reason, error }) => {
            let state = match reason {
                FailReason::Cancelled => TaskState::Cancelled,
                _ => TaskState::Failed,
            };
            outcome(state, None, Some(error), Some(reason), tally)
        }
        Err(e) => outcome(
            TaskState::Failed,
            None,
            Some(format!("could not record the task's progress: {e}")),
            Some(FailReason::Store),
            tally,
        ),
    }
}

pub(super) fn outcome(
    state: TaskState,
    answer: Option<String>,
    error: Option<String>,
    reason: Option<FailReason>,
    tally: &Tally,
) -> TaskOutcome {
    TaskOutcome {
        state,
        answer,
        error,
        reason,
        parse_failures: tally.parse_failures.load(Ordering::Relaxed),
        prompt_tokens: tally.prompt_tokens.load(Ordering::Relaxed),
        completion_tokens: tally.completion_tokens.load(Ordering::Relaxed),
    }
}

/// How the loop ended, before it becomes a stored outcome.
enum LoopEnd {
    Answer(String),
    Failed { reason: FailReason, error: String },
}

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
        match store.start_task_row(task_id).await? {
            Some(task) => self.drive(task, opts).await,
            None => Ok(store.task(task_id).await?),
        }
    }

    /// Run a task a worker already took from the queue (it is `running`).
    pub(super) async fn run_taken(
        &self,
        task: Task,
        opts: RunOptions,
    ) -> Result<Task, super::AgentError> {
        self.drive(task, opts).await
    }

    /// Run a task this process created with [`Agent::create_claimed`].
    pub async fn run_claimed(
        &self,
        claimed: super::Claimed,
        opts: RunOptions,
    ) -> Result<Task, super::AgentError> {
        self.drive(claimed.0, opts).await
    }

    /// The running task's life: the loop under its limits, then its final state.
    async fn drive(&self, task: Task, opts: RunOptions) -> Result<Task, super::AgentError> {
        let store = &self.inner.store;
        let token = CancellationToken::new();
        let why = Arc::new(Mutex::new(None));
        lock(&self.inner.running).insert(
            task.id.clone(),
            super::Running {
                stop: token.clone(),
                why: why.clone(),
            },
        );
        tracing::info!(task = %task.id, origin = %task.origin, profile = %task.profile, "task started");
        let started = Instant::now();
        let limit = opts.timeout.unwrap_or(Duration::from_secs(
            self.inner.settings.agent.task_timeout_s,
        ));
        let tally = Tally::default();
        let deadline = tokio::time::Instant::now() + limit;
        let run = Run {
            agent: self,
            task: &task,
            opts: &opts,
            tally: &tally,
            deadline,
        };
        let end = tokio::select! {
            r = tokio::time::timeout_at(deadline, run.run_loop()) => match r {
                Ok(Ok(end)) => Ok(end),
                Ok(Err(e)) => Err(e),
                Err(_) => Ok(LoopEnd::Failed {
                    reason: FailReason::Timeout,
                    error: format!(
                        "the task ran longer than its limit of {} s (agent.task_timeout_s)",
                        limit.as_secs()
                    ),
                }),
            },
            _ = token.cancelled() => Ok(match *lock(&why) {
                Some(StopReason::Shutdown) => LoopEnd::Failed {
                    reason: FailReason::Shutdown,
                    error: "the daemon stopped before the task finished".into(),
                },
                _ => LoopEnd::Failed { reason: FailReason::Cancelled, error: "cancelled".into() },
            }),
        };
        lock(&self.inner.running).remove(&task.id);
        // Rows the loop recorded before it was cut off (a model call whose tools were running).
        let end = match run.flush().await {
            Ok(()) => end,
            Err(e) => end.and(Err(e)),
        };
        let out = final_outcome(end, &tally);
        let done = match store.finish_task_row(&task.id, &out).await {
            Ok(Some(done)) => done,
            // Finished already, by someone else (the shutdown marking every running task).
            Ok(None) => store.task(&task.id).await?,
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
                let shown = self.keep_unsaved(&task, out, &e);
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
struct Run<'a> {
    agent: &'a Agent,
    task: &'a Task,
    opts: &'a RunOptions,
    /// Token counts and trace rows not yet written: they outlive the loop (a timeout or a
    /// cancel drops it) and are written by `drive`.
    tally: &'a Tally,
    /// The task's wall-clock limit; model calls are cut off at it.
    deadline: tokio::time::Instant,
}

impl Run<'_> {
    async fn run_loop(&self) -> Result<LoopEnd, StoreError> {
        let inner = &self.agent.inner;
        let ctx = ToolContext {
            task_id: self.task.id.clone(),
            origin: self.task.origin,
            job_id: self.task.job_id.clone(),
            depth: self.opts.depth,
            profile: self.task.profile.clone(),
        };
        // Tool sources still on their first start (an MCP server the daemon just launched)
        // would be missing from this task's offer: wait for them, bounded, and say so when
        // one is still not up.
        let late = (inner.registry.starting())
            .wait(crate::tools::SOURCE_START_WAIT)
            .await;
        if !late.is_empty() {
            let text = format!(
                "tools of {} still starting after {} s; they are offered once they are up",
                late.join(", "),
                crate::tools::SOURCE_START_WAIT.as_secs()
            );
            self.record(trace::note(0, Some(text), None));
        }
        let mut window = self.prepare_window().await?;
        let summariser = self.agent.summariser(self.task);
        let mut guard = LoopGuard::new(inner.settings.agent.max_identical_calls);
        let max_steps = i64::from(inner.settings.agent.max_steps);
        for step in 1..=max_steps {
            let reply = match self.model_turn(step, &window).await? {
                ControlFlow::Continue(reply) => reply,
                ControlFlow::Break(end) => return Ok(end),
            };
            if reply.tool_calls.is_empty() {
                return Ok(final_answer(&reply.content));
            }
            let results = match self
                .tool_round(&ctx, step, &reply.tool_calls, &mut guard)
                .await?
            {
                ControlFlow::Continue(results) => results,
                ControlFlow::Break(end) => return Ok(end),
            };
            window.push_round(Message::assistant(reply.content, reply.tool_calls), results);
            window.compact(&summariser).await;
        }
        Ok(LoopEnd::Failed {
            reason: FailReason::MaxSteps,
            error: format!(
                "no final answer after {max_steps} model calls (agent.max_steps); the trace shows what was tried"
            ),
        })
    }

    /// The task's message window at its start: the stable system prompt, then one user message
    /// with the time, the facts memory recalls for the task, and the task itself.
    async fn prepare_window(&self) -> Result<ShortTerm, StoreError> {
        let s = &self.agent.inner.settings;
        let tz: chrono_tz::Tz = s.scheduler.timezone.parse().unwrap_or(chrono_tz::UTC);
        let now_local = now()
            .with_timezone(&tz)
            .format("%Y-%m-%d %H:%M %Z (%A)")
            .to_string();
        let system = prompt::system_prompt(
            &s.agent.system_prompt_extra,
            self.opts.agent_prompt.as_deref(),
        );
        let facts = match &self.agent.inner.memory {
            Some(memory) => self.recall(memory).await,
            None => Vec::new(),
        };
        // A reply by email continues what it answers: the notice goes into the first message.
        let earlier = match self.task.origin {
            crate::store::Origin::Email => {
                self.agent.inner.store.email_context(&self.task.id).await?
            }
            _ => None,
        };
        let goal = prompt::task_message(&now_local, &facts, earlier.as_deref(), &self.task.task);
        Ok(ShortTerm::new(
            vec![Message::system(system)],
            Message::user(goal),
            s.context.max_dialog_rounds as usize,
            s.context.summary_max_length as usize,
        ))
    }

    /// The facts memory recalls for the task, noted in the trace; none when recall fails
    /// (the task goes on without them, and the trace says why).
    async fn recall(&self, memory: &crate::memory::LongTerm) -> Vec<crate::memory::Recalled> {
        let k = self.agent.inner.settings.memory.recall_top_k as usize;
        match memory.recall(&self.task.task, k).await {
            Ok(facts) => {
                if !facts.is_empty() {
                    let text = format!("recalled {} fact(s) from memory", facts.len());
                    self.record(trace::note(0, Some(text), None));
                }
                facts
            }
            Err(e) => {
                tracing::warn!(task = %self.task.id, error = %e, "memory recall failed; continuing without");
                let error = format!("memory recall failed: {e}");
                self.record(trace::note(0, None, Some(error)));
                Vec::new()
            }
        }
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
        let tools = inner.registry.offered(self.opts.restrict.as_deref());
        let t0 = Instant::now();
        let reply = inner
            .gateway
            .chat_until(profile, &window.messages(), &tools, Some(self.deadline))
            .await;
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

    /// Run the calls of one model turn — concurrently, since the model asked for them together
    /// — record each, and return the results as messages in the calls' order.
    async fn tool_round(
        &self,
        ctx: &ToolContext,
        step: i64,
        calls: &[ToolCall],
        guard: &mut LoopGuard,
    ) -> Result<ControlFlow<LoopEnd, Vec<Message>>, StoreError> {
        let registry = &self.agent.inner.registry;
        let restrict = self.opts.restrict.as_deref();
        let verdicts: Vec<Verdict> = calls.iter().map(|c| guard.check(c)).collect();
        let outcomes = join_all(calls.iter().zip(&verdicts).map(|(c, v)| async move {
            match v {
                Verdict::Run => registry.execute(c, ctx, restrict).await,
                Verdict::Refuse { times } => not_run(c, ToolError::Repeated(*times)),
                Verdict::Stop { error } => not_run(c, ToolError::Failed(error.clone())),
            }
        }))
        .await;
        let mut results = Vec::with_capacity(outcomes.len());
        for (call, o) in calls.iter().zip(outcomes) {
            self.record(trace::tool(step, call, &o));
            results.push(Message::tool(call.id.clone(), o.content));
        }
        self.flush().await?;
        let stop = verdicts.into_iter().find_map(|v| match v {
            Verdict::Stop { error } => Some(error),
            _ => None,
        });
        Ok(match stop {
            Some(error) => ControlFlow::Break(LoopEnd::Failed {
                reason: FailReason::Loop,
                error,
            }),
            None => ControlFlow::Continue(results),
        })
    }

    /// Number a trace row and show it to the observer (the live timeline of `run`) at once;
    /// it is stored by the next [`Run::flush`].
    fn record(&self, row: NewStep) {
        let mut trace = lock(&self.tally.trace);
        trace.last_seq += 1;
        let step = row.into_step(trace.last_seq, now());
        if let Some(tx) = &self.opts.observer {
            // The observer may have gone (a closed terminal); the trace is stored regardless.
            let _ = tx.send(step.clone());
        }
        trace.rows.push(step);
    }

    /// Store the rows recorded since the last flush, in one statement, and announce them to
    /// followers (the dashboard's live timeline, `tasks watch`).
    async fn flush(&self) -> Result<(), StoreError> {
        let rows = std::mem::take(&mut lock(&self.tally.trace).rows);
        let Some(last) = rows.last().map(|r| r.seq) else {
            return Ok(());
        };
        let inner = &self.agent.inner;
        inner.store.add_steps(&self.task.id, &rows).await?;
        // No receivers is normal (nobody following).
        let _ = inner.steps.send(super::StepRecorded {
            task_id: self.task.id.clone(),
            seq: last,
        });
        Ok(())
    }
}

/// A call the loop guard did not run, as the model and the trace see it.
fn not_run(call: &ToolCall, error: ToolError) -> ToolOutcome {
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
