//! One chat message in (Matrix, Telegram; any chat channel): screened, decided through the same
//! seam as mail (`converse`), recorded by its event id in one transaction with what it became,
//! then handed over.
//!
//! What a message becomes:
//! - the agent's own: nothing, not even a record (the channel drops it before);
//! - from anyone not in the channel's `allow_from`: recorded, ignored, never answered;
//! - one the agent holds no key for: recorded `undecryptable` with the reason, shown on
//!   `/inbox` — never silently dropped; read once its key came, its new record takes the old
//!   one's place (`Inbox::record_replacing` in the store);
//! - in a room of several people, neither addressed to the agent nor in a thread of one of its
//!   messages: recorded, ignored (`not_addressed`);
//! - a ✅ / ❌ reaction to an approval request's notice, or its Approve / Deny button:
//!   `approve` / `deny`;
//! - anything else from an allowed person: what `converse` decides — a command in a notice's
//!   thread, or a task answered in the message's thread.

use super::Inner;
use super::converse::{Reply, Said};
use super::reply::ChatThread;
use hermes_store::{
    Channel, IgnoreReason, InboxOutcome, MAX_TASK_CHARS, NewInboxMessage, Notice, Place, StoreError,
};

/// A chat message as its channel read it: protocol turned into plain facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    pub channel: Channel,
    /// The server's id of the event (Matrix `$…`, Telegram `CHAT:MESSAGE` or `cb:QUERY`): the
    /// message's identity, once and for all.
    pub event_id: String,
    /// Where it was said (Matrix `!…`, a Telegram chat id); answers go back there.
    pub room: String,
    /// Who said it (Matrix `@user:server`, a Telegram user id).
    pub sender: String,
    /// The thread it is in (its root event), if any.
    pub thread_root: Option<String>,
    /// The event it replies to, if any.
    pub reply_to: Option<String>,
    /// A direct room (the agent and one person), or the agent was mentioned.
    pub addressed: bool,
    /// A text that came unencrypted in a room that is encrypted: never acted on. (Reactions
    /// are never encrypted by Matrix clients, so they cannot be held to this.)
    pub plain_in_encrypted_room: bool,
    pub kind: ChatKind,
}

/// What kind of chat message it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChatKind {
    /// Text (the plain body).
    Text(String),
    /// A reaction with `key` (an emoji) to the event `to`.
    Reaction { key: String, to: String },
    /// An encrypted message the agent could not decrypt, and why.
    Undecryptable(String),
    /// A button under the agent's message `to` was pressed; `data` is what the button carries
    /// (`approve`, `deny`).
    Pressed { data: String, to: String },
}

/// Reactions that answer an approval request.
const APPROVE: &[&str] = &["✅", "✔️", "👍"];
const DENY: &[&str] = &["❌", "✖️", "👎"];

impl super::Inbox {
    /// Take in one chat message: decide, record (by event id, once), hand over. A message
    /// recorded before (a sync replayed after a crash) changes nothing. Whether it was new.
    #[cfg_attr(not(feature = "matrix"), allow(dead_code))]
    pub(crate) async fn take_in_chat(&self, m: &ChatMessage) -> Result<bool, StoreError> {
        match &self.inner {
            Some(inner) => inner.take_in_chat(m, None).await,
            None => Ok(false),
        }
    }

    /// [`Inbox::take_in_chat`] for a channel read by offset: the channel's cursor `key` moves
    /// to `position` in the same transaction as the record (or alone, when the message is
    /// known already or becomes nothing).
    #[cfg_attr(not(feature = "telegram"), allow(dead_code))]
    pub(crate) async fn take_in_chat_at(
        &self,
        m: &ChatMessage,
        key: &str,
        position: &str,
    ) -> Result<bool, StoreError> {
        match &self.inner {
            Some(inner) => inner.take_in_chat(m, Some((key, position))).await,
            None => Ok(false),
        }
    }
}

