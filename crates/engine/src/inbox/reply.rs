//! The words of what the inbox sends back, and their threading: an answer (a finished task's
//! result, or why it has none) and the one-line confirmation of a command — each a notice for
//! the outbox: by mail addressed to the allowed sender who wrote, `Re:` the mail's subject,
//! under its Message-ID; in a chat room, in the thread of the message answered.

use crate::notify::{EMAIL, thread};
use hermes_store::{FailReason, NewNotice, Task, TaskState};

/// How many ids an answer's References keeps (the newest).
const KEEP_REFS: usize = 20;
/// The most of a notice the next task's first message holds, in characters.
pub(crate) const CONTEXT_BUDGET: usize = 4000;

/// Where an answer goes and what it hangs under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Thread {
    /// The allowed sender's address, as written in `allow_from`.
    pub to: String,
    /// The mail's subject.
    pub subject: String,
    /// The mail's Message-ID.
    pub message_id: Option<String>,
    /// The answer's References, space-separated (the mail's own, then its Message-ID).
    pub refs: Option<String>,
    /// The job the conversation is about (the answered notice's), so that a reply to this
    /// answer can pause it too.
    pub job_id: Option<String>,
}

/// The References an answer to a mail carries, as stored with the mail.
pub(crate) fn refs_of(references: &[String], message_id: Option<&str>) -> Option<String> {
    let refs = thread::references(references, message_id, KEEP_REFS);
    (!refs.is_empty()).then(|| refs.join(" "))
}

/// Where a chat answer goes: the room, in the thread of `root` (the person's message, or the
/// notice they answered in its thread).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ChatThread {
    /// The outbox channel replies go out on (`matrix`): the lane of the whole account.
    pub channel: String,
    pub room: String,
    pub root: String,
    /// As for [`Thread::job_id`].
    pub job_id: Option<String>,
}

impl ChatThread {
    fn notice(&self, body: String, task_id: Option<&str>) -> NewNotice {
        NewNotice {
            channel: self.channel.clone(),
            title: String::new(),
            body,
            task_id: task_id.map(str::to_string),
            job_id: self.job_id.clone(),
            run_id: None,
            recipient: Some(self.room.clone()),
            in_reply_to: Some(self.root.clone()),
            refs: None,
        }
    }

    pub(crate) fn confirmation(&self, line: &str, task_id: Option<&str>) -> NewNotice {
        self.notice(line.to_string(), task_id)
    }

    pub(crate) fn answer(&self, task: &Task, public_url: &str) -> NewNotice {
        // Telegram has no threads: a reply to the answer is what continues the run.
        let again = if self.channel == crate::notify::TELEGRAM {
            "Reply to this message to try again."
        } else {
            "Write in this thread to try again."
        };
        self.notice(answer_body(task, public_url, again), Some(&task.id))
    }
}

impl Thread {
    fn notice(&self, body: String, task_id: Option<&str>) -> NewNotice {
        NewNotice {
            channel: EMAIL.to_string(),
            title: thread::reply_subject(&self.subject),
            body,
            task_id: task_id.map(str::to_string),
            job_id: self.job_id.clone(),
            run_id: None,
            recipient: Some(self.to.clone()),
            in_reply_to: self.message_id.clone(),
            refs: self.refs.clone(),
        }
    }

    /// A one-line confirmation of a command (or why it could not be done).
    pub(crate) fn confirmation(&self, line: &str, task_id: Option<&str>) -> NewNotice {
        self.notice(line.to_string(), task_id)
    }

    /// The answer to the task a mail became.
    pub(crate) fn answer(&self, task: &Task, public_url: &str) -> NewNotice {
        let body = answer_body(task, public_url, "Reply to this message to try again.");
        self.notice(body, Some(&task.id))
    }
}

