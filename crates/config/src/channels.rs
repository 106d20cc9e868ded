//! The `channels` section: chat accounts the agent talks through (`channels.matrix`,
//! `channels.telegram`), with their defaults. Their secrets are redacted from `Debug` with the others (`settings.rs`).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ChannelSettings {
    /// A Matrix account: conversations in its rooms, notices to `matrix:NAME`; `None`: none.
    pub matrix: Option<MatrixSettings>,
    /// A Telegram bot: private chats (and groups, when mentioned), notices to `telegram:NAME`.
    pub telegram: Option<TelegramSettings>,
}

/// The Bot API server a bot talks to unless `api_url` names another.
pub(crate) const TELEGRAM_API: &str = "https://api.telegram.org";

#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelegramSettings {
    /// The token @BotFather gave (`123456789:AA…`): the bot's whole identity, so a secret.
    pub bot_token: String,
    /// Telegram user ids who may instruct the agent; empty: nobody.
    pub allow_from: Vec<i64>,
    /// Delivery targets by name (`telegram:NAME`): a chat id (a person's id for the private
    /// chat with them, a negative id for a group).
    pub chats: BTreeMap<String, i64>,
    /// The Bot API server (another one: a self-hosted `telegram-bot-api`).
    pub api_url: String,
    /// Tasks one sender may start per hour; past it messages are recorded and ignored.
    pub max_tasks_per_hour: u32,
}

impl Default for TelegramSettings {
    fn default() -> Self {
        TelegramSettings {
            bot_token: String::new(),
            allow_from: Vec::new(),
            chats: BTreeMap::new(),
            api_url: TELEGRAM_API.to_string(),
            max_tasks_per_hour: 20,
        }
    }
}

impl TelegramSettings {
    /// Whether the Telegram user `id` may instruct the agent.
    pub fn allowed(&self, id: i64) -> bool {
        self.allow_from.contains(&id)
    }

    /// The bot's id: the token's part before the colon (not a secret: Telegram shows it).
    pub fn bot_id(&self) -> &str {
        self.bot_token
            .trim()
            .split_once(':')
            .map_or("", |(id, _)| id)
    }

    /// The account as inbox rows record it: `telegram:123456789` (the bot's id).
    pub fn account(&self) -> String {
        format!("telegram:{}", self.bot_id())
    }
}

/// Why `channels.telegram` is refused by a build without the cargo feature `telegram`.
pub const TELEGRAM_NOT_BUILT: &str = "this hermes-agent was built without the Telegram channel \
     (the cargo feature `telegram`, on by default); install a build with it (`cargo install \
     --path . --features telegram`) or remove channels.telegram";