impl Inner {
    async fn take_in_chat(
        &self,
        m: &ChatMessage,
        cursor: Option<(&str, &str)>,
    ) -> Result<bool, StoreError> {
        let Some(account) = self.chat_account(m.channel) else {
            return Ok(false);
        };
        let place = match cursor {
            Some((key, position)) => Place::Polled {
                account: &account,
                key,
                position,
            },
            None => Place::Chat(&account),
        };
        // Nothing to record: only the cursor moves past the message.
        let skip = || async {
            match cursor {
                Some((key, position)) => {
                    self.store
                        .chat()
                        .move_cursor(m.channel, key, position)
                        .await
                }
                None => Ok(()),
            }
        };
        let mut mail = inbox_row(m);
        let known = match &m.kind {
            ChatKind::Undecryptable(_) => self.store.inbox().seen(place, &mail).await?,
            // Its undecryptable record is not this message read: the key came since, and
            // the record gives way to what it says.
            _ => {
                self.store
                    .inbox()
                    .seen_besides(place, &mail, IgnoreReason::Undecryptable)
                    .await?
            }
        };
        if known {
            tracing::debug!(event = %m.event_id, "chat message already recorded; skipped");
            skip().await?;
            return Ok(false);
        }
        let Some((outcome, root)) = self.decide_chat(m).await? else {
            skip().await?;
            return Ok(false);
        };
        mail.thread_root = root;
        let inbox = self.store.inbox();
        let recorded = match &outcome {
            InboxOutcome::Ignored {
                reason: IgnoreReason::Undecryptable,
                ..
            } => inbox.record(place, &mail, &outcome).await?,
            // One recorded undecryptable whose key came later is read as what it says: its old
            // record gives way to the new one.
            _ => {
                inbox
                    .record_replacing(place, &mail, &outcome, IgnoreReason::Undecryptable)
                    .await?
            }
        };
        let new = matches!(recorded, hermes_store::Recorded::New { .. });
        self.hand_over(m.channel, &outcome, recorded).await?;
        Ok(new)
    }

    /// The account rows of `channel` are recorded under, when the channel is configured.
    fn chat_account(&self, channel: Channel) -> Option<String> {
        match channel {
            Channel::Matrix => self.matrix.as_ref().map(|m| m.account()),
            Channel::Telegram => self.telegram.as_ref().map(|t| t.account()),
            Channel::Email => None,
        }
    }

    /// Whether `sender` may instruct the agent on `channel`.
    pub(crate) fn chat_allowed(&self, channel: Channel, sender: &str) -> bool {
        match channel {
            Channel::Matrix => self
                .matrix
                .as_ref()
                .is_some_and(|s| s.allowed(sender).is_some()),
            Channel::Telegram => self
                .telegram
                .as_ref()
                .zip(sender.trim().parse::<i64>().ok())
                .is_some_and(|(s, id)| s.allowed(id)),
            Channel::Email => false,
        }
    }

    /// What `m` becomes and the root of the thread its answer goes in; None: not worth a
    /// record (a reaction that answers nothing).
    async fn decide_chat(
        &self,
        m: &ChatMessage,
    ) -> Result<Option<(InboxOutcome, Option<String>)>, StoreError> {
        let ignored = |reason, notice: Option<&Notice>| InboxOutcome::Ignored {
            reason,
            notice_id: notice.map(|n| n.id),
            job_id: notice.and_then(|n| n.queued.job_id.clone()),
            reply: None,
        };
        if let ChatKind::Undecryptable(why) = &m.kind {
            tracing::warn!(event = %m.event_id, room = %m.room, sender = %m.sender, reason = %why, "a chat message cannot be decrypted; recorded");
            return Ok(Some((ignored(IgnoreReason::Undecryptable, None), None)));
        }
        if !self.chat_allowed(m.channel, &m.sender) {
            return Ok(Some((ignored(IgnoreReason::NotAllowed, None), None)));
        }
        // Only encryption vouches for who wrote in an encrypted room; the sender field is the
        // server's word.
        if m.plain_in_encrypted_room {
            tracing::warn!(event = %m.event_id, room = %m.room, sender = %m.sender, "a chat message came unencrypted in an encrypted room; recorded, not acted on");
            return Ok(Some((ignored(IgnoreReason::Unencrypted, None), None)));
        }
        let (words, notice) = match &m.kind {
            ChatKind::Reaction { key, to } => {
                let word = if APPROVE.contains(&key.as_str()) {
                    "approve"
                } else if DENY.contains(&key.as_str()) {
                    "deny"
                } else {
                    return Ok(None);
                };
                let Some(notice) = self.approval_notice(to).await? else {
                    return Ok(None);
                };
                (word.to_string(), Some(notice))
            }
            ChatKind::Pressed { data, to } => {
                let Some(word) = ["approve", "deny"].into_iter().find(|w| w == data) else {
                    return Ok(None);
                };
                let Some(notice) = self.approval_notice(to).await? else {
                    return Ok(None);
                };
                (word.to_string(), Some(notice))
            }
            ChatKind::Text(body) => (body.clone(), self.answered_in_chat(m).await?),
            ChatKind::Undecryptable(_) => return Ok(None),
        };
        if notice.is_none() && !m.addressed {
            return Ok(Some((ignored(IgnoreReason::NotAddressed, None), None)));
        }
        // Answers go in the thread the person wrote in, else in a new one under their message;
        // a reaction's confirmation in the thread of the notice it reacted to.
        let root = match &m.kind {
            ChatKind::Reaction { to, .. } | ChatKind::Pressed { to, .. } => to.clone(),
            _ => m.thread_root.clone().unwrap_or_else(|| m.event_id.clone()),
        };
        let reply = Reply::Chat(ChatThread {
            channel: reply_lane(m.channel).to_string(),
            room: m.room.clone(),
            root: root.clone(),
            job_id: notice.as_ref().and_then(|n| n.queued.job_id.clone()),
        });
        let outcome = self
            .converse(Said {
                channel: m.channel,
                sender: m.sender.clone(),
                by: m.channel.as_str().to_string(),
                task: cut_to_task(&words),
                words,
                notice,
                reply,
            })
            .await?;
        Ok(Some((outcome, Some(root))))
    }

