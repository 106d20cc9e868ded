//! What recording one inbox message takes: where it was read ([`Place`], [`MailPlace`]), what
//! it says about itself ([`NewInboxMessage`]) and what it became ([`InboxOutcome`]). A leaf:
//! `inbox.rs` (the record's transaction) and `inbox_write.rs` (its writes) both use these.

use super::{Channel, CommandState, IgnoreReason, InboxCommand, NewNotice, NewTask};
use chrono::{DateTime, Utc};

/// Where a message was read: the account and folder, and its place there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MailPlace {
    /// `user@host:port/FOLDER`.
    pub mailbox: String,
    pub uid_validity: u32,
    pub uid: u32,
}

/// Where a message to record was read.
#[derive(Debug, Clone, Copy)]
pub enum Place<'a> {
    /// In a mailbox, at a UID: the watermark moves past it in the same transaction.
    Mail(&'a MailPlace),
    /// On a chat account (`matrix:@hermes:example.org`): known by its event id; the
    /// channel's cursor is saved after a whole batch ([`Chat::set_cursor`](crate::Chat::set_cursor)).
    Chat(&'a str),
    /// On a chat account read by offset (`telegram:123456`): known by its event id, and the
    /// channel's cursor `key` moves to `position` in the same transaction as the record, so a
    /// kill between the two can neither lose the update nor act on it twice.
    Polled {
        account: &'a str,
        key: &'a str,
        position: &'a str,
    },
}

impl<'a> Place<'a> {
    /// The chat account a message was read on; None for mail.
    pub fn account(self) -> Option<&'a str> {
        match self {
            Place::Mail(_) => None,
            Place::Chat(account) | Place::Polled { account, .. } => Some(account),
        }
    }

    /// Where the cursor moves with this record, if it does.
    pub fn cursor(self) -> Option<(&'a str, &'a str)> {
        match self {
            Place::Polled { key, position, .. } => Some((key, position)),
            _ => None,
        }
    }
}

/// A message to record: where it was read and what it says about itself.
#[derive(Debug, Clone, Default)]
pub struct NewInboxMessage {
    pub channel: Channel,
    /// A chat message's room and the event its answer hangs under; None for mail.
    pub room: Option<String>,
    pub thread_root: Option<String>,
    pub message_id: Option<String>,
    /// The message's identity when it has no Message-ID (a digest of what it says); None
    /// when it has one.
    pub digest: Option<String>,
    pub sender: String,
    pub subject: String,
    /// The mail's Message-ID and its References, for threading an answer.
    pub refs: Option<String>,
}

/// A job's enabled flag and next due time after a command (pause or resume), written in the
/// same transaction as the mail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobChange {
    pub enabled: bool,
    pub next_run_at: Option<DateTime<Utc>>,
}

/// What a message became.
#[derive(Debug, Clone)]
pub enum InboxOutcome {
    /// Left alone; `reply` only for an allowed sender's command that cannot be carried out.
    Ignored {
        reason: IgnoreReason,
        notice_id: Option<i64>,
        job_id: Option<String>,
        reply: Option<NewNotice>,
    },
    /// A new pending task (origin `email`); `context` is the notice it answers.
    Task {
        task: NewTask,
        context: Option<String>,
        notice_id: Option<i64>,
        job_id: Option<String>,
    },
    /// A command on a job (`change` is written now), or an answer to an approval request
    /// (no job); `reply` confirms it.
    Command {
        command: InboxCommand,
        state: CommandState,
        notice_id: i64,
        job_id: Option<String>,
        change: Option<JobChange>,
        detail: String,
        reply: Option<NewNotice>,
    },
}
