//! Approvals as a person meets them: the requests listed, answered, expired and announced.
//!
//! Owns: the one way a request is answered — [`Approvals::decide`] — used by the API, the
//! dashboard, the CLI and a reply to the request's mail; the expiry sweep (which also hands
//! the tasks of a `run` that died to the daemon's workers); the one notice per request on
//! `tools.approval_notify`.
//! Must not: be reachable from a tool: no tool holds this handle, so no model can answer.

use super::Agent;
use hermes_store::{Approval, ApprovalState, NewNotice, StoreError, Task};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How often the daemon looks for requests past their time: well within the promised 15 s.
pub(crate) const EXPIRY_SWEEP: Duration = Duration::from_secs(5);

/// The request header a client of the API sets to say through which tool a person answered
/// (`cli`), so the record names it rather than `api`. Only names from [`answered_via`] count: it
/// says where the answer came from, not who may give one (the token decides that).
pub const VIA_HEADER: &str = "x-hermes-via";

/// `decided_by` for an answer through the API, given its [`VIA_HEADER`].
pub fn answered_via(header: Option<&str>) -> &'static str {
    match header {
        Some("cli") => "cli",
        _ => "api",
    }
}

/// A person's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Approve,
    /// `reason`: said to the model (and shown); none: "declined".
    Deny {
        reason: Option<String>,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum ApprovalError {
    #[error("approval '{0}' not found; `hermes-agent approvals list` shows the open ones")]
    NotFound(String),
    #[error("approval '{id}' is already {state}; only open requests can be answered")]
    AlreadyDecided { id: String, state: ApprovalState },
    #[error(
        "approval '{id}' expired at {} unanswered and can no longer be answered; the task was \
         told it expired (run the task again to be asked anew; tools.approval_expire_s sets how \
         long a request waits)",
        expires_at.format("%Y-%m-%d %H:%M:%S UTC")
    )]
    Expired {
        id: String,
        expires_at: chrono::DateTime<chrono::Utc>,
    },
    #[error(transparent)]
    Store(StoreError),
}

impl From<StoreError> for ApprovalError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound { id, .. } => ApprovalError::NotFound(id),
            e => ApprovalError::Store(e),
        }
    }
}

/// The approvals service: a cheap handle over the agent (see [`Agent::approvals`]).
#[derive(Clone)]
pub struct Approvals {
    agent: Agent,
}

impl Agent {
    /// The way a person answers requests (never given to a tool).
    pub fn approvals(&self) -> Approvals {
        Approvals {
            agent: self.clone(),
        }
    }
}

impl Approvals {
    /// Newest first; `state` `None`: every state.
    pub async fn list(
        &self,
        state: Option<ApprovalState>,
        limit: i64,
    ) -> Result<Vec<Approval>, ApprovalError> {
        Ok(self.agent.store().approvals().list(state, limit).await?)
    }

    /// The request in its state as of now (open past its time: expired).
    pub async fn get(&self, id: &str) -> Result<Approval, ApprovalError> {
        let a = self.agent.store().approvals().get(id).await?;
        Ok(a.as_of(hermes_store::now()))
    }

    /// The requests of one task (its page shows them with their buttons), as of now.
    pub async fn of_task(&self, task_id: &str) -> Result<Vec<Approval>, ApprovalError> {
        let at = hermes_store::now();
        let all = self.agent.store().approvals().of_task(task_id).await?;
        Ok(all.into_iter().map(|a| a.as_of(at)).collect())
    }