/// Whether `token` has the shape of a bot token: the bot's numeric id, a colon, and at least
/// 30 characters of `A-Z a-z 0-9 _ -`.
pub(crate) fn is_bot_token(token: &str) -> bool {
    let Some((id, secret)) = token.split_once(':') else {
        return false;
    };
    !id.is_empty()
        && id.chars().all(|c| c.is_ascii_digit())
        && secret.len() >= 30
        && secret
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MatrixSettings {
    /// The homeserver's client URL (`https://matrix.example.org`).
    pub homeserver: String,
    /// The agent's own account (`@hermes:example.org`).
    pub user: String,
    /// Used to log in when there is no session yet; the session (token, device) is kept in
    /// the data dir and reused, so the same device keeps its keys.
    pub password: String,
    /// Who may instruct the agent (Matrix user ids, exactly); empty: nobody.
    pub allow_from: Vec<String>,
    /// Delivery targets by name (`matrix:NAME`): a user id (the agent's direct room with
    /// them, created encrypted if absent) or a room id the agent was invited to.
    pub rooms: BTreeMap<String, String>,
    /// Optional: restores the account's key backup and its cross-signing secrets.
    pub recovery_key: String,
    /// Tasks one sender may start per hour; past it messages are recorded and ignored.
    pub max_tasks_per_hour: u32,
}

impl Default for MatrixSettings {
    fn default() -> Self {
        MatrixSettings {
            homeserver: String::new(),
            user: String::new(),
            password: String::new(),
            allow_from: Vec::new(),
            rooms: BTreeMap::new(),
            recovery_key: String::new(),
            max_tasks_per_hour: 20,
        }
    }
}

/// Why `channels.matrix` is refused by a build without the cargo feature `matrix`.
pub const MATRIX_NOT_BUILT: &str = "this hermes-agent was built without the Matrix channel (the \
     cargo feature `matrix`, on by default); install a build with it (`cargo install --path . \
     --features matrix`) or remove channels.matrix";

/// What a `channels.matrix.rooms` entry names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatrixTarget<'a> {
    /// `@user:server`: the direct room with this person.
    User(&'a str),
    /// `!room:server`: a room by its id.
    Room(&'a str),
}

impl MatrixSettings {
    /// The entry of `allow_from` that `user` is (Matrix ids are compared exactly).
    pub fn allowed(&self, user: &str) -> Option<&str> {
        self.allow_from
            .iter()
            .map(|a| a.trim())
            .find(|a| *a == user.trim())
    }

    /// What the room `name` stands for, if it is configured and well formed.
    pub fn target(&self, name: &str) -> Option<MatrixTarget<'_>> {
        let value = self.rooms.get(name)?.trim();
        if is_matrix_id(value, '@') {
            Some(MatrixTarget::User(value))
        } else if is_matrix_id(value, '!') {
            Some(MatrixTarget::Room(value))
        } else {
            None
        }
    }

    /// The account as inbox rows record it: `matrix:@hermes:example.org`.
    pub fn account(&self) -> String {
        format!("matrix:{}", self.user.trim())
    }
}

/// Whether `id` is a Matrix identifier with `sigil` (`@user:server`, `!room:server`): the
/// sigil, a non-empty local part, a colon, a non-empty server name, no spaces. A room id of
/// room version 12 and later has no server name (`!` and the room's hash).
pub(crate) fn is_matrix_id(id: &str, sigil: char) -> bool {
    let Some(rest) = id.strip_prefix(sigil) else {
        return false;
    };
    if sigil == '!' && !rest.contains(':') {
        return !rest.is_empty() && !id.contains(char::is_whitespace);
    }
    match rest.split_once(':') {
        Some((local, server)) => {
            !local.is_empty() && !server.is_empty() && !id.contains(char::is_whitespace)
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_users_or_rooms() {
        let s = MatrixSettings {
            rooms: [
                ("me".to_string(), "@me:example.org".to_string()),
                ("family".to_string(), "!abc:example.org".to_string()),
                ("bad".to_string(), "#alias:example.org".to_string()),
            ]
            .into(),
            allow_from: vec!["@me:example.org".into()],
            ..MatrixSettings::default()
        };
        assert_eq!(s.target("me"), Some(MatrixTarget::User("@me:example.org")));
        assert_eq!(
            s.target("family"),
            Some(MatrixTarget::Room("!abc:example.org"))
        );
        assert_eq!(s.target("bad"), None);
        assert_eq!(s.target("nope"), None);
        assert_eq!(s.allowed("@me:example.org"), Some("@me:example.org"));
        assert_eq!(s.allowed("@Me:example.org"), None);
        assert!(!is_matrix_id("@:x", '@'));
        assert!(!is_matrix_id("@a", '@'));
        assert!(!is_matrix_id("@a b:x", '@'));
        assert!(is_matrix_id(
            "!Y3ebo6NXF-l5U11wvWyXlN1TyWFfkj-tm-EepCTWRnk",
            '!'
        ));
        assert!(!is_matrix_id("!", '!'));
    }

    #[test]
    fn bot_tokens_have_an_id_and_a_secret() {
        assert!(is_bot_token("123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"));
        assert!(!is_bot_token("123456789:short"));
        assert!(!is_bot_token("bot:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"));
        assert!(!is_bot_token("AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"));
        let t = TelegramSettings {
            bot_token: " 42:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw ".into(),
            allow_from: vec![7],
            ..TelegramSettings::default()
        };
        assert_eq!(t.account(), "telegram:42");
        assert!(t.allowed(7) && !t.allowed(8));
    }
}
