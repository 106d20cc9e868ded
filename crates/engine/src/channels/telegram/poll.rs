//! The polling loop: hold the channel, ask the Bot API who the bot is (and clear a webhook left
//! on it, which would refuse polling), then `getUpdates` from the saved offset, long-polling;
//! each update handed to the inbox with the offset after it (one transaction: see the module
//! doc of `telegram`). When anything fails the channel is marked down and connects again after
//! a backoff with jitter — except a refused token, which stops the channel until a person
//! replaces it: retrying a revoked token only hammers the server. Nothing here ends the daemon.
//!
//! First start (no saved offset): `getUpdates` with offset -1 returns only the newest update
//! and forgets the rest; the loop starts after it, so what was said before the bot's first
//! start is never acted on.

use super::client::{self, Bot, Failure, LONG_POLL};
use super::events::{self, Read};
use super::{Inner, State};
use crate::channels::{Feed, Retry};
use crate::inbox::Inbox;
use hermes_store::{Channel, StoreError};
use std::sync::Arc;
use std::time::Duration;
use teloxide_core::payloads::{AnswerCallbackQuerySetters, GetUpdatesSetters};
use teloxide_core::requests::Requester;
use teloxide_core::types::{AllowedUpdate, CallbackQueryId, ChatId, MessageId};

/// How long answering a press (the spinner on the person's button) may take; past it the
/// loop goes on, since the press itself is recorded.
const ANSWER_PRESS: Duration = Duration::from_secs(5);

/// How long after a 409 (another reader of the bot's updates) polling tries again.
const CONFLICT_RETRY: std::time::Duration = std::time::Duration::from_secs(10);

/// Why a connection ended.
#[derive(Debug, thiserror::Error)]
enum Ended {
    #[error(transparent)]
    Api(#[from] Failure),
    /// Recording failed: nothing was lost, the update is read again.
    #[error("cannot record Telegram messages: {0}")]
    Store(#[from] StoreError),
    /// The saved offset is not a number: the database was edited by hand.
    #[error(
        "the saved Telegram offset '{0}' is not a number; delete the channel_cursors row '{1}' to start after the newest message"
    )]
    BadOffset(String, String),
    /// Another daemon on the same database took the channel over (this one's lease lapsed).
    #[error("another daemon reads the Telegram channel now")]
    Elsewhere,
}

impl Ended {
    fn retry(&self) -> Retry {
        match self {
            // Retrying a revoked token only hammers the server.
            Ended::Api(Failure::Revoked) => Retry::Never,
            Ended::Api(Failure::RetryAfter(wait)) => Retry::After(*wait),
            Ended::BadOffset(..) | Ended::Api(Failure::Refused(_)) => Retry::Late,
            // Not the doubling backoff: after a long conflict (a second poller left running for
            // minutes) it would keep the bot deaf for minutes more once the other one stops.
            Ended::Api(Failure::Conflict(_)) => Retry::After(CONFLICT_RETRY),
            _ => Retry::Soon,
        }
    }

    /// Whether the bot may still send after this: sending does not depend on polling, only on
    /// the token and on this node holding the channel.
    fn sends_on(&self) -> bool {
        !matches!(self, Ended::Elsewhere | Ended::Api(Failure::Revoked))
    }
}

pub(super) async fn run(inner: Arc<Inner>, feed: Feed) {
    tracing::info!(api = %inner.settings.api_url, bot = inner.settings.bot_id(), "Telegram channel started");
    let connect = || connection(&inner, &feed);
    let retry = |e: &Ended| {
        let retry = e.retry();
        if retry == Retry::Never {
            tracing::error!("{}", client::REVOKED);
            inner.revoked();
        }
        retry
    };
    (inner.link)
        .keep_reading(&inner.store, &feed.stop, connect, retry, Ended::sends_on)
        .await;
}

/// One connection (the channel held): learn the bot's name, then poll until something fails.
async fn connection(inner: &Inner, feed: &Feed) -> Result<std::convert::Infallible, Ended> {
    let (inbox, metrics) = (&feed.inbox, &feed.metrics);
    let bot = client::bot(&inner.settings)?;
    let me = bot.get_me().await.map_err(Failure::from)?;
    let username = me.username().to_string();
    // A webhook left set on the bot (by another program, or an earlier setup) makes every
    // getUpdates a 409: polling is this channel's one way in, so it is cleared. Updates queued
    // meanwhile are kept.
    bot.delete_webhook().await.map_err(Failure::from)?;
    let key = format!("telegram/{}", inner.settings.bot_id());
    let mut offset = match inner.store.chat().cursor(&key).await? {
        Some(p) => p
            .parse::<i32>()
            .map_err(|_| Ended::BadOffset(p, key.clone()))?,
        None => skip_backlog(inner, &bot, &key).await?,
    };
    inner.link.connected(bot.clone());
    inner.link.status.update(|s| {
        s.state = State::Ok;
        s.error = None;
        s.protocol.bot = Some(format!("@{username}"));
    });
    tracing::info!(bot = %username, "Telegram channel connected");
    loop {
        let updates = bot
            .get_updates()
            .offset(offset)
            .timeout(LONG_POLL.as_secs() as u32)
            .allowed_updates([AllowedUpdate::Message, AllowedUpdate::CallbackQuery])
            .await
            .map_err(Failure::from)?;
        if !inner.store.chat().hold_channel(Channel::Telegram).await? {
            return Err(Ended::Elsewhere);
        }
        inner.link.status.update(|s| {
            s.state = State::Ok;
            s.error = None;
        });
        for update in &updates {
            let next = update.id.as_offset();
            if take_in(inner, inbox, &bot, &username, &key, update, next).await? {
                metrics.observe_message_in(Channel::Telegram.as_str());
            }
            offset = next;
        }
    }
}