    /// Answer an open request, once; `decided_by` says who (`api`, `dashboard`, `cli`,
    /// `email:ADDRESS`). The task waiting on it goes on at once when this was its last open
    /// request: the call runs (approved) or the model is told a person declined. A request
    /// past its time is refused ([`ApprovalError::Expired`]) and recorded expired, by the
    /// clock now, whether or not the sweep has run (a CLI on the data dir with the daemon
    /// stopped answers here too).
    pub async fn decide(
        &self,
        id: &str,
        decision: Decision,
        decided_by: &str,
    ) -> Result<Approval, ApprovalError> {
        let (state, reason) = match decision {
            Decision::Approve => (ApprovalState::Approved, None),
            Decision::Deny { reason } => (
                ApprovalState::Denied,
                Some(
                    reason
                        .map(|r| r.trim().to_string())
                        .filter(|r| !r.is_empty())
                        .unwrap_or_else(|| "declined".into()),
                ),
            ),
        };
        let store = self.agent.store();
        match store
            .approvals()
            .decide(id, state, reason.as_deref(), decided_by)
            .await?
        {
            Some(done) if done.state == ApprovalState::Expired && state != done.state => {
                tracing::info!(approval = %done.id, task = %done.task_id, tool = %done.tool,
                    by = decided_by, "approval answered after it expired; recorded expired");
                self.agent.wake_for_holds();
                Err(ApprovalError::Expired {
                    id: done.id,
                    expires_at: done.expires_at,
                })
            }
            Some(done) => {
                tracing::info!(approval = %done.id, task = %done.task_id, tool = %done.tool,
                    state = %done.state, by = decided_by, "approval answered");
                self.agent.wake_for_holds();
                Ok(done)
            }
            None => {
                let now = store.approvals().get(id).await?;
                Err(match now.state {
                    ApprovalState::Expired => ApprovalError::Expired {
                        id: now.id,
                        expires_at: now.expires_at,
                    },
                    state => ApprovalError::AlreadyDecided { id: now.id, state },
                })
            }
        }
    }

    /// Deny (reason `expired`) every open request past its time; how many.
    pub async fn expire_due(&self) -> Result<usize, ApprovalError> {
        let ids = self
            .agent
            .store()
            .approvals()
            .expire(hermes_store::now())
            .await?;
        if !ids.is_empty() {
            tracing::info!(count = ids.len(), "approval requests expired unanswered");
            self.agent.wake_for_holds();
        }
        Ok(ids.len())
    }

    /// The request a notice asked about: a reply to that notice answers it.
    pub async fn for_notice(&self, notice_id: i64) -> Result<Option<Approval>, ApprovalError> {
        Ok(self.agent.store().approvals().for_notice(notice_id).await?)
    }

