//! One task's execution: pending → running → succeeded | failed | cancelled, and the
//! plan-execute-check loop in between. Every model call and tool call becomes a trace row.

use super::{Agent, RunOptions, StopReason, prompt};
use crate::llm::{Gateway, Message, ToolCall};
use crate::memory::{ShortTerm, Summariser, SummaryModel};
use crate::store::{FailReason, NewStep, Step, StepKind, Task, TaskOutcome, TaskState, now};
use crate::tools::ToolContext;
use futures::future::{BoxFuture, join_all};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Counters that must survive the loop being dropped by a timeout or a cancel.
#[derive(Debug, Default)]
pub(super) struct Tally {
    prompt_tokens: AtomicI64,
    completion_tokens: AtomicI64,
    parse_failures: AtomicI64,
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
    fn summarise<'a>(&'a self, prompt: String) -> BoxFuture<'a, Result<String, String>> {
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
                .map_err(|e| e.to_string())
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
        if !store.start_task(task_id).await? {
            return Ok(store.task(task_id).await?);
        }
        let task = store.task(task_id).await?;
        self.drive(task, opts).await
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
        if let Ok(mut map) = self.inner.running.lock() {
            map.insert(
                task.id.clone(),
                super::Running {
                    stop: token.clone(),
                    why: why.clone(),
                },
            );
        }
        tracing::info!(task = %task.id, origin = %task.origin, profile = %task.profile, "task started");
        let started = Instant::now();
        let limit = opts.timeout.unwrap_or(Duration::from_secs(
            self.inner.settings.agent.task_timeout_s,
        ));
        let tally = Tally::default();
        let end = tokio::select! {
            r = tokio::time::timeout(limit, self.run_loop(&task, &opts, &tally)) => match r {
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
            _ = token.cancelled() => Ok(match why.lock().ok().and_then(|r| *r) {
                Some(StopReason::Shutdown) => LoopEnd::Failed {
                    reason: FailReason::Shutdown,
                    error: "the daemon stopped before the task finished".into(),
                },
                _ => LoopEnd::Failed { reason: FailReason::Cancelled, error: "cancelled".into() },
            }),
        };
        if let Ok(mut map) = self.inner.running.lock() {
            map.remove(&task.id);
        }
        let out = match end {
            Ok(LoopEnd::Answer(a)) => outcome(TaskState::Succeeded, Some(a), None, None, &tally),
            Ok(LoopEnd::Failed { reason, error }) => {
                // A cancelled task is not a failed one: it ends in its own state.
                let state = match reason {
                    FailReason::Cancelled => TaskState::Cancelled,
                    _ => TaskState::Failed,
                };
                outcome(state, None, Some(error), Some(reason), &tally)
            }
            Err(e) => outcome(
                TaskState::Failed,
                None,
                Some(format!("could not record the task's progress: {e}")),
                Some(FailReason::Store),
                &tally,
            ),
        };
        if let Err(e) = store.finish_task(&task.id, &out).await {
            // Waiters (API clients, a job's run holding its lock) must not wait forever on a
            // row that could not be written; the row stays `running` and is marked
            // `interrupted` at the next start.
            tracing::error!(task = %task.id, error = %e, "could not record the task's end");
            self.announce(&task.id, out.state);
            return Err(e.into());
        }
        let done = store.task(&task.id).await?;
        tracing::info!(
            task = %done.id,
            state = %done.state,
            reason = done.reason.map(FailReason::as_str).unwrap_or(""),
            ms = started.elapsed().as_millis() as u64,
            tokens_in = done.prompt_tokens,
            tokens_out = done.completion_tokens,
            "task finished"
        );
        self.announce(&done.id, done.state);
        Ok(done)
    }

    async fn run_loop(
        &self,
        task: &Task,
        opts: &RunOptions,
        tally: &Tally,
    ) -> Result<LoopEnd, crate::store::StoreError> {
        let s = &self.inner.settings;
        let ctx = ToolContext {
            task_id: task.id.clone(),
            origin: task.origin,
            job_id: task.job_id.clone(),
            depth: opts.depth,
            profile: task.profile.clone(),
        };
        let restrict = opts.restrict.as_deref();
        let tz: chrono_tz::Tz = s.scheduler.timezone.parse().unwrap_or(chrono_tz::UTC);
        let now_local = now()
            .with_timezone(&tz)
            .format("%Y-%m-%d %H:%M %Z (%A)")
            .to_string();
        let system = prompt::system_prompt(
            &now_local,
            &s.agent.system_prompt_extra,
            opts.agent_prompt.as_deref(),
        );
        let mut preamble = vec![Message::system(system)];
        if let Some(memory) = &self.inner.memory {
            match memory
                .recall(&task.task, s.memory.recall_top_k as usize)
                .await
            {
                Ok(facts) => {
                    if let Some(m) = prompt::memory_message(&facts) {
                        preamble.push(m);
                        self.note(
                            task,
                            0,
                            opts,
                            format!("recalled {} fact(s) from memory", facts.len()),
                            None,
                        )
                        .await?;
                    }
                }
                Err(e) => {
                    tracing::warn!(task = %task.id, error = %e, "memory recall failed; continuing without");
                    self.note(
                        task,
                        0,
                        opts,
                        String::new(),
                        Some(format!("memory recall failed: {e}")),
                    )
                    .await?;
                }
            }
        }
        let mut window = ShortTerm::new(
            preamble,
            Message::user(task.task.clone()),
            s.context.max_dialog_rounds as usize,
            s.context.summary_max_length as usize,
        );
        let summariser = if s.context.summary_enabled {
            let profile = if self.inner.gateway.has_profile("fast") {
                "fast".to_string()
            } else {
                task.profile.clone()
            };
            Summariser::Model(Arc::new(GatewaySummary {
                gateway: self.inner.gateway.clone(),
                profile,
            }))
        } else {
            Summariser::Rules
        };

        let max_steps = s.agent.max_steps as i64;
        for step in 1..=max_steps {
            let tools = self.inner.registry.offered(restrict);
            let messages = window.messages();
            let t0 = Instant::now();
            let reply = self
                .inner
                .gateway
                .chat(&task.profile, &messages, &tools)
                .await;
            let ms = t0.elapsed().as_millis() as i64;
            let reply = match reply {
                Ok(r) => r,
                Err(e) => {
                    let error = e.to_string();
                    self.record(
                        task,
                        opts,
                        NewStep {
                            step,
                            kind: StepKind::Model,
                            name: task.profile.clone(),
                            request_tokens: 0,
                            result_tokens: 0,
                            arguments: None,
                            output: None,
                            error: Some(error.clone()),
                            duration_ms: ms,
                        },
                    )
                    .await?;
                    return Ok(LoopEnd::Failed {
                        reason: FailReason::Model,
                        error,
                    });
                }
            };
            tally
                .prompt_tokens
                .fetch_add(reply.usage.prompt_tokens.into(), Ordering::Relaxed);
            tally
                .completion_tokens
                .fetch_add(reply.usage.completion_tokens.into(), Ordering::Relaxed);
            tally
                .parse_failures
                .fetch_add(reply.parse_warnings.len() as i64, Ordering::Relaxed);
            let calls_json =
                (!reply.tool_calls.is_empty()).then(|| calls_summary(&reply.tool_calls));
            self.record(
                task,
                opts,
                NewStep {
                    step,
                    kind: StepKind::Model,
                    name: task.profile.clone(),
                    request_tokens: reply.usage.prompt_tokens.into(),
                    result_tokens: reply.usage.completion_tokens.into(),
                    arguments: calls_json,
                    output: (!reply.content.trim().is_empty()).then(|| reply.content.clone()),
                    error: (!reply.parse_warnings.is_empty()).then(|| {
                        format!(
                            "unparseable tool call treated as text: {}",
                            reply.parse_warnings.join("; ")
                        )
                    }),
                    duration_ms: ms,
                },
            )
            .await?;

            if reply.tool_calls.is_empty() {
                let answer = reply.content.trim();
                if answer.is_empty() {
                    return Ok(LoopEnd::Failed {
                        reason: FailReason::EmptyAnswer,
                        error: "the model answered with neither text nor a tool call".into(),
                    });
                }
                return Ok(LoopEnd::Answer(answer.to_string()));
            }

            // Independent calls of one step run concurrently; results keep the call order.
            let outcomes = join_all(
                reply
                    .tool_calls
                    .iter()
                    .map(|c| self.inner.registry.execute(c, &ctx, restrict)),
            )
            .await;
            let mut results = Vec::with_capacity(outcomes.len());
            for (call, o) in reply.tool_calls.iter().zip(outcomes) {
                self.record(
                    task,
                    opts,
                    NewStep {
                        step,
                        kind: StepKind::Tool,
                        name: call.name.clone(),
                        request_tokens: 0,
                        result_tokens: o.result_tokens.into(),
                        arguments: Some(call.arguments.to_string()),
                        output: Some(o.content.clone()),
                        error: o.error.as_ref().map(|e| e.to_string()),
                        duration_ms: o.duration.as_millis() as i64,
                    },
                )
                .await?;
                results.push(Message::tool(call.id.clone(), o.content));
            }
            window.push_round(
                Message::assistant(reply.content.clone(), reply.tool_calls.clone()),
                results,
            );
            window.compact(&summariser).await;
        }
        Ok(LoopEnd::Failed {
            reason: FailReason::MaxSteps,
            error: format!(
                "no final answer after {max_steps} model calls (agent.max_steps); the trace shows what was tried"
            ),
        })
    }

    async fn record(
        &self,
        task: &Task,
        opts: &RunOptions,
        step: NewStep,
    ) -> Result<(), crate::store::StoreError> {
        let seq = self.inner.store.add_step(&task.id, &step).await?;
        if let Some(tx) = &opts.observer {
            // The observer may have gone (a closed terminal); the trace is stored regardless.
            let _ = tx.send(Step {
                seq,
                step: step.step,
                kind: step.kind,
                name: step.name,
                request_tokens: step.request_tokens,
                result_tokens: step.result_tokens,
                arguments: step.arguments,
                output: step.output,
                error: step.error,
                duration_ms: step.duration_ms,
                created_at: now(),
            });
        }
        Ok(())
    }

    async fn note(
        &self,
        task: &Task,
        step: i64,
        opts: &RunOptions,
        text: String,
        error: Option<String>,
    ) -> Result<(), crate::store::StoreError> {
        self.record(
            task,
            opts,
            NewStep {
                step,
                kind: StepKind::Note,
                name: String::new(),
                request_tokens: 0,
                result_tokens: 0,
                arguments: None,
                output: (!text.is_empty()).then_some(text),
                error,
                duration_ms: 0,
            },
        )
        .await
    }
}

/// The calls a model asked for, as stored in its trace row.
fn calls_summary(calls: &[ToolCall]) -> String {
    let v: Vec<serde_json::Value> = calls
        .iter()
        .map(|c| serde_json::json!({"name": c.name, "arguments": c.arguments}))
        .collect();
    serde_json::Value::Array(v).to_string()
}
