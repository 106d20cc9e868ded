//! Sending the outbox's notices: `telegram` (an answer, into the chat the notice names, as a
//! reply to the message it answers) and `telegram:NAME` (a configured chat).
//!
//! A notice is Markdown: sent as Telegram HTML (`format`), split below 4,096 UTF-16 units on
//! paragraph (then line) boundaries, in order. Each part is recorded as it is sent, so a retry
//! goes on after the parts Telegram took (see the module doc of `telegram`). A part Telegram
//! refuses for its formatting is sent again as plain text — never lost for a stray `<`. A 429
//! waits its `retry_after` (up to [`MAX_RETRY_WAIT`]; longer, the notice goes back to the
//! outbox's backoff). Writes to one chat are paced to Telegram's documented rates: one message
//! a second in a private chat, twenty a minute in a group. The lanes of one bot are few and each
//! sends one notice at a time, so the bot stays far below its overall thirty a second.
//! An approval request carries Approve / Deny buttons under its last part.

use super::client::{Bot, Failure};
use super::events::remote_id;
use super::{Inner, format};
use crate::channels::Sends;
use crate::notify::SendError;
use hermes_store::Notice;
use std::time::Duration;
use teloxide_core::payloads::SendMessageSetters;
use teloxide_core::requests::Requester;
use teloxide_core::types::{
    ChatId, InlineKeyboardButton, InlineKeyboardMarkup, LinkPreviewOptions, MessageId, ParseMode,
    ReplyParameters,
};

/// The longest a 429's `retry_after` is waited out inside one attempt.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(30);
/// 429s one part may meet before the attempt gives up to the outbox's backoff.
const MAX_RETRIES: u32 = 3;
/// Telegram's rates: a message a second in one chat; twenty a minute in a group.
const PRIVATE_GAP: Duration = Duration::from_secs(1);
const GROUP_GAP: Duration = Duration::from_secs(3);

/// One message to send: where, what, and what it hangs under.
struct Part<'a> {
    chat: i64,
    html: &'a str,
    reply_to: Option<i32>,
    buttons: Option<InlineKeyboardMarkup>,
}

impl Sends for Inner {
    async fn send(&self, notice: &Notice) -> Result<String, SendError> {
        let bot = self.link.conn_to_send()?;
        let (chat, reply_to) = self.destination(notice)?;
        let html = format::to_html(&crate::channels::compose(
            &notice.queued.title,
            &notice.queued.body,
        ));
        let parts = format::split(&html, format::MAX_UTF16);
        let store = |e| SendError::Transient(format!("cannot read or record the sent parts: {e}"));
        let sent = self.store.chat().parts(notice.id).await.map_err(store)?;
        let approval = self
            .store
            .approvals()
            .for_notice(notice.id)
            .await
            .map_err(store)?
            .is_some();
        let mut first = sent.first().map(|(_, id)| id.clone());
        let last = parts.len().saturating_sub(1);
        for (i, html) in parts.iter().enumerate() {
            let number = i as i64;
            if sent.iter().any(|(n, _)| *n == number) {
                continue;
            }
            // Later parts hang under the first when the notice answers nothing, so a reply
            // to any of them is a reply to the notice.
            let under = reply_to.or_else(|| first.as_deref().and_then(message_of));
            let part = Part {
                chat,
                html,
                reply_to: under,
                buttons: (approval && i == last).then(buttons),
            };
            let id = self.send_part(&bot, &part).await?;
            let remote = remote_id(chat, id);
            self.store
                .chat()
                .add_part(notice.id, number, &remote)
                .await
                .map_err(|e| SendError::Transient(format!("sent, but cannot record it: {e}")))?;
            first.get_or_insert(remote);
        }
        first.ok_or_else(|| SendError::Permanent("the notice is empty".into()))
    }
}

impl Inner {
    /// The chat a notice goes to and the message it replies to.
    fn destination(&self, notice: &Notice) -> Result<(i64, Option<i32>), SendError> {
        let q = &notice.queued;
        if q.channel == crate::notify::TELEGRAM {
            let chat = q
                .recipient
                .as_deref()
                .and_then(|c| c.parse::<i64>().ok())
                .ok_or_else(|| {
                    SendError::Permanent(
                        "a Telegram answer names no chat; use telegram:NAME for a configured chat"
                            .into(),
                    )
                })?;
            return Ok((chat, q.in_reply_to.as_deref().and_then(message_of)));
        }
        let name = q.channel.strip_prefix("telegram:").unwrap_or_default();
        match self.settings.chats.get(name) {
            Some(chat) => Ok((*chat, None)),
            None => Err(SendError::Permanent(format!(
                "telegram:{name} is not under channels.telegram.chats any more; add it back and \
                 queue the notice again"
            ))),
        }
    }

