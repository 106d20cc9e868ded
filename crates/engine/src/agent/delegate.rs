//! Sub-agents: the `delegate` and `delegate_parallel` tools. A sub-agent is a task of its own
//! (origin `agent`, linked to its parent) with its own context, trace, tool list, prompt and
//! time limit. Results are tagged `success`, `failed` or `timeout` so the parent can reason
//! over partial failure.

use super::queue::{QueueError, TaskQueue};
use super::{Agent, RunOptions, Submit};
use crate::llm::ToolCall;
use crate::tools::{Tool, ToolContext, ToolError, ToolInfo, tool_with};
use futures::future::join_all;
use hermes_config::SubAgent;
use hermes_store::{FailReason, Origin, Task, TaskState};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// Sub-agents may not delegate beyond this depth (a top-level task is depth 0).
pub(crate) const MAX_DEPTH: u32 = 2;

/// At most this many sub-agents of one task run at once (`delegate_parallel`'s own limit): a
/// reply of sixteen `delegate_parallel` calls would otherwise start 128. One bound per parent,
/// not one for all: a parent holding a slot while its children wait for one would deadlock.
pub(crate) const MAX_LIVE_SUBAGENTS: usize = 8;

/// What a sub-agent's caller hears when no agent serves the queue any more.
const SHUTTING_DOWN: &str = "the agent is shutting down";

/// The delegate tools. They are registered before the agent exists (the agent holds the
/// registry), so they reach it through the agent's [`TaskQueue`].
#[derive(Clone)]
pub struct DelegateTools {
    queue: TaskQueue,
    live: Live,
}

/// The tools' state: the queue, and the sub-agents they were made with (the ones their
/// descriptions list).
#[derive(Clone)]
struct Delegation {
    queue: TaskQueue,
    agents: Arc<BTreeMap<String, SubAgent>>,
    live: Live,
}

/// How many sub-agents each parent task has running, by the parent's id.
#[derive(Clone, Default)]
struct Live(Arc<Mutex<HashMap<String, usize>>>);

/// One running sub-agent of `parent`, counted until dropped (the call ended or was dropped).
struct Slot {
    live: Live,
    parent: String,
}

impl Live {
    /// A slot under `parent`, or none when it has [`MAX_LIVE_SUBAGENTS`] running already.
    fn take(&self, parent: &str) -> Option<Slot> {
        let mut counts = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let n = counts.entry(parent.to_string()).or_default();
        if *n >= MAX_LIVE_SUBAGENTS {
            return None;
        }
        *n += 1;
        Some(Slot {
            live: self.clone(),
            parent: parent.to_string(),
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut counts = self.live.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = counts.get_mut(&self.parent) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.remove(&self.parent);
            }
        }
    }
}

impl DelegateTools {
    pub fn new(queue: TaskQueue) -> DelegateTools {
        DelegateTools {
            queue,
            live: Live::default(),
        }
    }

    /// The two tools, or none when no sub-agents are configured.
    pub fn tools(&self, settings: &hermes_config::Settings) -> Vec<Arc<dyn Tool>> {
        if settings.agents.is_empty() {
            return Vec::new();
        }
        let (one, many) = infos(settings);
        let state = Delegation {
            queue: self.queue.clone(),
            agents: Arc::new(settings.agents.clone()),
            live: self.live.clone(),
        };
        vec![
            tool_with(state.clone(), one, |d, a: SubTask, ctx| async move {
                let r = d.run_one(&ctx, &a.agent, &a.task).await;
                if r.status == SubStatus::Waiting {
                    // The caller's task waits too; this result is never shown.
                    ctx.waiting.set(vec![r.entry()]);
                    return Ok(json!({"status": "waiting"}));
                }
                one_result(r.to_value(), r.status)
            }),
            tool_with(state, many, |d, a: SubTasks, ctx| async move {
                let runs = a.tasks.iter().map(|t| d.run_one(&ctx, &t.agent, &t.task));
                let results = join_all(runs).await;
                if results.iter().any(|r| r.status == SubStatus::Waiting) {
                    ctx.waiting
                        .set(results.iter().map(SubResult::entry).collect());
                    return Ok(json!({"status": "waiting"}));
                }
                let results: Vec<Value> = results.iter().map(SubResult::to_value).collect();
                Ok(json!({ "results": results }))
            }),
        ]
    }
}

