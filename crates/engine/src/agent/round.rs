//! One round of tool calls — the calls of one model reply — through the approval gate.
//!
//! Owns: the order of a round: results of sub-tasks that were waited for; then the gate: if any
//! call needs a person who has not answered, nothing of the round runs and the task is held
//! (one request per distinct call); else the calls run concurrently (a few at a time, at most
//! [`MAX_CALLS_PER_REPLY`] of a reply), each once — approved ones
//! with exactly the approved arguments, declined ones not at all. A delegate call whose
//! sub-agent waits for a person holds the round too, keeping the results of the calls that
//! already ran so that they never run again.
//! Must not: decide what a person wants (`hold.rs` judges, `approvals.rs` records).

use super::guard::{LoopGuard, Verdict, canonical};
use super::hold::{Checkpoint, Gate, HeldRound, SavedOptions, Slot, judge};
use super::run::{RoundEnd, Run, not_run};
use super::tally::LoopEnd;
use super::trace;
use crate::llm::ToolCall;
use crate::memory::ShortTerm;
use crate::tools::{Permit, ToolContext, ToolError, ToolOutcome};
use futures::StreamExt as _;
use hermes_store::StoreError;

/// The most tool calls one model reply may make; those past it are answered "not run" without
/// being gated or run. A reply of hundreds of calls (a model looping inside one answer) must
/// not start hundreds of processes, sub-agents or approval requests at once.
pub(crate) const MAX_CALLS_PER_REPLY: usize = 16;

/// How many calls of one reply run at once; the rest start as those finish, in order. Keeps a
/// fan-out of sub-agents (each its own model calls and tools) within reach of `agent.workers`.
const CONCURRENT_CALLS: usize = 4;

