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

use super::converse::{Reply, Said};
use super::parse::{self, Inbound};
use super::reply::{self, Thread};
use super::{Inner, classify};
use crate::notify::{EMAIL, thread};
use hermes_store::{
    Channel, IgnoreReason, InboxOutcome, MAX_TASK_CHARS, MailPlace, NewInboxMessage, Notice, Place,
    Recorded, StoreError,
};

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
                    channel: Channel::Email,
                    room: None,
                    thread_root: None,
                    message_id: m.message_id.clone(),
                    // A Message-ID is the identity when there is one; two mails that differ
                    // only in it are two mails.
                    digest: m.message_id.is_none().then(|| m.digest.clone()),
                    sender: m.from.clone().unwrap_or_default(),
                    subject: hermes_store::util::text::one_line(&m.subject, 300),
                    refs: reply::refs_of(&m.references, m.message_id.as_deref()),
                };
                if self.store.inbox().seen(Place::Mail(place), &mail).await? {
                    tracing::debug!(uid = place.uid, "message already recorded; skipped");
                    self.store.inbox().start_watermark(place).await?;
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
        let recorded = self
            .store
            .inbox()
            .record(Place::Mail(place), &mail, &outcome)
            .await?;
        if let Recorded::Seen = recorded {
            tracing::debug!(uid = place.uid, "message already recorded; skipped");
            return Ok(());
        }
        self.metrics.observe_message_in(Channel::Email.as_str());
        self.hand_over(Channel::Email, &outcome, recorded).await?;
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
            to: to.clone(),
            subject: m.subject.clone(),
            message_id: m.message_id.clone(),
            refs: reply::refs_of(&m.references, m.message_id.as_deref()),
            job_id: notice.as_ref().and_then(|n| n.queued.job_id.clone()),
        };
        let task = task_text(m, notice.is_some());
        Ok(self
            .converse(Said {
                channel: Channel::Email,
                sender: m.from.clone().unwrap_or_default(),
                by: format!("email:{to}"),
                words: m.text.clone(),
                task,
                notice,
                reply: Reply::Mail(thread),
            })
            .await?)
    }

    /// The email notice whose token the message names (In-Reply-To first, then References
    /// from the newest back). A token we never issued, or issued on another channel, is none.
    async fn answered(&self, m: &Inbound) -> Result<Option<Notice>, StoreError> {
        for id in &m.answers {
            let Some(token) = thread::token_of(id) else {
                continue;
            };
            if let Some(n) = self.store.outbox().by_token(token).await?
                && n.queued.channel == EMAIL
            {
                return Ok(Some(n));
            }
        }
        Ok(None)
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
