//! One message in: read it, decide what it becomes, record both in one transaction, then hand
//! over (wake a worker, the scheduler, the outbox).
//!
//! What a message becomes:
//! - not from an allowed, vouched-for person, or sent by a program: ignored with the reason,
//!   never answered;
//! - naming one of our notices (its token in In-Reply-To / References) with a command as its
//!   first line: the command on that notice's job, confirmed by a one-line reply;
//! - anything else: a task (origin `email`) whose text is what the person wrote; a reply to a
//!   notice continues its run (`parent_id` = the run's task, the notice in the first message).
//!   A message naming no known token is a fresh task — never an act on a job.

use super::parse::{self, Inbound};
use super::reply::{self, Thread};
use super::{Inner, classify};
use crate::agent::{ApprovalError, Decision};
use crate::notify::{EMAIL, thread};
use crate::store::{
    ApprovalState, CommandState, IgnoreReason, InboxCommand, InboxOutcome, Job, JobChange,
    MAX_TASK_CHARS, MailPlace, NewInboxMessage, NewTask, Notice, Origin, Recorded, StoreError,
};

/// The rate limit's window.
const RATE_WINDOW: chrono::Duration = chrono::Duration::hours(1);

/// Why a message was not taken in. Nothing was recorded: it is read again on the next attempt.
#[derive(Debug, thiserror::Error)]
pub(crate) enum IntakeError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Only [`parse::BodyError::Spawn`]: an unreadable body is recorded, not an error.
    #[error(transparent)]
    Body(parse::BodyError),
}

