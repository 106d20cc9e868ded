//! The rules of the `channels` section (`channels.matrix`, `channels.telegram`) and the
//! delivery names the chat channels add (`matrix:NAME`, `telegram:NAME`).
//!
//! Owns: every semantic rule of a chat account's settings. Must not: read files or the
//! environment, or reach a chat server (`doctor` does).

use super::channels::{MatrixSettings, MatrixTarget, is_bot_token, is_matrix_id};
use super::settings::Settings;
use super::validate::{Violation, bad, is_loopback, positive};

impl Settings {
    /// `matrix:NAME` for every room of `channels.matrix.rooms`.
    pub(crate) fn matrix_channels(&self) -> Vec<String> {
        self.channels
            .matrix
            .iter()
            .flat_map(|m| m.rooms.keys().map(|name| format!("matrix:{name}")))
            .collect()
    }

    /// `telegram:NAME` for every chat of `channels.telegram.chats`.
    pub(crate) fn telegram_channels(&self) -> Vec<String> {
        self.channels
            .telegram
            .iter()
            .flat_map(|t| t.chats.keys().map(|name| format!("telegram:{name}")))
            .collect()
    }

    /// Every delivery name a chat channel adds.
    pub(super) fn chat_channels(&self) -> Vec<String> {
        let mut names = self.matrix_channels();
        names.extend(self.telegram_channels());
        names
    }

    pub(super) fn validate_matrix(&self) -> Result<(), Violation> {
        let Some(m) = &self.channels.matrix else {
            return Ok(());
        };
        if !cfg!(feature = "matrix") {
            return bad("channels.matrix", super::MATRIX_NOT_BUILT);
        }
        let k = |f: &str| format!("channels.matrix.{f}");
        let Ok(url) = url::Url::parse(m.homeserver.trim()) else {
            return bad(
                k("homeserver"),
                format!(
                    "'{}' is not a URL; write the homeserver's client address, e.g. https://matrix.example.org",
                    m.homeserver
                ),
            );
        };
        match url.scheme() {
            "https" => {}
            "http" if url.host_str().is_some_and(is_loopback) => {}
            "http" => {
                return bad(
                    k("homeserver"),
                    "plain http sends the password and every message unencrypted, so it is only for a \
                     homeserver on this machine (127.0.0.1, ::1, localhost); use https",
                );
            }
            other => {
                return bad(
                    k("homeserver"),
                    format!("'{other}' is not http(s); write https://matrix.example.org"),
                );
            }
        }
        if !is_matrix_id(m.user.trim(), '@') {
            return bad(
                k("user"),
                format!(
                    "'{}' is not a Matrix user id; write the agent's account as @hermes:example.org",
                    m.user
                ),
            );
        }
        if let Some(a) = m.allow_from.iter().find(|a| !is_matrix_id(a.trim(), '@')) {
            return bad(
                k("allow_from"),
                format!("'{a}' is not a Matrix user id (write @me:example.org)"),
            );
        }
        if m.allowed(&m.user).is_some() {
            return bad(
                k("allow_from"),
                "lists the agent's own account; its own messages are never instructions",
            );
        }
        validate_rooms(m)?;
        positive(&k("max_tasks_per_hour"), m.max_tasks_per_hour.into())
    }

    pub(super) fn validate_telegram(&self) -> Result<(), Violation> {
        let Some(t) = &self.channels.telegram else {
            return Ok(());
        };
        if !cfg!(feature = "telegram") {
            return bad("channels.telegram", super::TELEGRAM_NOT_BUILT);
        }
        let k = |f: &str| format!("channels.telegram.{f}");
        if t.bot_token.trim().is_empty() {
            return bad(
                k("bot_token"),
                "is empty; write ${TELEGRAM_BOT_TOKEN} and put the token @BotFather gave in that \
                 variable",
            );
        }
        if !is_bot_token(t.bot_token.trim()) {
            // Never echo the value: it is the bot's whole identity.
            return bad(
                k("bot_token"),
                "is not a bot token (the bot's id, a colon, then the secret, as @BotFather gives \
                 it: 123456789:AA…)",
            );
        }
        let Ok(url) = url::Url::parse(t.api_url.trim()) else {
            return bad(
                k("api_url"),
                format!(
                    "'{}' is not a URL; leave it out for {} or write your own Bot API server's address",
                    t.api_url,
                    super::TELEGRAM_API
                ),
            );
        };
        match url.scheme() {
            "https" => {}
            "http" if url.host_str().is_some_and(is_loopback) => {}
            _ => {
                return bad(
                    k("api_url"),
                    "must be https (plain http only for a Bot API server on this machine: \
                     127.0.0.1, ::1, localhost), since every request carries the bot token",
                );
            }
        }
        if let Some(id) = t.allow_from.iter().find(|id| **id <= 0) {
            return bad(
                k("allow_from"),
                format!(
                    "'{id}' is not a Telegram user id (a positive number; a bot like @userinfobot tells yours)"
                ),
            );
        }
        for (name, chat) in &t.chats {
            let key = format!("channels.telegram.chats.{name}");
            if !is_target_name(name) {
                return bad(
                    key,
                    "a chat's name is letters, digits, '-' and '_' (it is used as telegram:NAME)",
                );
            }
            if *chat == 0 {
                return bad(key, "0 is not a chat id");
            }
            if *chat > 0 && !t.allowed(*chat) {
                return bad(
                    key,
                    format!(
                        "'{chat}' is a person's private chat, and they are not in \
                         channels.telegram.allow_from; the bot writes privately only to someone \
                         who may instruct it"
                    ),
                );
            }
        }
        positive(&k("max_tasks_per_hour"), t.max_tasks_per_hour.into())
    }
}

