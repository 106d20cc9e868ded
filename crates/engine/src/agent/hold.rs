//! A task waiting for a person: the checkpoint it is continued from, and the gate that decides,
//! per call, whether it may run.
//!
//! Owns: what a held task keeps (its message window, the held round with what already ran,
//! counters, its budget and options), continuing a task from it ([`Agent::resume`]), and the
//! verdict on each call of a tool that needs
//! approval: run (approved once, or covered by a job's `pre_approved`), declined (a person said
//! no — the same call again is declined without asking), or ask.
//! Must not: run tools; the loop (`round.rs`) acts on the verdicts.

use super::guard::{LoopGuard, canonical};
use super::tally::{Counts, Tally, outcome};
use super::{Agent, AgentError, RunOptions};
use crate::llm::{Message, ToolCall};
use crate::memory::ShortTerm;
use hermes_store::{Approval, ApprovalState, FailReason, Step, Task, TaskState};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::Duration;

impl Agent {
    /// Continue a held task whose hold this process took (`store.holds().take_ready`)
    /// from its checkpoint; `observer` follows it (a `run` continuing its own task).
    pub(super) async fn resume(
        &self,
        hold: hermes_store::Hold,
        observer: Option<tokio::sync::mpsc::UnboundedSender<Step>>,
    ) -> Result<Task, AgentError> {
        let store = &self.inner.store;
        let task = store.tasks().get(&hold.task_id).await?;
        let cp: Checkpoint = match serde_json::from_str(&hold.checkpoint) {
            Ok(cp) => cp,
            Err(e) => {
                let out = outcome(
                    TaskState::Failed,
                    None,
                    Some(format!(
                        "its saved progress cannot be read ({e}); run it again"
                    )),
                    Some(FailReason::Store),
                    &Tally::default(),
                );
                let done = store.tasks().finish_row(&task.id, &out).await?;
                let done = match done {
                    Some(d) => d,
                    None => store.tasks().get(&task.id).await?,
                };
                self.announce(&done.id, done.state, Some(&done));
                return Ok(done);
            }
        };
        if task.state.is_finished() {
            return Ok(task);
        }
        tracing::info!(task = %task.id, "task continues after its approvals were answered");
        let saved = cp.options.clone();
        let opts = RunOptions {
            observer,
            restrict: saved.restrict,
            agent_prompt: saved.agent_prompt,
            depth: saved.depth,
            timeout: Some(Duration::from_millis(cp.limit_ms)),
            // Whoever took the hold continues it: its `run`, or the daemon's workers (also
            // for a hold taken over from a `run` that died), whose later holds are theirs.
            resumer: hold.owner.clone(),
        };
        self.drive(task, opts, Some(cp)).await
    }
}

/// Everything a held execution needs to go on where it stopped, stored as JSON with the hold.
#[derive(Serialize, Deserialize)]
pub(super) struct Checkpoint {
    pub window: ShortTerm,
    pub guard: LoopGuard,
    /// The loop step whose tool calls are held.
    pub step: i64,
    pub round: HeldRound,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub parse_failures: i64,
    /// The last trace row's number (the runner numbers its rows).
    pub last_seq: i64,
    /// The execution's wall-clock limit and how much of it was used: waiting is not counted.
    pub limit_ms: u64,
    pub used_ms: u64,
    pub options: SavedOptions,
}

impl Checkpoint {
    /// What the held execution had counted, for the [`Tally`] that continues it.
    pub(super) fn counts(&self) -> Counts {
        Counts {
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
            parse_failures: self.parse_failures,
            last_seq: self.last_seq,
        }
    }
}

/// The parts of [`super::RunOptions`] that outlive a process (no observer; no resumer: the
/// hold's owner says who continues it). A checkpoint saved with a `resumer` still reads.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct SavedOptions {
    pub restrict: Option<Vec<String>>,
    pub agent_prompt: Option<String>,
    pub depth: u32,
}

/// One model reply's tool calls and where each one is.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct HeldRound {
    /// The reply as it goes into the window (its text and calls).
    pub assistant: Message,
    pub slots: Vec<Slot>,
}

impl HeldRound {
    pub(super) fn new(assistant: Message) -> HeldRound {
        let slots = assistant.tool_calls.iter().map(|_| Slot::ToRun).collect();
        HeldRound { assistant, slots }
    }

    pub(super) fn calls(&self) -> &[ToolCall] {
        &self.assistant.tool_calls
    }

    /// Every call has its result: the round can go into the window.
    pub(super) fn results(&self) -> Option<Vec<Message>> {
        self.calls()
            .iter()
            .zip(&self.slots)
            .map(|(c, s)| match s {
                Slot::Done { content } => Some(Message::tool(c.id.clone(), content.clone())),
                _ => None,
            })
            .collect()
    }
}