    /// Send one part: its message id. Formatting refused: the same text plain. 429: wait and
    /// go again. Token refused: the channel stops and the notice waits for a new one.
    async fn send_part(&self, bot: &Bot, part: &Part<'_>) -> Result<i32, SendError> {
        let mut formatted = true;
        let mut retries = 0;
        loop {
            self.pace(part.chat).await;
            let text = if formatted {
                part.html.to_string()
            } else {
                format::plain(part.html)
            };
            let mut request = bot
                .send_message(ChatId(part.chat), text)
                .link_preview_options(no_preview());
            if formatted {
                request = request.parse_mode(ParseMode::Html);
            }
            if let Some(to) = part.reply_to {
                request = request.reply_parameters(
                    ReplyParameters::new(MessageId(to)).allow_sending_without_reply(),
                );
            }
            if let Some(b) = &part.buttons {
                request = request.reply_markup(b.clone());
            }
            let failure = match request.await {
                Ok(m) => return Ok(m.id.0),
                Err(e) => Failure::from(e),
            };
            match failure {
                Failure::Formatting(why) if formatted => {
                    tracing::warn!(reason = %why, "Telegram refused a notice's formatting; sending it as plain text");
                    formatted = false;
                }
                Failure::RetryAfter(wait) if wait <= MAX_RETRY_WAIT && retries < MAX_RETRIES => {
                    tracing::info!(
                        wait_s = wait.as_secs(),
                        "Telegram asks to slow down (429); waiting"
                    );
                    retries += 1;
                    tokio::time::sleep(wait).await;
                }
                Failure::Revoked => {
                    self.revoked();
                    return Err(SendError::Transient(Failure::Revoked.to_string()));
                }
                f @ (Failure::Refused(_) | Failure::TooLong | Failure::Formatting(_)) => {
                    return Err(SendError::Permanent(f.to_string()));
                }
                f @ (Failure::RetryAfter(_) | Failure::Unavailable(_) | Failure::Conflict(_)) => {
                    return Err(SendError::Transient(f.to_string()));
                }
            }
        }
    }

    /// Wait until `chat` may be written to again, and book the next turn.
    async fn pace(&self, chat: i64) {
        let gap = if chat < 0 { GROUP_GAP } else { PRIVATE_GAP };
        let now = tokio::time::Instant::now();
        let at = {
            let mut next = self.pace.lock().await;
            let at = next.get(&chat).copied().filter(|t| *t > now).unwrap_or(now);
            next.insert(chat, at + gap);
            at
        };
        tokio::time::sleep_until(at).await;
    }
}

/// The message id in `CHAT:MESSAGE`.
fn message_of(remote: &str) -> Option<i32> {
    remote.rsplit_once(':')?.1.parse().ok()
}

/// Approve / Deny under an approval request; the press comes back as a callback query.
fn buttons() -> InlineKeyboardMarkup {
    InlineKeyboardMarkup::new([[
        InlineKeyboardButton::callback("Approve", "approve"),
        InlineKeyboardButton::callback("Deny", "deny"),
    ]])
}

/// Notices carry links to the dashboard and to pages the agent read: a preview of each would
/// fetch it from Telegram's side and bury the text.
fn no_preview() -> LinkPreviewOptions {
    LinkPreviewOptions {
        is_disabled: true,
        url: None,
        prefer_small_media: false,
        prefer_large_media: false,
        show_above_text: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_ids_name_the_message() {
        assert_eq!(message_of("111:42"), Some(42));
        assert_eq!(message_of("-1001234567890:7"), Some(7));
        assert_eq!(message_of("cb:abc"), None);
        assert_eq!(message_of("nothing"), None);
    }

    #[test]
    fn approval_buttons_carry_the_words_the_inbox_knows() {
        let json = serde_json::to_value(buttons()).expect("markup serialises");
        assert_eq!(
            json,
            serde_json::json!({"inline_keyboard": [[
                {"text": "Approve", "callback_data": "approve"},
                {"text": "Deny", "callback_data": "deny"}
            ]]})
        );
    }
}