/// A delivery target's name: letters, digits, `-` and `_`.
fn is_target_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

#[cfg(all(test, feature = "telegram"))]
mod tests {
    use super::super::tests::{env, shipped_example};
    use super::super::{ConfigError, parse};
    use std::path::Path;

    const TOKEN: &str = "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw";

    #[test]
    fn the_documented_telegram_example_is_valid_and_its_defaults_are_the_real_ones() {
        let text = format!("channels:\n{}", shipped_example("#  telegram:"));
        let s = parse(
            &text,
            Path::new("s.yaml"),
            &env(&[("TELEGRAM_BOT_TOKEN", TOKEN)]),
        )
        .expect("the example parses");
        s.validate().expect("the example is valid");
        let t = s.channels.telegram.as_ref().expect("a Telegram bot");
        assert_eq!(t.allow_from, [123456789]);
        assert_eq!(t.api_url, crate::TELEGRAM_API);
        assert_eq!(
            t.max_tasks_per_hour,
            crate::TelegramSettings::default().max_tasks_per_hour
        );
        assert_eq!(s.telegram_channels(), ["telegram:family", "telegram:me"]);
        let shown = format!("{t:?}");
        assert!(!shown.contains("AAHdq"), "{shown}");
    }

    #[test]
    fn telegram_settings_that_cannot_work_are_refused_with_their_key() {
        let base = format!("channels:\n  telegram:\n    bot_token: \"{TOKEN}\"\n");
        let refused = [
            (
                "    allow_from: [\"me\"]\n",
                "channels.telegram.allow_from[0]",
            ),
            ("    allow_from: [-5]\n", "channels.telegram.allow_from"),
            ("    chats: {me: 42}\n", "channels.telegram.chats.me"),
            (
                "    chats: {\"a b\": -100}\n",
                "channels.telegram.chats.a b",
            ),
            (
                "    api_url: \"http://api.example.org\"\n",
                "channels.telegram.api_url",
            ),
            ("    api_url: \"not a url\"\n", "channels.telegram.api_url"),
            (
                "    max_tasks_per_hour: 0\n",
                "channels.telegram.max_tasks_per_hour",
            ),
        ];
        for (extra, key) in refused {
            let text = format!("{base}{extra}");
            match parse(&text, Path::new("s.yaml"), &env(&[])) {
                Err(ConfigError::Invalid(crate::InvalidAt { key: Some(k), .. })) => {
                    assert_eq!(k, key, "{extra}")
                }
                other => panic!("{extra}: {other:?}"),
            }
        }
        let bad_token = "channels:\n  telegram:\n    bot_token: \"123:short\"\n";
        match parse(bad_token, Path::new("s.yaml"), &env(&[])) {
            Err(ConfigError::Invalid(crate::InvalidAt {
                key: Some(k),
                message,
                ..
            })) => {
                assert_eq!(k, "channels.telegram.bot_token");
                assert!(!message.contains("short"), "the token is echoed: {message}");
            }
            other => panic!("{other:?}"),
        }
        let ok = format!(
            "{base}    allow_from: [42]\n    chats: {{me: 42, family: -1001234567890}}\n    \
             api_url: \"http://127.0.0.1:8081\"\nnotify: {{}}\ntools:\n  approval_notify: [\"telegram:me\"]\n"
        );
        parse(&ok, Path::new("s.yaml"), &env(&[])).expect("loopback http and a group chat");
        let clash =
            format!("{base}notify:\n  webhooks:\n    telegram: {{url: \"https://h.example/x\"}}\n");
        match parse(&clash, Path::new("s.yaml"), &env(&[])) {
            Err(ConfigError::Invalid(crate::InvalidAt { key: Some(k), .. })) => {
                assert_eq!(k, "notify.webhooks.telegram")
            }
            other => panic!("{other:?}"),
        }
    }
}

/// Each of `channels.matrix.rooms`: a name usable as `matrix:NAME`, and a room id, or a person
/// who may instruct the agent (the agent opens a direct room only with such a person).
fn validate_rooms(m: &MatrixSettings) -> Result<(), Violation> {
    for (name, value) in &m.rooms {
        let key = format!("channels.matrix.rooms.{name}");
        if !is_target_name(name) {
            return bad(
                key,
                "a room's name is letters, digits, '-' and '_' (it is used as matrix:NAME)",
            );
        }
        match m.target(name) {
            Some(MatrixTarget::User(user)) if m.allowed(user).is_none() => {
                return bad(
                    key,
                    format!(
                        "'{user}' is not in channels.matrix.allow_from; the agent opens a direct \
                         room only with someone who may instruct it"
                    ),
                );
            }
            Some(_) => {}
            None => {
                return bad(
                    key,
                    format!(
                        "'{value}' is neither a user id (@me:example.org) nor a room id \
                         (!abcdef:example.org); a room alias (#room) is not accepted"
                    ),
                );
            }
        }
    }
    Ok(())
}