/// The offset a first start begins at: past the newest update, which Telegram then forgets
/// with everything before it.
async fn skip_backlog(inner: &Inner, bot: &Bot, key: &str) -> Result<i32, Ended> {
    let newest = bot
        .get_updates()
        .offset(-1)
        .timeout(0)
        .await
        .map_err(Failure::from)?;
    let offset = newest.last().map_or(0, |u| u.id.as_offset());
    if !newest.is_empty() {
        tracing::info!(
            "Telegram: a first start; messages sent to the bot before it are not acted on"
        );
    }
    inner
        .store
        .chat()
        .move_cursor(Channel::Telegram, key, &offset.to_string())
        .await?;
    Ok(offset)
}

/// One update: recorded with the offset after it, then a press answered and its buttons
/// taken away. Whether it was new (not recorded before).
async fn take_in(
    inner: &Inner,
    inbox: &Inbox,
    bot: &Bot,
    username: &str,
    key: &str,
    update: &teloxide_core::types::Update,
    next: i32,
) -> Result<bool, Ended> {
    let position = next.to_string();
    match events::read(update, username) {
        Read::Nothing => {
            inner
                .store
                .chat()
                .move_cursor(Channel::Telegram, key, &position)
                .await?;
            Ok(false)
        }
        Read::Message(m) => {
            let new = inbox.take_in_chat_at(&m, key, &position).await?;
            if new {
                inner.link.status.update(|s| s.messages_in += 1);
            }
            Ok(new)
        }
        Read::Pressed {
            message,
            query,
            chat,
            on,
        } => {
            let new = inbox.take_in_chat_at(&message, key, &position).await?;
            if new {
                inner.link.status.update(|s| s.messages_in += 1);
            }
            // A stranger's press is recorded and left unanswered, and the buttons stay for
            // the people who may answer. A press replayed after a crash is answered again:
            // the person's spinner may still turn, and a query answered twice is only refused.
            let allowed = message
                .sender
                .parse::<i64>()
                .is_ok_and(|id| inner.settings.allowed(id));
            if allowed {
                answer_press(bot, query, chat, on).await;
            }
            Ok(new)
        }
    }
}

/// What Telegram says when a press replayed after a restart, or a second quick press, asks
/// again for what was done: its query answered already, its buttons gone. Nothing to warn of.
fn already_done(e: &teloxide_core::RequestError) -> bool {
    use teloxide_core::ApiError;
    matches!(
        e,
        teloxide_core::RequestError::Api(ApiError::MessageNotModified | ApiError::InvalidQueryId)
    )
}

/// Stop the spinner on the person's button and take the buttons away: the answer is decided
/// once, and the inbox's confirmation says how. Best effort — the press is recorded already.
async fn answer_press(bot: &Bot, query: String, chat: i64, on: i32) {
    let answered = bot
        .answer_callback_query(CallbackQueryId(query))
        .text("Got it");
    let removed = bot.edit_message_reply_markup(ChatId(chat), MessageId(on));
    let done = tokio::time::timeout(ANSWER_PRESS, async {
        (answered.await.map(|_| ()), removed.await.map(|_| ()))
    })
    .await;
    match done {
        Ok((a, r)) => {
            for e in [a.err(), r.err()]
                .into_iter()
                .flatten()
                .filter(|e| !already_done(e))
            {
                tracing::warn!(error = %Failure::from(e), "cannot answer a button press; it is recorded");
            }
        }
        Err(_) => tracing::warn!("answering a button press took too long; it is recorded"),
    }
}

#[cfg(test)]
mod tests {
    use super::already_done;
    use teloxide_core::{ApiError, RequestError};

    #[test]
    fn a_press_answered_or_edited_before_is_not_a_fault() {
        assert!(already_done(&RequestError::Api(
            ApiError::MessageNotModified
        )));
        assert!(already_done(&RequestError::Api(ApiError::InvalidQueryId)));
        assert!(!already_done(&RequestError::Api(
            ApiError::MessageCantBeEdited
        )));
        assert!(!already_done(&RequestError::RetryAfter(
            teloxide_core::types::Seconds::from_seconds(3)
        )));
    }
}
