//! What a message becomes, on any channel: the seam every conversation goes through once its
//! channel has read it (`intake` for mail, `chat` for Matrix) — the commands on a notice's job
//! and approval request, the task (continuing the run a notice came from), the rate limit.
//!
//! Owns: [`Said`] (a person's message in channel-neutral terms), [`Reply`] (how the answer goes
//! back: a threaded mail, or a message in a chat room's thread), and the decision.
//! Must not: know a protocol (headers, events), or record anything — the caller records the
//! outcome with the message in one transaction.

use super::Inner;
use super::reply::{ChatThread, Thread};
use crate::agent::{ApprovalError, Decision};
use hermes_store::{
    ApprovalState, Channel, CommandState, IgnoreReason, InboxCommand, InboxOutcome, Job, JobChange,
    NewNotice, NewTask, Notice, Recorded, StoreError, Task,
};

/// The rate limit's window.
const RATE_WINDOW: chrono::Duration = chrono::Duration::hours(1);

/// A message from an allowed person, as its channel read it.
pub(crate) struct Said {
    pub channel: Channel,
    /// Who wrote, as recorded (a lower-case address, a Matrix user id): the rate limit's key.
    pub sender: String,
    /// Who answers an approval request, as `decided_by` records it.
    pub by: String,
    /// What the person wrote (a command is its first line; a deny's reason the rest).
    pub words: String,
    /// The task it becomes if it is no command (for mail, its subject too).
    pub task: String,
    /// The notice it answers, if it names one of ours.
    pub notice: Option<Notice>,
    /// Where answers and confirmations go.
    pub reply: Reply,
}

/// How an answer goes back to the person, on the channel they wrote on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    Mail(Thread),
    Chat(ChatThread),
}

impl Reply {
    /// A one-line confirmation of a command (or why it could not be done).
    pub(crate) fn confirmation(&self, line: &str, task_id: Option<&str>) -> NewNotice {
        match self {
            Reply::Mail(t) => t.confirmation(line, task_id),
            Reply::Chat(t) => t.confirmation(line, task_id),
        }
    }

    /// The answer to the task a message became.
    pub(crate) fn answer(&self, task: &Task, public_url: &str) -> NewNotice {
        match self {
            Reply::Mail(t) => t.answer(task, public_url),
            Reply::Chat(t) => t.answer(task, public_url),
        }
    }

    fn job_id(&self) -> Option<String> {
        match self {
            Reply::Mail(t) => t.job_id.clone(),
            Reply::Chat(t) => t.job_id.clone(),
        }
    }
}

impl Inner {
    /// What `said` becomes: a command on the notice it answers (its first line is one), else
    /// a task — unless it is empty or its sender is past the rate limit.
    pub(crate) async fn converse(&self, said: Said) -> Result<InboxOutcome, StoreError> {
        let ignored = |reason, notice: Option<&Notice>| InboxOutcome::Ignored {
            reason,
            notice_id: notice.map(|n| n.id),
            job_id: notice.and_then(|n| n.queued.job_id.clone()),
            reply: None,
        };
        if let Some(n) = &said.notice
            && let Some(command) = super::classify::command(&said.words)
        {
            return match command {
                InboxCommand::Approve | InboxCommand::Deny => {
                    self.answer_approval(command, n, &said.reply, &said).await
                }
                _ => self.command(command, n, &said.reply).await,
            };
        }
        let notice = said.notice.as_ref();
        if said.task.trim().is_empty() {
            return Ok(ignored(IgnoreReason::Empty, notice));
        }
        let since = hermes_store::now() - RATE_WINDOW;
        let started = self
            .store
            .inbox()
            .tasks_since(said.channel, &said.sender, since)
            .await?;
        if started >= i64::from(self.max_tasks_per_hour(said.channel)) {
            return Ok(ignored(IgnoreReason::RateLimited, notice));
        }
        Ok(InboxOutcome::Task {
            task: NewTask {
                task: said.task.clone(),
                origin: said.channel.origin(),
                profile: self.profile.clone(),
                parent_id: notice.and_then(|n| n.queued.task_id.clone()),
                job_id: None,
                claimed: false,
            },
            context: notice.map(|n| super::reply::context(&n.queued.title, &n.queued.body)),
            notice_id: notice.map(|n| n.id),
            job_id: said.reply.job_id(),
        })
    }

    /// A command on the job of `notice`: the change and its confirmation, or why not.
    async fn command(
        &self,
        command: InboxCommand,
        notice: &Notice,
        reply: &Reply,
    ) -> Result<InboxOutcome, StoreError> {
        let no_job = |line: String| InboxOutcome::Ignored {
            reason: IgnoreReason::NoJob,
            notice_id: Some(notice.id),
            job_id: notice.queued.job_id.clone(),
            reply: Some(reply.confirmation(&line, None)),
        };
        let verb = match command {
            InboxCommand::Pause => "pause",
            InboxCommand::Resume => "resume",
            InboxCommand::RunNow => "run",
            InboxCommand::Approve | InboxCommand::Deny => "answer",
        };
        let Some(job_id) = notice.queued.job_id.clone() else {
            return Ok(no_job(format!(
                "That message did not come from a scheduled job, so there is nothing to {verb}."
            )));
        };
        let job = match self.store.jobs().get(&job_id).await {
            Ok(j) => j,
            Err(StoreError::NotFound { .. }) => {
                return Ok(no_job(format!(
                    "The job of that message ({job_id}) no longer exists, so there is nothing to {verb}."
                )));
            }
            Err(e) => return Err(e),
        };
        let name = &job.name;
        let (state, change, detail) = match command {
            InboxCommand::Pause => {
                let line = if job.enabled {
                    format!("Paused “{name}”. Reply resume to let it run again.")
                } else {
                    format!("“{name}” was already paused. Reply resume to let it run again.")
                };
                let change = JobChange {
                    enabled: false,
                    next_run_at: job.next_run_at,
                };
                (CommandState::Done, Some(change), line)
            }
            InboxCommand::Resume => {
                let next = self.handoff.resumed_next_run(&job);
                let line = format!("Resumed “{name}”; {}.", next_words(&job, next));
                let change = JobChange {
                    enabled: true,
                    next_run_at: next,
                };
                (CommandState::Done, Some(change), line)
            }
            InboxCommand::RunNow => (
                CommandState::Requested,
                None,
                format!("A run of “{name}” was asked for."),
            ),
            // Answered in `answer_approval`, never here.
            InboxCommand::Approve | InboxCommand::Deny => return Ok(no_job(String::new())),
        };
        // A run is confirmed once it has started (or could not).
        let reply = (state == CommandState::Done).then(|| reply.confirmation(&detail, None));
        Ok(InboxOutcome::Command {
            command,
            state,
            notice_id: notice.id,
            job_id: Some(job_id),
            change,
            detail,
            reply,
        })
    }

