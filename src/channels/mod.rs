//! Chat channels: the protocols the agent talks to people through, besides mail (Matrix,
//! Telegram).
//!
//! Owns: each channel's connection, its account's session and keys, turning the protocol's
//! events into [`crate::inbox::ChatMessage`]s and the outbox's notices into the protocol's
//! messages.
//! Must not: decide what a message means or who may instruct the agent (the inbox does, the
//! same for every channel); run tools or call the model; import the entry modules (`http`,
//! `cli`, `daemon`), which depend on it.

pub mod matrix;
pub mod telegram;

pub use matrix::Matrix;
pub use telegram::Telegram;

/// How a chat channel's connection is doing, for `/healthz`, the dashboard and `doctor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Off,
    Starting,
    Ok,
    Down,
}

impl State {
    pub fn word(self) -> &'static str {
        match self {
            State::Off => "off",
            State::Starting => "starting",
            State::Ok => "ok",
            State::Down => "down",
        }
    }
}

/// A notice as one Markdown text: its title (if any) in bold over its body.
// Used by the chat channels; a build without any has no caller.
#[cfg_attr(not(any(feature = "matrix", feature = "telegram")), allow(dead_code))]
pub(crate) fn compose(title: &str, body: &str) -> String {
    let title = title.trim();
    if title.is_empty() {
        body.trim().to_string()
    } else {
        format!("**{title}**\n\n{}", body.trim())
    }
}
