//! The Telegram channel (`channels.telegram`): a bot, through the Bot API (`teloxide-core`'s
//! typed requests and updates), by long polling — no webhook server, nothing listening.
//!
//! Owns: the bot's connection (`client`: the HTTP client, the token, what each Bot API error
//! means); the polling loop (`poll`: `getUpdates` from the saved offset, one node at a time
//! with several daemons); reading updates into [`ChatMessage`](crate::inbox::ChatMessage)s (`events`: private messages,
//! mentions and replies in groups, bot commands, button presses); sending the outbox's notices
//! (`send`: Markdown as Telegram HTML, split below 4,096 UTF-16 units, paced per chat, 429s
//! waited out, a refused formatting sent again as plain text, Approve / Deny buttons under an
//! approval request); the channel's health for `/healthz`, the dashboard and `doctor`.
//! Must not: decide what a message means or who may instruct (the inbox does); send to a chat
//! that is not configured or that no one of `allow_from` wrote in; write the token or a
//! message's text to a log (teloxide-core hides the token in its network errors).
//!
//! Exactly once: each update is recorded by its id in ONE transaction with what it became and
//! with the channel's offset (`Place::Polled`), so a kill -9 at any point neither loses an
//! update nor acts on one twice; an update that becomes nothing moves the offset alone. The
//! first start skips what was said before it (the backlog is history, as on Matrix).
//! Sends have no idempotency key on Telegram: each part a notice went out as is recorded as it
//! is sent (`chat_parts`), so a retried notice goes on after the parts already there. A part
//! whose answer was lost (the connection broke after Telegram took it) is sent again: the
//! person may see that part twice, never none.
//!
//! Built only with the cargo feature `telegram` (on by default). Without it this module keeps
//! its types — the channel is always off — and `config check` refuses `channels.telegram`.

#[cfg(feature = "telegram")]
mod client;
#[cfg(feature = "telegram")]
mod events;
#[cfg(feature = "telegram")]
#[allow(dead_code)]
pub(crate) mod format;
#[cfg(feature = "telegram")]
mod poll;
#[cfg(feature = "telegram")]
mod probe;
#[cfg(feature = "telegram")]
mod send;

#[cfg(not(feature = "telegram"))]
mod absent;
#[cfg(not(feature = "telegram"))]
pub use absent::probe;
#[cfg(feature = "telegram")]
pub use probe::probe;

use super::Handle;
#[cfg(feature = "telegram")]
use super::Link;
pub use super::{Running, State};
use hermes_config::Settings;
#[cfg(feature = "telegram")]
use hermes_config::TelegramSettings;
#[cfg(feature = "telegram")]
use hermes_store::Channel;
use hermes_store::Store;
use serde::Serialize;
#[cfg(feature = "telegram")]
use std::sync::Arc;

/// The channel's name in the log.
const NAME: &str = "telegram";

/// How the channel is doing, for `/healthz`, the dashboard and `doctor`; by default, off.
pub type Status = super::Status<Account>;

/// What the Telegram channel's status adds: whose bot it is, and whether its token is refused.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Account {
    /// The bot's `@username`, once the Bot API accepted its token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bot: Option<String>,
    /// The token was refused (401): the channel stopped until it is replaced.
    #[serde(default)]
    pub revoked: bool,
}

impl Status {
    /// Whether `/healthz` should say `degraded`: the channel is down.
    pub fn degraded(&self) -> bool {
        self.state == State::Down
    }
}

/// The Telegram channel: on when `channels.telegram` is configured; [`Handle::start`] polls
/// the Bot API; stopped, the bot goes after the outbox's last pass.
pub type Telegram = Handle<Status>;

#[cfg(feature = "telegram")]
pub(crate) struct Inner {
    settings: TelegramSettings,
    store: Store,
    /// The channel's status, and the bot once the Bot API accepted its token on this daemon
    /// (the node that polls); the outbox's lanes wait for it.
    link: Arc<Link<Status, client::Bot>>,
    /// When each chat may be written to next: Telegram's per-chat rates (see `send`).
    pace: tokio::sync::Mutex<std::collections::HashMap<i64, tokio::time::Instant>>,
}

impl Telegram {
    /// The channel of `settings` (off without `channels.telegram`).
    #[cfg(feature = "telegram")]
    pub fn new(settings: &Settings, store: Store) -> Telegram {
        let Some(t) = settings.channels.telegram.clone() else {
            return Handle::off(NAME);
        };
        let link = Arc::new(Link::new(Channel::Telegram, "Telegram", t.chats.keys()));
        let inner = Inner {
            settings: t,
            store,
            link: link.clone(),
            pace: tokio::sync::Mutex::new(std::collections::HashMap::new()),
        };
        Handle::on(NAME, link, Arc::new(inner), poll::run)
    }

    /// Without the `telegram` feature the channel is always off (`config check` refuses
    /// `channels.telegram`, so a daemon never gets here with one).
    #[cfg(not(feature = "telegram"))]
    pub fn new(_settings: &Settings, _store: Store) -> Telegram {
        Handle::off(NAME)
    }
}

#[cfg(feature = "telegram")]
impl Inner {
    /// The token was refused: stop using it (the loop ends, the lanes wait) and say so.
    fn revoked(&self) {
        self.link.lost();
        self.link.status.update(|s| {
            s.state = State::Down;
            s.protocol.revoked = true;
            s.error = Some(client::REVOKED.to_string());
        });
    }
}