impl Delegation {
    async fn run_one(&self, ctx: &ToolContext, name: &str, task: &str) -> SubResult {
        let failed = |error: String| SubResult::new(name, SubStatus::Failed, None).error(error);
        if ctx.depth + 1 > MAX_DEPTH {
            return failed(format!(
                "delegation is limited to depth {MAX_DEPTH}; do this part yourself"
            ));
        }
        let Some(def) = self.agents.get(name) else {
            return failed(format!("no sub-agent '{name}'"));
        };
        // Taken before anything is awaited, so the calls of one reply count each other.
        let Some(_slot) = self.live.take(&ctx.task_id) else {
            return failed(format!(
                "this task already has {MAX_LIVE_SUBAGENTS} sub-agents running; wait for their results before delegating more, or do this part yourself"
            ));
        };
        let profile = (!def.profile.is_empty())
            .then(|| def.profile.clone())
            .or(Some(ctx.profile.clone()));
        let created = self
            .queue
            .create_claimed(Submit {
                task: task.to_string(),
                origin: Origin::Agent,
                profile,
                parent_id: Some(ctx.task_id.clone()),
                job_id: ctx.job_id.clone(),
            })
            .await;
        let sub = match created {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return failed(e.to_string()),
            Err(QueueError::Closed) => return failed(SHUTTING_DOWN.into()),
            Err(e) => return failed(e.to_string()),
        };
        let sub_id = sub.task().id.clone();
        let opts = RunOptions {
            observer: None,
            restrict: Some(def.tools.clone()),
            agent_prompt: Some(def.system_prompt.clone()),
            depth: ctx.depth + 1,
            timeout: (def.timeout_s > 0).then(|| Duration::from_secs(def.timeout_s)),
            resumer: ctx.resumer.clone(),
        };
        // The agent runs it apart from this call, so the sub-task reaches a final state even
        // if this call is dropped.
        let with_id = |status| SubResult::new(name, status, Some(sub_id.clone()));
        match self.queue.run_claimed(sub, opts).await {
            Ok(Ok(t)) => from_task(name, t),
            Ok(Err(e)) => with_id(SubStatus::Failed).error(e.to_string()),
            Err(QueueError::Closed) => with_id(SubStatus::Failed).error(SHUTTING_DOWN.into()),
            Err(e @ QueueError::Unanswered) => with_id(SubStatus::Failed).error(e.to_string()),
        }
    }
}

/// A sub-task as the parent sees it: its answer, or why there is none; `waiting` while it
/// waits for a person.
fn from_task(agent: &str, t: Task) -> SubResult {
    let status = match (t.state, t.reason) {
        (TaskState::Succeeded, _) => SubStatus::Success,
        (TaskState::Running | TaskState::Pending, _) if t.waiting => SubStatus::Waiting,
        (_, Some(FailReason::Timeout)) => SubStatus::Timeout,
        _ => SubStatus::Failed,
    };
    SubResult {
        answer: t.answer,
        error: t.error,
        ..SubResult::new(agent, status, Some(t.id))
    }
}

/// `delegate`'s result: the sub-agent's answer, or a tool error carrying why there is none.
fn one_result(value: Value, status: SubStatus) -> Result<Value, ToolError> {
    match status {
        SubStatus::Success => Ok(value),
        _ => Err(ToolError::Failed(value.to_string())),
    }
}