impl Inner {
    /// Read `raw` (the first bytes of the message at `place`, whole size `size`), decide,
    /// record, hand over. The sender is screened on the headers alone: only an allowed
    /// sender's body is parsed. A message already recorded (the same UID, Message-ID or, for
    /// mail without one, digest) is not decided again — a renumbered mailbox replays nothing.
    pub(crate) async fn take_in(
        &self,
        place: &MailPlace,
        raw: &[u8],
        size: usize,
    ) -> Result<(), IntakeError> {
        let (mail, outcome) = match parse::headers(raw, size) {
            Some(m) => {
                let mail = NewInboxMessage {
                    message_id: m.message_id.clone(),
                    // A Message-ID is the identity when there is one; two mails that differ
                    // only in it are two mails.
                    digest: m.message_id.is_none().then(|| m.digest.clone()),
                    sender: m.from.clone().unwrap_or_default(),
                    subject: crate::util::text::one_line(&m.subject, 300),
                    refs: reply::refs_of(&m.references, m.message_id.as_deref()),
                };
                if self.store.inbox_seen(place, &mail).await? {
                    tracing::debug!(uid = place.uid, "message already recorded; skipped");
                    self.store.start_inbox_watermark(place).await?;
                    return Ok(());
                }
                let outcome = self.decide(m, raw, size, place).await?;
                (mail, outcome)
            }
            None => (
                NewInboxMessage {
                    digest: Some(parse::digest_of_bytes(raw)),
                    ..NewInboxMessage::default()
                },
                InboxOutcome::Ignored {
                    reason: IgnoreReason::Unreadable,
                    notice_id: None,
                    job_id: None,
                    reply: None,
                },
            ),
        };
        let recorded = self.store.record_inbox(place, &mail, &outcome).await?;
        let Recorded::New { id, task_id, reply } = recorded else {
            tracing::debug!(uid = place.uid, "message already recorded; skipped");
            return Ok(());
        };
        match &outcome {
            InboxOutcome::Ignored { reason, .. } => {
                tracing::info!(message = id, uid = place.uid, %reason, "mail ignored");
            }
            InboxOutcome::Task { notice_id, .. } => {
                let task = task_id.as_deref().unwrap_or("?");
                tracing::info!(message = id, uid = place.uid, task, answers_notice = ?notice_id, "mail became a task");
                self.handoff.task_queued();
            }
            InboxOutcome::Command {
                command,
                job_id,
                change,
                ..
            } => {
                tracing::info!(message = id, uid = place.uid, %command, job = ?job_id, "mail gave a command");
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

    /// What a message whose headers were read becomes: screened on them, then its body read
    /// (`raw`, `size` as for [`Inner::take_in`]).
    async fn decide(
        &self,
        m: Inbound,
        raw: &[u8],
        size: usize,
        place: &MailPlace,
    ) -> Result<InboxOutcome, IntakeError> {
        let ignored = |reason, notice: Option<&Notice>| InboxOutcome::Ignored {
            reason,
            notice_id: notice.map(|n| n.id),
            job_id: notice.and_then(|n| n.queued.job_id.clone()),
            reply: None,
        };
        let to = match classify::screen(&m, &self.settings, &self.own) {
            Ok(to) => to.to_string(),
            Err(reason) => return Ok(ignored(reason, None)),
        };
        let m = match parse::body(raw, size).await {
            Ok(body) => m.with(body),
            Err(parse::BodyError::Unreadable(why)) => {
                tracing::warn!(uid = place.uid, %why, "mail cannot be read; recorded unreadable");
                return Ok(ignored(IgnoreReason::Unreadable, None));
            }
            Err(e) => return Err(IntakeError::Body(e)),
        };
        let m = &m;
        let notice = self.answered(m).await?;
        let thread = Thread {
            to,
            subject: m.subject.clone(),
            message_id: m.message_id.clone(),
            refs: reply::refs_of(&m.references, m.message_id.as_deref()),
            job_id: notice.as_ref().and_then(|n| n.queued.job_id.clone()),
        };
        if let Some(n) = &notice
            && let Some(command) = classify::command(&m.text)
        {
            return match command {
                InboxCommand::Approve | InboxCommand::Deny => {
                    Ok(self.answer_approval(command, n, &thread, m).await?)
                }
                _ => Ok(self.command(command, n, &thread).await?),
            };
        }
        let text = task_text(m, notice.is_some());
        if text.trim().is_empty() {
            return Ok(ignored(IgnoreReason::Empty, notice.as_ref()));
        }
        let since = crate::store::now() - RATE_WINDOW;
        let sender = m.from.as_deref().unwrap_or_default();
        let started = self.store.email_tasks_since(sender, since).await?;
        if started >= i64::from(self.settings.max_tasks_per_hour) {
            return Ok(ignored(IgnoreReason::RateLimited, notice.as_ref()));
        }
        Ok(InboxOutcome::Task {
            task: NewTask {
                task: text,
                origin: Origin::Email,
                profile: self.profile.clone(),
                parent_id: notice.as_ref().and_then(|n| n.queued.task_id.clone()),
                job_id: None,
                claimed: false,
            },
            context: notice
                .as_ref()
                .map(|n| reply::context(&n.queued.title, &n.queued.body)),
            notice_id: notice.as_ref().map(|n| n.id),
            job_id: thread.job_id,
        })
    }

    /// The email notice whose token the message names (In-Reply-To first, then References
    /// from the newest back). A token we never issued, or issued on another channel, is none.
    async fn answered(&self, m: &Inbound) -> Result<Option<Notice>, StoreError> {
        for id in &m.answers {
            let Some(token) = thread::token_of(id) else {
                continue;
            };
            if let Some(n) = self.store.notice_by_token(token).await?
                && n.queued.channel == EMAIL
            {
                return Ok(Some(n));
            }
        }
        Ok(None)
    }

    /// A command on the job of `notice`: the change and its confirmation, or why not.
    async fn command(
        &self,
        command: InboxCommand,
        notice: &Notice,
        thread: &Thread,
    ) -> Result<InboxOutcome, StoreError> {
        let no_job = |line: String| InboxOutcome::Ignored {
            reason: IgnoreReason::NoJob,
            notice_id: Some(notice.id),
            job_id: notice.queued.job_id.clone(),
            reply: Some(thread.confirmation(&line, None)),
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
        let job = match self.store.job(&job_id).await {
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
        let reply = (state == CommandState::Done).then(|| thread.confirmation(&detail, None));
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
        thread: &Thread,
        m: &Inbound,
    ) -> Result<InboxOutcome, StoreError> {
        let Some(request) = self.store.approval_for_notice(notice.id).await? else {
            return Ok(InboxOutcome::Ignored {
                reason: IgnoreReason::NoApproval,
                notice_id: Some(notice.id),
                job_id: notice.queued.job_id.clone(),
                reply: Some(thread.confirmation(
                    "That message did not ask for an approval, so there is nothing to approve or deny.",
                    None,
                )),
            });
        };
        let decision = match command {
            InboxCommand::Approve => Decision::Approve,
            _ => Decision::Deny {
                reason: deny_reason(&m.text),
            },
        };
        let by = format!("email:{}", thread.to);
        let tool = &request.tool;
        let (state, detail) = match self
            .handoff
            .decide_approval(&request.id, decision, &by)
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
            reply: Some(thread.confirmation(&detail, Some(&request.task_id))),
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
    (!rest.is_empty()).then(|| crate::util::text::one_line(&rest.join(" "), 300))
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

/// The task's text: what the person wrote — for a fresh message its subject too (often the
/// whole instruction) — with the names of attachments it did not read, cut to the task limit.
fn task_text(m: &Inbound, is_reply: bool) -> String {
    let mut text = String::new();
    let subject = m.subject.trim();
    if !is_reply && !subject.is_empty() {
        text.push_str(subject);
        if !m.text.is_empty() {
            text.push_str("\n\n");
        }
    }
    text.push_str(&m.text);
    if text.trim().is_empty() {
        return String::new();
    }
    if !m.attachments.is_empty() {
        text.push_str(&format!(
            "\n\n[Attachments, not read: {}]",
            m.attachments.join(", ")
        ));
    }
    if m.cut && !text.contains("was cut") {
        text.push_str("\n\n[The message was longer; only its start was read.]");
    }
    // Bytes ≥ characters: a text within the limit in bytes is within it in characters.
    let note = "[The rest of this message was cut: it is longer than a task may be.]";
    if text.chars().count() > MAX_TASK_CHARS {
        let kept: String = text
            .chars()
            .take(MAX_TASK_CHARS - note.chars().count() - 2)
            .collect();
        text = format!("{}\n\n{note}", kept.trim_end());
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_message_is_its_subject_and_body() {
        let m = Inbound {
            subject: "Weather in Berlin".into(),
            text: "for tomorrow".into(),
            attachments: vec!["map.png".into()],
            ..Inbound::default()
        };
        assert_eq!(
            task_text(&m, false),
            "Weather in Berlin\n\nfor tomorrow\n\n[Attachments, not read: map.png]"
        );
        assert_eq!(
            task_text(&m, true),
            "for tomorrow\n\n[Attachments, not read: map.png]"
        );
        let empty = Inbound::default();
        assert_eq!(task_text(&empty, false), "");
    }

    #[test]
    fn a_text_past_the_task_limit_is_cut_with_a_note() {
        let m = Inbound {
            text: "ü".repeat(MAX_TASK_CHARS + 10),
            ..Inbound::default()
        };
        let t = task_text(&m, true);
        assert!(t.chars().count() <= MAX_TASK_CHARS, "{}", t.chars().count());
        assert!(t.ends_with("longer than a task may be.]"));
    }
}