    /// The approval request's notice sent as the chat event `to`, if it is one.
    async fn approval_notice(&self, to: &str) -> Result<Option<Notice>, StoreError> {
        let Some(notice) = self.store.outbox().by_remote(to).await? else {
            return Ok(None);
        };
        Ok(self
            .store
            .approvals()
            .for_notice(notice.id)
            .await?
            .map(|_| notice))
    }

    /// The notice a chat message answers: the one its thread hangs under or it replies to
    /// (sent by the agent on this channel), or the answer to the person's own message the
    /// thread began with.
    async fn answered_in_chat(&self, m: &ChatMessage) -> Result<Option<Notice>, StoreError> {
        for event in [&m.thread_root, &m.reply_to].into_iter().flatten() {
            if let Some(n) = self.store.outbox().by_remote(event).await?
                && n.queued.channel.starts_with(m.channel.as_str())
            {
                return Ok(Some(n));
            }
            if let Some(earlier) = self.store.inbox().by_message_id(event).await?
                && earlier.channel == m.channel
                && let Some(reply) = earlier.reply_notice_id
                && let Some(n) = self.store.outbox().get(reply).await?
            {
                return Ok(Some(n));
            }
        }
        Ok(None)
    }
}

/// The outbox lane a chat channel's answers go out on: the account's own, which sends to the
/// room and thread each notice names.
pub(crate) fn reply_lane(channel: Channel) -> &'static str {
    match channel {
        Channel::Telegram => crate::notify::TELEGRAM,
        Channel::Matrix => crate::notify::MATRIX,
        Channel::Email => crate::notify::EMAIL,
    }
}

/// A chat message's inbox row before it is decided (its thread is filled in once known); its
/// subject is a line of what it says, as `/inbox` lists it.
fn inbox_row(m: &ChatMessage) -> NewInboxMessage {
    let subject = match &m.kind {
        ChatKind::Text(body) => hermes_store::util::text::one_line(body, 300),
        ChatKind::Reaction { key, .. } => format!("reaction {key}"),
        ChatKind::Pressed { data, .. } => format!("button {data}"),
        ChatKind::Undecryptable(why) => format!("[cannot be decrypted: {why}]"),
    };
    NewInboxMessage {
        channel: m.channel,
        room: Some(m.room.clone()),
        thread_root: None,
        message_id: Some(m.event_id.clone()),
        digest: None,
        sender: m.sender.clone(),
        subject,
        refs: None,
    }
}

/// A chat message's text as a task: cut to the task limit with a note.
fn cut_to_task(text: &str) -> String {
    let text = text.trim();
    let note = "[The rest of this message was cut: it is longer than a task may be.]";
    if text.chars().count() <= MAX_TASK_CHARS {
        return text.to_string();
    }
    let kept: String = text
        .chars()
        .take(MAX_TASK_CHARS - note.chars().count() - 2)
        .collect();
    format!("{}\n\n{note}", kept.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_message_is_cut_to_a_task() {
        let t = cut_to_task(&"字".repeat(MAX_TASK_CHARS + 5));
        assert!(t.chars().count() <= MAX_TASK_CHARS);
        assert!(t.ends_with("longer than a task may be.]"));
        assert_eq!(cut_to_task("  hi \n"), "hi");
    }
}
