//! Sub-agents: the `delegate` and `delegate_parallel` tools. A sub-agent is a task of its own
//! (origin `agent`, linked to its parent) with its own context, trace, tool list, prompt and
//! time limit. Results are tagged `success`, `failed` or `timeout` so the parent can reason
//! over partial failure.

use super::{Agent, Inner, RunOptions, Submit};
use crate::store::{FailReason, Origin, TaskState};
use crate::tools::{Tool, ToolContext, ToolError};
use futures::future::{BoxFuture, join_all};
use serde_json::{Value, json};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

/// Sub-agents may not delegate beyond this depth (a top-level task is depth 0).
pub const MAX_DEPTH: u32 = 2;

/// The delegate tools. They are registered before the agent exists (the agent holds the
/// registry), so they hold a weak link set once with [`DelegateTools::bind`].
#[derive(Clone, Default)]
pub struct DelegateTools {
    agent: Arc<OnceLock<Weak<Inner>>>,
}

impl DelegateTools {
    pub fn new() -> DelegateTools {
        DelegateTools::default()
    }

    pub fn bind(&self, agent: &Agent) {
        let _ = self.agent.set(Arc::downgrade(&agent.inner));
    }

    /// The two tools, or none when no sub-agents are configured.
    pub fn tools(&self, settings: &crate::config::Settings) -> Vec<Arc<dyn Tool>> {
        if settings.agents.is_empty() {
            return Vec::new();
        }
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
        vec![
            Arc::new(DelegateTool {
                shared: self.clone(),
                parallel: false,
                description: format!(
                    "Hand a self-contained sub-task to a sub-agent and get its answer. Agents: {}.",
                    listing.join("; ")
                ),
                parameters: one,
                timeout,
            }),
            Arc::new(DelegateTool {
                shared: self.clone(),
                parallel: true,
                description: "Run several independent sub-tasks on sub-agents at once; each result is tagged success, failed or timeout.".into(),
                parameters: many,
                timeout,
            }),
        ]
    }

    async fn run_one(&self, ctx: &ToolContext, name: &str, task: &str) -> Value {
        let Some(agent) = self
            .agent
            .get()
            .and_then(Weak::upgrade)
            .map(|inner| Agent { inner })
        else {
            return json!({"agent": name, "status": "failed", "error": "the agent is shutting down"});
        };
        if ctx.depth + 1 > MAX_DEPTH {
            return json!({"agent": name, "status": "failed",
                "error": format!("delegation is limited to depth {MAX_DEPTH}; do this part yourself")});
        }
        let Some(def) = agent.settings().agents.get(name).cloned() else {
            return json!({"agent": name, "status": "failed", "error": format!("no sub-agent '{name}'")});
        };
        let profile = (!def.profile.is_empty())
            .then(|| def.profile.clone())
            .or(Some(ctx.profile.clone()));
        let created = agent
            .create_claimed(Submit {
                task: task.to_string(),
                origin: Origin::Agent,
                profile,
                parent_id: Some(ctx.task_id.clone()),
                job_id: ctx.job_id.clone(),
            })
            .await;
        let sub = match created {
            Ok(c) => c,
            Err(e) => return json!({"agent": name, "status": "failed", "error": e.to_string()}),
        };
        let sub_id = sub.task().id.clone();
        let opts = RunOptions {
            observer: None,
            restrict: Some(def.tools.clone()),
            agent_prompt: Some(def.system_prompt.clone()),
            depth: ctx.depth + 1,
            timeout: (def.timeout_s > 0).then(|| Duration::from_secs(def.timeout_s)),
        };
        // Spawned, so the sub-task always reaches a final state even if this call is dropped.
        let handle = tokio::spawn(async move { agent.run_claimed(sub, opts).await });
        match handle.await {
            Ok(Ok(t)) => match (t.state, t.reason) {
                (TaskState::Succeeded, _) => {
                    json!({"agent": name, "status": "success", "task_id": t.id, "answer": t.answer})
                }
                (_, Some(FailReason::Timeout)) => {
                    json!({"agent": name, "status": "timeout", "task_id": t.id, "error": t.error})
                }
                _ => json!({"agent": name, "status": "failed", "task_id": t.id, "error": t.error}),
            },
            Ok(Err(e)) => {
                json!({"agent": name, "status": "failed", "task_id": sub_id, "error": e.to_string()})
            }
            Err(e) => {
                json!({"agent": name, "status": "failed", "task_id": sub_id, "error": format!("sub-agent crashed: {e}")})
            }
        }
    }
}

struct DelegateTool {
    shared: DelegateTools,
    parallel: bool,
    description: String,
    parameters: Value,
    timeout: Duration,
}

impl Tool for DelegateTool {
    fn name(&self) -> &str {
        if self.parallel {
            "delegate_parallel"
        } else {
            "delegate"
        }
    }
    fn description(&self) -> &str {
        &self.description
    }
    fn parameters(&self) -> &Value {
        &self.parameters
    }
    fn timeout(&self) -> Option<Duration> {
        Some(self.timeout)
    }
    fn call<'a>(
        &'a self,
        args: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>> {
        Box::pin(async move {
            let pair = |v: &Value| {
                (
                    v.get("agent")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    v.get("task")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                )
            };
            if !self.parallel {
                let (agent, task) = pair(&args);
                let r = self.shared.run_one(ctx, &agent, &task).await;
                return match r.get("status").and_then(Value::as_str) {
                    Some("success") => Ok(r),
                    _ => Err(ToolError::Failed(r.to_string())),
                };
            }
            let jobs: Vec<(String, String)> = args
                .get("tasks")
                .and_then(Value::as_array)
                .map(|a| a.iter().map(pair).collect())
                .unwrap_or_default();
            let results = join_all(jobs.iter().map(|(a, t)| self.shared.run_one(ctx, a, t))).await;
            Ok(json!({"results": results}))
        })
    }
}