impl Run<'_> {
    /// The tool globs the task's job pre-approved (none for a task no job started).
    pub(super) async fn pre_approved(&self) -> Vec<String> {
        let Some(job) = &self.task.job_id else {
            return Vec::new();
        };
        match self.agent.store().jobs().get(job).await {
            Ok(j) => j.pre_approved,
            // A job deleted since: nothing is pre-approved any more.
            Err(_) => Vec::new(),
        }
    }

    pub(super) async fn tool_round(
        &self,
        ctx: &ToolContext,
        step: i64,
        mut round: HeldRound,
        guard: &mut LoopGuard,
        pre_approved: &[String],
    ) -> Result<RoundEnd, StoreError> {
        let calls: Vec<ToolCall> = round.calls().to_vec();
        self.finish_waited_subs(ctx, step, &calls, &mut round).await;
        self.refuse_past_cap(step, &calls, &mut round);
        let gates = self.gates(&calls, &round.slots, pre_approved).await?;
        if gates.iter().flatten().any(Gate::waits) {
            self.ask(step, &calls, &gates).await?;
            return Ok(RoundEnd::Held(round));
        }
        let verdicts = verdicts(&calls, &gates, guard);
        let waits = self
            .run_calls(ctx, step, &calls, &gates, &verdicts, &mut round)
            .await?;
        if waits {
            return Ok(RoundEnd::Held(round));
        }
        let stop = verdicts.into_iter().flatten().find_map(|v| match v {
            Verdict::Stop { error } => Some(error),
            _ => None,
        });
        if let Some(error) = stop {
            return Ok(RoundEnd::End(LoopEnd::Failed {
                reason: hermes_store::FailReason::Loop,
                error,
            }));
        }
        match round.results() {
            Some(results) => Ok(RoundEnd::Results(round, results)),
            None => Err(StoreError::Corrupt(
                "a tool round ended with a call that has no result".into(),
            )),
        }
    }

    /// Sub-tasks waited for have all finished (the hold was not taken before): their results
    /// fill their slots before the gate is judged.
    async fn finish_waited_subs(
        &self,
        ctx: &ToolContext,
        step: i64,
        calls: &[ToolCall],
        round: &mut HeldRound,
    ) {
        let registry = self.agent.registry();
        for (i, call) in calls.iter().enumerate() {
            if let Slot::Sub { entries } = &round.slots[i] {
                let result = super::delegate::resumed(self.agent, call, entries).await;
                let o = registry.shape(call, result, ctx).await;
                self.record(trace::tool(step, call, &o));
                round.slots[i] = Slot::Done { content: o.content };
            }
        }
    }

    /// Each call's gate; `None` for a call that already has its result. The task's approvals
    /// are read only when some call needs one.
    async fn gates(
        &self,
        calls: &[ToolCall],
        slots: &[Slot],
        pre_approved: &[String],
    ) -> Result<Vec<Option<Gate>>, StoreError> {
        let registry = self.agent.registry();
        let restrict = self.opts.restrict.as_deref();
        let gated: Vec<bool> = calls
            .iter()
            .zip(slots)
            .map(|(c, s)| {
                matches!(s, Slot::ToRun)
                    && registry.needs_approval(&c.name)
                    && registry.would_run(&c.name, &c.arguments, restrict)
            })
            .collect();
        let known = if gated.contains(&true) {
            self.agent
                .store()
                .approvals()
                .of_task(&self.task.id)
                .await?
        } else {
            Vec::new()
        };
        Ok(calls
            .iter()
            .zip(slots)
            .zip(&gated)
            .map(|((c, s), g)| match (s, g) {
                (Slot::ToRun, true) => Some(judge(c, &known, pre_approved)),
                (Slot::ToRun, false) => Some(Gate::Free),
                _ => None,
            })
            .collect())
    }

    /// Answer the calls past [`MAX_CALLS_PER_REPLY`] without running them.
    fn refuse_past_cap(&self, step: i64, calls: &[ToolCall], round: &mut HeldRound) {
        for (i, call) in calls.iter().enumerate().skip(MAX_CALLS_PER_REPLY) {
            if matches!(round.slots[i], Slot::ToRun) {
                let o = not_run(call, ToolError::TooMany(MAX_CALLS_PER_REPLY));
                self.record(trace::tool(step, call, &o));
                round.slots[i] = Slot::Done { content: o.content };
            }
        }
    }

    /// Runs the round's calls concurrently and fills their slots; `true` when a delegate's
    /// sub-agent waits for a person, so the round must be held with what already ran.
    async fn run_calls(
        &self,
        ctx: &ToolContext,
        step: i64,
        calls: &[ToolCall],
        gates: &[Option<Gate>],
        verdicts: &[Option<Verdict>],
        round: &mut HeldRound,
    ) -> Result<bool, StoreError> {
        let restrict = self.opts.restrict.as_deref();
        // One context per call, so that each call's waiting sub-tasks are told apart.
        let contexts: Vec<ToolContext> = calls
            .iter()
            .map(|_| ToolContext {
                waiting: Default::default(),
                ..ctx.clone()
            })
            .collect();
        self.ensure_lease().await?;
        // Made first, then streamed: a stream over a borrowing closure is not provably `Send`.
        let runs: Vec<_> = calls
            .iter()
            .zip(gates)
            .zip(verdicts)
            .zip(&contexts)
            .map(|(((c, g), v), ctx)| self.run_call(step, c, g.as_ref(), v.as_ref(), ctx, restrict))
            .collect();
        let outcomes: Vec<Option<ToolOutcome>> = futures::stream::iter(runs)
            .buffered(CONCURRENT_CALLS)
            .collect()
            .await;
        let mut waits = false;
        for (i, (call, o)) in calls.iter().zip(outcomes).enumerate() {
            let Some(o) = o else { continue };
            let entries = contexts[i].waiting.take();
            if entries.is_empty() {
                self.record(trace::tool(step, call, &o));
                round.slots[i] = Slot::Done { content: o.content };
            } else {
                waits = true;
                round.slots[i] = Slot::Sub { entries };
            }
        }
        self.flush().await?;
        Ok(waits)
    }

    /// One call that may run now, as its gate and the loop guard say; `None` for a call that
    /// already has its result.
    async fn run_call(
        &self,
        step: i64,
        call: &ToolCall,
        gate: Option<&Gate>,
        verdict: Option<&Verdict>,
        ctx: &ToolContext,
        restrict: Option<&[String]>,
    ) -> Option<ToolOutcome> {
        let registry = self.agent.registry();
        let gate = gate?;
        if let Some(Verdict::Refuse { times }) = verdict {
            return Some(not_run(call, ToolError::Repeated(*times)));
        }
        if let Some(Verdict::Stop { error }) = verdict {
            return Some(not_run(call, ToolError::Failed(error.clone())));
        }
        Some(match gate {
            Gate::Free => registry.execute(call, ctx, restrict).await,
            Gate::PreApproved => {
                let note = "pre-approved by the job".to_string();
                self.record(trace::approval(step, call, note, None));
                registry
                    .execute_approved(call, ctx, restrict, Permit::granted())
                    .await
            }
            Gate::Approved { id, arguments, by } => {
                match self.agent.store().approvals().mark_used(id).await {
                    Ok(true) => {
                        self.record(trace::approval(
                            step,
                            call,
                            format!("approved by {by}"),
                            None,
                        ));
                        // Exactly what the person approved.
                        let approved = ToolCall {
                            arguments: arguments.clone(),
                            ..call.clone()
                        };
                        registry
                            .execute_approved(&approved, ctx, restrict, Permit::granted())
                            .await
                    }
                    // Used already: the same call twice in one reply runs once.
                    Ok(false) => not_run(call, ToolError::ApprovedOnce),
                    Err(e) => not_run(
                        call,
                        ToolError::Failed(format!(
                            "not run: its approval could not be read ({e}); try again in a later step"
                        )),
                    ),
                }
            }
            Gate::Declined {
                reason,
                by,
                unanswered,
            } => {
                let error = format!("denied by {by}: {reason}");
                self.record(trace::approval(step, call, "denied".into(), Some(error)));
                let told = if *unanswered {
                    ToolError::Unanswered(reason.clone())
                } else {
                    ToolError::Declined(reason.clone())
                };
                not_run(call, told)
            }
            // Held before anything runs (see `tool_round`).
            Gate::Open | Gate::Ask => not_run(call, ToolError::NeedsApproval(call.name.clone())),
        })
    }

    /// Ask a person about each distinct call that needs it, and note the wait in the trace.
    async fn ask(
        &self,
        step: i64,
        calls: &[ToolCall],
        gates: &[Option<Gate>],
    ) -> Result<(), StoreError> {
        let approvals = self.agent.approvals();
        let mut asked: Vec<(String, String)> = Vec::new();
        for (call, gate) in calls.iter().zip(gates) {
            if gate.as_ref() != Some(&Gate::Ask) {
                continue;
            }
            let args = canonical(&call.arguments);
            let key = (call.name.clone(), args.clone());
            if asked.contains(&key) {
                continue;
            }
            approvals.ask(self.task, &call.name, &args).await?;
            self.record(trace::approval(step, call, "waiting".into(), None));
            asked.push(key);
        }
        Ok(())
    }

    /// Store the checkpoint and mark the task waiting; the execution then ends.
    pub(super) async fn hold(
        &self,
        window: ShortTerm,
        guard: LoopGuard,
        step: i64,
        round: HeldRound,
    ) -> Result<(), StoreError> {
        self.flush().await?;
        let counts = self.tally.counts();
        let cp = Checkpoint {
            window,
            guard,
            step,
            round,
            prompt_tokens: counts.prompt_tokens,
            completion_tokens: counts.completion_tokens,
            parse_failures: counts.parse_failures,
            last_seq: counts.last_seq,
            limit_ms: u64::try_from(self.budget.limit.as_millis()).unwrap_or(u64::MAX),
            used_ms: u64::try_from(self.budget.used().as_millis()).unwrap_or(u64::MAX),
            options: SavedOptions {
                restrict: self.opts.restrict.clone(),
                agent_prompt: self.opts.agent_prompt.clone(),
                depth: self.opts.depth,
            },
        };
        let text = serde_json::to_string(&cp)
            .map_err(|e| StoreError::Corrupt(format!("the task's checkpoint: {e}")))?;
        let store = self.agent.store();
        store
            .holds()
            .hold(&self.task.id, &text, self.opts.resumer.as_deref())
            .await?;
        // Answered already (a fast person, or a request that expired meanwhile).
        self.agent.wake_for_holds();
        Ok(())
    }
}

/// The loop guard's verdict on each call that may run; `None` for one that may not.
fn verdicts(
    calls: &[ToolCall],
    gates: &[Option<Gate>],
    guard: &mut LoopGuard,
) -> Vec<Option<Verdict>> {
    calls
        .iter()
        .zip(gates)
        .map(|(c, g)| match g {
            Some(Gate::Free | Gate::PreApproved | Gate::Approved { .. }) => Some(guard.check(c)),
            _ => None,
        })
        .collect()
}