    /// `approve` / `deny` in reply to an approval request's notice: answered through the same
    /// door as the API ([`Handoff::decide_approval`]), before the message is recorded. Read
    /// again after a crash, the request is no longer open and the answer says so: a request
    /// is decided once, whatever fails.
    async fn answer_approval(
        &self,
        command: InboxCommand,
        notice: &Notice,
        reply: &Reply,
        said: &Said,
    ) -> Result<InboxOutcome, StoreError> {
        let Some(request) = self.store.approvals().for_notice(notice.id).await? else {
            return Ok(InboxOutcome::Ignored {
                reason: IgnoreReason::NoApproval,
                notice_id: Some(notice.id),
                job_id: notice.queued.job_id.clone(),
                reply: Some(reply.confirmation(
                    "That message did not ask for an approval, so there is nothing to approve or deny.",
                    None,
                )),
            });
        };
        let decision = match command {
            InboxCommand::Approve => Decision::Approve,
            _ => Decision::Deny {
                reason: deny_reason(&said.words),
            },
        };
        let tool = &request.tool;
        let (state, detail) = match self
            .handoff
            .decide_approval(&request.id, decision, &said.by)
            .await
        {
            Ok(a) if a.state == ApprovalState::Approved => (
                CommandState::Done,
                format!(
                    "Approved: {tool} runs once with the arguments shown, and the task goes on."
                ),
            ),
            Ok(_) => (
                CommandState::Done,
                format!("Denied: {tool} will not run; the task is told a person declined."),
            ),
            Err(ApprovalError::AlreadyDecided { state, .. }) => (
                CommandState::Failed,
                format!("That request for {tool} was already {state}; nothing changed."),
            ),
            Err(ApprovalError::Expired { .. }) => (
                CommandState::Failed,
                format!(
                    "That request for {tool} had expired before your answer; {tool} will not \
                     run, and the task is told it expired."
                ),
            ),
            Err(ApprovalError::NotFound(_)) => (
                CommandState::Failed,
                format!("That request for {tool} no longer exists; nothing changed."),
            ),
            Err(ApprovalError::Store(e)) => return Err(e),
        };
        Ok(InboxOutcome::Command {
            command,
            state,
            notice_id: notice.id,
            job_id: notice.queued.job_id.clone(),
            change: None,
            reply: Some(reply.confirmation(&detail, Some(&request.task_id))),
            detail,
        })
    }
}

/// A `deny` reply's reason: what the person wrote after the first line, on one line.
fn deny_reason(text: &str) -> Option<String> {
    let rest: Vec<&str> = text
        .lines()
        .map(str::trim)
        .skip_while(|l| l.is_empty())
        .skip(1)
        .filter(|l| !l.is_empty())
        .collect();
    (!rest.is_empty()).then(|| hermes_store::util::text::one_line(&rest.join(" "), 300))
}

/// "next run 2026-12-02 08:00 CET", or why there is none.
fn next_words(job: &Job, next: Option<chrono::DateTime<chrono::Utc>>) -> String {
    match next {
        Some(t) => format!(
            "next run {}",
            crate::scheduler::words::in_zone(t, &job.timezone).format("%Y-%m-%d %H:%M %Z")
        ),
        None => "it has no further run on its schedule".to_string(),
    }
}

impl Inner {
    /// After the record: wake who must act on what a message became (a worker, the
    /// scheduler, the outbox) and carry out a `run now`.
    pub(crate) async fn hand_over(
        &self,
        channel: Channel,
        outcome: &InboxOutcome,
        recorded: Recorded,
    ) -> Result<(), StoreError> {
        let Recorded::New { id, task_id, reply } = recorded else {
            return Ok(());
        };
        match outcome {
            InboxOutcome::Ignored { reason, .. } => {
                tracing::info!(message = id, %channel, %reason, "message ignored");
            }
            InboxOutcome::Task { notice_id, .. } => {
                let task = task_id.as_deref().unwrap_or("?");
                tracing::info!(message = id, %channel, task, answers_notice = ?notice_id, "message became a task");
                self.handoff.task_queued();
            }
            InboxOutcome::Command {
                command,
                job_id,
                change,
                ..
            } => {
                tracing::info!(message = id, %channel, %command, job = ?job_id, "message gave a command");
                if change.is_some() {
                    self.handoff.jobs_changed();
                }
                if *command == InboxCommand::RunNow {
                    self.carry_out(id).await?;
                }
            }
        }
        if reply.is_some() {
            self.handoff.notices_queued();
        }
        Ok(())
    }
}