    /// Expire requests every [`EXPIRY_SWEEP`] until `stop`.
    pub fn spawn_sweeper(&self, tracker: &TaskTracker, stop: CancellationToken) {
        let this = self.clone();
        tracker.spawn(async move {
            loop {
                if let Err(e) = this.expire_due().await {
                    tracing::warn!(error = %e, "could not expire approval requests; retrying");
                }
                if let Err(e) = this.adopt_orphans().await {
                    tracing::warn!(error = %e, "could not look for tasks whose run died; retrying");
                }
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(EXPIRY_SWEEP) => {}
                }
            }
        });
    }

    /// Held tasks whose `run` died (no heartbeat for `storage.node_lease_s`) go to the daemon's
    /// workers: once answered they continue here, rather than wait for a process that is gone.
    pub(crate) async fn adopt_orphans(&self) -> Result<(), StoreError> {
        let lease =
            chrono::Duration::from_std(self.agent.node_lease()).unwrap_or(chrono::Duration::MAX);
        let adopted = self
            .agent
            .store()
            .holds()
            .adopt_silent(hermes_store::now() - lease)
            .await?;
        for task in &adopted {
            tracing::warn!(%task, "the `run` that held this task is gone; the daemon's workers continue it");
        }
        if !adopted.is_empty() {
            self.agent.wake_for_holds();
        }
        // A `run` killed while its task ran (not waiting): nothing is left to continue, and
        // nobody else would end it.
        let ended = self
            .agent
            .store()
            .tasks()
            .fail_abandoned(hermes_store::FailReason::Interrupted)
            .await?;
        if ended > 0 {
            tracing::warn!(
                count = ended,
                "tasks whose `run` process died while running them marked failed (interrupted)"
            );
        }
        Ok(())
    }

    /// Record a request for `tool` with `arguments` (canonical JSON) in `task`, and announce it
    /// once on each `tools.approval_notify` channel.
    pub(super) async fn ask(
        &self,
        task: &Task,
        tool: &str,
        arguments: &str,
    ) -> Result<Approval, StoreError> {
        let settings = self.agent.settings();
        let expires = hermes_store::now()
            + chrono::Duration::seconds(
                i64::try_from(settings.tools.approval_expire_s).unwrap_or(i64::MAX / 1000),
            );
        let store = self.agent.store();
        let approval = store
            .approvals()
            .create(&task.id, tool, arguments, expires)
            .await?;
        tracing::info!(approval = %approval.id, task = %task.id, tool, "waiting for approval");
        let Some(notifier) = &self.agent.inner.notifier else {
            return Ok(approval);
        };
        let goal = self.goal(task).await;
        for channel in &settings.tools.approval_notify {
            let notice = notice(
                &approval,
                &goal,
                channel,
                &settings.server.public_url,
                &task.id,
            );
            match notifier.enqueue(notice).await {
                Ok(notice_id) => {
                    store
                        .approvals()
                        .link_notice(&approval.id, notice_id)
                        .await?
                }
                Err(e) => {
                    tracing::warn!(approval = %approval.id, channel, error = %e, "could not queue the approval notice")
                }
            }
        }
        Ok(approval)
    }

    /// The goal a person is asked about: the top-level task's text (a sub-agent's own task
    /// after it).
    async fn goal(&self, task: &Task) -> String {
        let Some(parent) = &task.parent_id else {
            return task.task.clone();
        };
        let mut root = parent.clone();
        // Sub-agents nest at most `MAX_DEPTH` deep.
        for _ in 0..super::MAX_DEPTH {
            match self.agent.store().tasks().get(&root).await {
                Ok(t) => match t.parent_id {
                    Some(p) => root = p,
                    None => return format!("{}\n(sub-task: {})", t.task, task.task),
                },
                Err(_) => break,
            }
        }
        task.task.clone()
    }
}

/// The one notice of a request: goal, tool, arguments, and where to answer it.
fn notice(a: &Approval, goal: &str, channel: &str, public_url: &str, task_id: &str) -> NewNotice {
    let args =
        serde_json::to_string_pretty(&a.arguments).unwrap_or_else(|_| a.arguments.to_string());
    let base = public_url.trim_end_matches('/');
    let link = if base.is_empty() {
        String::new()
    } else {
        format!("\nTask: {base}/tasks/{task_id}\nAnswer: {base}/approvals\n")
    };
    let body = format!(
        "A task wants to run a tool that needs your approval.\n\n\
         Goal: {goal}\n\nTool: {tool}\n\nArguments:\n```\n{args}\n```\n{link}\n\
         Approve or deny on the dashboard, with `hermes-agent approvals approve {id}` / \
         `hermes-agent approvals deny {id} --reason TEXT`, or by replying `approve` or `deny`{react}. \
         Unanswered, it is denied at {expires}.",
        react = if channel.starts_with("matrix") {
            " (or reacting ✅ / ❌)"
        } else {
            ""
        },
        tool = a.tool,
        id = a.id,
        expires = a.expires_at.format("%Y-%m-%d %H:%M UTC"),
    );
    NewNotice {
        channel: channel.to_string(),
        title: format!("Approval needed: {}", a.tool),
        body,
        task_id: Some(task_id.to_string()),
        job_id: None,
        run_id: None,
        ..NewNotice::default()
    }
}

#[cfg(test)]
mod tests {
    use super::answered_via;

    #[test]
    fn only_a_known_tool_is_named_and_anything_else_is_the_api() {
        assert_eq!(answered_via(Some("cli")), "cli");
        assert_eq!(answered_via(None), "api");
        // A client cannot make the record claim the dashboard or a mail answered.
        assert_eq!(answered_via(Some("dashboard")), "api");
        assert_eq!(answered_via(Some("email:boss@example.org")), "api");
    }
}