/// A finished task's answer (or why it has none, and `again`: how to try again), with a link
/// to the task.
fn answer_body(task: &Task, public_url: &str, again: &str) -> String {
    let mut body = match (task.state, task.answer.as_deref()) {
        (TaskState::Succeeded, Some(a)) if !a.trim().is_empty() => a.trim().to_string(),
        (TaskState::Succeeded, _) => "Done (the task finished without an answer).".into(),
        _ => {
            let why = match task.reason {
                Some(FailReason::Interrupted | FailReason::Shutdown) => {
                    "the daemon stopped while it ran".to_string()
                }
                Some(FailReason::Cancelled) => "it was cancelled".to_string(),
                _ => task
                    .error
                    .as_deref()
                    .map(|e| hermes_store::util::text::one_line(e, 300))
                    .unwrap_or_else(|| task.state.to_string()),
            };
            format!("I could not finish this: {why}. {again}")
        }
    };
    body.push_str("\n\n---\n");
    if public_url.is_empty() {
        body.push_str(&format!("Task {}", task.id));
    } else {
        body.push_str(&format!(
            "Task [{}]({public_url}/tasks/{})",
            task.id, task.id
        ));
    }
    body
}

/// What the next task's first message holds of the notice answered: its title (a chat
/// thread's answer has none) and body without the task footer, cut to [`CONTEXT_BUDGET`].
pub(crate) fn context(title: &str, body: &str) -> String {
    let body = body.trim();
    // The `---` / `Task ID` footer of an answer is for the person, not the model.
    let body = match body.rsplit_once("\n---\nTask ") {
        Some((before, footer)) if !footer.contains('\n') => before.trim_end(),
        _ => body,
    };
    let text = match title.trim() {
        "" => body.to_string(),
        title => format!("Subject: {title}\n\n{body}"),
    };
    if text.chars().count() <= CONTEXT_BUDGET {
        return text;
    }
    let kept: String = text.chars().take(CONTEXT_BUDGET).collect();
    format!("{kept}\n[… the rest of the message is not shown]")
}

#[cfg(test)]
mod tests {
    use super::*;
    use hermes_store::Origin;

    fn thread() -> Thread {
        Thread {
            to: "me@example.org".into(),
            subject: "Re: Daily digest".into(),
            message_id: Some("m1@example.org".into()),
            refs: refs_of(&["d1@example.org".into()], Some("m1@example.org")),
            job_id: Some("j_1".into()),
        }
    }

    fn task(state: TaskState, answer: Option<&str>, reason: Option<FailReason>) -> Task {
        let t = chrono::Utc::now();
        Task {
            id: "t1".into(),
            state,
            origin: Origin::Email,
            parent_id: None,
            job_id: None,
            profile: "fast".into(),
            task: "x".into(),
            answer: answer.map(str::to_string),
            error: Some("model down".into()),
            reason,
            parse_failures: 0,
            prompt_tokens: 0,
            completion_tokens: 0,
            created_at: t,
            started_at: None,
            finished_at: None,
            waiting: false,
            node_epoch: None,
        }
    }

    #[test]
    fn an_answer_is_threaded_under_the_mail() {
        let n = thread().answer(&task(TaskState::Succeeded, Some("Item two is…"), None), "");
        assert_eq!(n.title, "Re: Daily digest");
        assert_eq!(n.recipient.as_deref(), Some("me@example.org"));
        assert_eq!(n.in_reply_to.as_deref(), Some("m1@example.org"));
        assert_eq!(n.refs.as_deref(), Some("d1@example.org m1@example.org"));
        assert_eq!(n.job_id.as_deref(), Some("j_1"));
        assert!(n.body.starts_with("Item two is…"), "{}", n.body);
        assert!(n.body.contains("Task t1"), "{}", n.body);
    }

    #[test]
    fn a_failed_task_says_why_and_links_it() {
        let n = thread().answer(
            &task(TaskState::Failed, None, Some(FailReason::Interrupted)),
            "https://h.example",
        );
        assert!(n.body.contains("the daemon stopped"), "{}", n.body);
        assert!(n.body.contains("https://h.example/tasks/t1"), "{}", n.body);
        let n = thread().answer(&task(TaskState::Failed, None, Some(FailReason::Model)), "");
        assert!(n.body.contains("model down"), "{}", n.body);
    }

    #[test]
    fn the_context_is_trimmed_to_its_budget() {
        let long = "x".repeat(10_000);
        let c = context("Digest", &long);
        assert!(c.starts_with("Subject: Digest\n\n"));
        assert!(c.chars().count() < CONTEXT_BUDGET + 60);
        assert!(c.ends_with("not shown]"));
        assert_eq!(context("T", "b"), "Subject: T\n\nb");
        // A chat thread's answer: no subject, and the footer is the person's.
        assert_eq!(
            context("", "It is 12 EUR.\n\n---\nTask 0123456789abcdef"),
            "It is 12 EUR."
        );
    }
}