/// The result of a delegate call whose sub-tasks waited for a person, now that they have
/// finished: read from their rows, as the call would have returned it.
pub(super) async fn resumed(
    agent: &Agent,
    call: &ToolCall,
    entries: &[Value],
) -> Result<Value, ToolError> {
    let mut results = Vec::with_capacity(entries.len());
    for e in entries {
        let agent_name = e["agent"].as_str().unwrap_or_default();
        let r = match (e["task_id"].as_str(), e.get("status")) {
            (Some(id), None) => match agent.store().tasks().get(id).await {
                Ok(t) => from_task(agent_name, t),
                Err(err) => SubResult::new(agent_name, SubStatus::Failed, Some(id.to_string()))
                    .error(format!("the sub-task cannot be read: {err}")),
            },
            // Finished before the wait (or never started): kept as it was.
            _ => {
                results.push((e.clone(), SubStatus::Failed));
                continue;
            }
        };
        results.push((r.to_value(), r.status));
    }
    if call.name == "delegate" {
        return match results.into_iter().next() {
            Some((v, status)) => one_result(v, status),
            None => Err(ToolError::Failed("the sub-task's result was lost".into())),
        };
    }
    let values: Vec<Value> = results.into_iter().map(|(v, _)| v).collect();
    Ok(json!({ "results": values }))
}

/// The `delegate` and `delegate_parallel` infos: the configured agents listed, and a timeout
/// longer than the longest sub-agent's own.
fn infos(settings: &hermes_config::Settings) -> (ToolInfo, ToolInfo) {
    let names: Vec<String> = settings.agents.keys().cloned().collect();
    let listing: Vec<String> = settings
        .agents
        .iter()
        .map(|(n, a)| format!("{n}: {}", a.description.trim()))
        .collect();
    let longest = settings
        .agents
        .values()
        .map(|a| {
            if a.timeout_s > 0 {
                a.timeout_s
            } else {
                settings.agent.task_timeout_s
            }
        })
        .max()
        .unwrap_or(settings.agent.task_timeout_s);
    // The sub-agent enforces its own limit; the tool's must be longer so the result
    // (including a `timeout` tag) always gets back to the parent.
    let timeout = Duration::from_secs(longest + 10);
    let one = json!({
        "type": "object",
        "properties": {
            "agent": {"type": "string", "enum": names},
            "task": {"type": "string", "minLength": 1}
        },
        "required": ["agent", "task"],
        "additionalProperties": false
    });
    let many = json!({
        "type": "object",
        "properties": {"tasks": {"type": "array", "minItems": 1, "maxItems": 8, "items": one.clone()}},
        "required": ["tasks"],
        "additionalProperties": false
    });
    (
        ToolInfo::new(
            "delegate",
            format!(
                "Hand a self-contained sub-task to a sub-agent and get its answer. Agents: {}.",
                listing.join("; ")
            ),
            one,
        )
        .with_timeout(timeout),
        ToolInfo::new(
            "delegate_parallel",
            "Run several independent sub-tasks on sub-agents at once; each result is tagged success, failed or timeout.",
            many,
        )
        .with_timeout(timeout),
    )
}

/// How a sub-task ended, as the parent model sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum SubStatus {
    Success,
    Failed,
    Timeout,
    /// Waits for a person's approval (the parent waits too; never shown to a model).
    Waiting,
}

/// One sub-task's result: `{agent, status, task_id?, answer?, error?}`.
#[derive(Debug, Serialize)]
struct SubResult {
    agent: String,
    status: SubStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    task_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    answer: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

impl SubResult {
    fn new(agent: &str, status: SubStatus, task_id: Option<String>) -> SubResult {
        SubResult {
            agent: agent.to_string(),
            status,
            task_id,
            answer: None,
            error: None,
        }
    }

    fn error(mut self, error: String) -> SubResult {
        self.error = Some(error);
        self
    }

    /// What a waiting parent keeps of this sub-task: where to read its result once it has
    /// finished, or the result itself when it has one already.
    fn entry(&self) -> Value {
        match (&self.task_id, self.status) {
            (Some(id), SubStatus::Waiting) => json!({"agent": self.agent, "task_id": id}),
            _ => self.to_value(),
        }
    }

    fn to_value(&self) -> Value {
        serde_json::to_value(self)
            .unwrap_or_else(|e| json!({"status": "failed", "error": e.to_string()}))
    }
}

/// `{agent, task}`: one sub-task.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SubTask {
    agent: String,
    task: String,
}

/// `{tasks: [{agent, task}, …]}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SubTasks {
    tasks: Vec<SubTask>,
}