/// Where one call of a held round is.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "slot", rename_all = "snake_case")]
pub(super) enum Slot {
    /// Not run yet (held before anything ran, or waiting on its approval).
    ToRun,
    /// Ran (or was refused); the text the model sees. It never runs again.
    Done { content: String },
    /// A delegate call whose sub-tasks wait for a person: one entry per sub-task.
    Sub { entries: Vec<Value> },
}

/// What to do with one call that has not run.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Gate {
    /// No person needed (or the call would be refused anyway: the registry says why).
    Free,
    /// Covered by the job's `pre_approved`.
    PreApproved,
    /// A person approved exactly this call; it runs once, with these arguments.
    Approved {
        id: String,
        arguments: Value,
        by: String,
    },
    /// A person declined this call, or nobody answered in time (`unanswered`: it expired, or
    /// `run --approval-timeout` ran out); not run, not asked again.
    Declined {
        reason: String,
        by: String,
        unanswered: bool,
    },
    /// Asked already; still open.
    Open,
    /// Ask a person.
    Ask,
}

impl Gate {
    pub(super) fn waits(&self) -> bool {
        matches!(self, Gate::Open | Gate::Ask)
    }
}

/// The verdict for `call` of a tool that needs approval, given the task's requests so far.
pub(super) fn judge(call: &ToolCall, known: &[Approval], pre_approved: &[String]) -> Gate {
    if pre_approved
        .iter()
        .any(|g| hermes_store::util::glob_matches(g, &call.name))
    {
        return Gate::PreApproved;
    }
    let args = canonical(&call.arguments);
    let same: Vec<&Approval> = known
        .iter()
        .filter(|a| a.tool == call.name && canonical(&a.arguments) == args)
        .collect();
    if let Some(a) = same
        .iter()
        .find(|a| a.state == ApprovalState::Approved && a.used_at.is_none())
    {
        return Gate::Approved {
            id: a.id.clone(),
            arguments: a.arguments.clone(),
            by: a.decided_by.clone().unwrap_or_default(),
        };
    }
    if same.iter().any(|a| a.state == ApprovalState::Open) {
        return Gate::Open;
    }
    if let Some(a) = same
        .iter()
        .rev()
        .find(|a| matches!(a.state, ApprovalState::Denied | ApprovalState::Expired))
    {
        return Gate::Declined {
            reason: a.reason.clone().unwrap_or_else(|| "declined".into()),
            by: a.decided_by.clone().unwrap_or_default(),
            unanswered: a.state == ApprovalState::Expired
                || a.decided_by.as_deref() == Some(super::own::TIMEOUT_DECIDER),
        };
    }
    Gate::Ask
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn approval(state: ApprovalState, args: Value, used: bool) -> Approval {
        let t = chrono::Utc::now();
        Approval {
            id: format!("a_{state}"),
            task_id: "t".into(),
            tool: "send".into(),
            arguments: args,
            state,
            reason: (state != ApprovalState::Approved).then(|| "no".into()),
            created_at: t,
            expires_at: t,
            decided_at: None,
            decided_by: Some("api".into()),
            used_at: used.then_some(t),
        }
    }

    fn call(args: Value) -> ToolCall {
        ToolCall {
            id: "c1".into(),
            name: "send".into(),
            arguments: args,
        }
    }

    #[test]
    fn a_new_call_is_asked_and_the_same_call_in_another_key_order_is_the_same_request() {
        assert_eq!(judge(&call(json!({"to": "x"})), &[], &[]), Gate::Ask);
        let open = approval(ApprovalState::Open, json!({"a": 1, "b": [1, 2]}), false);
        let same = call(json!({"b": [1, 2], "a": 1}));
        assert_eq!(judge(&same, std::slice::from_ref(&open), &[]), Gate::Open);
        let other = call(json!({"b": [2, 1], "a": 1}));
        assert_eq!(judge(&other, &[open], &[]), Gate::Ask);
    }

    #[test]
    fn an_approval_runs_once_and_a_denial_is_final() {
        let args = json!({"to": "x"});
        let approved = approval(ApprovalState::Approved, args.clone(), false);
        assert!(matches!(
            judge(&call(args.clone()), &[approved], &[]),
            Gate::Approved { .. }
        ));
        let used = approval(ApprovalState::Approved, args.clone(), true);
        assert_eq!(judge(&call(args.clone()), &[used], &[]), Gate::Ask);
        let denied = approval(ApprovalState::Denied, args.clone(), false);
        assert!(matches!(
            judge(&call(args.clone()), &[denied], &[]),
            Gate::Declined { .. }
        ));
        let expired = approval(ApprovalState::Expired, args.clone(), false);
        assert!(matches!(
            judge(&call(args), &[expired], &[]),
            Gate::Declined { .. }
        ));
    }

    #[test]
    fn a_jobs_pre_approved_glob_lets_the_call_run() {
        let c = call(json!({}));
        assert_eq!(judge(&c, &[], &["se*".into()]), Gate::PreApproved);
        assert_eq!(judge(&c, &[], &["other".into()]), Gate::Ask);
    }
}
